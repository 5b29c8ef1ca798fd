/*
 * app.h — the recurd application: what the loop thread owns (config, model, session table,
 * scheduler, HTTP server, counters) and the entry points main.c calls.
 */
#ifndef SRV_APP_H
#define SRV_APP_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "histogram.h"
#include "http.h"
#include "recur.h"
#include "scheduler.h"
#include "session_table.h"

/* Counters for /metrics: counts only, never ids or content. */
typedef struct {
    uint64_t tokens_folded, tokens_generated;
    uint64_t sessions_created, sessions_deleted, sessions_expired;
    uint64_t requests_rejected_busy;     /* 429 max_queued_ops_per_session */
    uint64_t sessions_rejected_full;     /* 503 max_sessions */
    uint64_t streams_cancelled;          /* client left or drain timeout */
    uint64_t generations_by_reason[3];   /* length, stop, cancelled */
    uint64_t openai_requests[2];         /* /v1/completions, /v1/chat/completions */
    uint64_t openai_errors;              /* answered with an OpenAI error */
} srv_counters;

/* Histograms for /metrics (metrics.c sets their buckets; histogram.h: atomic, any thread). */
typedef struct {
    srv_hist ttft;          /* request arrival to a generation's first token, seconds */
    srv_hist itl;           /* between two tokens of a generation, seconds */
    srv_hist queue;         /* an op's wait in its session's FIFO (enqueue to start), seconds */
    srv_hist prompt_tokens; /* tokens a fold, a create or an OpenAI prompt folds */
} srv_hists;

/* Requests held behind an off-loop body decode (offloop.h): the per-session gates, and the
 * bodies waiting for one of the SRV_OFFLOOP_DECODERS threadpool slots. */
struct srv_held_gate;
struct srv_held;
typedef struct {
    struct srv_held_gate *gates;
    struct srv_held *wait_head, *wait_tail;
    int decoding;
} srv_held_state;

typedef struct srv_app {
    uv_loop_t *loop;
    srv_config cfg;
    recur_model *model;
    const recur_model_info *info;
    char model_name[96];   /* what /v1/model and the log call it: info->name, or for seeded
                            * weights (--model-config) "<config name>-seed<N>" */
    srv_table *table;
    srv_sched *sched;
    srv_server *server;
    uv_timer_t ttl_timer;
    int stopping;          /* SIGTERM drain: no new generation steps after the drain timeout */
    int draining;
    int n_running_streams; /* ops currently streaming (drain bookkeeping) */
    srv_counters counters;
    srv_hists hists;
    struct srv_residency *res; /* persistence and the resident budget (residency.c) */
    struct srv_tier *tier;     /* the Redis tier (redis_tier.h), NULL without --redis */
    srv_held_state held;       /* requests held behind an off-loop body decode (offloop.c) */
    recur_tokenizer *tok;      /* the model folder's tokenizer, or the byte tokenizer (text.h) */
    struct srv_pcache *pcache; /* the prefix-state cache (prefix_cache.h) */
    struct srv_pcredis *pcredis; /* its entries in Redis (prefix_redis.h), or NULL */
    struct srv_access_log *access_log; /* one line per request, or NULL (access_log.h) */
    recur_chat_template *chat; /* the OpenAI chat route's template, or NULL (openai.h) */
    char chat_source[64];      /* where it came from: a built-in, a file, tokenizer_config.json */
    char chat_error[320];      /* why there is none */
    int32_t end_ids[1];        /* [n_end_ids] the OpenAI routes' end-of-turn token (openai_chat.c) */
    int n_end_ids;
} srv_app;

/* The HTTP callbacks (routes.c). */
void srv_app_on_request(srv_conn *c, const srv_request *req, void *app);
void srv_app_on_close(srv_conn *c, void *app);
void srv_app_on_drain(srv_conn *c, void *app);
void srv_app_on_done(srv_conn *c, const srv_access *a, void *app); /* the access log (routes.c) */

/* Scheduler completion (ops.c). */
void srv_ops_work_done(srv_work *w, void *app);
/* New lines of a generation still stepping on the workers (ops.c). */
void srv_ops_gen_progress(srv_work *w, void *app);
/* Drain timeout: end every running generation/fold stream at its next step (reason
 * "cancelled"); streams paused on backpressure end now. */
void srv_ops_cancel_all(srv_app *app);
/* Idle TTL sweep (sessions with no queued request, idle longer than idle_ttl_ms). */
void srv_ops_expire_idle(srv_app *app);

#endif /* SRV_APP_H */
