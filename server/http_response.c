/*
 * http_response.c — writing responses: status line and headers, Content-Length bodies, chunked
 * streams (one chunk per srv_stream_write), JSON errors, the write queue (high/low watermarks ->
 * srv_stream_writable / on_drain) and the send-stall timer.
 *
 * Output is appended to the connection's buffer (c->out) and written at the end of the loop turn
 * (srv_flush_all, from the server's uv_check / uv_prepare handles): a single-token response —
 * head, line chunk, done chunk, last chunk — leaves in one syscall (a stream's head is held until
 * its first chunk or its end), and a stream still flushes every line in the turn that produced it. uv_try_write first; what the kernel does not take goes
 * to uv_write with a malloc'd block that its callback frees.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strings.h>

#include "http_internal.h"
#include "responses.h"

typedef struct {
    uv_write_t req;
    srv_conn *c;
    size_t len;
    char *data;
} srv_write_req;

/* Bytes handed to libuv and not yet taken by the kernel. */
static size_t uv_queue_size(const srv_conn *c)
{
    return uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
}

/* Everything not yet taken by the kernel: libuv's queue + this turn's unwritten output. */
size_t srv_write_queue_size(const srv_conn *c)
{
    return uv_queue_size(c) + c->out.len;
}

/* Bytes the kernel has taken so far: monotonic, grows on partial writes too. */
static uint64_t bytes_accepted(const srv_conn *c)
{
    return c->bytes_queued - uv_queue_size(c);
}

static void note_progress(srv_conn *c)
{
    c->stall_mark = bytes_accepted(c);
    c->last_progress = uv_now(c->srv->loop);
}

static void on_stall(uv_timer_t *t);

static void stall_arm(srv_conn *c)
{
    uint64_t limit = c->srv->limits.send_stall_timeout;
    uint64_t idle = uv_now(c->srv->loop) - c->last_progress;
    uint64_t step = limit / 4 ? limit / 4 : 1; /* re-check partial progress 4x per period */
    uint64_t left = idle < limit ? limit - idle : 0;
    uv_timer_start(&c->stall, on_stall, left < step ? left : step, 0);
}

static void on_stall(uv_timer_t *t)
{
    srv_conn *c = t->data;
    if (c->closing)
        return;
    if (c->pending_writes == 0)
        return;
    if (bytes_accepted(c) != c->stall_mark) { /* a large write is moving, slowly */
        note_progress(c);
        stall_arm(c);
        return;
    }
    if (uv_now(c->srv->loop) - c->last_progress < c->srv->limits.send_stall_timeout) {
        stall_arm(c);
        return;
    }
    /* send_stall_timeout without any write progress: the peer does not read. RST, and the
     * application learns it through on_close. */
    c->srv->stats.stalls++;
    srv_conn_close_reset(c);
}

/* A write completed: progress. Stops the timer when nothing is pending. */
static void stall_progress(srv_conn *c)
{
    if (c->closing)
        return;
    if (c->pending_writes == 0 || c->srv->limits.send_stall_timeout == 0) {
        uv_timer_stop(&c->stall);
        return;
    }
    note_progress(c);
    stall_arm(c);
}

static void srv_stall_start_or_stop(srv_conn *c)
{
    if (c->closing)
        return;
    if (c->pending_writes == 0 || c->srv->limits.send_stall_timeout == 0)
        uv_timer_stop(&c->stall);
    else if (!uv_is_active((uv_handle_t *)&c->stall)) { /* queueing more is not progress */
        note_progress(c);
        stall_arm(c);
    }
}

static void on_write(uv_write_t *req, int status)
{
    srv_write_req *w = (srv_write_req *)req;
    srv_conn *c = w->c;
    c->pending_writes--;
    if (status == 0)
        c->srv->stats.bytes_written += w->len;
    free(w->data);
    free(w);
    if (c->closing)
        return; /* UV_ECANCELED from uv_close, or already closing */
    if (status < 0) { /* EPIPE / ECONNRESET: the peer left */
        srv_conn_close_now(c);
        return;
    }
    stall_progress(c);
    if (c->above_high && srv_write_queue_size(c) < c->srv->limits.write_low_watermark) {
        c->above_high = 0;
        srv_conn_on_drained(c);
    }
}

