/*
 * routes.c — HTTP routing (docs/DESIGN.md §5): one table {method, path pattern, checks, handler}.
 * A request is answered by the first entry whose pattern and method match; the entries whose
 * pattern alone matches make the 405's Allow. Before a handler runs: the API key for /v1/
 * paths, the body's media type, the session lookup (one per request), then the route's JSON
 * body is decoded (inline, or on the threadpool when large: offloop.h) and a decode error
 * answered. A handler queues an op (ops.h); the per-session queue limit is checked once, in new_op.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "access_log.h"
#include "app.h"
#include "auth.h"
#include "accept.h"
#include "buf.h"
#include "idempotency.h"
#include "log.h"
#include "metrics.h"
#include "offloop.h"
#include "openai.h"
#include "playground.h"
#include "ops.h"
#include "prefix_cache.h"
#include "redis_tier.h"
#include "requests.h"
#include "residency.h"
#include "responses.h"
#include "text.h"

/* ---------------------------------------------------------------- responses */

static void respond_json(srv_conn *c, int status, proto_buf *b)
{
    srv_respond(c, status, "application/json", b->data, b->len, NULL);
}

static void reject(srv_conn *c, const proto_error *e)
{
    srv_respond_error(c, e->status, e->code, e->message);
}

/* ---------------------------------------------------------------- checks */

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

/* A JSON body: Content-Type absent, application/json, curl's default, or text/plain (what a
 * browser's fetch(url, {body: JSON.stringify(x)}) sends: a "simple" request needs no CORS
 * preflight); otherwise 415. The body is decoded as strict JSON whatever the label. */
static int json_body_ok(srv_conn *c, const srv_request *req)
{
    if (req->body_len == 0 || !req->content_type || media_is(req->content_type, "application/json") ||
        media_is(req->content_type, CURL_DEFAULT_TYPE) || media_is(req->content_type, "text/plain"))
        return 1;
    srv_respond_error(c, 415, "unsupported_media_type", "request body must be application/json");
    return 0;
}

/* A state blob: Content-Type absent, application/octet-stream or curl's default; otherwise 415. */
static int blob_body_ok(srv_conn *c, const srv_request *req)
{
    if (!req->content_type || media_is(req->content_type, "application/octet-stream") ||
        media_is(req->content_type, CURL_DEFAULT_TYPE))
        return 1;
    srv_respond_error(c, 415, "unsupported_media_type", "a state upload must be application/octet-stream");
    return 0;
}

static proto_limits limits_of(const srv_app *app)
{
    proto_limits l = {.vocab_size = app->info->vocab_size,
                      .max_tokens_per_request = app->cfg.max_tokens_per_request};
    srv_text_limits(app, &l); /* text fields through the model's tokenizer (text.h) */
    l.render = srv_chat_render; /* OpenAI chat: the chat template (openai.h) */
    l.render_ctx = app;
    return l;
}

/* No session for the id: 404, or 503 + Retry-After when its snapshot exists but could not be
 * read just now (persistence: EMFILE, EIO, no memory; residency.h). */
static void session_missing(srv_app *app, srv_conn *c)
{
    if (srv_residency_take_load_error(app)) {
        srv_respond_error_ex(c, 503, "session_unavailable",
                             "the session's snapshot could not be read just now; retry",
                             "Retry-After: 1\r\n");
        return;
    }
    srv_respond_error(c, 404, "session_not_found", "no such session");
}

/* ---------------------------------------------------------------- handlers */

/* A handler: s is the session of the path's {id} for routes with R_SESSION, else NULL; body is the
 * route's decoded JSON body (offloop.h; kind SRV_BODY_NONE when it has none), already checked:
 * a body that did not decode was answered before the handler. */
typedef void route_fn(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                      srv_body *body);

/* An op of kind for s, or NULL after answering 429 when s's queue is full
 * (max_queued_ops_per_session): the one queue-limit check of a request. */
