/*
 * hello_server.c — the minimal libuv + llhttp responder that recurd's HTTP overhead is compared
 * with (issue 5, scenario 5). No model, no scheduler, no worker thread: one loop thread that
 * parses a request and answers with the same shapes recurd does, so that recur-load can drive it
 * unchanged and check every answer:
 *
 *   GET  /v1/model                 {"name":"hello","vocab_size":V,...,"state_bytes":0}
 *   POST /v1/sessions              201 {"id":"<16 hex>","tokens_seen":0,"state_bytes":0}
 *   POST /v1/sessions/{id}/tokens  chunked NDJSON, one line per token (uniform logprobs), done line
 *   POST /v1/sessions/{id}/generate  chunked NDJSON, max_tokens lines of token 0, done line
 *   DELETE /v1/sessions/{id}       204
 *   GET  /metrics                  a few counters
 *   anything else                  200 "hello\n"
 *
 * Build: cc -O2 -isystem /usr/share/include/llhttp hello_server.c build/libllhttp.a -luv -lm
 * Run:   hello_server [--port N] [--vocab V]   (prints {"port":N} on stderr; port 0 picks one)
 */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <llhttp.h>

typedef struct {
    uv_tcp_t tcp;
    llhttp_t parser;
    char url[512];
    size_t url_len;
    char body[65536];
    size_t body_len;
    int keep_alive;
    int closing;
} conn;

typedef struct {
    uv_write_t req;
    char data[];
} wreq;

static uv_loop_t *loop;
static uv_tcp_t server;
static llhttp_settings_t settings;
static int vocab = 256;
static uint64_t *seen;       /* tokens_seen per session, indexed by id - 1 */
static size_t n_sessions, cap_sessions;
static uint64_t requests;

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

static void close_conn(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w);
}

static void on_shutdown(uv_shutdown_t *s, int status)
{
    (void)status;
    close_conn(s->handle->data);
    free(s);
}

static void write_bytes(conn *c, const char *p, size_t n)
{
    wreq *w = malloc(sizeof *w + n);
    memcpy(w->data, p, n);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
        free(w);
        close_conn(c);
    }
}

/* Growable response text. */
typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
}

static void respond(conn *c, int status, const char *reason, const char *ctype, const char *body)
{
    sbuf b = {0};
    size_t n = body ? strlen(body) : 0;
    sb_printf(&b, "HTTP/1.1 %d %s\r\n", status, reason);
    if (ctype)
        sb_printf(&b, "Content-Type: %s\r\n", ctype);
    if (status != 204)
        sb_printf(&b, "Content-Length: %zu\r\n", n);
    sb_printf(&b, "%s\r\n%s", c->keep_alive ? "" : "Connection: close\r\n", body ? body : "");
    write_bytes(c, b.p, b.len);
    free(b.p);
}

/* One chunk of a chunked body holding exactly one NDJSON line. */
static void chunk_line(sbuf *b, const char *line)
{
    size_t n = strlen(line);
    sb_printf(b, "%zx\r\n%s\n\r\n", n + 1, line);
}

static long session_of(const char *url, const char **rest)
{
    const char *p = url + strlen("/v1/sessions/");
    char *end;
    unsigned long long id = strtoull(p, &end, 16);
    if (end - p != 16 || id == 0 || id > n_sessions)
        return -1;
    *rest = end;
    return (long)id - 1;
}

/* The numbers of "tokens":[...] (no JSON library: the bench measures HTTP, not cJSON). */
static int parse_tokens(const char *body, int *out, int cap)
{
    const char *p = strstr(body, "\"tokens\"");
    if (!p || !(p = strchr(p, '[')))
        return -1;
    int n = 0;
    p++;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ']')
            return n;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= vocab || n >= cap)
            return -1;
        out[n++] = (int)v;
        p = end;
    }
}