/* The connection's output buffer, to append to directly (then srv_out_queued). NULL if closing. */
static proto_buf *srv_out(srv_conn *c)
{
    return c->closing ? NULL : &c->out;
}

/* Output was appended to srv_out(c): make sure it is written at the end of this loop turn. */
static void srv_out_queued(srv_conn *c)
{
    if (c->closing || c->out.len == 0)
        return;
    if (!c->in_flush_list) {
        srv_server *s = c->srv;
        c->in_flush_list = 1;
        c->flush_next = s->flush_list;
        s->flush_list = c;
        srv_conn_ref(c); /* released by srv_flush_all */
    }
    if (srv_write_queue_size(c) > c->srv->limits.write_high_watermark)
        c->above_high = 1;
}

int srv_write(srv_conn *c, proto_buf *owned)
{
    if (c->closing) {
        proto_buf_free(owned);
        return UV_ECANCELED;
    }
    if (c->out.len == 0 && owned->cap >= c->out.cap) { /* take the block: no copy */
        proto_buf t = c->out;
        c->out = *owned;
        *owned = t;
    } else if (proto_buf_try_append(&c->out, owned->data, owned->len)) {
        proto_buf_free(owned);
        srv_conn_close_now(c);
        return UV_ENOMEM;
    }
    proto_buf_free(owned);
    srv_out_queued(c);
    return 0;
}

void srv_out_discard(srv_conn *c)
{
    proto_buf_free(&c->out);
}

/* Writes c->out: directly (uv_try_write) when libuv's queue is empty, the rest through uv_write
 * (which owns its block until on_write). notify = 0 inside an srv_* call (no app callbacks). */
void srv_flush_conn(srv_conn *c, int notify)
{
    if (c->closing || c->out.len == 0)
        return;
    size_t len = c->out.len, done = 0;
    c->bytes_queued += len;
    if (c->pending_writes == 0) {
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned int)len);
        int r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (r >= 0) {
            done = (size_t)r;
        } else if (r != UV_EAGAIN) { /* EPIPE / ECONNRESET: the peer left */
            c->out.len = 0;
            srv_conn_close_now(c);
            return;
        }
    }
    c->srv->stats.bytes_written += done;
    if (done == len) {
        proto_buf_clear(&c->out); /* the block is kept for the next turn */
    } else {
        srv_write_req *w = malloc(sizeof *w);
        if (!w)
            abort();
        w->c = c;
        w->len = len - done;
        if (done == 0) { /* hand the block over */
            w->data = c->out.data;
            c->out.data = NULL;
            c->out.len = c->out.cap = 0;
        } else {
            w->data = malloc(w->len);
            if (!w->data)
                abort();
            memcpy(w->data, c->out.data + done, w->len);
            proto_buf_clear(&c->out);
        }
        uv_buf_t b = uv_buf_init(w->data, (unsigned int)w->len);
        int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
        if (r) {
            free(w->data);
            free(w);
            srv_conn_close_now(c);
            return;
        }
        c->pending_writes++;
        srv_stall_start_or_stop(c);
    }
    if (c->above_high && srv_write_queue_size(c) < c->srv->limits.write_low_watermark) {
        if (notify) {
            c->above_high = 0;
            srv_conn_on_drained(c);
        } else if (c->pending_writes == 0) {
            c->above_high = 0; /* nothing pending: on_write will not run */
        }
    }
}

void srv_flush_all(srv_server *s)
{
    while (s->flush_list) {
        srv_conn *c = s->flush_list;
        s->flush_list = c->flush_next;
        c->flush_next = NULL;
        c->in_flush_list = 0;
        srv_flush_conn(c, 1);
        srv_conn_unref(c);
    }
}

/* ------------------------------------------------------------------ heads */

static int has_no_body(int status)
{
    return (status >= 100 && status < 200) || status == 204 || status == 304;
}

static int append_str(proto_buf *b, const char *str)
{
    return proto_buf_try_append(b, str, strlen(str));
}

/* Decimal / hex of v into tmp (returns the start; tmp has room for 24 bytes). */
static char *fmt_u64(char *tmp, uint64_t v, int hex)
{
    char *e = tmp + 24, *p = e;
    do {
        *--p = "0123456789abcdef"[hex ? v & 15 : v % 10];
        v = hex ? v >> 4 : v / 10;
    } while (v);
    return p;
}

