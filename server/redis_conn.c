/* redis_conn.c — one Redis connection on the libuv loop (redis_conn.h). */
#include "redis_conn.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "errf.h"
#include "dlist.h"
#include "log.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
#define READ_BUF_KEEP ((size_t)4 << 20)
#define RECV_CHUNK ((size_t)64 << 10) /* bytes read from the socket per recv (the loop's buffer) */
#define PATIENCE_MAX 16 /* a reset connection's successor allows up to 16 x timeout_ms */

/* A command sent and not answered yet; in send order (replies come in that order). */
typedef struct pend {
    struct pend *prev, *next;
    srv_redis *r;
    srv_redis_cb *cb;
    void *arg;
    uint64_t t_sent_ns;
} pend;

struct srv_redis {
    uv_loop_t *loop;
    char ip[INET6_ADDRSTRLEN];
    int port, db;
    uint64_t timeout_ms;
    uint64_t patience_ms;  /* the silence allowed now: timeout_ms, doubled by every reset for
                            * silence, back to timeout_ms once the queue drains */
    srv_hist *latency;
    void (*on_state)(void *ctx, int up);
    void *ctx;
    redisAsyncContext *ac; /* NULL while down */
    int up;                /* connected */
    uint64_t connect_started_ms;
    uint64_t last_reply_ns; /* the last reply read on this connection (progress) */
    pend *head, *tail;
    size_t n_pending;
    uv_timer_t watchdog;   /* timeouts: the oldest pending command, a connect that hangs */
    uv_timer_t retry;      /* the next connect attempt */
    uint64_t backoff_ms;
    uint64_t reconnects;
    char last_error[128];
    int closing, handles_open;
    void (*done)(void *ctx);
    void *done_ctx;
};

/* ---------------------------------------------------------------- URL */

