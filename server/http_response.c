/*
 * http_response.c — writing responses: status line and headers, Content-Length bodies, chunked
 * streams (one uv_write per chunk, so each chunk is flushed), JSON errors, the write queue
 * (high/low watermarks -> srv_stream_writable / on_drain) and the send-stall timer.
 *
 * Every uv_write owns one malloc'd block (header + body in one piece) that its callback frees.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

typedef struct {
    uv_write_t req;
    srv_conn *c;
    size_t len;
    char *data;
} srv_write_req;

size_t srv_write_queue_size(const srv_conn *c)
{
    return uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
}

/* Bytes the kernel has taken so far: monotonic, grows on partial writes too. */
static uint64_t bytes_accepted(const srv_conn *c)
{
    return c->bytes_queued - srv_write_queue_size(c);
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

void srv_stall_start_or_stop(srv_conn *c)
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

int srv_write(srv_conn *c, srv_buf *owned)
{
    if (c->closing) {
        srv_buf_free(owned);
        return UV_ECANCELED;
    }
    srv_write_req *w = malloc(sizeof *w);
    if (!w)
        abort();
    w->c = c;
    w->len = owned->len;
    w->data = owned->p;
    owned->p = NULL;
    owned->len = owned->cap = 0;
    uv_buf_t b = uv_buf_init(w->data, (unsigned int)w->len);
    int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (r) {
        free(w->data);
        free(w);
        srv_conn_close_now(c);
        return r;
    }
    c->pending_writes++;
    c->bytes_queued += w->len;
    if (srv_write_queue_size(c) > c->srv->limits.write_high_watermark)
        c->above_high = 1;
    srv_stall_start_or_stop(c);
    return 0;
}

/* ------------------------------------------------------------------ heads */

static int appendf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int appendf(srv_buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return UV_EINVAL;
    return srv_buf_append(b, tmp, (size_t)n);
}

static int has_no_body(int status)
{
    return (status >= 100 && status < 200) || status == 204 || status == 304;
}

/* Decides keep-alive for the response being started and writes the common head. framing:
 * 0 = Content-Length len, 1 = chunked, 2 = none (HTTP/1.0 stream, ends by close). */
static int build_head(srv_conn *c, srv_buf *b, int status, const char *content_type, int framing,
                      size_t len, const char *extra)
{
    srv_server *s = c->srv;
    if (status < 100 || status > 599)
        status = 500;
    if (s->draining)
        c->keep_alive = 0;
    c->resp_started = 1;
    s->stats.responses_by_class[status / 100]++;
    int r = appendf(b, "HTTP/1.1 %d %s\r\n", status, srv_reason_phrase(status));
    if (!r && content_type && !has_no_body(status))
        r = srv_buf_append(b, "Content-Type: ", 14) || srv_buf_append(b, content_type, strlen(content_type)) ||
            srv_buf_append(b, "\r\n", 2);
    if (!r && !has_no_body(status)) {
        if (framing == 0)
            r = appendf(b, "Content-Length: %zu\r\n", len);
        else if (framing == 1)
            r = srv_buf_append(b, "Transfer-Encoding: chunked\r\n", 28);
    }
    if (!r && extra)
        r = srv_buf_append(b, extra, strlen(extra));
    if (!r)
        r = c->keep_alive ? srv_buf_append(b, "Connection: keep-alive\r\n\r\n", 26)
                          : srv_buf_append(b, "Connection: close\r\n\r\n", 21);
    return r;
}

void srv_send_response(srv_conn *c, int status, const char *content_type, const void *body,
                       size_t len, const char *extra_headers)
{
    srv_buf b = {0};
    if (has_no_body(status))
        len = 0;
    if (srv_buf_reserve(&b, 160 + (content_type ? strlen(content_type) : 0) +
                                (extra_headers ? strlen(extra_headers) : 0) + (c->is_head ? 0 : len))) {
        srv_conn_close_now(c);
        return;
    }
    if (build_head(c, &b, status, content_type, 0, len, extra_headers) ||
        (len && !c->is_head && srv_buf_append(&b, body, len))) {
        srv_buf_free(&b);
        srv_conn_close_now(c);
        return;
    }
    srv_write(c, &b);
}

void srv_send_error_json(srv_conn *c, int status, const char *code, const char *message,
                         const char *extra_headers)
{
    srv_buf b = {0};
    int r = srv_buf_append(&b, "{\"error\":{\"code\":\"", 18) || srv_json_escape(&b, code) ||
            srv_buf_append(&b, "\",\"message\":\"", 13) || srv_json_escape(&b, message) ||
            srv_buf_append(&b, "\"}}\n", 4);
    if (r) {
        srv_buf_free(&b);
        srv_conn_close_now(c);
        return;
    }
    srv_send_response(c, status, "application/json", b.p, b.len, extra_headers);
    srv_buf_free(&b);
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
    srv_buf b = {0};
    if (c->http10) { /* HTTP/1.0 has no chunked coding: the body ends when the connection does */
        c->keep_alive = 0;
        c->stream_raw = 1;
    } else {
        c->stream_raw = 0;
    }
    if (build_head(c, &b, status, content_type, c->stream_raw ? 2 : 1, 0, NULL)) {
        srv_buf_free(&b);
        srv_conn_close_now(c);
        return;
    }
    c->streaming = 1;
    srv_write(c, &b);
}

void srv_stream_write(srv_conn *c, const void *data, size_t len)
{
    if (!c || !c->streaming || c->closing || c->shutting || len == 0 || c->is_head)
        return;
    srv_buf b = {0};
    int r = srv_buf_reserve(&b, len + 24);
    if (!r && !c->stream_raw)
        r = appendf(&b, "%zx\r\n", len);
    r = r || srv_buf_append(&b, data, len);
    if (!r && !c->stream_raw)
        r = srv_buf_append(&b, "\r\n", 2);
    if (r) {
        srv_buf_free(&b);
        srv_conn_close_now(c);
        return;
    }
    srv_write(c, &b);
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
        srv_buf b = {0};
        if (srv_buf_append(&b, "0\r\n\r\n", 5)) {
            srv_conn_close_now(c);
            return;
        }
        srv_write(c, &b);
    }
    c->resp_started = 0;
    srv_conn_response_done(c);
}
