/*
 * report.c — the end of a run: a table on stdout and, with --json FILE, the same figures as JSON
 * (plus the server memory time series). Throughput counts only answers that passed every check.
 */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *dist_json(lg_samples *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)s->n);
    cJSON_AddNumberToObject(o, "mean", lg_samples_mean(s));
    cJSON_AddNumberToObject(o, "p50", lg_samples_pct(s, 50));
    cJSON_AddNumberToObject(o, "p90", lg_samples_pct(s, 90));
    cJSON_AddNumberToObject(o, "p99", lg_samples_pct(s, 99));
    cJSON_AddNumberToObject(o, "p999", lg_samples_pct(s, 99.9));
    cJSON_AddNumberToObject(o, "max", lg_samples_pct(s, 100));
    return o;
}

static void add_num_or_null(cJSON *o, const char *name, double x)
{
    if (x < 0)
        cJSON_AddNullToObject(o, name);
    else
        cJSON_AddNumberToObject(o, name, x);
}

/* first / last / max of one memory series (-1 when never seen) */
static void series(const lg_run *r, size_t off, double *first, double *last, double *max)
{
    *first = *last = *max = -1;
    for (size_t i = 0; i < r->n_mem; i++) {
        double v = *(const double *)((const char *)&r->mem[i] + off);
        if (v < 0)
            continue;
        if (*first < 0)
            *first = v;
        *last = v;
        if (v > *max)
            *max = v;
    }
}

static double elapsed(const lg_run *r)
{
    double e = r->t_drive1 - r->t_drive0;
    return e > 0 ? e : 0;
}

static double server_cpu(const lg_run *r)
{
    if (r->cpu_drive0 < 0 || r->cpu_drive1 < 0 || r->o.server_pid <= 0)
        return -1;
    return r->cpu_drive1 - r->cpu_drive0;
}

