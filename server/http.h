/*
 * http.h — recurd's HTTP/1.1 layer: libuv TCP + llhttp 8.1 (strict) with the compensating checks
 * C1–C9 of docs/HARDENING.md, the header/body limits, timeouts, keep-alive, pipelining (one request in
 * flight per connection, answered in order), chunked streaming with backpressure.
 *
 * The layer knows nothing of sessions or models. It parses a request completely (body included,
 * within limits), hands it to the application's callback on the loop thread, and parses nothing
 * more on that connection until the application has finished the response (srv_respond* or
 * srv_stream_end). Everything here runs on the loop thread only.
 *
 * Ownership: the layer owns every srv_conn. The application may keep a pointer across async work
 * only while it holds a reference (srv_conn_ref / srv_conn_unref); a connection whose peer left is
 * marked closed (srv_conn_is_closed) and freed after the last unref.
 */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "histogram.h"

/* Limits of docs/HARDENING.md §1; every one configurable (server/config.c fills them). Times in ms. */
typedef struct {
    size_t max_request_line;     /* 8 KiB  -> 414 */
    size_t max_header_bytes;     /* 16 KiB -> 431 (request line + headers + trailers) */
    int max_headers;             /* 100    -> 431 */
    size_t max_body;             /* 1 MiB  -> 413 */
    size_t max_chunk_ext_bytes;  /* 16 KiB -> 413 */
    uint64_t header_timeout;     /* 10 s from the first byte -> 408, close */
    uint64_t body_idle_timeout;  /* 10 s between body reads -> 408, close */
    uint64_t request_timeout;    /* 60 s total -> 408, close */
    uint64_t keepalive_idle;     /* 5 s -> silent close */
    int max_requests_per_conn;   /* 1000 -> Connection: close */
    uint64_t send_stall_timeout; /* 60 s without write progress -> RST, on_close fires */
    size_t write_high_watermark; /* 256 KiB: srv_stream_writable() turns 0 above it */
    size_t write_low_watermark;  /* 64 KiB: on_drain fires when the queue falls below it */
    int max_connections;         /* 1024: further connections are accepted and closed at once */
    /* CORS (docs/API.md "CORS"): "" = no CORS headers; "*" = any origin; else a comma-separated
     * list of exact origins ("https://a.example,http://localhost:3000"), each echoed when a
     * request's Origin equals it. Not a limit: the response head is the HTTP layer's to write. */
    char cors_origin[512];
} srv_http_limits;

void srv_http_limits_default(srv_http_limits *l);

/* A parsed request; valid only during the on_request callback (copy what you keep). */
typedef struct {
    const char *method;          /* "GET", "POST", ... (NUL-terminated) */
    const char *path;            /* URL path without the query, NUL-terminated */
    const char *query;           /* after '?', or "" */
    const char *content_type;    /* header value (OWS trimmed) or NULL */
    const char *accept;          /* header value or NULL */
    const char *authorization;   /* header value or NULL */
    const char *last_event_id;   /* Last-Event-ID (an SSE reconnect) or NULL */
    const char *origin;          /* Origin (a browser's cross-origin request) or NULL */
    const char *idempotency_key; /* Idempotency-Key (server/idempotency.h) or NULL */
    const uint8_t *body;         /* body bytes, NUL-terminated past body_len (for cJSON) */
    size_t body_len;
} srv_request;

typedef struct srv_conn srv_conn;
typedef struct srv_server srv_server;

/* What the application adds to a request's access record (srv_conn_access_note); reset by the
 * layer when the next request begins. */
typedef struct {
    const char *route;       /* static route template ("/v1/sessions/{id}/tokens"), NULL = none */
    char session[13];        /* short hash of the session id (never the id), "" = none */
    uint64_t tokens_in;      /* tokens the request folded */
    uint64_t tokens_out;     /* tokens it generated */
} srv_access_note;

/* One finished request, for the access log (on_done). Strings are valid during the call only.
 * Times are uv_hrtime (ns). */
typedef struct {
    const char *method;      /* "GET", ...; "-" when the request line was never parsed */
    int status;              /* of the response; 0 when none began (the peer left first) */
    const char *error;       /* the code of a JSON error response (the rule it broke), or NULL */
    int aborted;             /* the connection closed before the response was complete */
    uint64_t bytes_in;       /* request bytes read: request line, headers, body, framing */
    uint64_t bytes_out;      /* response bytes produced: head, body, chunk framing */
    uint64_t t_start_ns;     /* the request's first byte */
    uint64_t t_first_ns;     /* a stream's first chunk (its first token), 0 = not a stream */
    uint64_t t_end_ns;       /* the response's last byte was queued (or the close) */
    uint64_t seq;            /* requests since the server started, this one included */
    const char *request_id;  /* the request's X-Request-Id (1-64 of [A-Za-z0-9._:-]) or NULL */
    const char *remote;      /* peer "address:port" ("[v6]:port"), "" when unknown */
    const srv_access_note *note;
} srv_access;

