/*
 * test_http.c — the HTTP layer (server/http_*.c) against a real loopback socket.
 *
 * Each test starts srv_server on 127.0.0.1:0 in a pthread running its own uv loop with a small
 * test application, and talks raw TCP from the test thread. Every error case checks the status
 * AND the JSON error code AND Connection: close. Criterion runs each test in its own process;
 * every socket read has a timeout and every test a .timeout.
 *
 * Test application routes:
 *   /echo     200 {"method","path","query","body_len","ct"}
 *   /slow     the same, answered 60 ms later from a timer (async; holds a conn reference)
 *   /stream   ?n=N: chunked NDJSON, one line {"i":k} per chunk
 *   /flood    streams 16 KiB chunks while srv_stream_writable(), waits for on_drain; counts
 *             backpressure and on_close (for the send-stall test)
 *   /locked   refused by on_head (401 "unauthorized", WWW-Authenticate) when it has a body;
 *             on_request counts every request it sees (g_requests_seen)
 *   /lei      200 with the Last-Event-ID it was given ("-" for none)
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "auth.h"
#include "http.h"
#include "http_internal.h"

/* ------------------------------------------------------------------ the server thread */

static srv_http_limits g_limits;
static pthread_t g_thread;
static uv_loop_t g_loop;
static uv_async_t g_cmd;
static atomic_int g_cmd_code, g_drained;
static srv_server *g_srv;
static atomic_int g_port;
static atomic_int g_backpressured, g_drains, g_closed, g_stalls_at_close, g_flood_ended;
static atomic_int g_loop_close_rc = 12345;
static atomic_int g_requests_seen, g_heads_seen;

typedef struct {
    uv_timer_t t;
    srv_conn *c;
    char json[512];
} slow_reply;

static void echo_json(char *out, size_t cap, const srv_request *r)
{
    snprintf(out, cap, "{\"method\":\"%s\",\"path\":\"%s\",\"query\":\"%s\",\"body_len\":%zu,\"ct\":\"%s\"}",
             r->method, r->path, r->query, r->body_len, r->content_type ? r->content_type : "");
}

static void slow_closed(uv_handle_t *h) { free(h->data); }

static void slow_fire(uv_timer_t *t)
{
    slow_reply *s = t->data;
    if (!srv_conn_is_closed(s->c))
        srv_respond(s->c, 200, "application/json", s->json, strlen(s->json), NULL);
    srv_conn_unref(s->c);
    uv_close((uv_handle_t *)&s->t, slow_closed);
}

static void flood_pump(srv_conn *c)
{
    static char chunk[16384];
    memset(chunk, 'x', sizeof chunk);
    size_t *sent = srv_conn_get_user(c);
    while (srv_stream_writable(c)) {
        if (*sent > (64u << 20)) { /* safety: never reached when backpressure works */
            atomic_store(&g_flood_ended, 1);
            srv_stream_end(c);
            return;
        }
        srv_stream_write(c, chunk, sizeof chunk);
        *sent += sizeof chunk;
    }
    atomic_fetch_add(&g_backpressured, 1);
}

static int app_on_head(const srv_request *head, srv_refusal *rf, void *app)
{
    atomic_fetch_add(&g_heads_seen, 1);
    if (strcmp(head->path, "/locked") || head->body_len != 0)
        return 0;
    return srv_auth_refuse(rf, "locked");
}

static void app_on_request(srv_conn *c, const srv_request *r, void *app)
{
    char json[512];
    atomic_fetch_add(&g_requests_seen, 1);
    if (!strcmp(r->path, "/lei")) {
        int n = snprintf(json, sizeof json, "{\"lei\":\"%s\"}", r->last_event_id ? r->last_event_id : "-");
        srv_respond(c, 200, "application/json", json, (size_t)n, NULL);
    } else if (!strcmp(r->path, "/echo")) {
        echo_json(json, sizeof json, r);
        srv_respond(c, 200, "application/json", json, strlen(json), NULL);
    } else if (!strcmp(r->path, "/slow")) {
        slow_reply *s = calloc(1, sizeof *s);
        echo_json(s->json, sizeof s->json, r);
        s->c = c;
        srv_conn_ref(c);
        uv_timer_init(&g_loop, &s->t);
        s->t.data = s;
        uv_timer_start(&s->t, slow_fire, 60, 0);
    } else if (!strcmp(r->path, "/stream")) {
        int n = atoi(r->query[0] == 'n' && r->query[1] == '=' ? r->query + 2 : "3");
        srv_stream_begin(c, 200, "application/x-ndjson");
        for (int i = 0; i < n; i++) {
            int len = snprintf(json, sizeof json, "{\"i\":%d}\n", i);
            srv_stream_write(c, json, (size_t)len);
        }
        srv_stream_end(c);
    } else if (!strcmp(r->path, "/flood")) {
        size_t *sent = calloc(1, sizeof *sent);
        srv_conn_set_user(c, sent);
        srv_conn_ref(c);
        srv_stream_begin(c, 200, "application/octet-stream");
        flood_pump(c);
    } else if (!strcmp(r->path, "/big")) { /* one 16 MiB write */
        size_t n = 16u << 20;
        char *b = malloc(n);
        memset(b, 'B', n);
        srv_respond(c, 200, "application/octet-stream", b, n, NULL);
        free(b);
    } else if (!strcmp(r->path, "/retry")) {
        srv_respond_error_ex(c, 503, "busy", "max_sessions reached \"quoted\"\n", "Retry-After: 1\r\n");
    } else {
        srv_respond_error(c, 404, "not_found", "no such route");
    }
}

static void app_on_close(srv_conn *c, void *app)
{
    atomic_store(&g_stalls_at_close, (int)srv_server_stats(g_srv)->stalls);
    size_t *sent = srv_conn_get_user(c);
    if (sent) {
        srv_conn_set_user(c, NULL);
        free(sent);
        srv_conn_unref(c);
    }
    atomic_fetch_add(&g_closed, 1);
}

static void app_on_drain(srv_conn *c, void *app)
{
    atomic_fetch_add(&g_drains, 1);
    if (srv_conn_get_user(c))
        flood_pump(c);
}

