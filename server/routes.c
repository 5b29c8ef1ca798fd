/* routes.c — HTTP routing of DESIGN.md §5: auth, validation, and handing requests to ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "app.h"
#include "buf.h"
#include "log.h"
#include "ops.h"
#include "requests.h"
#include "residency.h"
#include "responses.h"

/* ---------------------------------------------------------------- responses */

void srv_app_error(srv_conn *c, int status, const char *code, const char *message,
                   const char *extra_headers)
{
    srv_respond_error_ex(c, status, code, message, extra_headers);
}

static void respond_json(srv_conn *c, int status, proto_buf *b)
{
    srv_respond(c, status, "application/json", b->data, b->len, NULL);
}

static void method_not_allowed(srv_conn *c, const char *allow)
{
    char hdr[64], msg[96];
    snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
    snprintf(msg, sizeof msg, "method not allowed; allowed: %s", allow);
    srv_app_error(c, 405, "method_not_allowed", msg, hdr);
}

static void reject(srv_conn *c, const proto_error *e)
{
    srv_respond_error(c, e->status, e->code, e->message);
}

/* ---------------------------------------------------------------- checks */

/* Constant-time comparison of the bearer token against the configured key: the time depends
 * only on the key's length, never on where the first difference is. */
static int auth_ok(const srv_app *app, const char *authorization)
{
    const char *key = app->cfg.api_key;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t kl = strlen(key), tl = strlen(tok);
    while (tl > 0 && (tok[tl - 1] == ' ' || tok[tl - 1] == '\t'))
        tl--;
    volatile unsigned char diff = (unsigned char)(kl != tl);
    for (size_t i = 0; i < kl; i++) {
        unsigned char t = i < tl ? (unsigned char)tok[i] : 0;
        diff |= (unsigned char)(t ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

/* Media type of a Content-Type value equals want (parameters ignored, case-insensitive). */
static int media_is(const char *ct, const char *want)
{
    size_t n = strlen(want);
    if (strncasecmp(ct, want, n) != 0)
        return 0;
    char c = ct[n];
    return c == '\0' || c == ';' || c == ' ' || c == '\t';
}

/* curl -d / --data-binary label any body application/x-www-form-urlencoded unless told
 * otherwise; accepting that label keeps `curl -d '{...}'` working. Other types are refused. */
#define CURL_DEFAULT_TYPE "application/x-www-form-urlencoded"

/* A JSON body: Content-Type absent, application/json or curl's default; otherwise 415. */
static int json_body_ok(srv_conn *c, const srv_request *req)
{
    if (req->body_len == 0 || !req->content_type || media_is(req->content_type, "application/json") ||
        media_is(req->content_type, CURL_DEFAULT_TYPE))
        return 1;
    srv_respond_error(c, 415, "unsupported_media_type", "request body must be application/json");
    return 0;
}

static proto_limits limits_of(const srv_app *app)
{
    proto_limits l = {app->info->vocab_size, app->cfg.max_tokens_per_request};
    return l;
}

static int wants_sse(const char *accept)
{
    if (!accept)
        return 0;
    /* Any listed media range text/event-stream selects SSE. */
    const char *p = accept;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (media_is(p, "text/event-stream"))
            return 1;
        p = strchr(p, ',');
        if (!p)
            break;
    }
    return 0;
}

/* ---------------------------------------------------------------- handlers */

static void handle_model(srv_app *app, srv_conn *c)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_model_json(&b, app->info);
    respond_json(c, 200, &b);
    proto_buf_free(&b);
}

static void session_full(srv_app *app, srv_conn *c)
{
    char msg[96];
    app->counters.sessions_rejected_full++;
    snprintf(msg, sizeof msg, "max_sessions (%d) reached", srv_table_max(app->table));
    srv_app_error(c, 503, "max_sessions", msg, "Retry-After: 1\r\n");
}

/* Queue op; should the queue have filled since queue_op looked, answer 429 and drop it. */
static void submit(srv_app *app, srv_conn *c, srv_op *op)
{
    if (srv_ops_enqueue(op) == 0)
        return;
    srv_op_free(op);
    srv_app_error(c, 429, "max_queued_ops_per_session", "max_queued_ops_per_session reached",
                  "Retry-After: 1\r\n");
}

static void handle_create(srv_app *app, srv_conn *c, const srv_request *req)
{
    if (!json_body_ok(c, req))
        return;
    proto_tokens_req tr;
    proto_error e;
    proto_limits lim = limits_of(app);
    if (proto_decode_create_req(req->body, req->body_len, &lim, &tr, &e)) {
        reject(c, &e);
        return;
    }
    srv_session *s;
    int rc = srv_table_new(app->table, uv_now(app->loop), &s);
    if (rc != 0) {
        proto_tokens_req_free(&tr);
        if (rc == -1)
            session_full(app, c);
        else
            srv_app_error(c, 503, "out_of_memory", "cannot create a session", "Retry-After: 1\r\n");
        return;
    }
    app->counters.sessions_created++;
    if (tr.n == 0) {
        proto_tokens_req_free(&tr);
        proto_buf b;
        proto_buf_init(&b);
        s->snapshot_bytes = recur_snapshot_size(s->state);
        proto_session_json(&b, s->id, 0, app->info->state_bytes, s->snapshot_bytes, 0);
        respond_json(c, 201, &b);
        proto_buf_free(&b);
        return;
    }
    srv_op *op = srv_op_new(app, SRV_OP_CREATE, s, c);
    op->tokens = tr.tokens;
    op->n = tr.n;
    submit(app, c, op); /* a fresh session's queue is empty: never 429 */
}

/* No session for the id: 404, or 503 + Retry-After when its snapshot exists but could not be
 * read just now (persistence: EMFILE, EIO, no memory; residency.h). */
static void session_missing(srv_app *app, srv_conn *c)
{
    if (srv_residency_take_load_error(app)) {
        srv_app_error(c, 503, "session_unavailable",
                      "the session's snapshot could not be read just now; retry",
                      "Retry-After: 1\r\n");
        return;
    }
    srv_respond_error(c, 404, "session_not_found", "no such session");
}

/* Look the session up and queue op kind for it; 404 / 429 otherwise. */
static srv_op *queue_op(srv_app *app, srv_conn *c, const char *id, srv_op_kind kind)
{
    srv_session *s = srv_table_find(app->table, id);
    if (!s) {
        session_missing(app, c);
        return NULL;
    }
    if (s->q_len >= app->cfg.max_queued_ops_per_session) {
        char msg[128];
        app->counters.requests_rejected_busy++;
        snprintf(msg, sizeof msg, "max_queued_ops_per_session (%d) reached for this session",
                 app->cfg.max_queued_ops_per_session);
        srv_app_error(c, 429, "max_queued_ops_per_session", msg, "Retry-After: 1\r\n");
        return NULL;
    }
    return srv_op_new(app, kind, s, c);
}

static void handle_session(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                           const char *action)
{
    const char *m = req->method;
    proto_error e;
    proto_limits lim = limits_of(app);
    srv_op *op;

    if (action[0] == '\0') {
        int is_get = !strcmp(m, "GET"), is_del = !strcmp(m, "DELETE");
        if (!is_get && !is_del) {
            method_not_allowed(c, "GET, DELETE");
            return;
        }
        if (is_get) {
            /* A read: answered at once from the loop-side mirrors, not queued behind a long
             * stream (pending_ops says how many requests are queued or running). */
            srv_session *s = srv_table_find(app->table, id);
            if (!s) {
                session_missing(app, c);
                return;
            }
            if (!s->snapshot_bytes)
                s->snapshot_bytes = recur_snapshot_size(s->state); /* idle: nothing in flight */
            s->last_used_ms = uv_now(app->loop);
            proto_buf b;
            proto_buf_init(&b);
            proto_session_json(&b, s->id, s->tokens_seen, app->info->state_bytes,
                               s->snapshot_bytes, s->q_len);
            respond_json(c, 200, &b);
            proto_buf_free(&b);
            return;
        }
        if ((op = queue_op(app, c, id, SRV_OP_DELETE)))
            submit(app, c, op);
        return;
    }
    if (!strcmp(action, "tokens")) {
        if (strcmp(m, "POST")) {
            method_not_allowed(c, "POST");
            return;
        }
        if (!json_body_ok(c, req))
            return;
        proto_tokens_req tr;
        if (!srv_table_find(app->table, id)) { /* 404 before 422: the resource comes first */
            session_missing(app, c);
            return;
        }
        if (proto_decode_tokens_req(req->body, req->body_len, &lim, &tr, &e)) {
            reject(c, &e);
            return;
        }
        if (!(op = queue_op(app, c, id, SRV_OP_FOLD))) {
            proto_tokens_req_free(&tr);
            return;
        }
        op->tokens = tr.tokens;
        op->n = tr.n;
        op->top_k = tr.top_k;
        op->framing = wants_sse(req->accept) ? PROTO_FRAME_SSE : PROTO_FRAME_NDJSON;
        submit(app, c, op);
        return;
    }
    if (!strcmp(action, "generate")) {
        if (strcmp(m, "POST")) {
            method_not_allowed(c, "POST");
            return;
        }
        if (!json_body_ok(c, req))
            return;
        if (!srv_table_find(app->table, id)) {
            session_missing(app, c);
            return;
        }
        proto_generate_req g;
        if (proto_decode_generate_req(req->body, req->body_len, &lim, &g, &e)) {
            reject(c, &e);
            return;
        }
        if (!(op = queue_op(app, c, id, SRV_OP_GENERATE)))
            return;
        op->gen = g;
        op->framing = wants_sse(req->accept) ? PROTO_FRAME_SSE : PROTO_FRAME_NDJSON;
        submit(app, c, op);
        return;
    }
    if (!strcmp(action, "fork")) {
        if (strcmp(m, "POST")) {
            method_not_allowed(c, "POST");
            return;
        }
        if (!json_body_ok(c, req))
            return;
        if (proto_decode_empty_req(req->body, req->body_len, &e)) {
            reject(c, &e);
            return;
        }
        if ((op = queue_op(app, c, id, SRV_OP_FORK)))
            submit(app, c, op);
        return;
    }
    if (!strcmp(action, "state")) {
        int is_get = !strcmp(m, "GET"), is_put = !strcmp(m, "PUT");
        if (!is_get && !is_put) {
            method_not_allowed(c, "GET, PUT");
            return;
        }
        if (is_put && req->content_type && !media_is(req->content_type, "application/octet-stream") &&
            !media_is(req->content_type, CURL_DEFAULT_TYPE)) {
            srv_respond_error(c, 415, "unsupported_media_type",
                              "a state upload must be application/octet-stream");
            return;
        }
        if (!(op = queue_op(app, c, id, is_get ? SRV_OP_GET_STATE : SRV_OP_PUT_STATE)))
            return;
        if (is_put) {
            op->blob = malloc(req->body_len ? req->body_len : 1);
            if (!op->blob)
                abort();
            memcpy(op->blob, req->body, req->body_len);
            op->blob_len = req->body_len;
        }
        submit(app, c, op);
        return;
    }
    srv_respond_error(c, 404, "not_found", "no such endpoint");
}

/* ---------------------------------------------------------------- metrics */

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

static void metric(proto_buf *b, const char *name, const char *type, const char *help,
                   unsigned long long v)
{
    proto_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

static void handle_metrics(srv_app *app, srv_conn *c)
{
    proto_buf b;
    proto_buf_init(&b);
    const srv_http_stats *hs = srv_server_stats(app->server);
    const srv_counters *k = &app->counters;
    srv_sched_stats ss = srv_sched_get_stats(app->sched);
    size_t sessions = srv_table_count(app->table);

    proto_buf_puts(&b, "# HELP recurd_http_responses_total HTTP responses by status class.\n"
                       "# TYPE recurd_http_responses_total counter\n");
    for (int i = 1; i <= 5; i++)
        proto_buf_printf(&b, "recurd_http_responses_total{class=\"%dxx\"} %llu\n", i,
                         (unsigned long long)hs->responses_by_class[i]);
    metric(&b, "recurd_http_requests_total", "counter", "HTTP requests parsed.", hs->requests_total);
    metric(&b, "recurd_connections_open", "gauge", "Open client connections.", hs->connections_open);
    metric(&b, "recurd_connections_accepted_total", "counter", "Accepted connections.",
           hs->connections_accepted);
    metric(&b, "recurd_connections_rejected_total", "counter", "Connections over max_connections.",
           hs->connections_rejected);
    proto_buf_puts(&b, "# HELP recurd_http_timeouts_total Connections closed by a timeout.\n"
                       "# TYPE recurd_http_timeouts_total counter\n");
    proto_buf_printf(&b, "recurd_http_timeouts_total{kind=\"header\"} %llu\n",
                     (unsigned long long)hs->timeouts_header);
    proto_buf_printf(&b, "recurd_http_timeouts_total{kind=\"body\"} %llu\n",
                     (unsigned long long)hs->timeouts_body);
    proto_buf_printf(&b, "recurd_http_timeouts_total{kind=\"request\"} %llu\n",
                     (unsigned long long)hs->timeouts_request);
    proto_buf_printf(&b, "recurd_http_timeouts_total{kind=\"send_stall\"} %llu\n",
                     (unsigned long long)hs->stalls);
    metric(&b, "recurd_http_bytes_written_total", "counter", "Response bytes written.",
           hs->bytes_written);
    metric(&b, "recurd_tokens_folded_total", "counter", "Tokens folded into sessions (tokens, create).",
           k->tokens_folded);
    metric(&b, "recurd_tokens_generated_total", "counter", "Tokens generated and folded.",
           k->tokens_generated);
    metric(&b, "recurd_sessions", "gauge", "Resident sessions.", sessions);
    metric(&b, "recurd_sessions_max", "gauge", "max_sessions.", (unsigned long long)app->cfg.max_sessions);
    metric(&b, "recurd_sessions_created_total", "counter", "Sessions created (incl. forks).",
           k->sessions_created);
    metric(&b, "recurd_sessions_deleted_total", "counter", "Sessions deleted.", k->sessions_deleted);
    metric(&b, "recurd_sessions_expired_total", "counter", "Sessions removed by idle_ttl.",
           k->sessions_expired);
    metric(&b, "recurd_sessions_rejected_total", "counter", "Creates refused by max_sessions (503).",
           k->sessions_rejected_full);
    metric(&b, "recurd_requests_rejected_busy_total", "counter",
           "Requests refused by max_queued_ops_per_session (429).", k->requests_rejected_busy);
    metric(&b, "recurd_state_bytes_per_session", "gauge", "Bytes of one session's state.",
           app->info->state_bytes);
    metric(&b, "recurd_state_bytes", "gauge", "Bytes of all resident sessions' states.",
           (unsigned long long)(sessions * app->info->state_bytes));
    proto_buf_puts(&b, "# HELP recurd_generations_total Finished generations by reason.\n"
                       "# TYPE recurd_generations_total counter\n");
    static const char *reasons[] = {"length", "stop", "cancelled"};
    for (int i = 0; i < 3; i++)
        proto_buf_printf(&b, "recurd_generations_total{reason=\"%s\"} %llu\n", reasons[i],
                         (unsigned long long)k->generations_by_reason[i]);
    metric(&b, "recurd_streams_cancelled_total", "counter", "Streams stopped because the client left.",
           k->streams_cancelled);
    metric(&b, "recurd_decode_batches_total", "counter", "Batched decode steps executed.", ss.batches);
    metric(&b, "recurd_decode_batched_tokens_total", "counter", "Session steps inside decode batches.",
           ss.batched_steps);
    metric(&b, "recurd_decode_batch_size_max", "gauge", "Largest decode batch so far.",
           ss.max_batch_seen);
    metric(&b, "recurd_prefill_slices_total", "counter", "Prefill slices executed.", ss.prefill_slices);
    metric(&b, "recurd_worker_busy_microseconds_total", "counter",
           "Worker time in model work (decode batches, prefill slices), wall clock.", ss.busy_ns / 1000);
    metric(&b, "recurd_prefill_tokens_total", "counter", "Tokens folded by prefill slices.",
           ss.prefill_tokens);
    long rss = rss_bytes();
    if (rss >= 0)
        metric(&b, "process_resident_memory_bytes", "gauge", "Resident set size.",
               (unsigned long long)rss);
    srv_residency_metrics(app, &b);
    srv_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
    proto_buf_free(&b);
}

/* ---------------------------------------------------------------- dispatch */

void srv_app_on_request(srv_conn *c, const srv_request *req, void *appv)
{
    srv_app *app = appv;
    const char *path = req->path, *m = req->method;

    if (!strcmp(path, "/healthz")) {
        if (strcmp(m, "GET")) {
            method_not_allowed(c, "GET");
            return;
        }
        proto_buf hb; /* "ok", or "degraded" after a failed snapshot write (residency.h) */
        proto_buf_init(&hb);
        int status = srv_residency_health(app, &hb);
        srv_respond(c, status, "application/json", hb.data, hb.len, NULL);
        proto_buf_free(&hb);
        return;
    }
    if (!strcmp(path, "/metrics")) {
        if (strcmp(m, "GET")) {
            method_not_allowed(c, "GET");
            return;
        }
        handle_metrics(app, c);
        return;
    }
    if (strncmp(path, "/v1/", 4) != 0) {
        srv_respond_error(c, 404, "not_found", "no such endpoint");
        return;
    }
    /* Every /v1 route: the key is checked before the body is looked at. */
    if (app->cfg.api_key[0] && !auth_ok(app, req->authorization)) {
        srv_app_error(c, 401, "unauthorized", "missing or wrong API key (Authorization: Bearer KEY)",
                      "WWW-Authenticate: Bearer\r\n");
        return;
    }
    if (!strcmp(path, "/v1/model")) {
        if (strcmp(m, "GET")) {
            method_not_allowed(c, "GET");
            return;
        }
        handle_model(app, c);
        return;
    }
    if (!strcmp(path, "/v1/sessions") || !strcmp(path, "/v1/sessions/")) {
        if (strcmp(m, "POST")) {
            method_not_allowed(c, "POST");
            return;
        }
        handle_create(app, c, req);
        return;
    }
    if (!strncmp(path, "/v1/sessions/", 13)) {
        const char *rest = path + 13;
        const char *slash = strchr(rest, '/');
        size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
        const char *action = slash ? slash + 1 : "";
        if (idlen == 0 || idlen > 64 || strchr(action, '/')) {
            srv_respond_error(c, 404, "not_found", "no such endpoint");
            return;
        }
        if (action[0] && strcmp(action, "tokens") && strcmp(action, "generate") &&
            strcmp(action, "fork") && strcmp(action, "state")) {
            srv_respond_error(c, 404, "not_found", "no such endpoint");
            return;
        }
        char id[65];
        memcpy(id, rest, idlen);
        id[idlen] = '\0';
        handle_session(app, c, req, id, action);
        return;
    }
    srv_respond_error(c, 404, "not_found", "no such endpoint");
}
