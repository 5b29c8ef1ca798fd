/*
 * conn.c — one keep-alive HTTP/1.1 client connection: libuv TCP + llhttp in HTTP_RESPONSE mode.
 *
 * One request in flight per connection. The body of a streamed response is split into lines
 * (NDJSON) as it arrives, so time to first line and the gaps between lines are measured when the
 * bytes arrive, not at the end. A response that asks for `Connection: close` (recurd does after
 * max_requests_per_conn) closes the socket; the next request reconnects.
 */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static llhttp_settings_t g_settings;
static int g_settings_ready;

typedef struct {
    uv_write_t req;
    size_t len;
    char data[];
} lg_write;

static void conn_fail(lg_conn *c, const char *why);
static void start_connect(lg_conn *c);

/* ---------------------------------------------------------------- llhttp callbacks */

static int on_message_begin(llhttp_t *p)
{
    lg_conn *c = p->data;
    c->status = 0;
    c->chunked = 0;
    c->complete = 0;
    c->chunk_split_lines = 0;
    c->content_type[0] = '\0';
    c->hfield.len = c->hvalue.len = 0;
    c->in_header_value = 0;
    c->body.len = 0;
    return 0;
}

static void header_done(lg_conn *c)
{
    if (c->hfield.len == 0)
        return;
    if (c->hfield.len == 12 && strncasecmp(c->hfield.data, "Content-Type", 12) == 0) {
        size_t n = c->hvalue.len < sizeof c->content_type - 1 ? c->hvalue.len : sizeof c->content_type - 1;
        memcpy(c->content_type, c->hvalue.data ? c->hvalue.data : "", n);
        c->content_type[n] = '\0';
    }
    c->hfield.len = c->hvalue.len = 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    lg_conn *c = p->data;
    if (c->in_header_value) {
        header_done(c);
        c->in_header_value = 0;
    }
    if (c->hfield.len + len < 4096)
        proto_buf_append(&c->hfield, at, len);
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    lg_conn *c = p->data;
    c->in_header_value = 1;
    if (c->hvalue.len + len < 4096)
        proto_buf_append(&c->hvalue, at, len);
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    lg_conn *c = p->data;
    if (c->in_header_value)
        header_done(c);
    c->in_header_value = 0;
    c->status = p->status_code;
    c->chunked = (p->flags & F_CHUNKED) != 0;
    return 0;
}

static void emit_line(lg_conn *c, char *line, size_t len)
{
    double now = lg_now_s();
    if (c->lines == 0)
        c->t_first_line = now;
    c->t_last_line = now;
    c->lines++;
    if (len && line[len - 1] == '\r')
        line[--len] = '\0';
    if (c->cb && c->cb->on_line)
        c->cb->on_line(c, line, len);
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    lg_conn *c = p->data;
    if (!c->stream) {
        proto_buf_append(&c->body, at, len);
        return 0;
    }
    while (len) {
        const char *nl = memchr(at, '\n', len);
        if (!nl) {
            proto_buf_append(&c->body, at, len);
            return 0;
        }
        size_t n = (size_t)(nl - at);
        if (c->body.len) {
            proto_buf_append(&c->body, at, n);
            emit_line(c, c->body.data, c->body.len);
            c->body.len = 0;
        } else {
            /* the line is whole inside the read buffer: copy it to have a writable, NUL-ended string */
            proto_buf_append(&c->body, at, n);
            emit_line(c, c->body.data, c->body.len);
            c->body.len = 0;
        }
        at += n + 1;
        len -= n + 1;
    }
    return 0;
}

/* docs/DESIGN.md §5: one flushed chunk per line, so a chunk never ends in the middle of a line. */
static int on_chunk_complete(llhttp_t *p)
{
    lg_conn *c = p->data;
    if (c->stream && c->body.len)
        c->chunk_split_lines++;
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    lg_conn *c = p->data;
    c->complete = 1;
    c->keep_alive = llhttp_should_keep_alive(p);
    return HPE_PAUSED;
}