static void on_drained(srv_server *srv, void *app)
{
    atomic_store(&g_drained, 1);
}

static void on_cmd(uv_async_t *a)
{
    if (atomic_load(&g_cmd_code) == 2) {
        srv_server_drain(g_srv, on_drained);
    } else {
        srv_server_close_all(g_srv);
    }
    uv_close((uv_handle_t *)a, NULL);
}

static void *server_main(void *arg)
{
    srv_http_callbacks cb = {.on_request = app_on_request, .on_close = app_on_close,
                             .on_drain = app_on_drain, .on_head = app_on_head};
    uv_loop_init(&g_loop);
    uv_async_init(&g_loop, &g_cmd, on_cmd);
    int r = srv_server_start(&g_loop, "127.0.0.1", 0, &g_limits, &cb, NULL, &g_srv);
    if (r) {
        atomic_store(&g_port, -1);
        return NULL;
    }
    atomic_store(&g_port, srv_server_port(g_srv));
    uv_run(&g_loop, UV_RUN_DEFAULT);
    srv_server_free(g_srv);
    uv_run(&g_loop, UV_RUN_DEFAULT);
    atomic_store(&g_loop_close_rc, uv_loop_close(&g_loop));
    return NULL;
}

/* Every test server's limits: sizes a test reaches, 2 s timeouts (5 s for a whole request);
 * max_requests_per_conn and max_connections keep their defaults. */
static void test_limits(srv_http_limits *l)
{
    srv_http_limits_default(l);
    l->max_request_line = 1024;
    l->max_header_bytes = 4096;
    l->max_headers = 20;
    l->max_body = 65536;
    l->max_chunk_ext_bytes = 256;
    l->header_timeout = l->body_idle_timeout = l->keepalive_idle = l->send_stall_timeout = 2000;
    l->request_timeout = 5000;
    l->write_high_watermark = 64 * 1024;
    l->write_low_watermark = 16 * 1024;
}

static void start_server(void)
{
    signal(SIGPIPE, SIG_IGN);
    atomic_store(&g_port, 0);
    pthread_create(&g_thread, NULL, server_main, NULL);
    for (int i = 0; i < 2000 && atomic_load(&g_port) == 0; i++)
        usleep(1000);
    cr_assert(atomic_load(&g_port) > 0, "server did not start");
}

static void stop_server(void)
{
    if (atomic_load(&g_cmd_code) == 0) {
        atomic_store(&g_cmd_code, 1);
        uv_async_send(&g_cmd);
    }
    pthread_join(g_thread, NULL);
    cr_expect_eq(atomic_load(&g_loop_close_rc), 0, "uv_loop_close: handles left open");
}

static void setup(void)
{
    test_limits(&g_limits);
    start_server();
}

/* ------------------------------------------------------------------ a raw client */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}



typedef struct {
    int fd;
    char buf[1 << 20];
    size_t len;
} client;

typedef struct {
    int status;
    char head[8192];
    char body[65536];
    size_t body_len;
    int chunked;
    int chunks;
} response;