int srv_redis_url_parse(const char *url, srv_redis_url *out, char *err, size_t en)
{
    memset(out, 0, sizeof *out);
    out->port = 6379;
    static const char scheme[] = "redis://";
    if (!strncmp(url, "rediss://", 9))
        return srv_errf(err, en, "redis: rediss:// (TLS) is not supported; use redis://HOST:PORT[/DB]");
    if (!strncmp(url, "unix:", 5))
        return srv_errf(err, en, "redis: unix sockets are not supported; use redis://HOST:PORT[/DB]");
    if (strncmp(url, scheme, sizeof scheme - 1) != 0)
        return srv_errf(err, en, "redis: the URL must be redis://HOST:PORT[/DB]");
    const char *p = url + sizeof scheme - 1;
    if (strchr(p, '@'))
        return srv_errf(err, en, "redis: credentials in the URL (user:password@) are not supported");
    size_t hl;
    if (*p == '[') { /* [IPv6] */
        const char *e = strchr(p, ']');
        if (!e)
            return srv_errf(err, en, "redis: unterminated [IPv6 address]");
        hl = (size_t)(e - p - 1);
        if (hl == 0 || hl >= sizeof out->host)
            return srv_errf(err, en, "redis: bad host");
        memcpy(out->host, p + 1, hl);
        p = e + 1;
    } else {
        hl = strcspn(p, ":/");
        if (hl == 0 || hl >= sizeof out->host)
            return srv_errf(err, en, "redis: the URL has no host (redis://HOST:PORT[/DB])");
        memcpy(out->host, p, hl);
        p += hl;
    }
    for (size_t i = 0; out->host[i]; i++) {
        char c = out->host[i];
        if (!(c == '.' || c == '-' || c == ':' || c == '_' || (c >= '0' && c <= '9') ||
              (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return srv_errf(err, en, "redis: bad character in host");
    }
    if (*p == ':') {
        p++;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65535 || (*end && *end != '/'))
            return srv_errf(err, en, "redis: the port must be an integer in [1, 65535]");
        out->port = (int)v;
        p = end;
    }
    if (*p == '/' && p[1]) {
        p++;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || *end || v < 0 || v > 15)
            return srv_errf(err, en, "redis: the database (/DB) must be an integer in [0, 15]");
        out->db = (int)v;
    } else if (*p == '/') {
        p++;
    }
    if (*p && *p != '/')
        return srv_errf(err, en, "redis: unexpected text after the port");
    return 0;
}

/* ---------------------------------------------------------------- pending commands */

static void pend_unlink(srv_redis *r, pend *p)
{
    DLIST_UNLINK(r->head, r->tail, p, prev, next);
    r->n_pending--;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    pend *p = privdata;
    srv_redis *r = p->r;
    pend_unlink(r, p);
    redisReply *rep = reply;
    if (rep) {
        if (r->up && r->n_pending == 0) /* (not the handshake's PONG: the burst follows it) */
            r->patience_ms = r->timeout_ms; /* Redis kept up with everything we sent */
        r->last_reply_ns = uv_hrtime();
        srv_hist_observe(r->latency, r->last_reply_ns - p->t_sent_ns);
    }
    p->cb(r, rep, p->arg);
    free(p);
}

/* ---------------------------------------------------------------- event adapter
 *
 * hiredis's own libuv adapter (adapters/libuv.h) re-armed the poll handle on every event hook,
 * and hiredis calls its "add read" hook after each read of at most 16 KB: uv_poll_start stops
 * the watcher first (epoll_ctl DEL) and the next poll adds it back (ADD), so a ~200 KB state
 * read cost 13 reads, 13 loop iterations and ~30 epoll_ctl calls, and every command burst two
 * more re-arms for the write (perf, 2026-12-02: epoll_ctl 13 %, read 9 %, epoll_wait 6 % of
 * the loop thread's time per resume from Redis). This adapter:
 *   - changes the poll handle's events only when the set of events changes;
 *   - reads what the socket holds in RECV_CHUNK pieces before hiredis's own read (which then
 *     finds the socket empty, or its end or error: hiredis alone decides a disconnect) and
 *     processes the replies, in one loop iteration;
 *   - writes the commands queued while connected from an idle handle, started by the command:
 *     an active idle handle keeps the loop from blocking, so they are written before the loop
 *     next waits, whichever phase queued them (a prepare handle started from another prepare
 *     callback would only run after the next poll); it polls for writability only while a write
 *     is left over (the socket full) or the connect is in progress. Never written from the
 *     command's own call: a write error frees the context inside hiredis's command call. */
typedef struct {
    redisAsyncContext *ac; /* NULL once hiredis freed the context (cleanup) */
    uv_poll_t poll;
    uv_idle_t flush;       /* active while commands wait to be written (ev_add_write) */
    int events;            /* UV_READABLE | UV_WRITABLE the poll handle watches */
    int flushing;          /* inside flush's redisAsyncHandleWrite */
    int open;              /* handles not closed yet */
    char *rbuf;            /* [RECV_CHUNK] */
} ev_adapter;

static void ev_set(ev_adapter *e, int events);

static void ev_on_poll(uv_poll_t *h, int status, int events)
{
    ev_adapter *e = h->data;
    if (status != 0)
        events = UV_READABLE | UV_WRITABLE; /* let hiredis's own read / write see the error */
    if (e->ac && (events & UV_READABLE)) {
        redisContext *c = &e->ac->c;
        if ((c->flags & REDIS_CONNECTED) && !c->err) {
            for (;;) { /* what the socket holds now; the end or an error is hiredis's to see */
                ssize_t n = recv(c->fd, e->rbuf, RECV_CHUNK, MSG_DONTWAIT);
                if (n <= 0)
                    break;
                if (redisReaderFeed(c->reader, e->rbuf, (size_t)n) != REDIS_OK)
                    break; /* hiredis's read below reports the reader's error */
                if ((size_t)n < RECV_CHUNK)
                    break; /* drained */
            }
        }
        redisAsyncHandleRead(e->ac); /* its read, then the replies' callbacks */
    }
    if (e->ac && (events & UV_WRITABLE) && (e->events & UV_WRITABLE))
        redisAsyncHandleWrite(e->ac);
}

static void ev_on_flush(uv_idle_t *h)
{
    ev_adapter *e = h->data;
    uv_idle_stop(h);
    if (!e->ac)
        return;
    e->flushing = 1;
    redisAsyncHandleWrite(e->ac); /* may free the context (a write error): e->ac NULL then */
    e->flushing = 0;
}

static void ev_set(ev_adapter *e, int events)
{
    if (events == e->events || !e->open)
        return;
    e->events = events;
    if (events)
        uv_poll_start(&e->poll, events, ev_on_poll);
    else
        uv_poll_stop(&e->poll);
}

static void ev_add_read(void *d)
{
    ev_adapter *e = d;
    ev_set(e, e->events | UV_READABLE);
}

static void ev_del_read(void *d)
{
    ev_adapter *e = d;
    ev_set(e, e->events & ~UV_READABLE);
}

static void ev_add_write(void *d)
{
    ev_adapter *e = d;
    if (e->ac && (e->ac->c.flags & REDIS_CONNECTED) && !e->flushing)
        uv_idle_start(&e->flush, ev_on_flush); /* written before the loop next waits */
    else
        ev_set(e, e->events | UV_WRITABLE); /* connecting, or the socket is full */
}

static void ev_del_write(void *d)
{
    ev_adapter *e = d;
    ev_set(e, e->events & ~UV_WRITABLE);
}

static void ev_closed(uv_handle_t *h)
{
    ev_adapter *e = h->data;
    if (--e->open == 0) {
        free(e->rbuf);
        free(e);
    }
}

static void ev_cleanup(void *d)
{
    ev_adapter *e = d;
    e->ac = NULL; /* hiredis is freeing the context */
    uv_idle_stop(&e->flush);
    uv_close((uv_handle_t *)&e->poll, ev_closed);
    uv_close((uv_handle_t *)&e->flush, ev_closed);
}

static int ev_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
    ev_adapter *e = calloc(1, sizeof *e);
    if (!e)
        abort();
    e->rbuf = malloc(RECV_CHUNK);
    if (!e->rbuf)
        abort();
    if (uv_poll_init(loop, &e->poll, ac->c.fd) != 0) {
        free(e->rbuf);
        free(e);
        return REDIS_ERR;
    }
    uv_idle_init(loop, &e->flush);
    e->poll.data = e->flush.data = e;
    e->open = 2;
    e->ac = ac;
    ac->ev.data = e;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    return REDIS_OK;
}

