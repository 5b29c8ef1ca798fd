/*
 * http_internal.h — private structures shared by the http_*.c files (the HTTP layer of http.h).
 * Nothing outside server/http_*.c and tests/unit/test_http.c should include this.
 *
 * Files:
 *   http_server.c    listener, accept, max_connections, drain / close_all, stats, default limits
 *   http_conn.c      one connection: read, C1 scan + llhttp, callbacks (C2-C8), timers, keep-alive,
 *                    pipelining, close lifecycle and reference count
 *   http_checks.c    pure helpers: the C1/C6 header-section scanner, tchar, Transfer-Encoding value,
 *                    JSON string escaping, reason phrases
 *   http_response.c  status line + headers, Content-Length responses, chunked streaming, write queue
 *                    accounting (watermarks, on_drain), send-stall timer
 */
#ifndef SRV_HTTP_INTERNAL_H
#define SRV_HTTP_INTERNAL_H

#include <llhttp.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "http.h"

/* After an error response the write side is shut down and the read side drained (discarded) for
 * at most this long, so that the client reads the error instead of a RST caused by unread data
 * (nginx's lingering close). */
#define SRV_LINGER_MS 2000
/* Bytes of the next pipelined request(s) kept while a request is in flight. Reading stops while a
 * request is in flight, so this is at most one read's worth. */
#define SRV_READ_BUF_SIZE 65536

/* Byte buffers are proto_buf (proto/buf.h), through its non-aborting proto_buf_try_* calls:
 * what a peer sends must not abort the daemon when memory runs out. */

/* ------------------------------------------------------------------ C1/C6 scanner (http_checks.c) */
/* Scans the header section (request line .. blank line) or the trailer section byte by byte,
 * keeping its state across reads. Rejects CR not followed by LF, LF not preceded by CR, NUL, a
 * line beginning with SP/HTAB (obs-fold), and enforces max_request_line, max_header_bytes (request
 * line + headers + trailers of one message) and max_headers (header + trailer lines). */
typedef enum { SCAN_LINE_START = 0, SCAN_IN_LINE, SCAN_SAW_CR } srv_scan_state;

typedef struct {
    srv_scan_state state;
    int active;        /* 1 while inside a header or trailer section */
    int in_request_line;
    int started;       /* a byte of the request line was seen (leading empty lines are skipped) */
    size_t line_len;   /* bytes of the current line, CRLF excluded */
    size_t total;      /* bytes of header + trailer sections of this message */
    int lines;         /* header + trailer field lines of this message */
} srv_scan;

typedef enum {
    SCAN_MORE = 0,     /* every byte was validated, section not finished */
    SCAN_END,          /* the section ended; *used = bytes up to and including its final LF */
    SCAN_ERROR         /* *err describes the violation; *used = offset of the offending byte */
} srv_scan_result;

typedef struct {
    int status;
    const char *code;    /* snake_case, static */
    const char *message; /* static */
    const char *extra_headers; /* static "Name: value\r\n..." or NULL */
} srv_http_error;

void srv_scan_begin_message(srv_scan *s);  /* before a request line */
void srv_scan_begin_trailers(srv_scan *s); /* after the last chunk's size line */
srv_scan_result srv_scan_run(srv_scan *s, const srv_http_limits *l, const char *data, size_t len,
                             size_t *used, srv_http_error *err);

/* RFC 9110 §5.6.2 tchar. */
int srv_is_tchar(unsigned char ch);
/* 1 when the value, OWS trimmed, is exactly "chunked" (ASCII case-insensitive). */
int srv_te_is_chunked(const char *v, size_t n);
/* Trims leading/trailing SP/HTAB in place (returns the new start, updates *n). */
const char *srv_trim_ows(const char *v, size_t *n);
/* Appends s as the inside of a JSON string (quotes not included): escapes ", \, control bytes,
 * and replaces bytes that are not valid UTF-8 by U+FFFD. 0 or UV_ENOMEM. */