static client *cl_connect_rcvbuf(int rcvbuf)
{
    client *c = calloc(1, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = {3, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atomic_load(&g_port))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

static client *cl_connect(void) { return cl_connect_rcvbuf(0); }

static void cl_close(client *c)
{
    close(c->fd);
    free(c);
}

static void cl_send_n(client *c, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the server may close early on an error; the response tells */
        s += w;
        n -= (size_t)w;
    }
}

static void cl_send(client *c, const char *s) { cl_send_n(c, s, strlen(s)); }

/* Reads more bytes; 0 on EOF, -1 on timeout/error. */
static ssize_t cl_fill(client *c)
{
    if (c->len == sizeof c->buf)
        return -1;
    ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (r > 0)
        c->len += (size_t)r;
    return r;
}

static void cl_consume(client *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

static char *find(client *c, const char *needle)
{
    return memmem(c->buf, c->len, needle, strlen(needle));
}

/* Reads until a whole head is buffered: its length up to and with the blank line, 0 on
 * EOF/timeout. */
static size_t cl_read_head(client *c)
{
    char *end;
    while (!(end = find(c, "\r\n\r\n")))
        if (cl_fill(c) <= 0)
            return 0;
    return (size_t)(end - c->buf) + 4;
}

/* Reads one response (keeping pipelined leftovers). 0 ok, -1 EOF/timeout/malformed. */
static int cl_response(client *c, response *r)
{
    memset(r, 0, sizeof *r);
    size_t hlen = cl_read_head(c);
    if (!hlen || hlen >= sizeof r->head)
        return -1;
    memcpy(r->head, c->buf, hlen);
    r->head[hlen] = '\0';
    cl_consume(c, hlen);
    if (sscanf(r->head, "HTTP/1.1 %d", &r->status) != 1)
        return -1;
    char *cl = strcasestr(r->head, "\r\nContent-Length:");
    if (strcasestr(r->head, "\r\nTransfer-Encoding: chunked\r\n")) {
        r->chunked = 1;
        for (;;) {
            char *eol;
            while (!(eol = find(c, "\r\n")))
                if (cl_fill(c) <= 0)
                    return -1;
            size_t size = strtoul(c->buf, NULL, 16);
            size_t line = (size_t)(eol - c->buf) + 2;
            while (c->len < line + size + 2)
                if (cl_fill(c) <= 0)
                    return -1;
            if (c->buf[line + size] != '\r' || c->buf[line + size + 1] != '\n')
                return -1;
            if (size == 0) {
                cl_consume(c, line + 2);
                return 0;
            }
            if (r->body_len + size < sizeof r->body) {
                memcpy(r->body + r->body_len, c->buf + line, size);
                r->body_len += size;
            }
            r->chunks++;
            cl_consume(c, line + size + 2);
        }
    }
    size_t n = cl ? strtoul(cl + 17, NULL, 10) : 0;
    if (n >= sizeof r->body)
        return -1;
    while (c->len < n)
        if (cl_fill(c) <= 0)
            return -1;
    memcpy(r->body, c->buf, n);
    r->body[n] = '\0';
    r->body_len = n;
    cl_consume(c, n);
    return 0;
}

/* 1 when the server closed the connection (EOF or RST) within the socket timeout, with no more
 * response bytes. */
static int cl_sees_close(client *c)
{
    if (c->len)
        return 0;
    char b[256];
    ssize_t r = recv(c->fd, b, sizeof b, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

static int has_header(const response *r, const char *h)
{
    return strcasestr(r->head, h) != NULL;
}

/* Reads the next response on c into *r (asserted); expects its status (unless 0) and, unless part
 * is NULL, that its body contains part. */
static void cl_expect(client *c, response *r, int status, const char *part)
{
    cr_assert_eq(cl_response(c, r), 0, "no response (expected %d %s)", status, part ? part : "");
    if (status)
        cr_expect_eq(r->status, status, "status %d, expected %d; body %s", r->status, status, r->body);
    if (part)
        cr_expect(strstr(r->body, part) != NULL, "no %s in the body %s", part, r->body);
}

/* A fresh connection that has sent req and read one response, checked as cl_expect does. */
static client *cl_exchange(const char *req, response *r, int status, const char *part)
{
    client *c = cl_connect();
    cl_send(c, req);
    cl_expect(c, r, status, part);
    return c;
}

/* One request on a fresh connection; expects a layer error: status, JSON code, close. */
static void expect_error_n(const char *req, size_t n, int status, const char *code)
{
    client *c = cl_connect();
    cl_send_n(c, req, n);
    response r;
    cr_assert_eq(cl_response(c, &r), 0, "no response for a request expecting %d %s", status, code);
    cr_expect_eq(r.status, status, "status %d, expected %d (%s); body %s", r.status, status, code, r.body);
    char want[128];
    snprintf(want, sizeof want, "{\"error\":{\"code\":\"%s\",\"message\":\"", code);
    cr_expect(strstr(r.body, want) != NULL, "expected code %s, got body %s", code, r.body);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"), "error without Connection: close");
    cr_expect(has_header(&r, "\r\nContent-Type: application/json\r\n"));
    cr_expect(cl_sees_close(c), "connection not closed after %s", code);
    cl_close(c);
}

static void expect_error(const char *req, int status, const char *code)
{
    expect_error_n(req, strlen(req), status, code);
}

/* ------------------------------------------------------------------ basic requests */

TestSuite(http, .init = setup, .fini = stop_server, .timeout = 15);

Test(http, simple_get)
{
    response r;
    client *c = cl_exchange("GET /echo?x=1 HTTP/1.1\r\nHost: t\r\n\r\n", &r, 200, NULL);
    cr_expect_str_eq(r.body, "{\"method\":\"GET\",\"path\":\"/echo\",\"query\":\"x=1\",\"body_len\":0,\"ct\":\"\"}");
    cr_expect(has_header(&r, "\r\nConnection: keep-alive\r\n"));
    cr_expect(has_header(&r, "\r\nContent-Type: application/json\r\n"));
    cl_close(c);
}

Test(http, unknown_route_is_json_404_and_keeps_alive)
{
    response r;
    client *c = cl_exchange("GET /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n", &r, 404, NULL);
    cr_expect_str_eq(r.body, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such route\"}}\n");
    cl_expect(c, &r, 200, NULL);
    cl_close(c);
}

Test(http, error_ex_escapes_message_and_adds_headers)
{
    response r;
    client *c = cl_exchange("GET /retry HTTP/1.1\r\nHost: t\r\n\r\n", &r, 503, NULL);
    cr_expect(has_header(&r, "\r\nRetry-After: 1\r\n"));
    cr_expect_str_eq(r.body,
                     "{\"error\":{\"code\":\"busy\",\"message\":\"max_sessions reached \\\"quoted\\\"\\n\"}}\n");
    cl_close(c);
}

Test(http, post_with_content_length)
{
    response r;
    client *c = cl_exchange("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/json  \r\n"
                            "Content-Length: 11\r\n\r\n{\"a\":12345}", &r, 200, "\"body_len\":11");
    cr_expect(strstr(r.body, "\"ct\":\"application/json\"") != NULL, "OWS not trimmed: %s", r.body);
    cl_close(c);
}

Test(http, chunked_request_body_with_trailer)
{
    client *c = cl_connect();
    cl_send(c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5;ext=1\r\nhello\r\n");
    usleep(30000); /* split across reads, CRLF at the boundary */
    cl_send(c, "6\r\n world\r");
    usleep(30000);
    cl_send(c, "\n0\r\nX-Trailer: t\r\n\r\n");
    response r;
    cl_expect(c, &r, 200, "\"body_len\":11");
    cl_close(c);
}

Test(http, pipelined_requests_answered_in_order)
{
    client *c = cl_connect();
    /* /slow answers asynchronously, later than /echo would: order must still hold */
    cl_send(c, "GET /echo?q=1 HTTP/1.1\r\nHost: t\r\n\r\n"
               "GET /slow?q=2 HTTP/1.1\r\nHost: t\r\n\r\n"
               "POST /echo?q=3 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
               "GET /stream?n=2 HTTP/1.1\r\nHost: t\r\n\r\n"
               "GET /echo?q=5 HTTP/1.1\r\nHost: t\r\n\r\n");
    response r;
    const char *want[] = {"q=1", "q=2", "q=3", NULL, "q=5"};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(cl_response(c, &r), 0, "response %d missing", i + 1);
        cr_expect_eq(r.status, 200);
        if (want[i])
            cr_expect(strstr(r.body, want[i]) != NULL, "response %d out of order: %s", i + 1, r.body);
        else
            cr_expect(r.chunked && r.chunks == 2, "response %d should be the stream", i + 1);
    }
    cl_close(c);
}

Test(http, requests_fed_one_byte_per_segment)
{
    /* every split point of the scanner, the C8 check and llhttp: one byte per send */
    client *c = cl_connect();
    const char *req = "GET /echo?q=1 HTTP/1.1\r\nHost: t\r\n\r\n"
                      "POST /echo?q=2 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
                      "\r\nPOST /echo?q=3 HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nwxyz";
    for (size_t i = 0; req[i]; i++) {
        cl_send_n(c, req + i, 1);
        usleep(300);
    }
    response r;
    const char *want[] = {"\"query\":\"q=1\",\"body_len\":0", "\"query\":\"q=2\",\"body_len\":5",
                          "\"query\":\"q=3\",\"body_len\":4"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cl_response(c, &r), 0, "response %d", i + 1);
        cr_expect_eq(r.status, 200, "response %d: %d %s", i + 1, r.status, r.body);
        cr_expect(strstr(r.body, want[i]) != NULL, "response %d: %s", i + 1, r.body);
    }
    cl_close(c);
}

Test(http, absolute_form_target)
{
    response r;
    client *c = cl_exchange("GET http://t:80/echo?x=2 HTTP/1.1\r\nHost: t\r\n\r\n"
                            "GET HTTP://t?y=3 HTTP/1.1\r\nHost: t\r\n\r\n", &r, 0, "\"path\":\"/echo\",\"query\":\"x=2\"");
    cl_expect(c, &r, 404, NULL); /* path "/" */
    cl_close(c);
}

Test(http, nothing_is_parsed_after_connection_close)
{
    response r;
    client *c = cl_exchange("GET /echo?n=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                            "GET /echo?n=2 HTTP/1.1\r\nHost: t\r\n\r\n", &r, 0, NULL);
    cr_expect(strstr(r.body, "n=1") != NULL);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cl_sees_close(c), "a request after Connection: close was answered");
    cl_close(c);
}

Test(http, keep_alive_sequential_requests)
{
    client *c = cl_connect();
    response r;
    for (int i = 0; i < 5; i++) {
        cl_send(c, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
        cr_assert_eq(cl_response(c, &r), 0, "request %d", i);
        cr_expect_eq(r.status, 200);
        cr_expect(has_header(&r, "\r\nConnection: keep-alive\r\n"));
    }
    cl_close(c);
}

Test(http, connection_close_honoured)
{
    response r;
    client *c = cl_exchange("GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", &r, 200, NULL);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cl_sees_close(c));
    cl_close(c);
}

Test(http, http10_closes_by_default_and_keeps_alive_on_request)
{
    response r;
    client *c = cl_exchange("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r, 200, NULL);
    cr_expect(has_header(&r, "\r\nConnection: keep-alive\r\n"));
    cl_send(c, "GET /echo HTTP/1.0\r\n\r\n");
    cr_assert_eq(cl_response(c, &r), 0);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cl_sees_close(c));
    cl_close(c);
}

Test(http, http10_stream_is_unframed_and_closes)
{
    client *c = cl_connect();
    cl_send(c, "GET /stream?n=3 HTTP/1.0\r\n\r\n");
    cr_assert(cl_read_head(c) > 0);
    cr_expect(memmem(c->buf, c->len, "Transfer-Encoding", 17) == NULL);
    while (cl_fill(c) > 0)
        ;
    cr_expect(find(c, "\r\n\r\n{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n") != NULL);
    cl_close(c);
}

Test(http, streaming_response_is_chunked_one_line_per_chunk)
{
    response r;
    client *c = cl_exchange("GET /stream?n=4 HTTP/1.1\r\nHost: t\r\n\r\n", &r, 200, NULL);
    cr_expect(r.chunked);
    cr_expect(!has_header(&r, "Content-Length"));
    cr_expect(has_header(&r, "\r\nContent-Type: application/x-ndjson\r\n"));
    cr_expect_eq(r.chunks, 4);
    cr_expect_str_eq(r.body, "{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n");
    /* and the connection is still usable */
    cl_send(c, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    cl_expect(c, &r, 200, NULL);
    cl_close(c);
}

Test(http, leading_empty_line_is_tolerated)
{
    response r;
    client *c = cl_exchange("\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n", &r, 200, NULL);
    cl_close(c);
}

/* ------------------------------------------------------------------ layer errors, one row each */

/* Requests the HTTP layer refuses by itself. Each row runs as its own test on a fresh server
 * (`--verbose` logs its name) and is checked by expect_error: status, JSON code, Connection:
 * close. Arrays, not pointers: Criterion copies the rows into each test's process. */
typedef struct {
    char name[48];
    int status;
    char code[40];
    char req[160];
} layer_error;

static layer_error LAYER_ERRORS[] = {
    /* framing (400) */
    {"cl_and_te_together_400", 400, "conflicting_content_length",
     "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
    {"te_and_cl_together_400", 400, "conflicting_content_length",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"},
    {"duplicate_content_length_400", 400, "conflicting_content_length",
     "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"},
    {"bad_content_length_400", 400, "invalid_content_length",
     "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3x\r\n\r\nabc"},
    {"bad_chunk_size_400", 400, "invalid_chunk_size",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
    {"missing_crlf_after_chunk_data_400", 400, "bad_chunk_framing",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n"},
    {"obs_fold_400", 400, "obs_fold",
     "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\r\n  folded\r\n\r\n"},
    {"bare_cr_400", 400, "bare_cr",
     "GET /echo HTTP/1.1\r\nHost: t\rX-A: a\r\n\r\n"},
    {"bare_lf_400", 400, "bare_lf",
     "GET /echo HTTP/1.1\r\nHost: t\nX-A: a\r\n\r\n"},
    {"bare_lf_in_request_line_400", 400, "bare_lf",
     "GET /echo HTTP/1.1\nHost: t\r\n\r\n"},
    {"bare_lf_in_trailer_400", 400, "bare_lf",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX: y\n\r\n"},
    {"invalid_header_name_400", 400, "invalid_header",
     "GET /echo HTTP/1.1\r\nHost: t\r\nBad Name: v\r\n\r\n"},
    {"missing_host_http11_400", 400, "missing_host",
     "GET /echo HTTP/1.1\r\nX-A: a\r\n\r\n"},
    {"duplicate_host_400", 400, "duplicate_host",
     "GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
    /* versions and codings */
    {"http2_505", 505, "http_version_not_supported",
     "GET /echo HTTP/2.0\r\nHost: t\r\n\r\n"},
    {"h2_preface_505", 505, "http_version_not_supported",
     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
    {"http09_400", 400, "invalid_version",
     "GET /echo HTTP/0.9\r\nHost: t\r\n\r\n"},
    {"unknown_transfer_coding_501", 501, "unsupported_transfer_encoding",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n"},
    {"chunked_not_alone_501 (chunked last)", 501, "unsupported_transfer_encoding",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
    {"chunked_not_alone_501 (chunked first)", 501, "unsupported_transfer_encoding",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"},
    {"repeated_transfer_encoding_400", 400, "duplicate_transfer_encoding",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
    {"transfer_encoding_on_http10_400", 400, "transfer_encoding_http10",
     "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
    /* limits: rejected at headers-complete, before any body byte is sent */
    {"body_too_large_by_content_length_413", 413, "body_too_large",
     "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n"},
    {"unknown_expectation_417", 417, "expectation_failed",
     "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nExpect: teapot\r\n\r\nx"},
    /* issue 10 item 11: the application's refusal from the head comes before max_body */
    {"on_head_refusal_before_body_too_large (length)", 401, "unauthorized",
     "POST /locked HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n"},
    {"on_head_refusal_before_body_too_large (chunked)", 401, "unauthorized",
     "POST /locked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"},
    /* issue 10 item 14: what RFC 9112 does not allow in a chunk extension stays refused:
     * whitespace (llhttp strict has no BWS), a value that is neither a token nor a quoted string,
     * and (llhttp 8.1, documented in API.md) a quoted-pair in a quoted value */
    {"chunk_extension_rules_kept (whitespace)", 400, "invalid_chunk_size",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1 ;a=1\r\na\r\n0\r\n\r\n"},
    {"chunk_extension_rules_kept (value)", 400, "invalid_chunk_extension",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1;a=@\r\na\r\n0\r\n\r\n"},
    {"chunk_extension_rules_kept (quoted-pair)", 400, "invalid_chunk_extension",
     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1;a=\"\\\"\"\r\na\r\n0\r\n\r\n"},
};

ParameterizedTestParameters(http, layer_errors)
{
    return cr_make_param_array(layer_error, LAYER_ERRORS, sizeof LAYER_ERRORS / sizeof LAYER_ERRORS[0]);
}

ParameterizedTest(layer_error *e, http, layer_errors)
{
    cr_log_info("%s", e->name);
    expect_error(e->req, e->status, e->code);
}

Test(http, nul_in_header_400)
{
    expect_error_n("GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n", 40, 400, "invalid_header_byte");
}

Test(http, missing_crlf_after_chunk_data_across_reads_400)
{
    client *c = cl_connect();
    cl_send(c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r");
    usleep(50000);
    cl_send(c, "X0\r\n\r\n");
    response r;
    cl_expect(c, &r, 400, "\"bad_chunk_framing\"");
    cl_close(c);
}

/* ------------------------------------------------------------------ limits */

Test(http, request_line_too_long_414)
{
    static char req[4096];
    strcpy(req, "GET /echo?");
    memset(req + 10, 'a', 2000);
    strcpy(req + 2010, " HTTP/1.1\r\nHost: t\r\n\r\n");
    expect_error(req, 414, "request_line_too_long");
}

Test(http, header_section_too_large_431)
{
    static char req[8192];
    strcpy(req, "GET /echo HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 6; i++)
        sprintf(req + strlen(req), "X-H%d: %0900d\r\n", i, 0);
    strcat(req, "\r\n");
    expect_error(req, 431, "header_too_large");
}

Test(http, single_huge_header_value_431_without_buffering_it)
{
    /* 1 MiB header value: rejected at the 4 KiB limit, the rest is never parsed */
    size_t n = 1 << 20;
    char *req = malloc(n + 64);
    strcpy(req, "GET /echo HTTP/1.1\r\nHost: t\r\nX-Big: ");
    size_t h = strlen(req);
    memset(req + h, 'b', n);
    memcpy(req + h + n, "\r\n\r\n", 5);
    client *c = cl_connect();
    cl_send_n(c, req, h + 8192); /* enough to cross the limit */
    response r;
    cl_expect(c, &r, 431, NULL);
    cr_expect(strstr(r.body, "\"header_too_large\"") && strstr(r.body, "max_header_bytes (4096 bytes)"), "%s",
              r.body);
    cl_close(c);
    free(req);
}

Test(http, too_many_headers_431)
{
    static char req[8192];
    strcpy(req, "GET /echo HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 25; i++)
        sprintf(req + strlen(req), "X-H%d: v\r\n", i);
    strcat(req, "\r\n");
    expect_error(req, 431, "too_many_headers");
}

Test(http, body_too_large_by_content_length_while_sending_413)
{
    /* the client is still sending when the 413 comes: the lingering close lets it read the answer */
    size_t n = 200000;
    char *req = malloc(n + 128);
    int h = sprintf(req, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", n);
    memset(req + h, 'z', n);
    client *c = cl_connect();
    cl_send_n(c, req, (size_t)h + n);
    response r;
    cl_expect(c, &r, 413, NULL);
    cr_expect(strstr(r.body, "\"body_too_large\"") && strstr(r.body, "max_body"), "%s", r.body);
    cl_close(c);
    free(req);
}

Test(http, body_too_large_chunked_413)
{
    static char req[100000];
    strcpy(req, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 20; i++) { /* 20 x 4000 = 80000 > 65536 */
        strcat(req, "fa0\r\n");
        size_t l = strlen(req);
        memset(req + l, 'c', 4000);
        strcpy(req + l + 4000, "\r\n");
    }
    strcat(req, "0\r\n\r\n");
    expect_error(req, 413, "body_too_large");
}

Test(http, chunk_extension_too_large_413)
{
    static char req[4096];
    strcpy(req, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1;e=");
    memset(req + strlen(req), 'e', 400);
    strcat(req, "\r\na\r\n0\r\n\r\n");
    expect_error(req, 413, "chunk_extension_too_large");
}

Test(http, max_requests_per_conn_closes)
{
    /* default limit is 1000; prove Connection: close arrives on the last allowed request */
    client *c = cl_connect();
    response r;
    int saw_close = 0;
    for (int i = 0; i < 1000 && !saw_close; i++) {
        cl_send(c, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
        cr_assert_eq(cl_response(c, &r), 0, "request %d", i + 1);
        if (has_header(&r, "\r\nConnection: close\r\n")) {
            saw_close = 1;
            cr_expect_eq(i + 1, 1000);
        }
    }
    cr_expect(saw_close);
    cr_expect(cl_sees_close(c));
    cl_close(c);
}

Test(http, expect_100_continue)
{
    response r;
    client *c = cl_exchange("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                            "Expect: 100-continue\r\n\r\n", &r, 0, NULL);
    cr_expect_eq(r.status, 100, "no 100 Continue before the body");
    cl_send(c, "hello");
    cl_expect(c, &r, 200, "\"body_len\":5");
    cl_close(c);
}

Test(http, head_has_no_body_bytes)
{
    client *c = cl_connect();
    cl_send(c, "HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    size_t head = cl_read_head(c);
    cr_assert(head > 0);
    cr_expect(memmem(c->buf, head, "Content-Length: ", 16) != NULL);
    cl_consume(c, head);
    response r; /* the next bytes must be the GET's response, not a HEAD body */
    cl_expect(c, &r, 200, "\"method\":\"GET\"");
    cl_close(c);
}

Test(http, upgrade_is_answered_then_closed)
{
    response r;
    client *c = cl_exchange("GET /echo HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
                            "Connection: Upgrade\r\n\r\n", &r, 200, NULL);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cl_sees_close(c));
    cl_close(c);
}

Test(http, client_leaving_mid_stream_fires_on_close)
{
    client *c = cl_connect_rcvbuf(4096);
    cl_send(c, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
    char buf[16384];
    size_t total = 0;
    while (total < 100000) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        cr_assert(r > 0);
        total += (size_t)r;
    }
    cl_close(c);
    double t0 = now_s();
    while (atomic_load(&g_closed) == 0 && now_s() - t0 < 1.5) /* well under the 2 s stall */
        usleep(5000);
    cr_expect_eq(atomic_load(&g_closed), 1, "on_close did not fire after the peer left");
    cr_expect_eq(atomic_load(&g_stalls_at_close), 0, "peer close was taken for a stall");
}

Test(http, drain_closes_idle_finishes_in_flight)
{
    client *idle = cl_connect(), *busy = cl_connect();
    response r;
    cl_send(idle, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_assert_eq(cl_response(idle, &r), 0);
    cl_send(busy, "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"); /* answered 60 ms later */
    usleep(10000);
    atomic_store(&g_cmd_code, 2);
    uv_async_send(&g_cmd);
    cr_expect(cl_sees_close(idle), "idle keep-alive connection not closed by drain");
    cr_assert_eq(cl_response(busy, &r), 0, "in-flight request not finished by drain");
    cr_expect_eq(r.status, 200);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cl_sees_close(busy));
    cl_close(idle);
    cl_close(busy);
    double t0 = now_s();
    while (!atomic_load(&g_drained) && now_s() - t0 < 3)
        usleep(5000);
    cr_expect(atomic_load(&g_drained), "drain done() not called");
    /* the listener is gone */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atomic_load(&g_port))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_expect(connect(fd, (struct sockaddr *)&a, sizeof a) != 0, "still accepting after drain");
    close(fd);
}

static void setup_two_conns(void)
{
    test_limits(&g_limits);
    g_limits.max_connections = 2;
    start_server();
}

Test(http_conns, max_connections_rejects_the_third, .init = setup_two_conns, .fini = stop_server,
     .timeout = 10)
{
    client *a = cl_connect(), *b = cl_connect();
    response r;
    cl_send(a, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_assert_eq(cl_response(a, &r), 0);
    cl_send(b, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_assert_eq(cl_response(b, &r), 0);
    client *c = cl_connect();
    cl_send(c, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_expect(cl_sees_close(c), "third connection served past max_connections");
    cl_close(c);
    cl_close(b); /* a slot frees up */
    usleep(50000);
    client *d = cl_connect();
    cl_send(d, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_expect_eq(cl_response(d, &r), 0, "no slot after a connection closed");
    cl_close(d);
    cl_close(a);
}

/* ------------------------------------------------------------------ timeouts (tiny values) */

static void setup_fast_timeouts(void)
{
    test_limits(&g_limits);
    g_limits.header_timeout = 200;
    g_limits.body_idle_timeout = 200;
    g_limits.request_timeout = 600;
    g_limits.keepalive_idle = 200;
    start_server();
}

Test(http_timeouts, slow_headers_408, .init = setup_fast_timeouts, .fini = stop_server, .timeout = 10)
{
    client *c = cl_connect();
    double t0 = now_s();
    cl_send(c, "GET /echo HTTP/1.1\r\nHost: t\r\n"); /* never finished */
    response r;
    cr_assert_eq(cl_response(c, &r), 0);
    double dt = now_s() - t0;
    cr_expect_eq(r.status, 408);
    cr_expect(strstr(r.body, "\"header_timeout\"") && strstr(r.body, "header_timeout"), "%s", r.body);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(dt > 0.15 && dt < 2.0, "408 after %.3f s", dt);
    cr_expect(cl_sees_close(c));
    cl_close(c);
}

Test(http_timeouts, trickled_headers_still_408, .init = setup_fast_timeouts, .fini = stop_server, .timeout = 10)
{
    /* header_timeout counts from the first byte: trickling does not extend it */
    client *c = cl_connect();
    const char *req = "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: aaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    int got408 = 0;
    for (size_t i = 0; req[i]; i++) {
        cl_send_n(c, req + i, 1);
        usleep(20000);
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, 0) > 0)
            break;
    }
    response r;
    if (cl_response(c, &r) == 0 && r.status == 408)
        got408 = 1;
    cr_expect(got408);
    cl_close(c);
}

Test(http_timeouts, slow_body_408, .init = setup_fast_timeouts, .fini = stop_server, .timeout = 10)
{
    response r;
    client *c = cl_exchange("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc", &r, 408, NULL);
    cr_expect(strstr(r.body, "\"body_timeout\"") && strstr(r.body, "body_idle_timeout"), "%s", r.body);
    cl_close(c);
}

Test(http_timeouts, request_timeout_408_for_a_trickled_body, .init = setup_fast_timeouts, .fini = stop_server,
     .timeout = 10)
{
    client *c = cl_connect();
    cl_send(c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n");
    response r;
    int ok = -1;
    for (int i = 0; i < 100; i++) { /* one byte every 100 ms: body idle never fires */
        cl_send(c, "x");
        struct pollfd p = {c->fd, POLLIN, 100};
        if (poll(&p, 1, 100) > 0) {
            ok = cl_response(c, &r);
            break;
        }
    }
    cr_assert_eq(ok, 0);
    cr_expect_eq(r.status, 408);
    cr_expect(strstr(r.body, "\"request_timeout\"") != NULL, "%s", r.body);
    cl_close(c);
}

Test(http_timeouts, keepalive_idle_closes_silently, .init = setup_fast_timeouts, .fini = stop_server,
     .timeout = 10)
{
    response r;
    client *c = cl_exchange("GET /echo HTTP/1.1\r\nHost: t\r\n\r\n", &r, 0, NULL);
    double t0 = now_s();
    cr_expect(cl_sees_close(c), "idle keep-alive connection not closed");
    double dt = now_s() - t0;
    cr_expect(dt > 0.1 && dt < 2.0, "closed after %.3f s", dt);
    cl_close(c);
}

/* ------------------------------------------------------------------ backpressure and stall */

static void setup_stall(void)
{
    test_limits(&g_limits);
    g_limits.send_stall_timeout = 300;
    start_server();
}

Test(http_stall, reader_that_never_reads_gets_backpressure_then_reset, .init = setup_stall,
     .fini = stop_server, .timeout = 15)
{
    client *c = cl_connect_rcvbuf(4096);
    cl_send(c, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
    /* never read: the producer must see srv_stream_writable() == 0, then the stall timer fires */
    double t0 = now_s();
    while (atomic_load(&g_closed) == 0 && now_s() - t0 < 8)
        usleep(10000);
    cr_expect(atomic_load(&g_backpressured) >= 1, "producer never saw backpressure");
    cr_expect_eq(atomic_load(&g_flood_ended), 0, "producer wrote 64 MiB: no backpressure");
    cr_assert_eq(atomic_load(&g_closed), 1, "on_close did not fire after send_stall_timeout");
    cr_expect_eq(atomic_load(&g_stalls_at_close), 1, "stall not counted in stats");
    /* the connection was reset: reading now ends in ECONNRESET (or EOF) before a full stream */
    char buf[65536];
    ssize_t r;
    size_t total = 0;
    while ((r = recv(c->fd, buf, sizeof buf, 0)) > 0)
        total += (size_t)r;
    cr_expect(r == 0 || errno == ECONNRESET, "recv: %s", strerror(errno));
    cr_expect(total < (64u << 20));
    cl_close(c);
}

Test(http_stall, slow_but_steady_reader_gets_everything_via_on_drain, .init = setup_stall,
     .fini = stop_server, .timeout = 15)
{
    /* a reader that keeps reading is never reset; on_drain resumes the producer */
    client *c = cl_connect_rcvbuf(4096);
    cl_send(c, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
    char buf[65536];
    size_t total = 0;
    while (total < (4u << 20)) { /* 4 MiB: far above the watermarks and the socket buffers */
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        cr_assert(r > 0, "stream ended early after %zu bytes: %zd %s", total, r, strerror(errno));
        total += (size_t)r;
        usleep(200);
    }
    cr_expect(atomic_load(&g_backpressured) >= 2, "backpressure %d", atomic_load(&g_backpressured));
    cr_expect(atomic_load(&g_drains) >= 1, "on_drain never fired");
    cr_expect_eq(atomic_load(&g_closed), 0, "a reading client was treated as stalled");
    cl_close(c);
}

/* A 1 s stall timeout for the slow-reader test: long enough that a reader descheduled for a
 * few hundred ms on a loaded machine is not taken for a stalled one, short against the 2.5 s
 * the single write takes to drain. */
static void setup_stall_1s(void)
{
    test_limits(&g_limits);
    g_limits.send_stall_timeout = 1000;
    start_server();
}

Test(http_stall, slow_reader_of_one_large_write_is_not_a_stall, .init = setup_stall_1s,
     .fini = stop_server, .timeout = 30)
{
    /* a single 16 MiB write completes only after seconds; partial progress must count. The
     * reader is paced to 16 MiB in 2.5 s (whatever sizes recv returns), so the write is still
     * in flight for 2.5 stall timeouts: a timer that ignored partial progress would fire. */
    client *c = cl_connect_rcvbuf(65536);
    cl_send(c, "GET /big HTTP/1.1\r\nHost: t\r\n\r\n");
    char buf[65536];
    const double rate = (16u << 20) / 2.5; /* bytes per second */
    size_t total = 0;
    double t0 = now_s();
    while (total < (16u << 20)) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        cr_assert(r > 0, "reset after %zu bytes, %.2f s: %s", total, now_s() - t0, strerror(errno));
        total += (size_t)r;
        double ahead = t0 + (double)total / rate - now_s();
        if (ahead > 0)
            usleep((useconds_t)(ahead * 1e6));
    }
    cr_expect(now_s() - t0 > 2.0, "test too fast (%.2f s) to prove anything", now_s() - t0);
    cr_expect_eq(atomic_load(&g_closed), 0);
    cl_close(c);
}

/* ------------------------------------------------------------------ the scanner alone (C1) */

Test(http_scan, state_survives_every_split)
{
    srv_http_limits l;
    srv_http_limits_default(&l);
    const char *req = "\r\nGET / HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\nBODY";
    size_t n = strlen(req);
    size_t end_expected = n - 4;
    for (size_t split = 0; split < end_expected; split++) {
        srv_scan s;
        srv_http_error e;
        size_t used;
        srv_scan_begin_message(&s);
        srv_scan_result r = srv_scan_run(&s, &l, req, split, &used, &e);
        cr_assert_eq(r, SCAN_MORE, "split %zu", split);
        r = srv_scan_run(&s, &l, req + split, n - split, &used, &e);
        cr_assert_eq(r, SCAN_END, "split %zu", split);
        cr_assert_eq(split + used, end_expected);
        cr_assert_eq(s.lines, 2);
    }
}

Test(http_scan, cr_at_buffer_end_then_non_lf)
{
    srv_http_limits l;
    srv_http_limits_default(&l);
    srv_scan s;
    srv_http_error e;
    size_t used;
    srv_scan_begin_message(&s);
    cr_assert_eq(srv_scan_run(&s, &l, "GET / HTTP/1.1\r", 15, &used, &e), SCAN_MORE);
    cr_assert_eq(srv_scan_run(&s, &l, "Host: x\r\n\r\n", 11, &used, &e), SCAN_ERROR);
    cr_expect_str_eq(e.code, "bare_cr");
    cr_expect_eq(used, 0);
}

Test(http_scan, json_escape)
{
    proto_buf b = {0};
    const char *s = "a\"b\\c\x01\n\x7f\xff\xc3\xa9\xed\xa0\x80";
    cr_assert_eq(proto_buf_try_json_str(&b, s, strlen(s)), 0); /* the one escaper (proto/buf.c) */
    cr_expect_str_eq(b.data,
                     "\"a\\\"b\\\\c\\u0001\\n\\u007f\xEF\xBF\xBD\xc3\xa9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
    proto_buf_free(&b);
}

Test(http_scan, tchar_and_te)
{
    cr_expect(srv_is_tchar('a') && srv_is_tchar('~') && srv_is_tchar('!'));
    cr_expect(!srv_is_tchar(' ') && !srv_is_tchar(':') && !srv_is_tchar('(') && !srv_is_tchar(0x80));
    cr_expect(srv_te_is_chunked(" Chunked\t", 9));
    cr_expect(!srv_te_is_chunked("chunked, gzip", 13));
    cr_expect(!srv_te_is_chunked("", 0));
}

/* ------------------------------------------------------------------ issue 10 items 11, 14, 17 */

/* item 11: a request the application refuses from its head (a wrong API key) gets its answer
 * before any 100 Continue, and before max_body is looked at; its body is never read (the
 * connection closes after the answer) and on_request never sees it. */
Test(http, on_head_refusal_comes_before_100_continue)
{
    response r;
    client *c = cl_exchange("POST /locked HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                            "Expect: 100-continue\r\n\r\n", &r, 0, NULL);
    cr_expect_eq(r.status, 401, "got %d before the key was checked", r.status);
    cr_expect(strstr(r.body, "{\"error\":{\"code\":\"unauthorized\"") != NULL, "%s", r.body);
    cr_expect(has_header(&r, "\r\nWWW-Authenticate: Bearer\r\n"), "%s", r.head);
    cr_expect(has_header(&r, "\r\nConnection: close\r\n"));
    cr_expect(cl_sees_close(c));
    cl_close(c);
    cr_expect_eq(atomic_load(&g_requests_seen), 0, "on_request saw a refused request");
    cr_expect_eq(atomic_load(&g_heads_seen), 1);
}

Test(http, on_head_accepting_keeps_100_continue_and_bodiless_requests_skip_it)
{
    client *c = cl_connect();
    cl_send(c, "GET /locked HTTP/1.1\r\nHost: t\r\n\r\n"); /* no body: straight to on_request */
    response r;
    cl_expect(c, &r, 404, NULL);
    cr_expect_eq(atomic_load(&g_heads_seen), 0);
    cl_send(c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
    cl_expect(c, &r, 100, NULL);
    cl_send(c, "ok");
    cl_expect(c, &r, 200, "\"path\":\"/echo\",\"query\":\"\",\"body_len\":2");
    cr_expect_eq(atomic_load(&g_heads_seen), 1);
    cl_close(c);
}

/* item 14: RFC 9112 §7.1.1 allows any number of chunk extensions, token or quoted values, on
 * data chunks and the last chunk; llhttp 8.1 alone refuses a second one after a token value. */
static const char *const MULTI_EXT_REQ =
    "POST /echo?q=x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    "3;a=1;b=2\r\nabc\r\n"
    "2;a;b;c=\"q; x\";d=4\r\nde\r\n"
    "1;a=\"1\";b=2;c\r\nf\r\n"
    "0;last=1;more\r\nT: 1\r\n\r\n";

Test(http, several_chunk_extensions_accepted)
{
    response r;
    client *c = cl_exchange(MULTI_EXT_REQ, &r, 200, "\"query\":\"q=x\",\"body_len\":6");
    cl_close(c);
}

Test(http, several_chunk_extensions_one_byte_per_segment)
{
    client *c = cl_connect();
    for (size_t i = 0; MULTI_EXT_REQ[i]; i++) {
        cl_send_n(c, MULTI_EXT_REQ + i, 1);
        usleep(300);
    }
    cl_send(c, "GET /echo?q=after HTTP/1.1\r\nHost: t\r\n\r\n");
    response r;
    cl_expect(c, &r, 200, "\"body_len\":6");
    cl_expect(c, &r, 0, "\"query\":\"q=after\"");
    cl_close(c);
}

Test(http, chunk_extension_limit_counts_every_extension)
{
    /* 40 extensions of 8 bytes (name + value) = 320 > max_chunk_ext_bytes 256 */
    static char req[4096];
    strcpy(req, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1");
    for (int i = 0; i < 40; i++)
        strcat(req, ";nnnn=vvvv");
    strcat(req, "\r\na\r\n0\r\n\r\n");
    expect_error(req, 413, "chunk_extension_too_large");
}

/* item 17: Last-Event-ID reaches the application. */
Test(http, last_event_id_passed_to_the_application)
{
    response r;
    client *c = cl_exchange("GET /lei HTTP/1.1\r\nHost: t\r\nLast-Event-ID:  17 \r\n\r\n"
                            "GET /lei HTTP/1.1\r\nHost: t\r\n\r\n", &r, 0, "{\"lei\":\"17\"}");
    cl_expect(c, &r, 0, "{\"lei\":\"-\"}");
    cl_close(c);
}