static void settings_init(void)
{
    if (g_settings_ready)
        return;
    llhttp_settings_init(&g_settings);
    g_settings.on_message_begin = on_message_begin;
    g_settings.on_header_field = on_header_field;
    g_settings.on_header_value = on_header_value;
    g_settings.on_headers_complete = on_headers_complete;
    g_settings.on_body = on_body;
    g_settings.on_chunk_complete = on_chunk_complete;
    g_settings.on_message_complete = on_message_complete;
    g_settings_ready = 1;
}

/* ---------------------------------------------------------------- libuv plumbing */

static void on_tcp_closed(uv_handle_t *h)
{
    lg_conn *c = h->data;
    c->state = LG_CONN_CLOSED;
    if (c->closing_handles) {
        c->closing_handles--;
        return;
    }
    if (c->pending.len)
        start_connect(c);
}

static void close_socket(lg_conn *c)
{
    if (c->state == LG_CONN_CLOSED || c->state == LG_CONN_CLOSING)
        return;
    uv_timer_stop(&c->timer);
    c->state = LG_CONN_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
}

static void conn_fail(lg_conn *c, const char *why)
{
    int was_busy = (c->state == LG_CONN_BUSY || c->state == LG_CONN_CONNECTING);
    c->pending.len = 0;
    close_socket(c);
    if (was_busy && c->cb && c->cb->on_fail) {
        const lg_conn_cb *cb = c->cb;
        c->cb = NULL;
        cb->on_fail(c, why);
    }
}

static void on_timeout(uv_timer_t *t)
{
    conn_fail(t->data, "timeout");
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    /* One buffer for the whole loop: read_cb consumes every byte before returning. */
    static char shared[65536];
    (void)h;
    (void)suggested;
    buf->base = shared;
    buf->len = sizeof shared;
}

static void finish_response(lg_conn *c)
{
    c->t_done = lg_now_s();
    uv_timer_stop(&c->timer);
    if (c->stream && c->body.len) {
        /* a last line without '\n' is still handed over (the checker reports the framing) */
        c->chunk_split_lines++;
        emit_line(c, c->body.data, c->body.len);
        c->body.len = 0;
    }
    if (c->keep_alive)
        c->state = LG_CONN_READY;
    else
        close_socket(c);
    const lg_conn_cb *cb = c->cb;
    c->cb = NULL;
    if (cb && cb->on_complete)
        cb->on_complete(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    lg_conn *c = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        if (c->state == LG_CONN_BUSY) {
            /* a response delimited by EOF completes here */
            if (nread == UV_EOF && llhttp_finish(&c->parser) == HPE_PAUSED && c->complete) {
                c->keep_alive = 0;
                finish_response(c);
                return;
            }
            conn_fail(c, nread == UV_EOF ? "connection closed by the server mid-response"
                                         : uv_strerror((int)nread));
        } else {
            close_socket(c); /* idle keep-alive connection closed by the server */
        }
        return;
    }
    if (c->state != LG_CONN_BUSY) {
        conn_fail(c, "unsolicited bytes from the server");
        return;
    }
    llhttp_errno_t err = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (err == HPE_OK)
        return;
    if (err == HPE_PAUSED && c->complete) {
        const char *pos = llhttp_get_error_pos(&c->parser);
        if (pos && pos < buf->base + nread) {
            conn_fail(c, "bytes after the end of the response");
            return;
        }
        llhttp_resume(&c->parser);
        finish_response(c);
        return;
    }
    static char why[160];
    snprintf(why, sizeof why, "HTTP parse error %s: %s", llhttp_errno_name(err),
             llhttp_get_error_reason(&c->parser) ? llhttp_get_error_reason(&c->parser) : "");
    conn_fail(c, why);
}

static void on_write(uv_write_t *req, int status)
{
    lg_write *w = (lg_write *)req;
    lg_conn *c = req->handle->data;
    free(w);
    if (status < 0 && status != UV_ECANCELED && c->state == LG_CONN_BUSY)
        conn_fail(c, uv_strerror(status));
}

