/*
 * http_server.c — the listener: bind/listen, accept (max_connections), drain / close_all, stats,
 * the default limits of docs/HARDENING.md §1.
 */
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

static const srv_http_limits DEFAULT_LIMITS = {
    .max_request_line = 8 * 1024,
    .max_header_bytes = 16 * 1024,
    .max_headers = 100,
    .max_body = 1024 * 1024,
    .max_chunk_ext_bytes = 16 * 1024,
    .header_timeout = 10000,
    .body_idle_timeout = 10000,
    .request_timeout = 60000,
    .keepalive_idle = 5000,
    .max_requests_per_conn = 1000,
    .send_stall_timeout = 60000,
    .write_high_watermark = 256 * 1024,
    .write_low_watermark = 64 * 1024,
    .max_connections = 1024,
};

void srv_http_limits_default(srv_http_limits *l)
{
    *l = DEFAULT_LIMITS;
}

static void on_flush_handle_closed(uv_handle_t *h);

static void server_maybe_done(srv_server *s)
{
    if (s->listener_open || s->conns)
        return;
    if (s->flush_handles_open) { /* last: connections flush through them until they are gone */
        if (!uv_is_closing((uv_handle_t *)&s->flush_prepare)) {
            uv_close((uv_handle_t *)&s->flush_prepare, on_flush_handle_closed);
            uv_close((uv_handle_t *)&s->flush_check, on_flush_handle_closed);
        }
        return;
    }
    if (s->drain_done && !s->drain_done_called) {
        s->drain_done_called = 1;
        s->drain_done(s, s->app);
    }
    if (s->free_pending) {
        free(s->read_buf);
        free(s);
    }
}

static void on_flush_handle_closed(uv_handle_t *h)
{
    srv_server *s = h->data;
    if (--s->flush_handles_open == 0)
        server_maybe_done(s);
}

/* End of the I/O phase (check) and before the loop blocks (prepare): write every connection's
 * output of this turn. */
static void on_flush_check(uv_check_t *h)
{
    srv_flush_all(h->data);
}

static void on_flush_prepare(uv_prepare_t *h)
{
    srv_flush_all(h->data);
}

void srv_server_conn_gone(srv_server *s)
{
    server_maybe_done(s);
}

static void on_listener_closed(uv_handle_t *h)
{
    srv_server *s = h->data;
    s->listener_open = 0;
    server_maybe_done(s);
}

static void close_listener(srv_server *s)
{
    if (s->listener_open && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

static void on_rejected_closed(uv_handle_t *h)
{
    free(h);
}

static void on_connection(uv_stream_t *listener, int status)
{
    srv_server *s = listener->data;
    if (status < 0 || s->draining)
        return;
    if (s->limits.max_connections > 0 &&
        s->stats.connections_open >= (uint64_t)s->limits.max_connections) {
        /* over max_connections: accept and close at once, so the backlog does not fill up */
        uv_tcp_t *t = malloc(sizeof *t);
        if (!t)
            return;
        uv_tcp_init(s->loop, t);
        if (uv_accept(listener, (uv_stream_t *)t) == 0)
            s->stats.connections_rejected++;
        uv_close((uv_handle_t *)t, on_rejected_closed);
        return;
    }
    srv_conn_accept(s);
}

int srv_server_start(uv_loop_t *loop, const char *host, int port, const srv_http_limits *limits,
                     const srv_http_callbacks *cb, void *app, srv_server **out)
{
    struct sockaddr_storage addr;
    int r;
    *out = NULL;
    if (!host)
        host = "127.0.0.1";
    if (port < 0 || port > 65535 || !limits || !cb)
        return UV_EINVAL;
    if (limits->write_low_watermark > limits->write_high_watermark || limits->max_header_bytes == 0 ||
        limits->max_request_line == 0)
        return UV_EINVAL;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr))
        return UV_EINVAL;

    srv_server *s = calloc(1, sizeof *s);
    if (!s)
        return UV_ENOMEM;
    s->read_buf = malloc(SRV_READ_BUF_SIZE);
    if (!s->read_buf) {
        free(s);
        return UV_ENOMEM;
    }
    s->loop = loop;
    static const double duration_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                         1, 2.5, 5, 10, 20, 40, 80, 160, 320};
    srv_hist_init(&s->stats.request_duration, duration_le,
                  (int)(sizeof duration_le / sizeof *duration_le), 1e9);
    s->limits = *limits;
    s->cb = *cb;
    s->app = app;
    srv_conn_settings(&s->settings);

    uv_prepare_init(loop, &s->flush_prepare);
    uv_check_init(loop, &s->flush_check);
    s->flush_prepare.data = s->flush_check.data = s;
    s->flush_handles_open = 2;
    uv_prepare_start(&s->flush_prepare, on_flush_prepare);
    uv_check_start(&s->flush_check, on_flush_check);
    uv_unref((uv_handle_t *)&s->flush_prepare); /* the listener and connections keep the loop alive */
    uv_unref((uv_handle_t *)&s->flush_check);

    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listener_open = 1;
    r = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (!r)
        r = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (!r) {
        struct sockaddr_storage got;
        int len = sizeof got;
        r = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len);
        if (!r)
            s->port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                                : ntohs(((struct sockaddr_in *)&got)->sin_port);
    }
    if (r) {
        s->free_pending = 1; /* freed by the close callback */
        close_listener(s);
        return r;
    }
    *out = s;
    return 0;
}

int srv_server_port(const srv_server *s)
{
    return s->port;
}

void srv_server_drain(srv_server *s, void (*done)(srv_server *s, void *app))
{
    s->drain_done = done;
    s->drain_done_called = 0;
    s->draining = 1;
    close_listener(s);
    srv_conn *next;
    for (srv_conn *c = s->conns; c; c = next) {
        next = c->next;
        srv_conn_drain(c);
    }
    server_maybe_done(s); /* nothing open: done now (listener close is always async) */
}

void srv_server_close_all(srv_server *s)
{
    s->draining = 1;
    close_listener(s);
    for (srv_conn *c = s->conns; c; c = c->next)
        srv_conn_close_now(c);
}

void srv_server_free(srv_server *s)
{
    if (!s)
        return;
    s->free_pending = 1;
    s->drain_done = NULL;
    server_maybe_done(s);
}

const srv_http_stats *srv_server_stats(const srv_server *s)
{
    return &s->stats;
}