static int write_json(lg_run *r, int exit_code)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "tool", "recur-load");
    cJSON_AddNumberToObject(j, "version", 1);

    cJSON *cfg = cJSON_AddObjectToObject(j, "config");
    cJSON_AddStringToObject(cfg, "host", r->o.host);
    cJSON_AddNumberToObject(cfg, "port", r->o.port);
    cJSON_AddStringToObject(cfg, "mode", r->o.mode == LG_MODE_TOKENS ? "tokens" : "generate");
    cJSON_AddNumberToObject(cfg, "sessions", r->o.n_sessions);
    cJSON_AddNumberToObject(cfg, "connections", r->n_conns);
    cJSON_AddNumberToObject(cfg, "duration_s", r->o.duration);
    cJSON_AddNumberToObject(cfg, "tokens_target", (double)r->o.total_tokens);
    cJSON_AddNumberToObject(cfg, "batch", r->o.batch);
    cJSON_AddNumberToObject(cfg, "max_tokens", r->o.max_tokens);
    cJSON_AddNumberToObject(cfg, "prefill", r->o.prefill);
    cJSON_AddBoolToObject(cfg, "sse", r->o.sse);
    cJSON_AddNumberToObject(cfg, "vocab", r->o.vocab);
    cJSON_AddNumberToObject(cfg, "top_k", r->o.top_k);
    cJSON_AddNumberToObject(cfg, "temperature", r->o.temperature);
    cJSON_AddNumberToObject(cfg, "seed", (double)r->o.seed);
    cJSON_AddNumberToObject(cfg, "metrics_interval_ms", r->o.metrics_interval_ms);
    cJSON_AddNumberToObject(cfg, "server_pid", r->o.server_pid);
    cJSON_AddNumberToObject(cfg, "max_time_s", r->o.max_time);

    cJSON *model = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(model, "name", r->model_name);
    cJSON_AddNumberToObject(model, "vocab_size", r->vocab_size);
    cJSON_AddNumberToObject(model, "n_layers", r->n_layers);
    add_num_or_null(model, "state_bytes", r->state_bytes);

    uint64_t failed = 0;
    for (int i = 0; i < LG_CHK_N; i++)
        failed += r->checks[i];
    cJSON_AddBoolToObject(j, "ok", exit_code == 0);
    cJSON_AddNumberToObject(j, "exit_code", exit_code);
    if (r->aborted)
        cJSON_AddStringToObject(j, "aborted", r->aborted);
    else
        cJSON_AddNullToObject(j, "aborted");
    if (r->setup_error)
        cJSON_AddStringToObject(j, "setup_error", r->setup_error);
    else
        cJSON_AddNullToObject(j, "setup_error");

    double el = elapsed(r);
    cJSON_AddNumberToObject(j, "elapsed_s", el);
    cJSON_AddNumberToObject(j, "tokens", (double)r->tokens_ok);
    cJSON_AddNumberToObject(j, "tokens_per_s", el > 0 ? (double)r->tokens_ok / el : 0);
    cJSON_AddNumberToObject(j, "requests", (double)r->requests_ok);
    cJSON_AddNumberToObject(j, "requests_per_s", el > 0 ? (double)r->requests_ok / el : 0);
    cJSON_AddNumberToObject(j, "requests_sent", (double)r->requests_sent);
    cJSON_AddNumberToObject(j, "requests_failed", (double)r->requests_bad);
    cJSON_AddItemToObject(j, "latency_ms", dist_json(&r->lat));
    cJSON_AddItemToObject(j, "ttfc_ms", dist_json(&r->ttfc));
    cJSON_AddItemToObject(j, "gap_ms", dist_json(&r->gap));

    cJSON *sc = cJSON_AddObjectToObject(j, "status_counts");
    cJSON *ebs = cJSON_AddObjectToObject(j, "errors_by_status");
    for (int s = 100; s < 600; s++) {
        if (!r->status_counts[s])
            continue;
        char k[16];
        snprintf(k, sizeof k, "%d", s);
        cJSON_AddNumberToObject(sc, k, (double)r->status_counts[s]);
        if (s >= 400)
            cJSON_AddNumberToObject(ebs, k, (double)r->status_counts[s]);
    }
    if (r->status_other)
        cJSON_AddNumberToObject(sc, "other", (double)r->status_other);

    cJSON_AddNumberToObject(j, "check_failures", (double)failed);
    cJSON *ch = cJSON_AddObjectToObject(j, "checks");
    for (int i = 0; i < LG_CHK_N; i++)
        cJSON_AddNumberToObject(ch, lg_check_names[i], (double)r->checks[i]);
    cJSON *ex = cJSON_AddArrayToObject(j, "failure_examples");
    for (int i = 0; i < r->n_examples; i++)
        cJSON_AddItemToArray(ex, cJSON_CreateString(r->examples[i]));

    cJSON *ss = cJSON_AddObjectToObject(j, "sessions");
    cJSON_AddNumberToObject(ss, "requested", r->n_sessions);
    cJSON_AddNumberToObject(ss, "created", r->created);
    cJSON_AddNumberToObject(ss, "deleted", r->deleted);
    cJSON_AddNumberToObject(ss, "retired", r->dead);
    if (r->pos_base_tokens != INT64_MIN)
        cJSON_AddNumberToObject(ss, "pos_offset_tokens", (double)r->pos_base_tokens);
    if (r->pos_base_generate != INT64_MIN)
        cJSON_AddNumberToObject(ss, "pos_offset_generate", (double)r->pos_base_generate);

    cJSON *srv = cJSON_AddObjectToObject(j, "server");
    double cpu = server_cpu(r);
    add_num_or_null(srv, "pid", r->o.server_pid > 0 ? r->o.server_pid : -1);
    add_num_or_null(srv, "cpu_s", cpu);
    add_num_or_null(srv, "cpu_us_per_request", cpu >= 0 && r->requests_ok ? cpu * 1e6 / (double)r->requests_ok : -1);
    add_num_or_null(srv, "cpu_us_per_token", cpu >= 0 && r->tokens_ok ? cpu * 1e6 / (double)r->tokens_ok : -1);

    cJSON *mem = cJSON_AddObjectToObject(j, "memory");
    cJSON_AddStringToObject(mem, "rss_metric", r->o.rss_metric);
    cJSON_AddStringToObject(mem, "state_metric", r->o.state_metric);
    cJSON_AddStringToObject(mem, "sessions_metric", r->o.sessions_metric);
    cJSON_AddNumberToObject(mem, "scrapes", (double)r->scrapes_ok);
    cJSON_AddNumberToObject(mem, "scrape_errors", (double)r->scrape_errors);
    double a, b, c;
    series(r, offsetof(lg_mem_sample, metric_rss), &a, &b, &c);
    add_num_or_null(mem, "rss_start", a);
    add_num_or_null(mem, "rss_end", b);
    add_num_or_null(mem, "rss_max", c);
    series(r, offsetof(lg_mem_sample, proc_rss), &a, &b, &c);
    add_num_or_null(mem, "proc_rss_start", a);
    add_num_or_null(mem, "proc_rss_end", b);
    add_num_or_null(mem, "proc_rss_max", c);
    series(r, offsetof(lg_mem_sample, metric_state), &a, &b, &c);
    add_num_or_null(mem, "state_bytes_start", a);
    add_num_or_null(mem, "state_bytes_end", b);
    add_num_or_null(mem, "state_bytes_max", c);
    cJSON *samples = cJSON_AddArrayToObject(mem, "samples");
    for (size_t i = 0; i < r->n_mem; i++) {
        const lg_mem_sample *m = &r->mem[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "t_s", m->t);
        cJSON_AddStringToObject(o, "phase", m->phase);
        cJSON_AddNumberToObject(o, "tokens", (double)m->tokens);
        add_num_or_null(o, "rss_bytes", m->metric_rss);
        add_num_or_null(o, "state_bytes", m->metric_state);
        add_num_or_null(o, "sessions", m->metric_sessions);
        add_num_or_null(o, "proc_rss_bytes", m->proc_rss);
        add_num_or_null(o, "proc_cpu_s", m->proc_cpu_s);
        cJSON_AddItemToArray(samples, o);
    }

    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return -1;
    FILE *f = fopen(r->o.json_path, "w");
    int rc = -1;
    if (f) {
        rc = (fputs(text, f) >= 0 && fputc('\n', f) != EOF) ? 0 : -1;
        if (fclose(f) != 0)
            rc = -1;
    }
    free(text);
    return rc;
}