/* A refusal the application decides from a request's head alone (on_head). Every string static. */
typedef struct {
    int status;
    const char *code;          /* snake_case */
    const char *message;
    const char *extra_headers; /* "Name: value\r\n..." or NULL */
} srv_refusal;

typedef struct {
    /* A complete request. The application must eventually finish exactly one response. */
    void (*on_request)(srv_conn *c, const srv_request *req, void *app);
    /* The peer left, a stall timeout hit, or the server is closing, while the application still
     * holds a reference: stop producing for this connection (its writes are now dropped). */
    void (*on_close)(srv_conn *c, void *app);
    /* The write queue fell below the low watermark after srv_stream_writable() returned 0. */
    void (*on_drain)(srv_conn *c, void *app);
    /* Optional. The head of a request whose body is still to come (head->body is empty), before
     * a byte of the body is read and before any 100 Continue: return 0 to go on, or fill *r and
     * return nonzero to answer *r at once; the body is then never read (the connection closes
     * after the answer). Requests without a body go straight to on_request. */
    int (*on_head)(const srv_request *head, srv_refusal *r, void *app);
    /* Optional. A request is finished: its response is complete, the layer refused it (400,
     * 408, 413, ... before the application saw it), or the connection closed while it was in
     * flight (aborted). Once per request that reached the application or was refused; never for
     * a connection that closes between requests. Must not call srv_* functions on c. */
    void (*on_done)(srv_conn *c, const srv_access *a, void *app);
} srv_http_callbacks;

/* Listen on host:port (port 0 picks a free one; srv_server_port tells which). */
int srv_server_start(uv_loop_t *loop, const char *host, int port, const srv_http_limits *limits,
                     const srv_http_callbacks *cb, void *app, srv_server **out);
int srv_server_port(const srv_server *s);
/* Stop accepting; idle keep-alive connections are closed; connections with a request in flight
 * finish it (the application ends its streams) and are then closed. done(s) runs once every
 * connection is gone and the listener is closed. */
void srv_server_drain(srv_server *s, void (*done)(srv_server *s, void *app));
/* Close every connection now (second SIGTERM) and the listener. */
void srv_server_close_all(srv_server *s);
void srv_server_free(srv_server *s); /* after drain/close_all has completed */

/* Connection reference while async work points at it. */
void srv_conn_ref(srv_conn *c);
void srv_conn_unref(srv_conn *c);
int srv_conn_is_closed(const srv_conn *c);
void srv_conn_set_user(srv_conn *c, void *user);
void *srv_conn_get_user(const srv_conn *c);
/* uv_hrtime of the first byte of the connection's current request. */
uint64_t srv_conn_request_start_ns(const srv_conn *c);
/* The current request's access note, for the application to fill (on_done reports it). */
srv_access_note *srv_conn_access_note(srv_conn *c);

/* A complete response with Content-Length. extra_headers: "Name: value\r\n..." or NULL. */
void srv_respond(srv_conn *c, int status, const char *content_type, const void *body, size_t len,
                 const char *extra_headers);
/* The JSON error of docs/DESIGN.md §5: {"error":{"code":code,"message":message}}. */
void srv_respond_error(srv_conn *c, int status, const char *code, const char *message);
/* The same with extra headers ("Retry-After: 1\r\n" for a 503), or NULL. The message is JSON-escaped;
 * pass a fixed text naming the limit, never raw request bytes. */
void srv_respond_error_ex(srv_conn *c, int status, const char *code, const char *message,
                          const char *extra_headers);

/* Chunked streaming: begin, one flushed chunk per srv_stream_write, end. */
void srv_stream_begin(srv_conn *c, int status, const char *content_type);
void srv_stream_write(srv_conn *c, const void *data, size_t len);
int srv_stream_writable(const srv_conn *c); /* 0 when above the high watermark */
void srv_stream_end(srv_conn *c);

/* Counters for /metrics (counts only). */
typedef struct {
    uint64_t connections_accepted, connections_open, connections_rejected;
    uint64_t requests_total;
    uint64_t responses_by_class[6]; /* [1..5] = 1xx..5xx */
    uint64_t timeouts_header, timeouts_body, timeouts_request, stalls;
    uint64_t bytes_written;
    srv_hist request_duration; /* first byte of a request to its response's end, seconds */
} srv_http_stats;
const srv_http_stats *srv_server_stats(const srv_server *s);

#endif /* SRV_HTTP_H */
