/*
 * fuzz_http.c — libFuzzer target for the HTTP layer (server/http_*.c) over a real loopback socket.
 *
 * Input: byte 0 seeds how the rest is split into segments (1..64 bytes, one send each, the loop
 * turning between them), so every read boundary of the scanner, the C8 check and llhttp is
 * reachable. The client then half-closes and reads until the server closes.
 *
 * Properties checked (abort = finding):
 *   - no memory error / UB (ASan + UBSan);
 *   - the server never leaves a connection waiting: every input ends with the connection closed
 *     within a bounded number of loop turns (timeouts are set far away, so only the protocol
 *     logic can close it);
 *   - every response starts with "HTTP/1.1 " and every connection is released afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "fuzz_http_app.h"

static uv_loop_t loop;
static srv_server *server;
static int port;

static void on_request(srv_conn *c, const srv_request *r, void *app)
{
    if (!strcmp(r->path, "/stream")) {
        srv_stream_begin(c, 200, "application/x-ndjson");
        srv_stream_write(c, "{\"a\":1}\n", 8);
        srv_stream_write(c, "{\"b\":2}\n", 8);
        srv_stream_end(c);
    } else if (r->body_len > 0) {
        srv_respond(c, 200, "application/octet-stream", r->body, r->body_len, NULL);
    } else {
        srv_respond_error(c, 404, "not_found", r->path); /* escaping of arbitrary bytes */
    }
}

static void init(void)
{
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&loop);
    srv_http_limits l;
    fuzz_small_limits(&l, 600000);
    l.max_chunk_ext_bytes = 64;
    l.max_requests_per_conn = 50;
    srv_http_callbacks cb = {.on_request = on_request, .on_close = on_close, .on_drain = on_drain,
                             .on_head = on_head};
    if (srv_server_start(&loop, "127.0.0.1", 0, &l, &cb, NULL, &server)) {
        fprintf(stderr, "fuzz_http: cannot listen\n");
        abort();
    }
    port = srv_server_port(server);
}

static uint32_t rng_next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        init();
        ready = 1;
    }
    if (size < 1)
        return 0;
    uint32_t seed = 0x9E3779B9u ^ ((uint32_t)data[0] * 0x01000193u);
    data++;
    size--;

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) /* completes in the kernel backlog */
        abort();
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    size_t off = 0, got = 0;
    int shut = 0, closed = 0;
    char first[9] = {0};
    for (long turn = 0; !closed; turn++) {
        if (turn > 200000) {
            fprintf(stderr, "fuzz_http: connection left waiting (sent %zu of %zu)\n", off, size);
            abort();
        }
        if (off < size) {
            size_t n = 1 + rng_next(&seed) % 64;
            if (n > size - off)
                n = size - off;
            ssize_t w = send(fd, data + off, n, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (w < 0 && errno != EAGAIN)
                off = size; /* the server closed: stop sending */
        } else if (!shut) {
            shutdown(fd, SHUT_WR);
            shut = 1;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        for (;;) {
            char buf[65536];
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r > 0) {
                for (ssize_t i = 0; i < r && got + (size_t)i < 9; i++)
                    first[got + (size_t)i] = buf[i];
                got += (size_t)r;
                continue;
            }
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                closed = 1;
            break;
        }
    }
    if (got && got >= 9 && memcmp(first, "HTTP/1.1 ", 9) != 0) {
        fprintf(stderr, "fuzz_http: response does not start with a status line\n");
        abort();
    }
    close(fd);
    /* the server side must be released too */
    for (long turn = 0; srv_server_stats(server)->connections_open > 0; turn++) {
        if (turn > 200000) {
            fprintf(stderr, "fuzz_http: server kept the connection after the client left\n");
            abort();
        }
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    return 0;
}