static srv_op *new_op(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                      srv_op_kind kind)
{
    if (s->q_len >= app->cfg.max_queued_ops_per_session) {
        char msg[128];
        app->counters.requests_rejected_busy++;
        snprintf(msg, sizeof msg, "max_queued_ops_per_session (%d) reached for this session",
                 app->cfg.max_queued_ops_per_session);
        srv_respond_error_ex(c, 429, "max_queued_ops_per_session", msg, "Retry-After: 1\r\n");
        return NULL;
    }
    srv_op *op = srv_op_new(app, kind, s, c);
    if (req->idempotency_key) /* checked: a route that takes one (R_IDEM), a valid key */
        snprintf(op->idem_key, sizeof op->idem_key, "%s", req->idempotency_key);
    return op;
}

static void handle_health(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                          srv_body *body)
{
    proto_buf b; /* "ok", or "degraded" after a failed snapshot write (residency.h) or while
                  * Redis cannot be reached (redis_tier.h) */
    proto_buf_init(&b);
    int status = srv_tier_enabled(app) ? srv_tier_health(app, &b) : srv_residency_health(app, &b);
    respond_json(c, status, &b);
    proto_buf_free(&b);
}

static void handle_metrics(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                           srv_body *body)
{
    proto_buf b;
    proto_buf_init(&b);
    srv_metrics_render(app, &b);
    srv_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
    proto_buf_free(&b);
}

static void handle_model(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                         srv_body *body)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_model_json(&b, app->info, app->model_name);
    b.len--; /* reopen the object for the tokenizer member */
    srv_text_model_json(app, &b);
    proto_buf_puts(&b, "}");
    respond_json(c, 200, &b);
    proto_buf_free(&b);
}

static void handle_create(srv_app *app, srv_conn *c, const srv_request *req, srv_session *unused,
                          srv_body *body)
{
    proto_tokens_req tr = body->tr;
    body->tr.tokens = NULL; /* taken */
    srv_session *s;
    int rc = srv_table_new(app->table, uv_now(app->loop), &s);
    if (rc != 0) {
        proto_tokens_req_free(&tr);
        if (rc == -1)
            srv_ops_reject_full(app, c);
        else
            srv_respond_error_ex(c, 503, "out_of_memory", "cannot create a session",
                                 "Retry-After: 1\r\n");
        return;
    }
    app->counters.sessions_created++;
    srv_access_session_hash(s->id, srv_conn_access_note(c)->session);
    int cached = tr.prefix_cache && srv_pcache_enabled(app->pcache);
    if (tr.n == 0 && !srv_tier_enabled(app)) { /* with the tier: an op, answered once committed */
        proto_tokens_req_free(&tr);
        if (cached) /* tracks its tokens from here: later folds and generations are stored */
            srv_pcache_hist_append(s, NULL, 0, 2 * app->cfg.max_tokens_per_request);
        proto_buf b;
        proto_buf_init(&b);
        s->snapshot_bytes = srv_session_state_bytes(s, app->info->vocab_size);
        proto_session_json(&b, s->id, 0, app->info->state_bytes, s->snapshot_bytes, 0);
        if (tr.prefix_cache) {
            b.len--;
            proto_buf_puts(&b, ",\"cached_tokens\":0}");
        }
        respond_json(c, 201, &b);
        proto_buf_free(&b);
        return;
    }
    srv_op *op = srv_op_new(app, SRV_OP_CREATE, s, c); /* a fresh session's queue is empty */
    op->tokens = tr.tokens;
    op->n = tr.n;
    op->pc_lookup = cached;
    op->pc_report = tr.prefix_cache;
    srv_ops_enqueue(op);
}

/* A read: answered at once from the loop-side mirrors, not queued behind a long stream
 * (pending_ops says how many requests are queued or running). */
static void handle_get_session(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                               srv_body *body)
{
    if (!s->snapshot_bytes)
        s->snapshot_bytes = srv_session_state_bytes(s, app->info->vocab_size); /* idle */
    srv_table_touch(app->table, s, uv_now(app->loop));
    proto_buf b;
    proto_buf_init(&b);
    proto_session_json(&b, s->id, s->tokens_seen, app->info->state_bytes, s->snapshot_bytes,
                       s->q_len);
    respond_json(c, 200, &b);
    proto_buf_free(&b);
}

/* An op of kind with nothing to fill in, queued (or the 429). */
static void queue(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                  srv_op_kind kind)
{
    srv_op *op = new_op(app, c, req, s, kind);
    if (op)
        srv_ops_enqueue(op);
}

