/* offloop.c — body decoding on the threadpool and per-session order of held requests
 * (offloop.h). */
#include "offloop.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "dlist.h"

/* ---------------------------------------------------------------- decoding */

/* The bodies that decode into a token request (srv_body.tr). */
static int (*const TOKENS_DECODER[])(const uint8_t *, size_t, const proto_limits *, proto_tokens_req *,
                                     proto_error *) = {
    [SRV_BODY_CREATE] = proto_decode_create_req,
    [SRV_BODY_TOKENS] = proto_decode_tokens_req,
    [SRV_BODY_TOKENIZE] = proto_decode_tokenize_req,
    [SRV_BODY_DETOKENIZE] = proto_decode_detokenize_req,
};

void srv_body_decode(srv_body_kind kind, const uint8_t *body, size_t len, const proto_limits *lim,
                     srv_body *out)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    switch (kind) {
    case SRV_BODY_NONE:
        break;
    case SRV_BODY_CREATE:
    case SRV_BODY_TOKENS:
    case SRV_BODY_TOKENIZE:
    case SRV_BODY_DETOKENIZE:
        out->rc = TOKENS_DECODER[kind](body, len, lim, &out->tr, &out->err);
        break;
    case SRV_BODY_GENERATE:
        out->rc = proto_decode_generate_req(body, len, lim, &out->g, &out->err);
        break;
    case SRV_BODY_EMPTY:
        out->rc = proto_decode_empty_req(body, len, &out->err);
        break;
    case SRV_BODY_ROLLBACK:
        out->rc = proto_decode_rollback_req(body, len, &out->rb, &out->err);
        break;
    case SRV_BODY_OAI_COMPLETION:
    case SRV_BODY_OAI_CHAT:
        out->oai_rc = proto_decode_oai_req(body, len, kind == SRV_BODY_OAI_CHAT, lim, lim->render,
                                           lim->render_ctx, &out->oai, &out->oai_err);
        break;
    }
}

void srv_body_free(srv_body *b)
{
    proto_tokens_req_free(&b->tr);
    proto_oai_req_free(&b->oai);
}

/* ---------------------------------------------------------------- held requests */

typedef struct srv_held srv_held;

/* The held requests of one session id, in arrival order; exists while it holds any. */
struct srv_held_gate {
    struct srv_held_gate *next;
    char id[SRV_HELD_ID_MAX + 1];
    srv_held *head, *tail;
    int draining;
};

struct srv_held {
    srv_held *next;             /* in its gate */
    srv_held *wnext;            /* waiting for a decoder slot */
    srv_app *app;
    srv_conn *c;
    struct srv_held_gate *gate; /* NULL for a request with no session (create) */
    char id[SRV_HELD_ID_MAX + 1];
    srv_request req;            /* copies (below) */
    char *strings;
    uint8_t *body;
    srv_body_kind kind;
    proto_limits lim;
    srv_body decoded;
    int has_decoded;
    int ready;                  /* decoded, or nothing to decode off the loop */
    int store_wait;             /* waits for the Redis tier's answer (srv_held_store_ready) */
    srv_held_fn *fn;
    const void *ctx;
    int nice;                   /* the decode's nice value (the loop's + SRV_OFFLOOP_NICE) */
    uv_work_t work;
};

/* Every field of srv_request is copied below: a new field must be added there too. */
_Static_assert(sizeof(srv_request) == 10 * sizeof(char *) + sizeof(size_t),
               "srv_request changed: copy the new field in copy_request (offloop.c)");