static void print_dist(FILE *f, const char *label, lg_samples *s)
{
    if (s->n == 0) {
        fprintf(f, "  %-13s -\n", label);
        return;
    }
    fprintf(f, "  %-13s p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms  (n=%zu)\n", label,
            lg_samples_pct(s, 50), lg_samples_pct(s, 90), lg_samples_pct(s, 99), lg_samples_pct(s, 99.9),
            lg_samples_pct(s, 100), s->n);
}

static void print_bytes(FILE *f, const char *label, const lg_run *r, size_t off, const char *src)
{
    double a, b, c;
    series(r, off, &a, &b, &c);
    if (a < 0) {
        fprintf(f, "  %-13s - (%s)\n", label, src);
        return;
    }
    fprintf(f, "  %-13s start %.2f MiB  end %.2f MiB  max %.2f MiB  (%s)\n", label, a / 1048576.0,
            b / 1048576.0, c / 1048576.0, src);
}

int lg_report(lg_run *r, int exit_code)
{
    FILE *f = stdout;
    uint64_t failed = 0;
    for (int i = 0; i < LG_CHK_N; i++)
        failed += r->checks[i];
    if (!r->o.quiet) {
        double el = elapsed(r);
        fprintf(f, "recur-load: %s mode, %d sessions over %d connections, %s%g %s, 127.0.0.1:%d\n",
                r->o.mode == LG_MODE_TOKENS ? "tokens" : "generate", r->o.n_sessions, r->n_conns,
                r->o.total_tokens ? "" : "", r->o.total_tokens ? (double)r->o.total_tokens : r->o.duration,
                r->o.total_tokens ? "tokens" : "s", r->o.port);
        fprintf(f, "  model         %s, vocab %d, state_bytes %.0f\n", r->model_name, r->vocab_size, r->state_bytes);
        if (r->setup_error)
            fprintf(f, "  SETUP FAILED  %s\n", r->setup_error);
        if (r->aborted)
            fprintf(f, "  ABORTED       %s\n", r->aborted);
        fprintf(f, "  sessions      %d created, %d deleted, %d retired\n", r->created, r->deleted, r->dead);
        fprintf(f, "  elapsed       %.3f s\n", el);
        fprintf(f, "  tokens        %llu  (%.1f tokens/s, verified answers only)\n",
                (unsigned long long)r->tokens_ok, el > 0 ? (double)r->tokens_ok / el : 0);
        fprintf(f, "  requests      %llu ok  (%.1f req/s), %llu failed, %llu sent\n",
                (unsigned long long)r->requests_ok, el > 0 ? (double)r->requests_ok / el : 0,
                (unsigned long long)r->requests_bad, (unsigned long long)r->requests_sent);
        print_dist(f, "latency", &r->lat);
        print_dist(f, "first chunk", &r->ttfc);
        print_dist(f, "chunk gap", &r->gap);
        fprintf(f, "  status       ");
        for (int s = 100; s < 600; s++)
            if (r->status_counts[s])
                fprintf(f, " %d: %llu", s, (unsigned long long)r->status_counts[s]);
        fprintf(f, "\n");
        if (failed == 0) {
            fprintf(f, "  checks        all passed\n");
        } else {
            fprintf(f, "  checks        FAILED:");
            for (int i = 0; i < LG_CHK_N; i++)
                if (r->checks[i])
                    fprintf(f, " %s %llu", lg_check_names[i], (unsigned long long)r->checks[i]);
            fprintf(f, "\n");
            for (int i = 0; i < r->n_examples; i++)
                fprintf(f, "    e.g. %s\n", r->examples[i]);
        }
        print_bytes(f, "server RSS", r, offsetof(lg_mem_sample, metric_rss), r->o.rss_metric);
        if (r->o.server_pid > 0)
            print_bytes(f, "server RSS", r, offsetof(lg_mem_sample, proc_rss), "/proc VmRSS");
        print_bytes(f, "state bytes", r, offsetof(lg_mem_sample, metric_state), r->o.state_metric);
        double cpu = server_cpu(r);
        if (cpu >= 0)
            fprintf(f, "  server CPU    %.3f s  (%.1f us/request)\n", cpu,
                    r->requests_ok ? cpu * 1e6 / (double)r->requests_ok : 0);
        if (r->scrape_errors)
            fprintf(f, "  /metrics      %llu scrape errors\n", (unsigned long long)r->scrape_errors);
        fflush(f);
    }
    if (r->o.json_path && write_json(r, exit_code) != 0) {
        fprintf(stderr, "recur-load: cannot write %s\n", r->o.json_path);
        if (exit_code == 0)
            exit_code = 3;
    }
    return exit_code;
}