static void handle_tokens(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                          srv_body *body)
{
    srv_op *op = new_op(app, c, req, s, SRV_OP_FOLD);
    if (!op)
        return;
    op->tokens = body->tr.tokens;
    op->n = body->tr.n;
    op->top_k = body->tr.top_k;
    op->ckpt_at_end = body->tr.checkpoint;
    op->last_only = body->tr.last_only;
    op->progress = body->tr.progress;
    body->tr.tokens = NULL; /* taken */
    op->framing = proto_negotiate_framing(req->accept);
    srv_ops_enqueue(op);
}

static void handle_generate(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                            srv_body *body)
{
    srv_op *op = new_op(app, c, req, s, SRV_OP_GENERATE);
    if (!op)
        return;
    op->gen = body->g;
    op->framing = proto_negotiate_framing(req->accept);
    srv_ops_enqueue(op);
}

static void handle_put_state(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                             srv_body *body)
{
    srv_op *op = new_op(app, c, req, s, SRV_OP_PUT_STATE);
    if (!op)
        return;
    op->blob = malloc(req->body_len ? req->body_len : 1);
    if (!op->blob)
        abort();
    memcpy(op->blob, req->body, req->body_len);
    op->blob_len = req->body_len;
    srv_ops_enqueue(op);
}

/* The op for a checkpoint id (the path's last segment, or the body's "checkpoint"). */
static void queue_ckpt_op(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                          srv_op_kind kind, const char *cid)
{
    srv_op *op = new_op(app, c, req, s, kind);
    if (!op)
        return;
    snprintf(op->ckpt_id, sizeof op->ckpt_id, "%s", cid);
    srv_ops_enqueue(op);
}

static void handle_ckpt_delete(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                               srv_body *body)
{
    queue_ckpt_op(app, c, req, s, SRV_OP_CKPT_DELETE, strrchr(req->path, '/') + 1); /* {cid} */
}

static void handle_rollback(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                            srv_body *body)
{
    queue_ckpt_op(app, c, req, s, SRV_OP_ROLLBACK, body->rb.checkpoint);
}

/* POST /v1/tokenize: the body was encoded by its decoder (proto_decode_tokenize_req). */
static void handle_tokenize(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                            srv_body *body)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_buf_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < body->tr.n; i++)
        proto_buf_printf(&b, "%s%d", i ? "," : "", (int)body->tr.tokens[i]);
    proto_buf_puts(&b, "]}");
    respond_json(c, 200, &b);
    proto_buf_free(&b);
}