static int append_u64(proto_buf *b, uint64_t v, int hex)
{
    char tmp[24];
    char *p = fmt_u64(tmp, v, hex);
    return proto_buf_try_append(b, p, (size_t)(tmp + 24 - p));
}

/* The origin a response allows (docs/API.md "CORS"), or NULL: with cors_origin "*" any request
 * that names an Origin gets "*"; with a list, an Origin equal to one of its entries is echoed. */
static const char *cors_allowed(const char *conf, const char *origin, size_t *n)
{
    if (!conf[0] || !origin)
        return NULL;
    if (!strcmp(conf, "*")) {
        *n = 1;
        return conf;
    }
    size_t olen = strlen(origin);
    for (const char *p = conf; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == olen && !memcmp(p, origin, len)) {
            *n = len;
            return p;
        }
        p += len + (e != NULL);
    }
    return NULL;
}

/* Decides keep-alive for the response being started and writes the common head. framing:
 * 0 = Content-Length len, 1 = chunked, 2 = none (HTTP/1.0 stream, ends by close). */
static int build_head(srv_conn *c, proto_buf *b, int status, const char *content_type, int framing,
                      size_t len, const char *extra)
{
    srv_server *s = c->srv;
    if (status < 100 || status > 599)
        status = 500;
    if (s->draining)
        c->keep_alive = 0;
    c->resp_started = 1;
    c->resp_status = status;
    s->stats.responses_by_class[status / 100]++;
    char st[4] = {(char)('0' + status / 100), (char)('0' + status / 10 % 10), (char)('0' + status % 10), ' '};
    int r = proto_buf_try_append(b, "HTTP/1.1 ", 9) || proto_buf_try_append(b, st, 4) ||
            append_str(b, srv_reason_phrase(status)) || proto_buf_try_append(b, "\r\n", 2);
    if (!r && content_type && !has_no_body(status))
        r = proto_buf_try_append(b, "Content-Type: ", 14) || append_str(b, content_type) ||
            proto_buf_try_append(b, "\r\n", 2);
    if (!r && !has_no_body(status)) {
        if (framing == 0)
            r = proto_buf_try_append(b, "Content-Length: ", 16) || append_u64(b, len, 0) ||
                proto_buf_try_append(b, "\r\n", 2);
        else if (framing == 1)
            r = proto_buf_try_append(b, "Transfer-Encoding: chunked\r\n", 28);
    }
    if (!r && extra)
        r = append_str(b, extra);
    size_t olen = 0;
    const char *allow = cors_allowed(s->limits.cors_origin,
                                     c->hdr_count[HDR_ORIGIN] ? c->hdr[HDR_ORIGIN].data : NULL, &olen);
    if (!r && allow) /* a list echoes one entry: caches must key on Origin */
        r = proto_buf_try_append(b, "Access-Control-Allow-Origin: ", 29) ||
            proto_buf_try_append(b, allow, olen) ||
            proto_buf_try_append(b, olen == 1 && allow[0] == '*' ? "\r\n" : "\r\nVary: Origin\r\n",
                                 olen == 1 && allow[0] == '*' ? 2 : 15) ||
            append_str(b, "Access-Control-Expose-Headers: Retry-After, Allow\r\n");
    if (!r)
        r = c->keep_alive ? proto_buf_try_append(b, "Connection: keep-alive\r\n\r\n", 26)
                          : proto_buf_try_append(b, "Connection: close\r\n\r\n", 21);
    return r;
}

/* Status line + headers (+ body) of a response with Content-Length; no phase checks. */
static void srv_send_response(srv_conn *c, int status, const char *content_type, const void *body,
                              size_t len, const char *extra_headers)
{
    proto_buf *b = srv_out(c);
    if (!b)
        return;
    if (has_no_body(status))
        len = 0;
    if (proto_buf_try_reserve(b, 160 + (content_type ? strlen(content_type) : 0) +
                               (extra_headers ? strlen(extra_headers) : 0) + (c->is_head ? 0 : len)) ||
        build_head(c, b, status, content_type, 0, len, extra_headers) ||
        (len && !c->is_head && proto_buf_try_append(b, body, len))) {
        srv_conn_close_now(c);
        return;
    }
    srv_out_queued(c);
}

