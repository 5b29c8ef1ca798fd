/* metrics.c — the /metrics page (metrics.h): HTTP, session, generation and scheduler figures,
 * the latency histograms, the process figures, then residency's (residency.c). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "access_log.h"
#include "openai.h"
#include "prefix_cache.h"
#include "redis_tier.h"
#include "residency.h"

/* "# HELP name help\n# TYPE name type\n": the head of a family whose samples follow. */
static void srv_metric_head(proto_buf *b, const char *name, const char *type, const char *help)
{
    proto_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample of a labelled family: name{label="value"} v. */
static void srv_metric_sample(proto_buf *b, const char *name, const char *label, const char *value,
                              unsigned long long v)
{
    proto_buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, value, v);
}

void srv_metric(proto_buf *b, const char *name, const char *type, const char *help,
                unsigned long long v)
{
    srv_metric_head(b, name, type, help);
    proto_buf_printf(b, "%s %llu\n", name, v);
}

void srv_metric_rows(proto_buf *b, const srv_metric_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        srv_metric_double(b, rows[i].name, rows[i].type, rows[i].help, rows[i].value);
}

void srv_metric_double(proto_buf *b, const char *name, const char *type, const char *help, double v)
{
    srv_metric_head(b, name, type, help);
    proto_buf_printf(b, "%s %.15g\n", name, v);
}

/* Resident set size from /proc/self/statm, or -1. */
static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long size = 0, res = 0;
    int n = fscanf(f, "%ld %ld", &size, &res);
    fclose(f);
    return n == 2 ? res * sysconf(_SC_PAGESIZE) : -1;
}

/* From /proc/self/stat (proc(5)): the start time after boot, in clock ticks. 0, or -1 when it
 * cannot be read. (Its utime and stime are whole ticks, 10 ms here: a daemon that served a few
 * requests read 0; the CPU time comes from CLOCK_PROCESS_CPUTIME_ID instead.) */
static int proc_start_ticks(unsigned long long *start)
{
    char line[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    const char *p = strrchr(line, ')'); /* the command name may hold spaces and parentheses */
    unsigned long long starttime;
    /* after ")": field 3 (state) ... 22 starttime */
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d"
                            " %*d %*d %llu", &starttime) != 1)
        return -1;
    *start = starttime;
    return 0;
}

/* The boot time (seconds since the epoch) from /proc/stat's btime line, or -1. */
static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    char line[256];
    long long bt = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

/* Entries of /proc/self/fd (the directory's own descriptor excluded), or -1. */
static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

