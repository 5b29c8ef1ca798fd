/*
 * resume_client.c — one keep-alive HTTP/1.1 connection that sends the requests given on stdin one
 * at a time and times each with CLOCK_MONOTONIC: the resume benches' client (section_capacity.py,
 * section_cluster.py), so that a percentile is recurd's and the machine's, not a Python
 * interpreter's (its allocator, its GIL hand-offs, its own wake-up after a sleep).
 *
 *   stdin:  one request a line: METHOD PATH [BODY]   (BODY: the rest of the line, sent as
 *           application/json; no BODY: no body)
 *   stdout: one line a request, in order: STATUS MICROSECONDS   (the first byte written to the
 *           last byte of the response read; a failed request ends the run with exit code 1)
 *
 * Options:
 *   --port N        127.0.0.1:N (required)
 *   --rate R        paced: request i is sent at start + i/R s (absolute schedule, clock_nanosleep);
 *                   0 (default) is a closed loop: the next request as soon as the answer is read
 *   --spin          wait by polling instead of sleeping: the pacing by a busy loop on the clock
 *                   and the answer by non-blocking recv in a loop, so this process never sleeps
 *                   and the time measured has no client wake-up in it (the VM's wake-up of an
 *                   idle vCPU costs tens of µs to ms here)
 *
 * A response is read by its Content-Length or its chunked framing (the /tokens answer). Nothing
 * is checked beyond the framing and the status: the benches check the answers' contents.
 *
 * Build: cc -O2 -o resume_client resume_client.c  (the Makefile: build/bench/resume/resume_client)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES (1 << 20) /* a request line on stdin */
#define BUF_BYTES (1 << 22)      /* a response (headers and body) */

static int fd = -1, spin;
static char *buf;      /* [BUF_BYTES] bytes read from the socket */
static size_t have, at; /* bytes in buf, bytes of it consumed */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "resume_client: %s\n", what);
    exit(1);
}

/* More bytes into buf (compacting it first): blocking, or polling with --spin. */
static void fill(void)
{
    if (at > 0) {
        memmove(buf, buf + at, have - at);
        have -= at;
        at = 0;
    }
    if (have == BUF_BYTES)
        die("response larger than the buffer");
    for (;;) {
        ssize_t n = recv(fd, buf + have, BUF_BYTES - have, spin ? MSG_DONTWAIT : 0);
        if (n > 0) {
            have += (size_t)n;
            return;
        }
        if (n == 0)
            die("connection closed by the server");
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            die(strerror(errno));
    }
}

/* The next line (CRLF-terminated) of the response, NUL-terminated in place. */
static char *line(void)
{
    for (;;) {
        char *e = memmem(buf + at, have - at, "\r\n", 2);
        if (e) {
            *e = '\0';
            char *l = buf + at;
            at = (size_t)(e + 2 - buf);
            return l;
        }
        fill();
    }
}

static void skip(size_t n)
{
    while (have - at < n) {
        n -= have - at;
        at = have;
        fill();
    }
    at += n;
}

/* Read one response; its status. */
static int response(void)
{
    int status = 0;
    if (sscanf(line(), "HTTP/1.%*d %d", &status) != 1)
        die("bad status line");
    long long clen = -1;
    int chunked = 0;
    for (char *h; *(h = line());) {
        if (!strncasecmp(h, "content-length:", 15))
            clen = atoll(h + 15);
        else if (!strncasecmp(h, "transfer-encoding:", 18) && strcasestr(h, "chunked"))
            chunked = 1;
    }
    if (chunked) {
        for (;;) {
            size_t n = strtoull(line(), NULL, 16);
            skip(n);
            line(); /* the chunk's CRLF (after the last: the empty trailer line) */
            if (n == 0)
                break;
        }
    } else if (clen > 0) {
        skip((size_t)clen);
    }
    return status;
}

static void send_all(const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die(strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
}

static void wait_until(uint64_t t)
{
    if (spin) {
        while (now_ns() < t)
            ;
        return;
    }
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

int main(int argc, char **argv)
{
    int port = 0;
    double rate = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
            rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--spin"))
            spin = 1;
        else
            die("usage: resume_client --port N [--rate R] [--spin] < requests");
    }
    if (port <= 0 || port > 65535 || rate < 0)
        die("--port N (1..65535) is required; --rate R >= 0");
    buf = malloc(BUF_BYTES);
    char *in = malloc(LINE_MAX_BYTES), *req = malloc(LINE_MAX_BYTES + 512);
    if (!buf || !in || !req)
        die("no memory");
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("cannot connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint64_t start = now_ns();
    for (long i = 0; fgets(in, LINE_MAX_BYTES, stdin); i++) {
        in[strcspn(in, "\r\n")] = '\0';
        char *method = strtok(in, " "), *path = strtok(NULL, " "), *body = strtok(NULL, "");
        if (!method || !path)
            die("a request line is METHOD PATH [BODY]");
        size_t bl = body ? strlen(body) : 0;
        int n = snprintf(req, LINE_MAX_BYTES + 512,
                         "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %zu\r\n\r\n%s",
                         method, path, bl ? "Content-Type: application/json\r\n" : "", bl,
                         bl ? body : "");
        if (n < 0 || n >= LINE_MAX_BYTES + 512)
            die("request too long");
        if (rate > 0)
            wait_until(start + (uint64_t)((double)i * 1e9 / rate));
        uint64_t t0 = now_ns();
        send_all(req, (size_t)n);
        int status = response();
        uint64_t t1 = now_ns();
        printf("%d %.1f\n", status, (double)(t1 - t0) / 1e3);
    }
    fflush(stdout);
    close(fd);
    return 0;
}