const char *srv_reason_phrase(int status);

/* ------------------------------------------------------------------ server and connection */
typedef enum {
    PH_IDLE = 0,   /* between requests, no byte of the next one seen */
    PH_HEADERS,    /* request line / headers being received */
    PH_BODY,       /* body being received */
    PH_IN_FLIGHT,  /* handed to the application; parsing paused until its response ends */
    PH_CLOSING     /* final response queued: shutting down / lingering / closing */
} srv_phase;

/* Named header slots we keep the values of. */
enum { HDR_OTHER = 0, HDR_HOST, HDR_CONTENT_TYPE, HDR_ACCEPT, HDR_AUTHORIZATION, HDR_TE, HDR_EXPECT,
       HDR_LAST_EVENT_ID, HDR_ORIGIN, HDR_REQUEST_ID, HDR_IDEMPOTENCY_KEY, HDR_COUNT };

struct srv_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;       /* read-side deadlines (keepalive / header / body / request / linger),
                             * and the deferred resume after a response (0 ms) */
    uv_timer_t stall;       /* send_stall_timeout while writes are pending */
    uv_shutdown_t shutdown_req;
    srv_server *srv;
    srv_conn *prev, *next;  /* srv->conns */
    void *user;

    int refs;               /* 1 for the layer (released when all handles are closed) + app refs */
    int handles_open;       /* of tcp, timer, stall */
    unsigned closing : 1;   /* conn_close* called: no more reads or writes */
    unsigned close_notified : 1;
    unsigned reading : 1;
    unsigned lingering : 1;
    unsigned shutting : 1;
    unsigned peer_eof : 1;
    unsigned resume_pending : 1;   /* response finished: parse the saved tail next loop turn */
    unsigned resume_on_drain : 1;  /* ... once the write queue is below the low watermark */
    unsigned above_high : 1;       /* queue went above high water: on_drain owed */
    unsigned unlinked : 1;
    unsigned in_flight : 1;        /* request handed to the app, its response not finished */
    unsigned access_pending : 1;   /* a request began and on_done has not reported it yet */

    srv_phase phase;
    llhttp_t parser;
    srv_scan scan;
    uint64_t t_first_byte;  /* uv_now of the first byte of the current request */
    uint64_t t_first_byte_ns; /* the same, uv_hrtime */
    uint64_t t_last_read;   /* uv_now of the last read (body idle) */
    uint64_t t_idle_since;  /* uv_now when the connection became idle (keepalive) */
    uint64_t t_linger_end;

    /* unparsed bytes saved when parsing paused (the next pipelined request) */
    char *tail;
    size_t tail_len;

    /* ---- per-request state, reset in on_message_begin */
    proto_buf url;
    char *target_path;       /* in url: the path of the request target (split at headers complete) */
    char *target_query;      /* in url: after '?', or "" */
    char field[24];          /* current header name (lowercased prefix) */
    size_t field_len;
    int field_slot;          /* HDR_* of the current header */
    int hdr_count[HDR_COUNT];
    proto_buf hdr[HDR_COUNT];  /* values of the named headers (OWS trimmed at complete) */
    int in_trailers;
    proto_buf body;
    uint64_t chunk_left;     /* bytes of the current chunk's data still expected */
    int crlf_expect;         /* C8: bytes of CRLF still to check after a chunk's data (0..2) */
    size_t chunk_ext_bytes;  /* C7 */
    int ext_value_semicolon; /* the chunk-ext-val just seen ended at a ';' (http_conn.c) */
    int ext_resume_semicolon; /* parser paused there: resume from that ';' */
    const char *exec_base;   /* data passed to the running llhttp_execute */
    size_t exec_len;
    int msg_complete;        /* on_message_complete seen during this execute */
    int last_chunk;          /* on_chunk_header with size 0 seen during this execute */
    srv_http_error err;      /* set by a callback before returning HPE_USER */

    /* ---- response state */
    int keep_alive;          /* for the response in progress */
    int http10;              /* request was HTTP/1.0 */
    int is_head;             /* HEAD: headers only, no body bytes */
    char errmsg[192];        /* error message naming the limit and its value */
    int resp_started;        /* status line queued */
    int streaming;           /* chunked stream begun */
    int stream_raw;          /* HTTP/1.0 stream: no chunk framing, ends by close */
    int requests;            /* requests read on this connection */
    size_t pending_writes;   /* uv_write requests not yet called back */
    uint64_t bytes_queued;   /* every byte ever given to uv_write */
    uint64_t stall_mark;     /* bytes the kernel had accepted at the last progress seen */
    uint64_t last_progress;  /* uv_now of that progress */

    /* ---- the access record of the current request (http.h srv_access; reset when it begins) */
    uint64_t req_bytes_in;   /* raw request bytes parsed */
    uint64_t out_mark;       /* bytes_queued + out.len when it began: bytes_out is the growth */
    uint64_t t_first_chunk_ns; /* a stream's first chunk, 0 = none */
    int resp_status;         /* status of the response begun, 0 = none */
    char resp_error[48];     /* code of a JSON error response, "" = none */
    srv_access_note note;    /* the application's part (srv_conn_access_note) */
    char remote[64];         /* peer "address:port", filled at accept */

    /* ---- output coalescing: bytes produced during one loop turn, written with one syscall at
     * the end of the turn (srv_flush_all from the server's prepare/check handles). Each chunk is
     * still framed on its own; only the syscalls are merged. */
    proto_buf out;
    srv_conn *flush_next;    /* srv->flush_list */
    int in_flush_list;
};