/* ---------------------------------------------------------------- connection */

static void schedule_connect(srv_redis *r);

static void went_down(srv_redis *r, const char *why)
{
    int was_up = r->up;
    r->up = 0;
    r->ac = NULL;
    snprintf(r->last_error, sizeof r->last_error, "%s", why);
    if (was_up) {
        srv_log(SRV_LOG_ERROR, "redis_down", "\"error\":\"%s\"", r->last_error);
        r->on_state(r->ctx, 0);
    }
    schedule_connect(r);
}

/* The handshake's PING answered: Redis itself (not only the kernel's listen queue) serves this
 * connection. An error reply (-LOADING while Redis reads its AOF) leaves it down: the watchdog
 * resets it after redis_timeout_ms and the backoff goes on. */
static void on_handshake(srv_redis *r, redisReply *reply, void *arg)
{
    if (!reply || r->up || !r->ac)
        return; /* reset meanwhile (its reconnect is scheduled) */
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(r->last_error, sizeof r->last_error, "handshake: %.100s", reply->str);
        return;
    }
    r->up = 1;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->last_error[0] = '\0';
    srv_log(SRV_LOG_INFO, "redis_up", "\"address\":\"%s\",\"port\":%d,\"db\":%d", r->ip, r->port, r->db);
    r->on_state(r->ctx, 1);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    srv_redis *r = ac->data;
    if (r->ac != ac)
        return; /* a context we dropped ourselves */
    if (status != REDIS_OK) {
        char why[128];
        snprintf(why, sizeof why, "connect: %s", ac->errstr[0] ? ac->errstr : "failed");
        went_down(r, why); /* hiredis frees the context after this callback */
        return;
    }
    /* A TCP connect succeeds while Redis is stopped (SIGSTOP, a long fsync): the kernel
     * completes it from the listen queue. Up only once Redis answers a PING. */
    snprintf(r->last_error, sizeof r->last_error, "handshake: waiting for PONG");
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    srv_redis_command(r, on_handshake, NULL, 1, argv, lens);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    srv_redis *r = ac->data;
    if (r->ac != ac)
        return;
    went_down(r, ac->errstr[0] ? ac->errstr : "connection closed");
}

