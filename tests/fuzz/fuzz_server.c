/*
 * fuzz_server.c — libFuzzer target: the whole daemon (routes, ops, scheduler with a worker
 * thread, session table, proto, core model, HTTP layer) fed over a loopback TCP connection.
 *
 * The app is assembled as server/main.c does it (config from flags, a seeded tiny model, table,
 * scheduler, srv_server_start with the routes' callbacks); persistence is off. The HTTP layer only
 * accepts from its listener, so the connection is loopback TCP rather than a socketpair
 * (fuzz_client.h: one connection per input, each piece one server read, half-close, read every
 * response byte and check it parses as HTTP/1.1, connection closed after the client's EOF).
 *
 * Input: byte 0 = split mode (fuzz_client.h); the rest is the client's bytes, with two
 * substitutions so that the fuzzer can reach per-session routes despite random ids:
 *   "@S"  the id of a session the harness creates before the input (3 tokens folded, logits set)
 *   "@N"  the last session id seen in a response so far (a created or forked session)
 * After each piece the client waits (at most 2 s) until no request is in flight, so an id is
 * known before the next piece is sent; pipelining is still exercised within a piece.
 * After each input every session is deleted, so inputs do not depend on one another.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "log.h"
#include "fuzz_client.h"
#include "state_blob.h"

/* byte-level vocab so that "text" works; a softmax layer so the context limit is reachable */
#define SERVER_MODEL \
    "{\"name\":\"fuzz-server\",\"vocab_size\":256,\"d_model\":8,\"n_layers\":2,\"n_heads\":2," \
    "\"head_k\":4,\"head_v\":4,\"d_ff\":16,\"mixers\":[\"gated_deltanet\",\"softmax\"]," \
    "\"max_context\":64}"
#define SERVER_MODEL_SEED 7

static srv_app g_app;
static recur_workspace *g_ws;
static char g_sid[33];      /* "@S" */
static char g_nid[33];      /* "@N" */

static void setup(void)
{
    srv_app *app = &g_app;
    char *argv[] = {"fuzz_server", "--config", "", "--workers", "1", "--max-batch", "4",
                    "--log-level", "error", "--max-sessions", "8", "--max-queued-ops-per-session", "4",
                    "--max-tokens-per-request", "128", "--max-request-line", "256",
                    "--max-header-bytes", "1024", "--max-headers", "16",
                    "--header-timeout-ms", "30000", "--body-idle-timeout-ms", "30000",
                    "--request-timeout-ms", "30000", "--keepalive-idle-ms", "30000",
                    "--send-stall-timeout-ms", "30000", "--max-requests-per-conn", "16",
                    "--drain-timeout-ms", "1000", "--idle-ttl-ms", "0"};
    char err[512];
    if (srv_config_load(&app->cfg, (int)(sizeof argv / sizeof argv[0]), argv, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_server: config: %s\n", err);
        abort();
    }
    srv_log_set_level(app->cfg.log_level);
    if (recur_model_init_seed(SERVER_MODEL, SERVER_MODEL_SEED, &app->model)) abort();
    app->info = recur_model_get_info(app->model);
    snprintf(app->model_name, sizeof app->model_name, "%s", app->info->name);
    size_t need = proto_state_max_body(app->info); /* as main.c */
    if (app->cfg.http.max_body < need) app->cfg.http.max_body = need;
    app->loop = calloc(1, sizeof *app->loop);
    if (!app->loop || uv_loop_init(app->loop)) abort();
    app->table = srv_table_create(app->model, app->cfg.max_sessions);
    if (!app->table) abort();
    if (srv_sched_create(app->loop, app->model, app->cfg.workers, app->cfg.max_batch,
                         app->cfg.decode_workers,
                         app->cfg.prefill_slice, srv_ops_work_done, srv_ops_gen_progress, app,
                         &app->sched))
        abort();
    srv_http_callbacks cb = {srv_app_on_request, srv_app_on_close, srv_app_on_drain, srv_app_on_head};
    if (srv_server_start(app->loop, "127.0.0.1", 0, &app->cfg.http, &cb, app, &app->server)) abort();
    uv_timer_init(app->loop, &app->ttl_timer); /* never started (idle_ttl_ms 0), as main.c */
    if (recur_workspace_create(app->model, 1, &g_ws)) abort();
}

/* The "@S" session: 3 tokens folded on this thread (no op in flight), logits of the last one. */
static void make_session(void)
{
    srv_session *s;
    if (srv_table_new(g_app.table, uv_now(g_app.loop), &s) != 0) abort();
    int vocab = g_app.info->vocab_size;
    int32_t toks[3] = {72, 105, 33};
    float *lg = malloc(sizeof(float) * 3 * (size_t)vocab);
    if (!lg || recur_model_prefill(g_app.model, g_ws, s->state, toks, 3, lg)) abort();
    memcpy(s->logits, lg + 2 * (size_t)vocab, sizeof(float) * (size_t)vocab);
    free(lg);
    s->has_logits = 1;
    s->tokens_seen = recur_state_tokens_seen(s->state);
    s->snapshot_bytes = recur_snapshot_size(s->state);
    memcpy(g_sid, s->id, 33);
    memcpy(g_nid, s->id, 33);
}

static void any_busy(srv_session *s, void *arg)
{
    if (s->q_head || s->running) *(int *)arg = 1;
}
static int busy(void)
{
    int b = 0;
    srv_table_foreach(g_app.table, any_busy, &b);
    return b;
}

static void remove_one(srv_session *s, void *arg) { srv_table_remove(g_app.table, s); }

/* Remember the last `"id":"<32 hex>"` the server sent (ids never straddle reads in practice;
 * one that does is simply missed). */
static void on_bytes(const char *p, size_t n)
{
    const char *end = p + n;
    if (getenv("FUZZ_VERBOSE")) fwrite(p, 1, n, stderr);
    for (const char *q = p; (q = memmem(q, (size_t)(end - q), "\"id\":\"", 6)) != NULL; q += 6) {
        if (end - (q + 6) < 33 || q[6 + 32] != '"') continue;
        memcpy(g_nid, q + 6, 32);
        g_nid[32] = '\0';
    }
}

static size_t transform(const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 32 <= cap; i++) {
        if (in[i] == '@' && i + 1 < n && (in[i + 1] == 'S' || in[i + 1] == 'N')) {
            memcpy(out + o, in[i + 1] == 'S' ? g_sid : g_nid, 32);
            o += 32;
            i++;
        } else {
            out[o++] = in[i];
        }
    }
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    if (size < 1) return 0;
    make_session();
    fc_opts o = {.on_bytes = on_bytes, .busy = busy, .transform = transform, .settle = 1};
    fc_run(g_app.loop, g_app.server, data[0], data + 1, size - 1, &o);
    srv_table_foreach(g_app.table, remove_one, NULL);
    if (srv_table_count(g_app.table) != 0) abort();
    return 0;
}