/* POST /v1/detokenize: ids past the tokenizer's vocabulary (a padded model) decode as "". */
static void handle_detokenize(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                              srv_body *body)
{
    char *text = NULL;
    size_t len = 0;
    if (recur_tokenizer_decode(app->tok, body->tr.tokens, body->tr.n, &text, &len) != 0) {
        srv_respond_error(c, 422, "invalid_token", "the tokens could not be decoded");
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    proto_buf_puts(&b, "{\"text\":");
    proto_buf_json_str(&b, text, len);
    proto_buf_puts(&b, "}");
    recur_tokenizer_release(text);
    respond_json(c, 200, &b);
    proto_buf_free(&b);
}

/* ---------------------------------------------------------------- the table */

enum {
    R_JSON = 1,    /* the body is JSON: Content-Type absent, application/json or curl's default */
    R_BLOB = 2,    /* the body is a state blob: application/octet-stream or curl's default */
    R_SESSION = 4, /* the path's {id} names a session: looked up (404 / 503) before the handler */
    R_STREAM = 8,  /* a stream: an SSE reconnect (Last-Event-ID) is answered 204, never run again */
    R_QUEUED = 16, /* queues an op on that session: keeps arrival order behind held requests */
    R_IDEM = 32,   /* takes an Idempotency-Key (idempotency.h); other routes refuse one */
};

typedef struct {
    const char *method;
    const char *pattern; /* literal bytes; {id} is one segment; {cid} one more segment (not
                          * copied: the handler reads it); a final "/?" an optional '/' */
    unsigned checks;     /* R_* */
    srv_body_kind body;  /* the JSON body it decodes (off the loop when large, offloop.h) */
    route_fn *handler;   /* NULL: the route queues an op of kind `op` with nothing to fill in */
    srv_op_kind op;      /* (0 where handler is set) */
} route;

/* Paths outside /v1/ need no key (health checks and scrapers); every /v1/ path does. */
static const route routes[] = {
    {"GET", "/", 0, SRV_BODY_NONE, srv_playground, 0}, /* the playground page (playground.h) */
    {"GET", "/healthz", 0, SRV_BODY_NONE, handle_health, 0},
    {"GET", "/health", 0, SRV_BODY_NONE, handle_health, 0}, /* vLLM's and llama.cpp's name */
    {"GET", "/metrics", 0, SRV_BODY_NONE, handle_metrics, 0},
    {"GET", "/v1/model", 0, SRV_BODY_NONE, handle_model, 0},
    {"POST", "/v1/tokenize", R_JSON, SRV_BODY_TOKENIZE, handle_tokenize, 0},
    {"POST", "/v1/detokenize", R_JSON, SRV_BODY_DETOKENIZE, handle_detokenize, 0},
    {"POST", "/v1/sessions/?", R_JSON, SRV_BODY_CREATE, handle_create, 0},
    {"GET", "/v1/sessions/{id}/?", R_SESSION, SRV_BODY_NONE, handle_get_session, 0},
    {"DELETE", "/v1/sessions/{id}/?", R_SESSION | R_QUEUED, SRV_BODY_NONE, NULL, SRV_OP_DELETE},
    {"POST", "/v1/sessions/{id}/tokens", R_JSON | R_SESSION | R_STREAM | R_QUEUED | R_IDEM,
     SRV_BODY_TOKENS, handle_tokens, 0},
    {"POST", "/v1/sessions/{id}/generate", R_JSON | R_SESSION | R_STREAM | R_QUEUED | R_IDEM,
     SRV_BODY_GENERATE, handle_generate, 0},
    {"POST", "/v1/sessions/{id}/fork", R_JSON | R_SESSION | R_QUEUED, SRV_BODY_EMPTY, NULL,
     SRV_OP_FORK},
    {"GET", "/v1/sessions/{id}/state", R_SESSION | R_QUEUED, SRV_BODY_NONE, NULL,
     SRV_OP_GET_STATE},
    {"PUT", "/v1/sessions/{id}/state", R_BLOB | R_SESSION | R_QUEUED, SRV_BODY_NONE,
     handle_put_state, 0},
    {"POST", "/v1/sessions/{id}/checkpoints", R_JSON | R_SESSION | R_QUEUED | R_IDEM,
     SRV_BODY_EMPTY, NULL, SRV_OP_CKPT_TAKE},
    {"GET", "/v1/sessions/{id}/checkpoints", R_SESSION | R_QUEUED, SRV_BODY_NONE, NULL,
     SRV_OP_CKPT_LIST},
    {"DELETE", "/v1/sessions/{id}/checkpoints/{cid}", R_SESSION | R_QUEUED, SRV_BODY_NONE,
     handle_ckpt_delete, 0},
    {"POST", "/v1/sessions/{id}/rollback", R_JSON | R_SESSION | R_QUEUED | R_IDEM,
     SRV_BODY_ROLLBACK, handle_rollback, 0},
    /* the OpenAI API (openai.h) */
    {"POST", "/v1/completions", R_JSON, SRV_BODY_OAI_COMPLETION, srv_openai_completions, 0},
    {"POST", "/v1/chat/completions", R_JSON, SRV_BODY_OAI_CHAT, srv_openai_completions, 0},
    {"GET", "/v1/models/?", 0, SRV_BODY_NONE, srv_openai_models, 0},
    {"GET", "/v1/models/{id}/?", 0, SRV_BODY_NONE, srv_openai_model, 0},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* The longest {id} a path may carry (session ids are 32 hex digits; longer is no endpoint). */
#define ROUTE_ID_MAX 64

/* 1 when path matches pattern; {id}'s segment (1..ROUTE_ID_MAX bytes) is copied to id. */
static int path_match(const char *pattern, const char *path, char id[ROUTE_ID_MAX + 1])
{
    const char *p = pattern, *s = path;
    while (*p) {
        if (!strcmp(p, "/?"))
            return *s == '\0' || !strcmp(s, "/");
        if (!strncmp(p, "{cid}", 5)) {
            size_t n = strcspn(s, "/");
            if (n == 0 || n > ROUTE_ID_MAX)
                return 0;
            s += n;
            p += 5;
            continue;
        }
        if (!strncmp(p, "{id}", 4)) {
            size_t n = strcspn(s, "/");
            if (n == 0 || n > ROUTE_ID_MAX)
                return 0;
            memcpy(id, s, n);
            id[n] = '\0';
            s += n;
            p += 4;
            continue;
        }
        if (*p++ != *s++)
            return 0;
    }
    return *s == '\0';
}

/* A route of method m answers a request of method req_method: the same, or HEAD on a GET route
 * (the HTTP layer sends the head alone). */
static int method_serves(const char *m, const char *req_method)
{
    return !strcmp(m, req_method) || (!strcmp(req_method, "HEAD") && !strcmp(m, "GET"));
}

/* The methods path answers, as an Allow value ("GET, HEAD, POST, OPTIONS"); 0 when no route
 * has the path. */
static int allowed_methods(const char *path, char *allow, size_t cap)
{
    char id[ROUTE_ID_MAX + 1];
    size_t len = 0;
    int any = 0;
    allow[0] = '\0';
    for (size_t i = 0; i < N_ROUTES; i++)
        if (path_match(routes[i].pattern, path, id)) {
            any = 1;
            len += (size_t)snprintf(allow + len, cap - len, "%s%s%s", len ? ", " : "",
                                    routes[i].method, strcmp(routes[i].method, "GET") ? "" : ", HEAD");
        }
    if (any)
        snprintf(allow + len, cap - len, ", OPTIONS");
    return any;
}

static void method_not_allowed(srv_conn *c, const char *path)
{
    char allow[128], hdr[160], msg[192];
    allowed_methods(path, allow, sizeof allow);
    snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
    snprintf(msg, sizeof msg, "method not allowed; allowed: %s", allow);
    srv_respond_error_ex(c, 405, "method_not_allowed", msg, hdr);
}

/* OPTIONS: 204 with Allow; with cors_origin set (the HTTP layer adds Access-Control-Allow-Origin
 * when the Origin is allowed) it is also the CORS preflight's answer: the methods, the request
 * headers a browser may send, and how long it may cache that. No API key: a preflight carries
 * none (the request it announces does). */
static void options(srv_app *app, srv_conn *c, const srv_request *req)
{
    char allow[128], hdr[512];
    if (!allowed_methods(req->path, allow, sizeof allow)) {
        srv_respond_error(c, 404, "not_found", "no such endpoint");
        return;
    }
    int n = snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
    if (app->cfg.http.cors_origin[0])
        snprintf(hdr + n, sizeof hdr - (size_t)n,
                 "Access-Control-Allow-Methods: %s\r\n"
                 "Access-Control-Allow-Headers: Authorization, Content-Type, Accept, Last-Event-ID\r\n"
                 "Access-Control-Max-Age: 600\r\n",
                 allow);
    srv_respond(c, 204, NULL, NULL, 0, hdr);
}

static void run_held(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                     srv_body *b, const void *ctx);

/* The session of {id}: 1 with *s, 0 after answering (404, 503; with the Redis tier 409
 * session_leased), 2 when the request was held until the Redis tier has answered (redis_tier.h;
 * it is then applied by run_held). */
static int session_of(srv_app *app, srv_conn *c, const srv_request *req, const route *r,
                      const char *id, srv_session **s)
{
    if (srv_tier_enabled(app)) {
        srv_tier_gate g = srv_tier_lookup(app, c, id, (r->checks & R_QUEUED) != 0, s);
        if (g == SRV_TIER_HOLD) {
            proto_limits lim = limits_of(app);
            srv_held_add_store_wait(app, c, req, id, r->body, &lim, run_held, r);
            return 2;
        }
        return g == SRV_TIER_PASS;
    }
    if (srv_residency_resume(app, id, s) == SRV_RESUME_HOLD) { /* read from the disk */
        proto_limits lim = limits_of(app);
        srv_held_add_store_wait(app, c, req, id, r->body, &lim, run_held, r);
        return 2;
    }
    if (!*s) {
        session_missing(app, c); /* 404 before 422: the resource comes first */
        return 0;
    }
    return 1;
}

/* The checks of r's flags; 0 after answering (or holding) the request. *s: the session for
 * R_SESSION. */
static int checks_pass(srv_app *app, srv_conn *c, const srv_request *req, const route *r,
                       const char *id, srv_session **s)
{
    if (req->idempotency_key && !(r->checks & R_IDEM)) {
        srv_respond_error(c, 400, "idempotency_key_unsupported",
                          "Idempotency-Key is taken by POST .../tokens, .../generate, "
                          ".../checkpoints and .../rollback only");
        return 0;
    }
    if (req->idempotency_key && !srv_idem_key_valid(req->idempotency_key)) {
        srv_respond_error(c, 400, "invalid_idempotency_key",
                          "Idempotency-Key must be 1-128 visible ASCII characters");
        return 0;
    }
    if ((r->checks & R_JSON) && !json_body_ok(c, req))
        return 0;
    if ((r->checks & R_BLOB) && !blob_body_ok(c, req))
        return 0;
    if (r->checks & R_SESSION) {
        srv_access_session_hash(id, srv_conn_access_note(c)->session);
        if (session_of(app, c, req, r, id, s) != 1)
            return 0;
    }
    if ((r->checks & R_STREAM) && req->last_event_id) {
        /* an EventSource reconnecting after its stream ended (or broke): a stream is never
         * resumed or run twice (it would fold again), and 204 is what stops the reconnecting */
        srv_respond(c, 204, NULL, NULL, 0, NULL);
        return 0;
    }
    return 1;
}

/* The handler with its decoded body: a body that did not decode is answered here. */
static void run_route(srv_app *app, srv_conn *c, const srv_request *req, const route *r,
                      srv_session *s, srv_body *b)
{
    if (b->kind != SRV_BODY_NONE && b->rc != 0) {
        reject(c, &b->err);
        return;
    }
    if (r->handler)
        r->handler(app, c, req, s, b);
    else
        queue(app, c, req, s, r->op);
}

/* A held request's turn (offloop.h): its session is looked up again (it may have gone, or been
 * evicted to disk, while the body was decoded). */
static void run_held(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                     srv_body *b, const void *ctx)
{
    const route *r = ctx;
    srv_session *s = NULL;
    if ((r->checks & R_SESSION) && session_of(app, c, req, r, id, &s) != 1)
        return;
    run_route(app, c, req, r, s, b);
}

void srv_app_on_done(srv_conn *c, const srv_access *a, void *appv)
{
    srv_access_log_record(((srv_app *)appv)->access_log, a);
}

void srv_app_on_request(srv_conn *c, const srv_request *req, void *appv)
{
    srv_app *app = appv;
    if (!strcmp(req->method, "OPTIONS")) {
        options(app, c, req);
        return;
    }
    /* Every /v1 path: the key is checked before the path or the body is looked at (auth.h; a
     * request with a body was already checked at its head, before the body was read). */
    srv_refusal unauth;
    if (srv_auth_check(app, req, &unauth)) {
        srv_respond_error_ex(c, unauth.status, unauth.code, unauth.message, unauth.extra_headers);
        return;
    }
    char id[ROUTE_ID_MAX + 1] = "";
    int path_known = 0;
    for (size_t i = 0; i < N_ROUTES; i++) {
        const route *r = &routes[i];
        if (!path_match(r->pattern, req->path, id))
            continue;
        path_known = 1;
        srv_conn_access_note(c)->route = r->pattern; /* the access log's route (a 405 too) */
        if (!method_serves(r->method, req->method))
            continue;
        srv_session *s = NULL;
        if (!checks_pass(app, c, req, r, id, &s))
            return;
        proto_limits lim = limits_of(app);
        const char *order_id = (r->checks & R_QUEUED) ? id : "";
        if (srv_held_needed(app, order_id, r->body, req->body_len)) {
            if (s)
                srv_table_touch(app->table, s, uv_now(app->loop)); /* not idle while its request
                                                                    * is decoded */
            srv_held_add(app, c, req, order_id, r->body, &lim, run_held, r);
            return;
        }
        srv_body b;
        srv_body_decode(r->body, req->body, req->body_len, &lim, &b);
        run_route(app, c, req, r, s, &b);
        srv_body_free(&b);
        return;
    }
    if (path_known)
        method_not_allowed(c, req->path);
    else
        srv_respond_error(c, 404, "not_found", "no such endpoint");
}