static void ignore_reply(srv_redis *r, redisReply *reply, void *arg) {}

static void connect_now(srv_redis *r)
{
    if (r->closing)
        return;
    redisAsyncContext *ac = redisAsyncConnect(r->ip, r->port);
    if (!ac || ac->err) {
        char why[128];
        snprintf(why, sizeof why, "connect: %s", ac ? ac->errstr : "no memory");
        if (ac)
            redisAsyncFree(ac);
        snprintf(r->last_error, sizeof r->last_error, "%s", why);
        schedule_connect(r);
        return;
    }
    ac->data = r;
    /* hiredis frees its read buffer whenever it empties past 16 KB: every ~200 KB state read
     * then grew a fresh buffer (copies, page faults). Kept up to READ_BUF_KEEP instead. */
    ac->c.reader->maxbuf = READ_BUF_KEEP;
    if (ev_attach(ac, r->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        snprintf(r->last_error, sizeof r->last_error, "connect: cannot attach to the loop");
        schedule_connect(r);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    r->ac = ac;
    r->connect_started_ms = uv_now(r->loop);
    r->last_reply_ns = 0;
    if (r->db) { /* sent first: every later command runs in that database */
        char db[8];
        snprintf(db, sizeof db, "%d", r->db);
        const char *argv[] = {"SELECT", db};
        size_t lens[] = {6, strlen(db)};
        srv_redis_command(r, ignore_reply, NULL, 2, argv, lens);
    }
}

static void on_retry(uv_timer_t *t)
{
    srv_redis *r = t->data;
    r->reconnects++;
    connect_now(r);
}

static void schedule_connect(srv_redis *r)
{
    if (r->closing)
        return;
    uv_timer_start(&r->retry, on_retry, r->backoff_ms, 0);
    r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

/* Drop the connection now: every pending callback gets NULL (called from a timer only, never
 * from a hiredis callback). */
static void reset(srv_redis *r, const char *why)
{
    redisAsyncContext *ac = r->ac;
    if (!ac)
        return;
    r->ac = NULL; /* its disconnect callback is ours to ignore */
    int was_up = r->up;
    r->up = 0;
    redisAsyncFree(ac);
    snprintf(r->last_error, sizeof r->last_error, "%s", why);
    if (was_up) {
        srv_log(SRV_LOG_ERROR, "redis_down", "\"error\":\"%s\"", r->last_error);
        r->on_state(r->ctx, 0);
    }
    schedule_connect(r);
}

/* 1 when a reply waits in the socket, unread: the loop (busy, or its thread descheduled on a
 * loaded machine) is late, not Redis. Timers run before the loop polls for I/O, so after a
 * stall the watchdog would otherwise reset a connection whose answer has already arrived. */
static int reply_waiting(const srv_redis *r)
{
    if (!r->ac || r->ac->c.fd < 0)
        return 0;
    char byte; /* bytes, not readability: a socket that failed (RST, EOF) is readable too */
    return recv(r->ac->c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

/* Timeout rule: commands are pending and no reply came for redis_timeout_ms (from the later of
 * the oldest command's send and the last reply read). Progress, not the age of each command: a
 * burst of commits (every session dirty after Redis came back: ~200 KB each) is answered over
 * more than timeout_ms by a Redis that works, and resetting it then re-sends the whole burst,
 * again and again (a node saw Redis as down for minutes that way, 2026-12-02). */
/* A Redis that answers, only slower than timeout_ms between two replies (a loaded machine, a
 * slow disk under appendfsync always), would otherwise be reset forever: each reset re-sends the
 * waiting commits and the next connection times out the same way. Each reset for silence
 * doubles the silence the next connection allows (up to PATIENCE_MAX x timeout_ms); once every
 * command sent has been answered it is timeout_ms again. */
static void grow_patience(srv_redis *r)
{
    uint64_t cap = r->timeout_ms * PATIENCE_MAX;
    r->patience_ms = r->patience_ms * 2 > cap ? cap : r->patience_ms * 2;
}

static void on_watchdog(uv_timer_t *t)
{
    srv_redis *r = t->data;
    uint64_t now_ns = uv_hrtime();
    uint64_t since = r->head ? r->head->t_sent_ns : 0;
    if (r->last_reply_ns > since)
        since = r->last_reply_ns;
    if (r->head && now_ns - since > r->patience_ms * 1000000ull && !reply_waiting(r)) {
        char why[96];
        snprintf(why, sizeof why, "no reply within %llu ms (redis_timeout_ms %llu)",
                 (unsigned long long)r->patience_ms, (unsigned long long)r->timeout_ms);
        grow_patience(r);
        reset(r, why);
        return;
    }
    if (r->ac && !r->up && uv_now(r->loop) - r->connect_started_ms > r->patience_ms &&
        !reply_waiting(r)) {
        grow_patience(r);
        reset(r, r->last_error[0] ? "connect: no PONG in time" : "connect: timed out");
    }
}

srv_redis *srv_redis_create(uv_loop_t *loop, const srv_redis_url *url, uint64_t timeout_ms,
                            srv_hist *latency, void (*on_state)(void *ctx, int up), void *ctx,
                            char *err, size_t en)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(url->host, NULL, &hints, &res);
    if (gai != 0 || !res) {
        srv_errf(err, en, "redis: host %.200s does not resolve: %s", url->host, gai_strerror(gai));
        return NULL;
    }
    srv_redis *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    if (res->ai_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, r->ip, sizeof r->ip);
    else
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, r->ip, sizeof r->ip);
    freeaddrinfo(res);
    r->loop = loop;
    r->port = url->port;
    r->db = url->db;
    r->timeout_ms = timeout_ms;
    r->patience_ms = timeout_ms;
    r->latency = latency;
    r->on_state = on_state;
    r->ctx = ctx;
    r->backoff_ms = BACKOFF_MIN_MS;
    snprintf(r->last_error, sizeof r->last_error, "connecting");
    uv_timer_init(loop, &r->watchdog);
    uv_timer_init(loop, &r->retry);
    r->watchdog.data = r->retry.data = r;
    r->handles_open = 2;
    uint64_t every = timeout_ms / 4 < 10 ? 10 : timeout_ms / 4;
    uv_timer_start(&r->watchdog, on_watchdog, every, every);
    connect_now(r);
    return r;
}

int srv_redis_up(const srv_redis *r)
{
    return r && r->up;
}

int srv_redis_command(srv_redis *r, srv_redis_cb *cb, void *arg, int argc, const char **argv,
                      const size_t *lens)
{
    if (!r->ac || r->closing)
        return -1;
    pend *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->r = r;
    p->cb = cb;
    p->arg = arg;
    p->t_sent_ns = uv_hrtime();
    if (redisAsyncCommandArgv(r->ac, on_reply, p, argc, argv, lens) != REDIS_OK) {
        free(p);
        return -1;
    }
    DLIST_APPEND(r->head, r->tail, p, prev, next);
    r->n_pending++;
    return 0;
}

size_t srv_redis_pending(const srv_redis *r)
{
    return r ? r->n_pending : 0;
}

uint64_t srv_redis_reconnects(const srv_redis *r)
{
    return r ? r->reconnects : 0;
}

const char *srv_redis_last_error(const srv_redis *r)
{
    return r ? r->last_error : "";
}

static void handle_closed(uv_handle_t *h)
{
    srv_redis *r = h->data;
    if (--r->handles_open == 0) {
        void (*done)(void *) = r->done;
        void *ctx = r->done_ctx;
        free(r);
        if (done)
            done(ctx);
    }
}

void srv_redis_close(srv_redis *r, void (*done)(void *ctx), void *ctx)
{
    if (!r || r->closing)
        return;
    r->done = done;
    r->done_ctx = ctx;
    r->closing = 1; /* no reconnect, no new command (pending callbacks may try) */
    reset(r, "closed");
    uv_timer_stop(&r->retry);
    uv_close((uv_handle_t *)&r->watchdog, handle_closed);
    uv_close((uv_handle_t *)&r->retry, handle_closed);
}