struct srv_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listener_open;
    int port;
    srv_http_limits limits;
    srv_http_callbacks cb;
    void *app;
    llhttp_settings_t settings;
    srv_conn *conns, *conns_tail; /* open connections, oldest first (dlist.h) */
    int draining;
    int free_pending;
    void (*drain_done)(srv_server *s, void *app);
    int drain_done_called;
    srv_http_stats stats;
    char *read_buf;          /* SRV_READ_BUF_SIZE, shared by every connection of this server */
    int read_buf_busy;
    /* connections with unwritten output; flushed after the I/O callbacks of a loop turn (check)
     * and before the loop blocks (prepare: output made by timers or close callbacks) */
    srv_conn *flush_list;
    uv_prepare_t flush_prepare;
    uv_check_t flush_check;
    int flush_handles_open;
};

/* http_conn.c */
void srv_conn_settings(llhttp_settings_t *s);   /* the llhttp callbacks of a connection */
void srv_conn_accept(srv_server *s);           /* called by the listener callback */
void srv_conn_close_now(srv_conn *c);          /* uv_close everything; on_close if the app cares */
void srv_conn_close_reset(srv_conn *c);        /* same with RST */
void srv_conn_response_done(srv_conn *c);      /* the application finished its response */
void srv_conn_on_drained(srv_conn *c);         /* write queue fell below low water */
void srv_conn_drain(srv_conn *c);              /* server drain: close if idle, else close after */


/* http_server.c */
void srv_server_conn_gone(srv_server *s);      /* a connection's handles are all closed */

/* http_response.c */
void srv_send_error_json(srv_conn *c, int status, const char *code, const char *message,
                         const char *extra_headers);
int srv_write(srv_conn *c, proto_buf *owned);    /* queue bytes (ownership taken); 0 or uv error */
void srv_flush_conn(srv_conn *c, int notify);   /* write c->out now (notify: on_drained allowed) */
void srv_flush_all(srv_server *s);              /* every connection of the flush list */
void srv_out_discard(srv_conn *c);              /* closing: drop unwritten output */
size_t srv_write_queue_size(const srv_conn *c);

#endif /* SRV_HTTP_INTERNAL_H */