static void send_pending(lg_conn *c)
{
    lg_write *w = malloc(sizeof *w + c->pending.len);
    if (!w) {
        fprintf(stderr, "recur-load: out of memory\n");
        abort();
    }
    memcpy(w->data, c->pending.data, c->pending.len);
    w->len = c->pending.len;
    c->pending.len = 0;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
    c->state = LG_CONN_BUSY;
    c->complete = 0;
    c->lines = 0;
    c->t_first_line = c->t_last_line = 0;
    c->t_sent = lg_now_s();
    uv_timer_start(&c->timer, on_timeout, c->timeout_ms, 0);
    int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (r < 0) {
        free(w);
        conn_fail(c, uv_strerror(r));
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    lg_conn *c = req->data;
    if (c->state != LG_CONN_CONNECTING)
        return;
    if (status < 0) {
        c->state = LG_CONN_BUSY; /* so that conn_fail reports it */
        static char why[128];
        snprintf(why, sizeof why, "connect: %s", uv_strerror(status));
        conn_fail(c, why);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_RESPONSE, &g_settings);
    c->parser.data = c;
    int r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (r < 0) {
        c->state = LG_CONN_BUSY;
        conn_fail(c, uv_strerror(r));
        return;
    }
    send_pending(c);
}

static void start_connect(lg_conn *c)
{
    int r = uv_tcp_init(c->loop, &c->tcp);
    if (r < 0) {
        c->state = LG_CONN_CLOSED;
        const lg_conn_cb *cb = c->cb;
        c->cb = NULL;
        c->pending.len = 0;
        if (cb && cb->on_fail)
            cb->on_fail(c, uv_strerror(r));
        return;
    }
    c->tcp.data = c;
    c->connect_req.data = c;
    c->state = LG_CONN_CONNECTING;
    c->reconnects++;
    /* the timer bounds the connect as well */
    uv_timer_start(&c->timer, on_timeout, c->timeout_ms, 0);
    r = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&c->addr, on_connect);
    if (r < 0) {
        static char why[128];
        snprintf(why, sizeof why, "connect: %s", uv_strerror(r));
        conn_fail(c, why);
    }
}

/* ---------------------------------------------------------------- public */

void lg_conn_init(lg_conn *c, uv_loop_t *loop, const struct sockaddr_in *addr, int index)
{
    settings_init();
    memset(c, 0, sizeof *c);
    c->loop = loop;
    c->addr = *addr;
    c->index = index;
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
}

int lg_conn_available(const lg_conn *c)
{
    return c->state == LG_CONN_CLOSED || c->state == LG_CONN_READY ||
           (c->state == LG_CONN_CLOSING && c->pending.len == 0 && c->cb == NULL);
}

void lg_conn_request(lg_conn *c, const char *req, size_t len, int stream, const lg_conn_cb *cb,
                     void *user, uint64_t timeout_ms)
{
    c->pending.len = 0;
    proto_buf_append(&c->pending, req, len);
    c->stream = stream;
    c->cb = cb;
    c->user = user;
    c->timeout_ms = timeout_ms ? timeout_ms : 30000;
    c->body.len = 0;
    switch (c->state) {
    case LG_CONN_READY:
        send_pending(c);
        break;
    case LG_CONN_CLOSED:
        start_connect(c);
        break;
    case LG_CONN_CLOSING:
        break; /* on_tcp_closed connects */
    default:
        fprintf(stderr, "recur-load: internal error: request on a busy connection\n");
        abort();
    }
}

static void on_timer_closed(uv_handle_t *h)
{
    lg_conn *c = h->data;
    c->closing_handles--;
}

void lg_conn_shutdown(lg_conn *c)
{
    if (c->state == LG_CONN_BUSY || c->state == LG_CONN_CONNECTING)
        conn_fail(c, "aborted");
    c->pending.len = 0;
    if (c->state != LG_CONN_CLOSED && c->state != LG_CONN_CLOSING) {
        c->closing_handles++;
        c->state = LG_CONN_CLOSING;
        uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
    } else if (c->state == LG_CONN_CLOSING) {
        c->closing_handles++; /* on_tcp_closed will not reconnect */
    }
    if (!uv_is_closing((uv_handle_t *)&c->timer)) {
        c->closing_handles++;
        uv_close((uv_handle_t *)&c->timer, on_timer_closed);
    }
}