/* process_* as Prometheus client libraries name them. */
static void process_metrics(proto_buf *b)
{
    long rss = rss_bytes();
    if (rss >= 0)
        srv_metric(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                   (unsigned long long)rss);
    struct timespec cpu;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0) /* every thread, nanoseconds */
        srv_metric_double(b, "process_cpu_seconds_total", "counter",
                          "Total user and system CPU time spent in seconds.",
                          (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9);
    unsigned long long start;
    double hz = (double)sysconf(_SC_CLK_TCK);
    long long bt = boot_time();
    if (bt >= 0 && hz > 0 && proc_start_ticks(&start) == 0)
        srv_metric_double(b, "process_start_time_seconds", "gauge",
                          "Start time of the process since unix epoch in seconds.", (double)bt + (double)start / hz);
    long fds = open_fds();
    if (fds >= 0)
        srv_metric(b, "process_open_fds", "gauge", "Number of open file descriptors.",
                   (unsigned long long)fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        srv_metric(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                   (unsigned long long)rl.rlim_cur);
}

static void build_metrics(proto_buf *b)
{
    srv_metric_head(b, "recurd_build_info", "gauge", "The daemon's version and ISA path; always 1.");
    proto_buf_printf(b, "recurd_build_info{version=\"%s\",isa=\"%s\"} 1\n", SRV_VERSION, recur_isa_name());
}

void srv_metrics_init(srv_app *app)
{
    static const double ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640};
    static const double itl_le[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                    0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    static const double queue_le[] = {0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                      2.5, 5, 10, 30, 60, 120, 300};
    static const double prompt_le[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000,
                                       10000, 20000, 50000, 100000, 200000, 500000, 1000000};
#define N_LE(a) ((int)(sizeof a / sizeof *a))
    srv_hist_init(&app->hists.ttft, ttft_le, N_LE(ttft_le), 1e9);
    srv_hist_init(&app->hists.itl, itl_le, N_LE(itl_le), 1e9);
    srv_hist_init(&app->hists.queue, queue_le, N_LE(queue_le), 1e9);
    srv_hist_init(&app->hists.prompt_tokens, prompt_le, N_LE(prompt_le), 1);
#undef N_LE
}

static void latency_metrics(proto_buf *b, const srv_app *app, const srv_http_stats *hs)
{
    srv_hist_render(&hs->request_duration, b, "recurd_request_duration_seconds",
                    "HTTP requests from their first byte to the end of their response.");
    srv_hist_render(&app->hists.ttft, b, "recurd_time_to_first_token_seconds",
                    "Generations from their request's first byte to their first sampled token.");
    srv_hist_render(&app->hists.itl, b, "recurd_inter_token_latency_seconds",
                    "Time between two sampled tokens of a generation.");
    srv_hist_render(&app->hists.queue, b, "recurd_request_queue_seconds",
                    "Session operations waiting behind earlier ones on their session.");
    srv_hist_render(&app->hists.prompt_tokens, b, "recurd_prompt_tokens",
                    "Tokens folded by a fold, a create with a prompt, or an OpenAI prompt.");
}

static void http_metrics(proto_buf *b, const srv_http_stats *hs)
{
    static const char *classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    srv_metric_head(b, "recurd_http_responses_total", "counter", "HTTP responses by status class.");
    for (int i = 1; i <= 5; i++)
        srv_metric_sample(b, "recurd_http_responses_total", "class", classes[i - 1],
                          hs->responses_by_class[i]);
    srv_metric(b, "recurd_http_requests_total", "counter", "HTTP requests parsed.", hs->requests_total);
    srv_metric(b, "recurd_connections_open", "gauge", "Open client connections.", hs->connections_open);
    srv_metric(b, "recurd_connections_accepted_total", "counter", "Accepted connections.",
               hs->connections_accepted);
    srv_metric(b, "recurd_connections_rejected_total", "counter", "Connections over max_connections.",
               hs->connections_rejected);
    srv_metric_head(b, "recurd_http_timeouts_total", "counter", "Connections closed by a timeout.");
    srv_metric_sample(b, "recurd_http_timeouts_total", "kind", "header", hs->timeouts_header);
    srv_metric_sample(b, "recurd_http_timeouts_total", "kind", "body", hs->timeouts_body);
    srv_metric_sample(b, "recurd_http_timeouts_total", "kind", "request", hs->timeouts_request);
    srv_metric_sample(b, "recurd_http_timeouts_total", "kind", "send_stall", hs->stalls);
    srv_metric(b, "recurd_http_bytes_written_total", "counter", "Response bytes written.",
               hs->bytes_written);
}

static void session_metrics(proto_buf *b, const srv_app *app)
{
    const srv_counters *k = &app->counters;
    size_t sessions = srv_table_count(app->table);
    srv_metric(b, "recurd_tokens_folded_total", "counter",
               "Tokens folded into sessions (tokens, create).", k->tokens_folded);
    srv_metric(b, "recurd_tokens_generated_total", "counter", "Tokens generated and folded.",
               k->tokens_generated);
    srv_metric(b, "recurd_sessions", "gauge", "Resident sessions.", sessions);
    srv_metric(b, "recurd_sessions_max", "gauge", "max_sessions.",
               (unsigned long long)app->cfg.max_sessions);
    srv_metric(b, "recurd_sessions_created_total", "counter", "Sessions created (incl. forks).",
               k->sessions_created);
    srv_metric(b, "recurd_sessions_deleted_total", "counter", "Sessions deleted.", k->sessions_deleted);
    srv_metric(b, "recurd_sessions_expired_total", "counter", "Sessions removed by idle_ttl.",
               k->sessions_expired);
    srv_metric(b, "recurd_sessions_rejected_total", "counter", "Creates refused by max_sessions (503).",
               k->sessions_rejected_full);
    srv_metric(b, "recurd_requests_rejected_busy_total", "counter",
               "Requests refused by max_queued_ops_per_session (429).", k->requests_rejected_busy);
    srv_metric(b, "recurd_state_bytes_per_session", "gauge", "Bytes of one session's state.",
               app->info->state_bytes);
    srv_metric(b, "recurd_state_bytes", "gauge", "Bytes of all resident sessions' states.",
               (unsigned long long)(sessions * app->info->state_bytes));
    static const char *reasons[] = {"length", "stop", "cancelled"};
    srv_metric_head(b, "recurd_generations_total", "counter", "Finished generations by reason.");
    for (int i = 0; i < 3; i++)
        srv_metric_sample(b, "recurd_generations_total", "reason", reasons[i],
                          k->generations_by_reason[i]);
    srv_metric(b, "recurd_streams_cancelled_total", "counter",
               "Streams stopped because the client left.", k->streams_cancelled);
}

static void sched_metrics(proto_buf *b, const srv_sched_stats *ss)
{
    srv_metric(b, "recurd_decode_batches_total", "counter", "Batched decode steps executed.",
               ss->batches);
    srv_metric(b, "recurd_decode_batched_tokens_total", "counter",
               "Session steps inside decode batches.", ss->batched_steps);
    srv_metric(b, "recurd_decode_batch_size_max", "gauge", "Largest decode batch so far.",
               ss->max_batch_seen);
    srv_metric(b, "recurd_prefill_slices_total", "counter", "Prefill slices executed.",
               ss->prefill_slices);
    srv_metric_double(b, "recurd_worker_busy_seconds_total", "counter",
                      "Worker time in model work (decode batches, prefill slices), wall clock.",
                      (double)ss->busy_ns / 1e9);
    srv_metric(b, "recurd_prefill_tokens_total", "counter", "Tokens folded by prefill slices.",
               ss->prefill_tokens);
}

void srv_metrics_render(srv_app *app, proto_buf *b)
{
    http_metrics(b, srv_server_stats(app->server));
    session_metrics(b, app);
    srv_sched_stats ss = srv_sched_get_stats(app->sched);
    sched_metrics(b, &ss);
    latency_metrics(b, app, srv_server_stats(app->server));
    process_metrics(b);
    build_metrics(b);
    srv_residency_metrics(app, b);
    srv_tier_metrics(app, b);
    srv_pcache_metrics(app->pcache, b);
    srv_openai_metrics(app, b);
    srv_access_log_metrics(app->access_log, b);
}