static void copy_request(srv_held *h, const srv_request *req)
{
    const char *const src[] = {req->method, req->path, req->query, req->content_type,
                               req->accept, req->authorization, req->last_event_id, req->origin,
                               req->idempotency_key};
    const char **dst[] = {&h->req.method, &h->req.path, &h->req.query, &h->req.content_type,
                          &h->req.accept, &h->req.authorization, &h->req.last_event_id,
                          &h->req.origin, &h->req.idempotency_key};
    size_t n = sizeof src / sizeof *src, total = 0;
    for (size_t i = 0; i < n; i++)
        total += src[i] ? strlen(src[i]) + 1 : 0;
    h->strings = malloc(total ? total : 1);
    h->body = malloc(req->body_len + 1);
    if (!h->strings || !h->body)
        abort();
    char *p = h->strings;
    for (size_t i = 0; i < n; i++) {
        if (!src[i]) {
            *dst[i] = NULL;
            continue;
        }
        size_t l = strlen(src[i]) + 1;
        memcpy(p, src[i], l);
        *dst[i] = p;
        p += l;
    }
    memcpy(h->body, req->body, req->body_len);
    h->body[req->body_len] = '\0'; /* as the HTTP layer hands it over */
    h->req.body = h->body;
    h->req.body_len = req->body_len;
}

static struct srv_held_gate *gate_find(srv_app *app, const char *id)
{
    for (struct srv_held_gate *g = app->held.gates; g; g = g->next)
        if (!strcmp(g->id, id))
            return g;
    return NULL;
}

static void gate_remove(srv_app *app, struct srv_held_gate *g)
{
    for (struct srv_held_gate **pp = &app->held.gates; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    free(g);
}

static void apply(srv_held *h)
{
    if (h->kind != SRV_BODY_NONE && !h->has_decoded) /* small, held only for its turn */
        srv_body_decode(h->kind, h->req.body, h->req.body_len, &h->lim, &h->decoded);
    else if (h->kind == SRV_BODY_NONE)
        memset(&h->decoded, 0, sizeof h->decoded);
    h->fn(h->app, h->c, &h->req, h->id, &h->decoded, h->ctx);
    srv_body_free(&h->decoded);
    srv_conn_unref(h->c);
    free(h->strings);
    free(h->body);
    free(h);
}

/* Apply the gate's held requests from the head while they are ready; drop the gate when empty. */
static void gate_drain(srv_app *app, struct srv_held_gate *g)
{
    if (g->draining)
        return;
    g->draining = 1;
    while (g->head && g->head->ready && !g->head->store_wait) {
        srv_held *h = g->head;
        g->head = h->next;
        if (!g->head)
            g->tail = NULL;
        apply(h);
    }
    g->draining = 0;
    if (!g->head)
        gate_remove(app, g);
}

/* The calling thread's nice value raised to `nice` (Linux nice values are per thread): on a busy
 * machine the loop thread, woken by a client, then gets a core at once instead of waiting out this
 * thread's time slice. Returns the value to give srv_nice_restore: the previous nice value, or
 * INT_MIN when nothing was changed (already that low, or not permitted). */
int srv_nice_lower(int nice)
{
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (errno == 0 && cur < nice && setpriority(PRIO_PROCESS, tid, nice) == 0)
        return cur;
    return INT_MIN;
}

/* srv_nice_lower, only where the priority can be put back after (root, or RLIMIT_NICE allows the
 * current nice value again: 20 - nice <= the limit); else INT_MIN and nothing changed. For work
 * nobody waits on, run on a shared threadpool thread whose later work may be waited on. */
int srv_nice_lower_restorable(int nice)
{
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    struct rlimit rl;
    int back = errno == 0 &&
               (geteuid() == 0 || (getrlimit(RLIMIT_NICE, &rl) == 0 &&
                                   (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)(20 - cur))));
    return back ? srv_nice_lower(nice) : INT_MIN;
}

/* The priority srv_nice_lower took, put back; where the process may not raise a priority again
 * (no CAP_SYS_NICE, RLIMIT_NICE too low) the threadpool thread stays lower, which only lowers
 * later threadpool work (snapshot writes, I/O-bound). */
void srv_nice_restore(int prev)
{
    if (prev != INT_MIN)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), prev);
}