void srv_send_error_json(srv_conn *c, int status, const char *code, const char *message,
                         const char *extra_headers)
{
    proto_buf b = {0};
    code = code ? code : "";
    message = message ? message : "";
    snprintf(c->resp_error, sizeof c->resp_error, "%s", code); /* the access record's rule */
    if (proto_error_json(&b, code, message) || proto_buf_try_append(&b, "\n", 1)) {
        proto_buf_free(&b);
        srv_conn_close_now(c);
        return;
    }
    srv_send_response(c, status, "application/json", b.data, b.len, extra_headers);
    proto_buf_free(&b);
}

/* ------------------------------------------------------------------ public API */

static int can_respond(const srv_conn *c)
{
    return c && c->in_flight && !c->resp_started && !c->closing && !c->shutting;
}

void srv_respond(srv_conn *c, int status, const char *content_type, const void *body, size_t len,
                 const char *extra_headers)
{
    if (!can_respond(c))
        return;
    srv_send_response(c, status, content_type, body, len, extra_headers);
    srv_conn_response_done(c);
}

void srv_respond_error(srv_conn *c, int status, const char *code, const char *message)
{
    srv_respond_error_ex(c, status, code, message, NULL);
}

void srv_respond_error_ex(srv_conn *c, int status, const char *code, const char *message,
                          const char *extra_headers)
{
    if (!can_respond(c))
        return;
    srv_send_error_json(c, status, code, message, extra_headers);
    srv_conn_response_done(c);
}

void srv_stream_begin(srv_conn *c, int status, const char *content_type)
{
    if (!can_respond(c))
        return;
    proto_buf *b = srv_out(c);
    if (c->http10) { /* HTTP/1.0 has no chunked coding: the body ends when the connection does */
        c->keep_alive = 0;
        c->stream_raw = 1;
    } else {
        c->stream_raw = 0;
    }
    /* an event stream is never cached (what EventSource clients and proxies expect) */
    const char *extra = content_type && !strncasecmp(content_type, "text/event-stream", 17)
                            ? "Cache-Control: no-cache\r\n"
                            : NULL;
    if (build_head(c, b, status, content_type, c->stream_raw ? 2 : 1, 0, extra)) {
        srv_conn_close_now(c);
        return;
    }
    c->streaming = 1;
    /* The head waits in c->out for the stream's first chunk (or its end): a single-token
     * response then leaves in one write instead of two (head at once, body a turn later), which
     * is one syscall and one wake-up of the client less per request. Any later append queues
     * the connection for the end-of-turn flush. */
}

/* One chunk per call (one NDJSON line per chunk); chunks made in the same loop turn leave in
 * one write at the end of the turn. */
void srv_stream_write(srv_conn *c, const void *data, size_t len)
{
    if (!c || !c->streaming || c->closing || c->shutting || len == 0 || c->is_head)
        return;
    if (!c->t_first_chunk_ns)
        c->t_first_chunk_ns = uv_hrtime();
    proto_buf *b = &c->out;
    int r = proto_buf_try_reserve(b, len + 24);
    if (!r && !c->stream_raw) {
        r = append_u64(b, len, 1) || proto_buf_try_append(b, "\r\n", 2);
    }
    r = r || proto_buf_try_append(b, data, len);
    if (!r && !c->stream_raw)
        r = proto_buf_try_append(b, "\r\n", 2);
    if (r) {
        srv_conn_close_now(c);
        return;
    }
    srv_out_queued(c);
}

int srv_stream_writable(const srv_conn *c)
{
    if (!c || c->closing || c->shutting)
        return 0;
    return srv_write_queue_size(c) <= c->srv->limits.write_high_watermark;
}

void srv_stream_end(srv_conn *c)
{
    if (!c || !c->streaming)
        return;
    c->streaming = 0;
    if (c->closing || c->shutting)
        return;
    if (!c->stream_raw && !c->is_head) {
        if (proto_buf_try_append(&c->out, "0\r\n\r\n", 5)) {
            srv_conn_close_now(c);
            return;
        }
    }
    srv_out_queued(c); /* also a head still held (HEAD request, or a stream without chunks) */
    c->resp_started = 0;
    srv_conn_response_done(c);
}
