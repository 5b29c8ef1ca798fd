/*
 * fuzz_client.h — the loopback client shared by fuzz_http.c and fuzz_server.c.
 *
 * The server under test runs on a libuv loop in this process, listening on 127.0.0.1 (the HTTP
 * layer only accepts from its TCP listener, so a socketpair cannot be handed to it). One input is
 * one connection: connect, wait for the accept, write the pieces one by one with TCP_NODELAY,
 * and after each piece turn the loop until the server has read it (its socket's receive queue is
 * empty, or it has stopped reading because a request is in flight): each piece is one read() on
 * the server side unless the server itself lets bytes pile up. Then half-close (SHUT_WR) and
 * turn the loop, reading and checking every response byte, until the server has closed the
 * connection. A connection still open FUZZ_CLOSE_DEADLINE_MS after the client's EOF is a hang:
 * abort() (libFuzzer keeps the input).
 *
 * Response check: unless the input holds a HEAD request (whose responses llhttp cannot frame
 * without knowing the method), every byte the server sends must parse as HTTP/1.1 responses
 * with llhttp in response mode.
 *
 * Split modes, from the input's first byte b:
 *   b & 3 == 0   the rest in one write
 *   b & 3 == 1   writes of 1 + (b >> 2) bytes (1..64)
 *   b & 3 == 2   one write per line (split after every LF)
 *   b & 3 == 3   pseudo-random sizes 1..32 (xorshift seeded by b)
 */
#ifndef FUZZ_CLIENT_H
#define FUZZ_CLIENT_H

#include <errno.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_internal.h"

#define FUZZ_CLOSE_DEADLINE_MS 8000

static uint64_t fc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

typedef struct {
    int fd;
    int check;            /* parse responses with llhttp */
    llhttp_t parser;
    llhttp_settings_t settings;
    size_t received;
    /* optional hook: every received chunk (fuzz_server.c extracts session ids from it) */
    void (*on_bytes)(const char *p, size_t n);
} fc_client;

static void fc_fail(const char *what, const fc_client *cl)
{
    fprintf(stderr, "fuzz client: %s (llhttp: %s, %s)\n", what, llhttp_errno_name(llhttp_get_errno(&cl->parser)),
            cl->parser.reason ? cl->parser.reason : "");
    abort();
}

static void fc_feed(fc_client *cl, const char *p, size_t n)
{
    cl->received += n;
    if (cl->on_bytes) cl->on_bytes(p, n);
    if (!cl->check) return;
    llhttp_errno_t e = llhttp_execute(&cl->parser, p, n);
    if (e != HPE_OK) fc_fail("server sent bytes that are not a valid HTTP/1.1 response stream", cl);
}

static void fc_drain(fc_client *cl)
{
    char buf[65536];
    for (;;) {
        ssize_t r = recv(cl->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) { fc_feed(cl, buf, (size_t)r); continue; }
        return; /* 0: server closed (EOF), < 0: EAGAIN or RST */
    }
}

/* One loop turn: wait (at most cap_ms) for the loop's backend or our socket, run ready work. */
static void fc_pump(uv_loop_t *loop, fc_client *cl, int cap_ms)
{
    struct pollfd p[2] = {{uv_backend_fd(loop), POLLIN, 0}, {cl->fd, POLLIN, 0}};
    int to = uv_backend_timeout(loop);
    if (to < 0 || to > cap_ms) to = cap_ms;
    poll(p, 2, to);
    uv_run(loop, UV_RUN_NOWAIT);
    fc_drain(cl);
}

/* Bytes waiting in the server-side socket of the only connection (0 if none / not reading). */
static int fc_server_unread(srv_server *s)
{
    srv_conn *c = s->conns;
    if (!c || c->closing || !c->reading) return 0;
    uv_os_fd_t fd;
    int n = 0;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &n) != 0) return 0;
    return n;
}

static void fc_send_all(uv_loop_t *loop, srv_server *s, fc_client *cl, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(cl->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!s->conns) return; /* server gone: the rest cannot be delivered */
            fc_pump(loop, cl, 5);
            continue;
        }
        return; /* EPIPE / ECONNRESET: the server closed; stop writing */
    }
}