/* The decode runs SRV_OFFLOOP_NICE below the loop thread's priority. */
static void work_cb(uv_work_t *w)
{
    srv_held *h = w->data;
    int prev = srv_nice_lower(h->nice);
    srv_body_decode(h->kind, h->req.body, h->req.body_len, &h->lim, &h->decoded);
    h->has_decoded = 1;
    srv_nice_restore(prev);
}

static void after_work_cb(uv_work_t *w, int status);

/* Start waiting decodes while a decoder slot is free. */
static void start_decodes(srv_app *app)
{
    srv_held_state *st = &app->held;
    while (st->decoding < SRV_OFFLOOP_DECODERS && st->wait_head) {
        srv_held *h = st->wait_head;
        st->wait_head = h->wnext;
        if (!st->wait_head)
            st->wait_tail = NULL;
        h->work.data = h;
        if (uv_queue_work(app->loop, &h->work, work_cb, after_work_cb) == 0) {
            st->decoding++;
            continue;
        }
        h->ready = 1; /* cannot happen with a live loop; apply() decodes inline instead */
        if (h->gate)
            gate_drain(app, h->gate);
        else
            apply(h);
    }
}

static void after_work_cb(uv_work_t *w, int status)
{
    srv_held *h = w->data;
    srv_app *app = h->app;
    (void)status; /* never cancelled; if it were, apply() decodes inline */
    app->held.decoding--;
    start_decodes(app);
    h->ready = 1;
    if (h->gate)
        gate_drain(h->app, h->gate);
    else
        apply(h);
}

int srv_held_needed(srv_app *app, const char *id, srv_body_kind kind, size_t body_len)
{
    if (kind != SRV_BODY_NONE && body_len > SRV_OFFLOOP_BODY_BYTES)
        return 1;
    return id[0] && gate_find(app, id) != NULL;
}

static void held_add(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                     srv_body_kind kind, const proto_limits *lim, srv_held_fn *fn,
                     const void *ctx, int store_wait)
{
    srv_held *h = calloc(1, sizeof *h);
    if (!h)
        abort();
    h->app = app;
    h->c = c;
    srv_conn_ref(c);
    snprintf(h->id, sizeof h->id, "%s", id);
    copy_request(h, req);
    h->kind = kind;
    h->lim = *lim;
    h->fn = fn;
    h->ctx = ctx;
    h->store_wait = store_wait;
    int offload = kind != SRV_BODY_NONE && req->body_len > SRV_OFFLOOP_BODY_BYTES;
    h->ready = !offload;
    if (offload) {
        errno = 0;
        int loop_nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
        h->nice = errno ? 19 : loop_nice + SRV_OFFLOOP_NICE > 19 ? 19 : loop_nice + SRV_OFFLOOP_NICE;
    }
    if (id[0]) {
        struct srv_held_gate *g = gate_find(app, id);
        if (!g) {
            g = calloc(1, sizeof *g);
            if (!g)
                abort();
            snprintf(g->id, sizeof g->id, "%s", id);
            g->next = app->held.gates;
            app->held.gates = g;
        }
        h->gate = g;
        QUEUE_APPEND(g->head, g->tail, h, next);
    }
    if (offload) {
        srv_held_state *st = &app->held;
        QUEUE_APPEND(st->wait_head, st->wait_tail, h, wnext);
        start_decodes(app);
        return;
    }
    if (h->gate)
        gate_drain(app, h->gate);
    else
        apply(h);
}

void srv_held_add(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                  srv_body_kind kind, const proto_limits *lim, srv_held_fn *fn, const void *ctx)
{
    held_add(app, c, req, id, kind, lim, fn, ctx, 0);
}

void srv_held_add_store_wait(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                             srv_body_kind kind, const proto_limits *lim, srv_held_fn *fn,
                             const void *ctx)
{
    held_add(app, c, req, id, kind, lim, fn, ctx, 1);
}

void srv_held_store_ready(srv_app *app, const char *id)
{
    struct srv_held_gate *g = gate_find(app, id);
    if (!g)
        return;
    for (srv_held *h = g->head; h; h = h->next)
        h->store_wait = 0;
    gate_drain(app, g);
}
