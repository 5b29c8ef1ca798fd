/* metrics.c — the /metrics page (metrics.h): HTTP, session, generation and scheduler figures,
 * then residency's (residency.c). */
#include <stdio.h>

#include "metrics.h"
#include "openai.h"
#include "prefix_cache.h"
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

/* Resident set size from /proc/self/statm, or -1. */
static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long size = 0, res = 0;
    int n = fscanf(f, "%ld %ld", &size, &res);
    fclose(f);
    return n == 2 ? res * 4096L : -1;
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
    srv_metric(b, "recurd_worker_busy_microseconds_total", "counter",
               "Worker time in model work (decode batches, prefill slices), wall clock.",
               ss->busy_ns / 1000);
    srv_metric(b, "recurd_prefill_tokens_total", "counter", "Tokens folded by prefill slices.",
               ss->prefill_tokens);
}

void srv_metrics_render(srv_app *app, proto_buf *b)
{
    http_metrics(b, srv_server_stats(app->server));
    session_metrics(b, app);
    srv_sched_stats ss = srv_sched_get_stats(app->sched);
    sched_metrics(b, &ss);
    long rss = rss_bytes();
    if (rss >= 0)
        srv_metric(b, "process_resident_memory_bytes", "gauge", "Resident set size.",
                   (unsigned long long)rss);
    srv_residency_metrics(app, b);
    srv_pcache_metrics(app->pcache, b);
    srv_openai_metrics(app, b);
}
