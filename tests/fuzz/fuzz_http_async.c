/*
 * fuzz_http_async.c — libFuzzer target: recurd's HTTP/1.1 layer (server/http_*.c + llhttp strict) over
 * a real loopback TCP connection, as the daemon runs it.
 *
 * fuzz_http.c fuzzes the same layer with random 1..64-byte segments and an echo app. This target
 * adds what that one cannot reach or see: responses finished on a later loop turn (the request
 * stays in flight while pipelined bytes wait, then the saved tail is parsed), bodies above the
 * write high watermark, the four split modes below, and an oracle on the output: every byte the
 * server sends must parse as a stream of HTTP/1.1 responses (llhttp in response mode).
 *
 * Input: byte 0 chooses how the rest is split across the server's reads (fuzz_client.h), the rest
 * is what a client sends. The application behind the layer is a small stub that exercises every
 * response path by URL path:
 *   /stream   chunked stream of three lines (NDJSON; raw for HTTP/1.0)
 *   /async    answered from a 0 ms timer (request in flight across loop turns, pipelining)
 *   /big      a 20 KiB body (above the 8 KiB high watermark)
 *   /error    a JSON error (422)
 *   other     200 with a short text describing the request
 * Limits are small (request line 256 B, headers 1 KiB / 16, body 4 KiB, chunk extensions
 * 256 B, 8 requests per connection) so that inputs of a few hundred bytes reach every limit.
 * Checks: ASan/UBSan/LSan; the request handed to the app is well-formed (NUL-terminated body,
 * body within max_body, non-empty method, path); the response bytes parse as HTTP/1.1
 * (fuzz_client.h); the connection closes after the client's EOF.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_client.h"
#include "fuzz_http_app.h"

static uv_loop_t g_loop;
static srv_server *g_srv;
static int g_async_pending; /* async responders not yet closed */

typedef struct {
    uv_timer_t timer;
    srv_conn *c;
} async_resp;

static void async_closed(uv_handle_t *h)
{
    free(h->data);
    g_async_pending--;
}

static void async_fire(uv_timer_t *t)
{
    async_resp *a = t->data;
    srv_respond(a->c, 200, "text/plain", "async\n", 6, NULL);
    srv_conn_unref(a->c);
    uv_close((uv_handle_t *)&a->timer, async_closed);
}

static void on_request(srv_conn *c, const srv_request *req, void *app)
{
    assert(req->method && req->method[0]);
    assert(req->path && req->query);
    assert(req->body && req->body[req->body_len] == '\0');
    assert(req->body_len <= g_srv->limits.max_body);

    if (!strcmp(req->path, "/stream")) {
        srv_stream_begin(c, 200, "application/x-ndjson");
        for (int i = 0; i < 3; i++) {
            char line[32];
            int n = snprintf(line, sizeof line, "{\"i\":%d}\n", i);
            srv_stream_write(c, line, (size_t)n);
        }
        srv_stream_end(c);
    } else if (!strcmp(req->path, "/async")) {
        async_resp *a = calloc(1, sizeof *a);
        if (!a) abort();
        a->c = c;
        srv_conn_ref(c);
        uv_timer_init(&g_loop, &a->timer);
        a->timer.data = a;
        g_async_pending++;
        uv_timer_start(&a->timer, async_fire, 0, 0);
    } else if (!strcmp(req->path, "/big")) {
        static char big[20 * 1024];
        memset(big, 'b', sizeof big);
        srv_respond(c, 200, "text/plain", big, sizeof big, NULL);
    } else if (!strcmp(req->path, "/error")) {
        srv_respond_error(c, 422, "invalid_thing", "thing must be valid");
    } else {
        char msg[512];
        int n = snprintf(msg, sizeof msg, "%s %.100s ?%.100s ct=%.50s accept=%.50s auth=%d body=%zu\n",
                         req->method, req->path, req->query,
                         req->content_type ? req->content_type : "-", req->accept ? req->accept : "-",
                         req->authorization != NULL, req->body_len);
        srv_respond(c, 200, "text/plain", msg, (size_t)n, "X-Fuzz: 1\r\n");
    }
}

static int busy(void) { return g_async_pending > 0; }

static void setup(void)
{
    if (uv_loop_init(&g_loop)) abort();
    srv_http_limits l;
    fuzz_small_limits(&l, 30000);
    l.max_chunk_ext_bytes = 256;
    l.max_requests_per_conn = 8;
    l.write_high_watermark = 8192;
    l.write_low_watermark = 2048;
    l.max_connections = 4;
    srv_http_callbacks cb = {on_request, on_close, on_drain, on_head};
    if (srv_server_start(&g_loop, "127.0.0.1", 0, &l, &cb, NULL, &g_srv)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    if (size < 1) return 0;
    fc_opts o = {.busy = busy};
    fc_run(&g_loop, g_srv, data[0], data + 1, size - 1, &o);
    return 0;
}