static void handle(conn *c)
{
    requests++;
    c->url[c->url_len] = '\0';
    c->body[c->body_len] = '\0';
    const char *method = llhttp_method_name(c->parser.method);
    const char *rest = NULL;
    char tmp[512];
    if (strcmp(c->url, "/v1/model") == 0) {
        snprintf(tmp, sizeof tmp,
                 "{\"name\":\"hello\",\"vocab_size\":%d,\"d_model\":0,\"n_layers\":0,\"n_heads\":0,"
                 "\"mixers\":[],\"state_bytes\":0}",
                 vocab);
        respond(c, 200, "OK", "application/json", tmp);
    } else if (strcmp(c->url, "/v1/sessions") == 0 && strcmp(method, "POST") == 0) {
        if (n_sessions == cap_sessions) {
            cap_sessions = cap_sessions ? cap_sessions * 2 : 1024;
            seen = realloc(seen, cap_sessions * sizeof *seen);
        }
        int toks[1024];
        int n = c->body_len ? parse_tokens(c->body, toks, 1024) : 0;
        seen[n_sessions++] = n > 0 ? (uint64_t)n : 0;
        snprintf(tmp, sizeof tmp, "{\"id\":\"%016zx\",\"tokens_seen\":%d,\"state_bytes\":0}", n_sessions,
                 n > 0 ? n : 0);
        respond(c, 201, "Created", "application/json", tmp);
    } else if (strncmp(c->url, "/v1/sessions/", 13) == 0) {
        long s = session_of(c->url, &rest);
        if (s < 0) {
            respond(c, 404, "Not Found", "application/json",
                    "{\"error\":{\"code\":\"not_found\",\"message\":\"no such session\"}}");
        } else if (strcmp(rest, "") == 0 && strcmp(method, "DELETE") == 0) {
            respond(c, 204, "No Content", NULL, NULL);
        } else if (strcmp(method, "POST") == 0 &&
                   (strcmp(rest, "/tokens") == 0 || strcmp(rest, "/generate") == 0)) {
            int toks[1024], n;
            int gen = strcmp(rest, "/generate") == 0;
            if (gen) {
                const char *m = strstr(c->body, "\"max_tokens\"");
                n = m ? atoi(strchr(m, ':') + 1) : 16;
                if (n < 0 || n > 1024)
                    n = -1;
                for (int i = 0; i < n; i++)
                    toks[i] = 0;
            } else {
                n = parse_tokens(c->body, toks, 1024);
            }
            if (n < 0) {
                respond(c, 422, "Unprocessable Content", "application/json",
                        "{\"error\":{\"code\":\"invalid_token\",\"message\":\"bad tokens\"}}");
                return;
            }
            double lp = -log((double)vocab);
            sbuf b = {0};
            sb_printf(&b, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                          "Transfer-Encoding: chunked\r\n%s\r\n",
                      c->keep_alive ? "" : "Connection: close\r\n");
            for (int i = 0; i < n; i++) {
                uint64_t pos = seen[s]++;
                if (gen)
                    snprintf(tmp, sizeof tmp, "{\"pos\":%llu,\"token\":0,\"text\":\"\\u0000\",\"logprob\":%.9g}",
                             (unsigned long long)pos, lp);
                else if (pos == 0)
                    snprintf(tmp, sizeof tmp,
                             "{\"pos\":%llu,\"token\":%d,\"logprob\":null,\"top\":[{\"token\":0,\"logprob\":%.9g}]}",
                             (unsigned long long)pos, toks[i], lp);
                else
                    snprintf(tmp, sizeof tmp,
                             "{\"pos\":%llu,\"token\":%d,\"logprob\":%.9g,\"top\":[{\"token\":0,\"logprob\":%.9g}]}",
                             (unsigned long long)pos, toks[i], lp, lp);
                chunk_line(&b, tmp);
            }
            snprintf(tmp, sizeof tmp, "{\"done\":true,%s\"tokens_seen\":%llu}", gen ? "\"reason\":\"length\"," : "",
                     (unsigned long long)seen[s]);
            chunk_line(&b, tmp);
            sb_printf(&b, "0\r\n\r\n");
            write_bytes(c, b.p, b.len);
            free(b.p);
        } else {
            snprintf(tmp, sizeof tmp, "{\"id\":\"%016lx\",\"tokens_seen\":%llu,\"state_bytes\":0}", s + 1,
                     (unsigned long long)seen[s]);
            respond(c, 200, "OK", "application/json", tmp);
        }
    } else if (strcmp(c->url, "/metrics") == 0) {
        snprintf(tmp, sizeof tmp, "# TYPE hello_requests_total counter\nhello_requests_total %llu\nhello_sessions %zu\n",
                 (unsigned long long)requests, n_sessions);
        respond(c, 200, "OK", "text/plain; version=0.0.4", tmp);
    } else {
        respond(c, 200, "OK", "text/plain", "hello\n");
    }
}

static int on_message_begin(llhttp_t *p)
{
    conn *c = p->data;
    c->url_len = c->body_len = 0;
    return 0;
}

/* Appends n bytes to a fixed buffer of cap bytes holding *len; -1 (the parser stops) when they do
 * not fit with room for a NUL. */
static int append(char *buf, size_t cap, size_t *len, const char *at, size_t n)
{
    if (*len + n >= cap)
        return -1;
    memcpy(buf + *len, at, n);
    *len += n;
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n)
{
    conn *c = p->data;
    return append(c->url, sizeof c->url, &c->url_len, at, n);
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    conn *c = p->data;
    return append(c->body, sizeof c->body, &c->body_len, at, n);
}

static int on_message_complete(llhttp_t *p)
{
    conn *c = p->data;
    c->keep_alive = llhttp_should_keep_alive(p);
    handle(c);
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char buf[65536];
    (void)h;
    (void)sz;
    b->base = buf;
    b->len = sizeof buf;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    conn *c = s->data;
    if (n == 0)
        return;
    if (n < 0) {
        close_conn(c);
        return;
    }
    if (llhttp_execute(&c->parser, b->base, (size_t)n) != HPE_OK || !c->keep_alive) {
        uv_read_stop(s);
        uv_shutdown_t *sd = malloc(sizeof *sd);
        if (uv_shutdown(sd, s, on_shutdown) < 0) {
            free(sd);
            close_conn(c);
        }
    }
}

static void on_connection(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    conn *c = calloc(1, sizeof *c);
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    c->keep_alive = 1;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        close_conn(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &settings);
    c->parser.data = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_signal(uv_signal_t *s, int sig)
{
    (void)sig;
    uv_stop(s->loop);
}

int main(int argc, char **argv)
{
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
            vocab = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: hello_server [--port N] [--vocab V]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    llhttp_settings_init(&settings);
    settings.on_message_begin = on_message_begin;
    settings.on_url = on_url;
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    uv_tcp_init(loop, &server);
    if (uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0) || uv_listen((uv_stream_t *)&server, 1024, on_connection)) {
        fprintf(stderr, "hello_server: cannot listen on port %d\n", port);
        return 1;
    }
    struct sockaddr_in bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
    fprintf(stderr, "{\"msg\":\"listening\",\"port\":%d}\n", ntohs(bound.sin_port));
    fflush(stderr);
    uv_signal_t sigterm, sigint;
    uv_signal_init(loop, &sigterm);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_signal_init(loop, &sigint);
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