static size_t fc_next_piece(uint8_t mode, uint64_t *rng, const uint8_t *p, size_t n)
{
    switch (mode & 3) {
    case 0: return n;
    case 1: { size_t k = 1 + (mode >> 2); return k < n ? k : n; }
    case 2: { const uint8_t *lf = memchr(p, '\n', n); return lf ? (size_t)(lf - p) + 1 : n; }
    default: {
        *rng ^= *rng << 13; *rng ^= *rng >> 7; *rng ^= *rng << 17;
        size_t k = 1 + (size_t)(*rng % 32);
        return k < n ? k : n;
    }
    }
}

static int fc_response_cb_ok(llhttp_t *p) { return 0; }

typedef struct {
    void (*on_bytes)(const char *p, size_t n); /* every chunk received */
    int (*busy)(void);          /* 1 while the application still has work of this input */
    /* rewrites a piece just before it is sent (at most *out_cap bytes into out) */
    size_t (*transform)(const uint8_t *in, size_t n, uint8_t *out, size_t out_cap);
    int settle;                 /* after each piece, wait until no request is in flight */
} fc_opts;

/* Runs one connection carrying `data` (split by mode) against server s. */
static void fc_run(uv_loop_t *loop, srv_server *s, uint8_t mode, const uint8_t *data, size_t n,
                   const fc_opts *o)
{
    fc_client cl;
    memset(&cl, 0, sizeof cl);
    cl.on_bytes = o->on_bytes;
    cl.check = !memmem(data, n, "HEAD", 4);
    llhttp_settings_init(&cl.settings);
    cl.settings.on_message_complete = fc_response_cb_ok;
    llhttp_init(&cl.parser, HTTP_RESPONSE, &cl.settings);

    cl.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (cl.fd < 0) abort();
    int one = 1;
    setsockopt(cl.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)srv_server_port(s));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(cl.fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) abort();
    uint64_t t0 = fc_now_ms();
    while (!s->conns) {
        if (fc_now_ms() - t0 > FUZZ_CLOSE_DEADLINE_MS) { fprintf(stderr, "fuzz client: no accept\n"); abort(); }
        fc_pump(loop, &cl, 5);
    }

    uint64_t rng = 0x9e3779b97f4a7c15ULL ^ mode;
    while (n && s->conns) {
        size_t k = fc_next_piece(mode, &rng, data, n);
        if (o->transform) {
            size_t cap = k * 16 + 64;
            uint8_t *t = malloc(cap);
            if (!t) abort();
            fc_send_all(loop, s, &cl, t, o->transform(data, k, t, cap));
            free(t);
        } else {
            fc_send_all(loop, s, &cl, data, k);
        }
        data += k;
        n -= k;
        for (int i = 0; i < 16 && s->conns; i++) { /* until the server has read this piece */
            fc_pump(loop, &cl, 0);
            if (fc_server_unread(s) == 0) break;
        }
        uint64_t t1 = fc_now_ms();
        while (o->settle && s->conns && s->conns->in_flight && fc_now_ms() - t1 < 2000)
            fc_pump(loop, &cl, 5);
    }
    shutdown(cl.fd, SHUT_WR);
    t0 = fc_now_ms();
    while (s->conns || (o->busy && o->busy())) {
        if (fc_now_ms() - t0 > FUZZ_CLOSE_DEADLINE_MS) {
            fprintf(stderr, "fuzz client: connection still open %d ms after the client's EOF\n",
                    FUZZ_CLOSE_DEADLINE_MS);
            abort();
        }
        fc_pump(loop, &cl, 10);
    }
    fc_drain(&cl);
    if (cl.check) {
        llhttp_errno_t e = llhttp_finish(&cl.parser);
        if (e != HPE_OK && e != HPE_INVALID_EOF_STATE)
            fc_fail("response stream ended badly", &cl);
    }
    close(cl.fd);
}

#endif /* FUZZ_CLIENT_H */
