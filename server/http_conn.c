/*
 * http_conn.c — one HTTP/1.1 connection: read, scan (C1/C6), parse with llhttp 8.1 strict, the
 * compensating checks C2–C9 in the parser callbacks, timeouts, keep-alive, pipelining and the close
 * lifecycle.
 *
 * Flow of bytes: read_cb -> conn_feed: while inside a header/trailer section, llhttp only ever sees
 * bytes the scanner has validated; in a body, everything goes to llhttp. on_message_complete pauses
 * the parser (HPE_PAUSED, docs/DESIGN.md §12); the unparsed tail is copied, reading stops, and the
 * request goes to the application. When its response ends, the tail is parsed on the next loop turn
 * (never re-entrantly from inside srv_respond / srv_stream_end), then reading resumes.
 *
 * Lifetime: three handles (tcp, timer, stall) and a reference count. The layer's reference is
 * dropped when the last handle's close callback has run; srv_conn_ref/unref add the application's.
 * on_close is delivered from the tcp close callback (never re-entrantly from an srv_* call).
 *
 * Choices worth knowing:
 * - C6 is counted by the scanner over raw bytes (request line, headers, trailers, CRLFs included),
 *   so llhttp never sees a byte past max_header_bytes and nothing beyond it is buffered.
 * - C8 is checked here (peek at the two bytes after each chunk's data, state kept across reads);
 *   llhttp 8.1 in strict mode also rejects it (HPE_STRICT), mapped to the same error code.
 * - Reading stops while a request is in flight (TCP backpressure for pipelined bytes), so a peer
 *   that leaves is noticed when a write fails (EPIPE/ECONNRESET: the next write or two of a
 *   stream) or by the send-stall timer; on_close then fires. EOF between requests closes quietly.
 * - Every close after a final response is uv_shutdown + a lingering read (discarding, at most
 *   SRV_LINGER_MS) + close, so a client still sending (413 while uploading) reads the error
 *   instead of a RST.
 * - Expect: 100-continue is answered when a body is expected and not already refused (curl
 *   otherwise waits 1 s); any other expectation is 417. HEAD responses carry no body bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dlist.h"
#include "http_internal.h"

static void srv_conn_send_error(srv_conn *c, const srv_http_error *e); /* respond + close */

enum { FEED_MORE = 0, FEED_DISPATCH, FEED_DONE };

static void on_timer(uv_timer_t *t);
static void conn_close_graceful(srv_conn *c);
static void conn_resume(srv_conn *c);

static srv_conn *conn_of(llhttp_t *p) { return (srv_conn *)p->data; }
static const srv_http_limits *lim(const srv_conn *c) { return &c->srv->limits; }

/* Records a layer error for the running llhttp callback; the caller returns HPE_USER / -1. */
static int cb_fail_ex(srv_conn *c, int status, const char *code, const char *message,
                      const char *extra_headers)
{
    if (!c->err.status) {
        c->err.status = status;
        c->err.code = code;
        c->err.message = message;
        c->err.extra_headers = extra_headers;
    }
    return HPE_USER;
}

static int cb_fail(srv_conn *c, int status, const char *code, const char *message)
{
    return cb_fail_ex(c, status, code, message, NULL);
}

/* ------------------------------------------------------------------ llhttp callbacks */

static int on_message_begin(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    proto_buf_clear(&c->url);
    c->target_path = c->target_query = NULL;
    for (int i = 0; i < HDR_COUNT; i++) {
        c->hdr_count[i] = 0;
        proto_buf_clear(&c->hdr[i]);
    }
    c->field_len = 0;
    c->field_slot = HDR_OTHER;
    c->in_trailers = 0;
    proto_buf_clear(&c->body);
    c->chunk_left = 0;
    c->crlf_expect = 0;
    c->chunk_ext_bytes = 0;
    c->ext_value_semicolon = 0;
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    srv_conn *c = conn_of(p);
    /* bounded by max_request_line: the scanner has already validated these bytes */
    if (proto_buf_try_append(&c->url, at, len))
        return cb_fail(c, 500, "out_of_memory", "out of memory");
    return 0;
}

/* C2: only HTTP/1.0 and HTTP/1.1. Checked as soon as the version is known. */
static int check_version(srv_conn *c, const llhttp_t *p)
{
    if (p->http_major == 1 && (p->http_minor == 0 || p->http_minor == 1))
        return 0;
    if (p->http_major == 2)
        return cb_fail(c, 505, "http_version_not_supported",
                       "HTTP/2 is not supported on this port; use HTTP/1.1");
    return cb_fail(c, 400, "invalid_version", "unsupported HTTP version");
}

static int on_version_complete(llhttp_t *p)
{
    return check_version(conn_of(p), p) ? -1 : 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    srv_conn *c = conn_of(p);
    for (size_t i = 0; i < len; i++) { /* C3 */
        unsigned char ch = (unsigned char)at[i];
        if (!srv_is_tchar(ch))
            return cb_fail(c, 400, "invalid_header_name", "header field name is not a token");
        if (c->field_len + i < sizeof c->field)
            c->field[c->field_len + i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    c->field_len += len;
    return 0;
}

static int on_header_field_complete(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    static const struct { const char *name; int slot; } known[] = {
        {"host", HDR_HOST},           {"content-type", HDR_CONTENT_TYPE},
        {"accept", HDR_ACCEPT},       {"authorization", HDR_AUTHORIZATION},
        {"transfer-encoding", HDR_TE}, {"expect", HDR_EXPECT},
        {"last-event-id", HDR_LAST_EVENT_ID}, {"origin", HDR_ORIGIN},
        {"x-request-id", HDR_REQUEST_ID}, {"idempotency-key", HDR_IDEMPOTENCY_KEY},
    };
    size_t n = c->field_len;
    c->field_len = 0;
    c->field_slot = HDR_OTHER;
    if (n == 0) {
        cb_fail(c, 400, "invalid_header_name", "empty header field name");
        return -1;
    }
    if (n >= sizeof c->field || c->in_trailers) /* trailers never carry framing or routing data */
        return 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strlen(known[i].name) == n && memcmp(known[i].name, c->field, n) == 0) {
            int slot = known[i].slot;
            int count = ++c->hdr_count[slot];
            c->field_slot = slot;
            if (count > 1) {
                switch (slot) {
                case HDR_HOST:
                    cb_fail(c, 400, "duplicate_host", "more than one Host header");
                    return -1;
                case HDR_TE: /* C4 */
                    cb_fail(c, 400, "duplicate_transfer_encoding",
                            "more than one Transfer-Encoding header");
                    return -1;
                case HDR_CONTENT_TYPE:
                    cb_fail(c, 400, "duplicate_content_type", "more than one Content-Type header");
                    return -1;
                case HDR_EXPECT:
                    cb_fail(c, 400, "duplicate_expect", "more than one Expect header");
                    return -1;
                case HDR_AUTHORIZATION:
                    cb_fail(c, 400, "duplicate_authorization",
                            "more than one Authorization header");
                    return -1;
                case HDR_IDEMPOTENCY_KEY:
                    cb_fail(c, 400, "duplicate_idempotency_key",
                            "more than one Idempotency-Key header");
                    return -1;
                default: /* Accept is a list: join the lines */
                    if (proto_buf_try_append(&c->hdr[slot], ", ", 2)) {
                        cb_fail(c, 500, "out_of_memory", "out of memory");
                        return -1;
                    }
                }
            }
            break;
        }
    }
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    srv_conn *c = conn_of(p);
    if (c->field_slot != HDR_OTHER && proto_buf_try_append(&c->hdr[c->field_slot], at, len))
        return cb_fail(c, 500, "out_of_memory", "out of memory");
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    int slot = c->field_slot;
    c->field_slot = HDR_OTHER;
    if (slot == HDR_OTHER)
        return 0;
    proto_buf *b = &c->hdr[slot];
    if (b->len) { /* llhttp strips leading OWS but keeps trailing OWS (B.1): trim both */
        size_t n = b->len;
        const char *v = srv_trim_ows(b->data, &n);
        memmove(b->data, v, n);
        b->len = n;
        b->data[n] = '\0';
    }
    if (slot == HDR_TE) { /* C4: a single "chunked", on HTTP/1.1 only */
        if (p->http_major == 1 && p->http_minor == 0) {
            cb_fail(c, 400, "transfer_encoding_http10", "Transfer-Encoding is not allowed in HTTP/1.0");
            return -1;
        }
        if (!srv_te_is_chunked(b->data ? b->data : "", b->len)) {
            cb_fail(c, 501, "unsupported_transfer_encoding",
                    "only Transfer-Encoding: chunked is supported");
            return -1;
        }
    }
    return 0;
}

/* The request target as path + query, in place in c->url (once, at headers complete).
 * absolute-form (RFC 9112 §3.2.2, which servers must accept): the path and query are kept. */
static void split_target(srv_conn *c)
{
    if (!c->url.data && proto_buf_try_append(&c->url, "/", 1)) {
        c->target_path = (char *)"/";
        c->target_query = (char *)"";
        return;
    }
    char *url = c->url.data;
    if (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8)) {
        char *rest = strpbrk(url + (url[4] == ':' ? 7 : 8), "/?");
        if (!rest)
            url = (char *)"/";
        else if (*rest == '?') {
            *--rest = '/';
            url = rest;
        } else
            url = rest;
    }
    char *q = strchr(url, '?');
    if (q)
        *q++ = '\0';
    c->target_path = url;
    c->target_query = q ? q : (char *)"";
}

static const char *hdr_value(const srv_conn *c, int slot)
{
    return c->hdr_count[slot] ? (c->hdr[slot].data ? c->hdr[slot].data : "") : NULL;
}

/* The request as the application sees it; the body only once it is complete. */
static void fill_request(srv_conn *c, srv_request *req, int with_body)
{
    req->method = llhttp_method_name((llhttp_method_t)c->parser.method);
    req->path = c->target_path ? c->target_path : "/";
    req->query = c->target_query ? c->target_query : "";
    req->content_type = hdr_value(c, HDR_CONTENT_TYPE);
    req->accept = hdr_value(c, HDR_ACCEPT);
    req->authorization = hdr_value(c, HDR_AUTHORIZATION);
    req->last_event_id = hdr_value(c, HDR_LAST_EVENT_ID);
    req->origin = hdr_value(c, HDR_ORIGIN);
    req->idempotency_key = hdr_value(c, HDR_IDEMPOTENCY_KEY);
    if (with_body && c->body.data)
        c->body.data[c->body.len] = '\0';
    req->body = (const uint8_t *)(with_body && c->body.data ? c->body.data : "");
    req->body_len = with_body ? c->body.len : 0;
}

static int on_headers_complete(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    if (check_version(c, p))
        return -1;
    if (p->http_minor == 1 && c->hdr_count[HDR_HOST] != 1) { /* C5 */
        cb_fail(c, 400, "missing_host", "HTTP/1.1 request without a Host header");
        return -1;
    }
    c->t_last_read = uv_now(c->srv->loop);
    split_target(c);
    int has_body = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0);
    if (has_body && c->srv->cb.on_head) {
        /* before the body is read, before any 100 Continue and before max_body: a client the
         * application refuses (a wrong API key) is never invited to upload (issue 10 item 11) */
        srv_request head;
        srv_refusal r = {0};
        fill_request(c, &head, 0);
        if (c->srv->cb.on_head(&head, &r, c->srv->app)) {
            cb_fail_ex(c, r.status, r.code, r.message, r.extra_headers);
            return -1;
        }
    }
    if (p->flags & F_CHUNKED) {
        c->phase = PH_BODY;
    } else if ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0) {
        if (p->content_length > lim(c)->max_body) {
            cb_fail(c, 413, "body_too_large", "request body exceeds max_body");
            return -1;
        }
        /* exact allocation, bounded by max_body, checked above */
        size_t want = (size_t)p->content_length + 1;
        if (c->body.cap < want) {
            char *nb = realloc(c->body.data, want);
            if (!nb) {
                cb_fail(c, 500, "out_of_memory", "out of memory");
                return -1;
            }
            c->body.data = nb;
            c->body.cap = want;
        }
        c->phase = PH_BODY;
    }
    if (c->hdr_count[HDR_EXPECT] && p->http_minor == 1) { /* RFC 9110 §10.1.1; ignored in 1.0 */
        const proto_buf *e = &c->hdr[HDR_EXPECT];
        if (!e->data || strcasecmp(e->data, "100-continue") != 0) {
            cb_fail(c, 417, "expectation_failed", "only Expect: 100-continue is supported");
            return -1;
        }
        if (c->phase == PH_BODY) { /* curl waits up to 1 s for this before sending a body */
            proto_buf b = {0};
            if (proto_buf_try_append(&b, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0)
                srv_write(c, &b);
            proto_buf_free(&b);
        }
    }
    return 0;
}

/* C8: the two bytes after a chunk's data must be CRLF. `off` is where they start in the buffer
 * given to llhttp_execute; the part beyond the buffer is checked at the next read. */
static int check_crlf_after_chunk(srv_conn *c, size_t off)
{
    c->crlf_expect = 2;
    while (c->crlf_expect && off < c->exec_len) {
        char want = c->crlf_expect == 2 ? '\r' : '\n';
        if (c->exec_base[off] != want)
            return cb_fail(c, 400, "bad_chunk_framing", "chunk data not followed by CRLF");
        c->crlf_expect--;
        off++;
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    srv_conn *c = conn_of(p);
    if (len > lim(c)->max_body || c->body.len > lim(c)->max_body - len)
        return cb_fail(c, 413, "body_too_large", "request body exceeds max_body");
    if (proto_buf_try_append(&c->body, at, len))
        return cb_fail(c, 500, "out_of_memory", "out of memory");
    if (p->flags & F_CHUNKED) {
        c->chunk_left = len >= c->chunk_left ? 0 : c->chunk_left - len;
        if (c->chunk_left == 0)
            return check_crlf_after_chunk(c, (size_t)(at + len - c->exec_base));
    }
    return 0;
}

static int on_chunk_header(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    c->chunk_ext_bytes = 0; /* C7: the limit is per chunk */
    c->chunk_left = p->content_length;
    if (p->content_length > lim(c)->max_body ||
        c->body.len > lim(c)->max_body - (size_t)p->content_length) {
        cb_fail(c, 413, "body_too_large", "request body exceeds max_body");
        return -1;
    }
    if (p->content_length == 0) { /* last chunk: the trailer section follows; scan it (C1) */
        c->last_chunk = 1;
        c->in_trailers = 1;
        return HPE_PAUSED;
    }
    return 0;
}

static int count_chunk_ext(srv_conn *c, size_t len)
{
    c->chunk_ext_bytes += len;
    if (c->chunk_ext_bytes > lim(c)->max_chunk_ext_bytes)
        return cb_fail(c, 413, "chunk_extension_too_large",
                       "chunk extensions exceed max_chunk_ext_bytes");
    return 0;
}

static int on_chunk_ext_name(llhttp_t *p, const char *at, size_t len)
{
    srv_conn *c = conn_of(p);
    c->ext_value_semicolon = 0;
    return count_chunk_ext(c, len);
}

/* llhttp 8.1 consumes the ';' that ends an unquoted chunk-ext-val and then expects CRLF, so
 * "1;a=1;b=2" is HPE_INVALID_CHUNK_SIZE although RFC 9112 §7.1.1 allows any number of
 * extensions. The value's span ends at that ';' (at[len]); its _complete callback then pauses the
 * parser, and conn_feed gives the ';' back to llhttp, whose chunk_size_otherwise state reads it as
 * the start of the next extension. (A quoted value's span ends at its closing '"', also followed
 * by the ';': llhttp handles that case itself, and conn_feed just resumes.) */
static int on_chunk_ext_value(llhttp_t *p, const char *at, size_t len)
{
    srv_conn *c = conn_of(p);
    size_t end = (size_t)(at + len - c->exec_base);
    c->ext_value_semicolon = at >= c->exec_base && end < c->exec_len && at[len] == ';';
    return count_chunk_ext(c, len);
}

static int on_chunk_ext_value_complete(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    if (!c->ext_value_semicolon)
        return 0;
    c->ext_value_semicolon = 0;
    c->ext_resume_semicolon = 1;
    return HPE_PAUSED;
}

static int on_message_complete(llhttp_t *p)
{
    srv_conn *c = conn_of(p);
    c->msg_complete = 1;
    c->keep_alive = llhttp_should_keep_alive(p);
    c->http10 = p->http_minor == 0;
    if (p->upgrade) /* C9: Upgrade / CONNECT are answered normally, then the connection closes */
        c->keep_alive = 0;
    return HPE_PAUSED;
}

void srv_conn_settings(llhttp_settings_t *s)
{
    llhttp_settings_init(s);
    s->on_message_begin = on_message_begin;
    s->on_url = on_url;
    s->on_version_complete = on_version_complete;
    s->on_header_field = on_header_field;
    s->on_header_field_complete = on_header_field_complete;
    s->on_header_value = on_header_value;
    s->on_header_value_complete = on_header_value_complete;
    s->on_headers_complete = on_headers_complete;
    s->on_body = on_body;
    s->on_chunk_header = on_chunk_header;
    s->on_chunk_extension_name = on_chunk_ext_name;
    s->on_chunk_extension_value = on_chunk_ext_value;
    s->on_chunk_extension_value_complete = on_chunk_ext_value_complete;
    s->on_message_complete = on_message_complete;
}

/* ------------------------------------------------------------------ errors from llhttp */

/* llhttp's errors as the client sees them. */
static const struct {
    enum llhttp_errno err;
    int status;
    const char *code, *message;
} PARSE_ERRORS[] = {
    {HPE_UNEXPECTED_CONTENT_LENGTH, 400, "conflicting_content_length",
     "Content-Length repeated or combined with Transfer-Encoding"},
    {HPE_INVALID_CONTENT_LENGTH, 400, "invalid_content_length", "invalid Content-Length"},
    {HPE_INVALID_CHUNK_SIZE, 400, "invalid_chunk_size", "invalid chunk size"},
    {HPE_INVALID_TRANSFER_ENCODING, 501, "unsupported_transfer_encoding",
     "only Transfer-Encoding: chunked is supported"},
    {HPE_INVALID_VERSION, 400, "invalid_version", "unsupported HTTP version"},
    {HPE_INVALID_METHOD, 400, "invalid_method", "invalid request method"},
    {HPE_INVALID_URL, 400, "invalid_url", "invalid request target"},
    {HPE_INVALID_HEADER_TOKEN, 400, "invalid_header", "invalid character in a header field"},
    {HPE_CLOSED_CONNECTION, 400, "data_after_close", "data after a Connection: close request"},
};

static void map_parse_error(srv_conn *c, enum llhttp_errno err, srv_http_error *e)
{
    if (c->err.status) {
        *e = c->err;
        return;
    }
    e->status = 400;
    e->code = "malformed_request";
    e->message = "malformed HTTP request";
    if (err == HPE_STRICT) {
        /* llhttp 8.1 reports a bad chunk extension as HPE_STRICT too; only its reason tells */
        const char *why = llhttp_get_error_reason(&c->parser);
        if (why && strstr(why, "chunk extensions")) {
            e->code = "invalid_chunk_extension";
            e->message = "chunk extension is not ;name[=token|\"quoted string\"] (no whitespace, no "
                         "backslash escapes)";
        } else {
            e->code = "bad_chunk_framing";
            e->message = "malformed chunked framing";
        }
        return;
    }
    for (size_t i = 0; i < sizeof PARSE_ERRORS / sizeof *PARSE_ERRORS; i++)
        if (PARSE_ERRORS[i].err == err) {
            e->status = PARSE_ERRORS[i].status;
            e->code = PARSE_ERRORS[i].code;
            e->message = PARSE_ERRORS[i].message;
        }
}

/* ------------------------------------------------------------------ feeding bytes */

static int save_tail(srv_conn *c, const char *data, size_t len)
{
    free(c->tail);
    c->tail = NULL;
    c->tail_len = 0;
    if (!len)
        return 0;
    c->tail = malloc(len);
    if (!c->tail)
        return UV_ENOMEM;
    memcpy(c->tail, data, len);
    c->tail_len = len;
    return 0;
}

/* Feeds bytes to the scanner and llhttp. Returns FEED_MORE (all consumed, need more),
 * FEED_DISPATCH (a request is complete, the rest saved as the tail) or FEED_DONE (an error
 * response was sent, or the connection is closing). */
/* The first byte of a request: its clocks and a fresh access record. */
static void conn_request_begins(srv_conn *c)
{
    c->phase = PH_HEADERS;
    c->t_first_byte = uv_now(c->srv->loop);
    c->t_first_byte_ns = uv_hrtime();
    c->access_pending = 1;
    c->req_bytes_in = 0;
    c->out_mark = c->bytes_queued + c->out.len;
    c->t_first_chunk_ns = 0;
    c->resp_status = 0;
    c->resp_error[0] = '\0';
    memset(&c->note, 0, sizeof c->note);
}

/* An X-Request-Id worth logging: 1-64 of [A-Za-z0-9._:-] (nothing that needs escaping). */
static const char *request_id_of(const srv_conn *c)
{
    const char *v = hdr_value(c, HDR_REQUEST_ID);
    size_t n = v ? strlen(v) : 0;
    if (n == 0 || n > 64 || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789._:-") != n)
        return NULL;
    return v;
}

/* Reports the current request to on_done once (http.h srv_access). */
static void conn_access_done(srv_conn *c, int aborted)
{
    if (!c->access_pending)
        return;
    c->access_pending = 0;
    srv_server *s = c->srv;
    if (!s->cb.on_done)
        return;
    srv_access a = {
        .method = c->url.len ? llhttp_method_name((llhttp_method_t)c->parser.method) : "-",
        .status = c->resp_status,
        .error = c->resp_error[0] ? c->resp_error : NULL,
        .aborted = aborted,
        .bytes_in = c->req_bytes_in,
        .bytes_out = c->bytes_queued + c->out.len - c->out_mark,
        .t_start_ns = c->t_first_byte_ns,
        .t_first_ns = c->t_first_chunk_ns,
        .t_end_ns = uv_hrtime(),
        .seq = s->stats.requests_total,
        .request_id = request_id_of(c),
        .remote = c->remote,
        .note = &c->note,
    };
    s->cb.on_done(c, &a, s->app);
}

static int conn_feed(srv_conn *c, const char *data, size_t len)
{
    const srv_http_limits *l = lim(c);
    while (len > 0) {
        if (c->phase == PH_IDLE)
            conn_request_begins(c);
        size_t n = len;
        if (c->scan.active) {
            srv_http_error e = {0};
            if (srv_scan_run(&c->scan, l, data, len, &n, &e) == SCAN_ERROR) {
                srv_conn_send_error(c, &e);
                return FEED_DONE;
            }
        }
        /* C8 across a read boundary: the CRLF after the previous chunk's data */
        for (size_t i = 0; c->crlf_expect && i < n; i++) {
            char want = c->crlf_expect == 2 ? '\r' : '\n';
            if (data[i] != want) {
                srv_http_error e = {400, "bad_chunk_framing", "chunk data not followed by CRLF", NULL};
                srv_conn_send_error(c, &e);
                return FEED_DONE;
            }
            c->crlf_expect--;
        }
        c->exec_base = data;
        c->exec_len = n;
        c->msg_complete = 0;
        c->last_chunk = 0;
        c->ext_resume_semicolon = 0;
        enum llhttp_errno err = llhttp_execute(&c->parser, data, n);
        const char *stop = err == HPE_OK ? NULL : llhttp_get_error_pos(&c->parser);
        c->req_bytes_in += stop ? (size_t)(stop - data) : n;
        if (err == HPE_OK) {
            data += n;
            len -= n;
            continue;
        }
        if (err == HPE_PAUSED && !c->err.status) {
            size_t used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
            if (c->msg_complete) {
                if (save_tail(c, data + used, len - used)) {
                    srv_http_error e = {500, "out_of_memory", "out of memory", NULL};
                    srv_conn_send_error(c, &e);
                    return FEED_DONE;
                }
                return FEED_DISPATCH;
            }
            if (c->last_chunk) {
                llhttp_resume(&c->parser);
                srv_scan_begin_trailers(&c->scan);
                data += used;
                len -= used;
                continue;
            }
            if (c->ext_resume_semicolon) {
                /* another chunk extension follows (on_chunk_ext_value). After an unquoted value
                 * llhttp consumed its ';': parse again from that ';'. After a quoted one it did
                 * not (its quoted_value_done state reads the ';'): go on where it stopped. */
                c->ext_resume_semicolon = 0;
                llhttp_resume(&c->parser);
                if (used >= 1 && data[used - 1] == ';')
                    used--;
                data += used;
                len -= used;
                continue;
            }
        }
        srv_http_error e = {0};
        map_parse_error(c, err, &e);
        srv_conn_send_error(c, &e);
        return FEED_DONE;
    }
    return FEED_MORE;
}

/* ------------------------------------------------------------------ timers */

static uint64_t deadline_after(uint64_t start, uint64_t ms)
{
    return ms ? start + ms : UINT64_MAX;
}

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static uint64_t conn_deadline(const srv_conn *c)
{
    const srv_http_limits *l = lim(c);
    switch (c->phase) {
    case PH_IDLE:
        return deadline_after(c->t_idle_since, l->keepalive_idle);
    case PH_HEADERS:
        return min64(deadline_after(c->t_first_byte, l->header_timeout),
                     deadline_after(c->t_first_byte, l->request_timeout));
    case PH_BODY:
        return min64(deadline_after(c->t_last_read, l->body_idle_timeout),
                     deadline_after(c->t_first_byte, l->request_timeout));
    case PH_CLOSING:
        return c->lingering ? c->t_linger_end : UINT64_MAX;
    default:
        return UINT64_MAX;
    }
}

static void conn_arm_timer(srv_conn *c)
{
    if (c->closing || c->resume_pending)
        return;
    uint64_t d = conn_deadline(c), now = uv_now(c->srv->loop);
    if (d == UINT64_MAX) {
        uv_timer_stop(&c->timer);
        return;
    }
    uv_timer_start(&c->timer, on_timer, d > now ? d - now : 0, 0);
}

static void conn_timeout(srv_conn *c)
{
    const srv_http_limits *l = lim(c);
    uint64_t now = uv_now(c->srv->loop);
    srv_http_stats *st = &c->srv->stats;
    srv_http_error e = {408, NULL, NULL, NULL};
    switch (c->phase) {
    case PH_IDLE:
        srv_conn_close_now(c); /* keepalive_idle: silent close */
        return;
    case PH_HEADERS:
    case PH_BODY:
        if (l->request_timeout && now >= c->t_first_byte + l->request_timeout) {
            st->timeouts_request++;
            e.code = "request_timeout";
            e.message = "request not received within request_timeout";
        } else if (c->phase == PH_HEADERS) {
            st->timeouts_header++;
            e.code = "header_timeout";
            e.message = "request headers not received within header_timeout";
        } else {
            st->timeouts_body++;
            e.code = "body_timeout";
            e.message = "no request body bytes within body_idle_timeout";
        }
        srv_conn_send_error(c, &e);
        return;
    case PH_CLOSING:
        if (c->lingering)
            srv_conn_close_now(c);
        return;
    default:
        return;
    }
}

/* ------------------------------------------------------------------ dispatch and resume */

static void conn_dispatch(srv_conn *c)
{
    srv_server *s = c->srv;
    c->phase = PH_IN_FLIGHT;
    c->in_flight = 1;
    /* Reading goes on (stopping and restarting it costs two epoll_ctl per request): bytes that
     * arrive while the request is in flight are kept with the tail and stop reading (on_read). */
    uv_timer_stop(&c->timer);
    c->requests++;
    c->is_head = c->parser.method == HTTP_HEAD;
    c->resp_started = 0;
    c->streaming = 0;
    s->stats.requests_total++;
    if (s->draining || (lim(c)->max_requests_per_conn > 0 && c->requests >= lim(c)->max_requests_per_conn))
        c->keep_alive = 0;

    srv_request req;
    fill_request(c, &req, 1);

    srv_conn_ref(c);
    if (s->cb.on_request)
        s->cb.on_request(c, &req, s->app);
    else
        srv_respond_error(c, 404, "not_found", "no handler");
    /* the request is valid only during on_request: give back large bodies */
    if (c->body.cap > 65536)
        proto_buf_free(&c->body);
    else
        proto_buf_clear(&c->body);
    srv_conn_unref(c);
}

static void conn_start_reading(srv_conn *c);

/* Parses `data` and dispatches/continues as needed. */
static void conn_process(srv_conn *c, const char *data, size_t len)
{
    int r = conn_feed(c, data, len);
    if (r == FEED_DISPATCH)
        conn_dispatch(c);
    else if (r == FEED_MORE) {
        if (c->peer_eof) { /* the peer half-closed in the middle of a request */
            srv_conn_close_now(c);
            return;
        }
        conn_start_reading(c);
        conn_arm_timer(c);
    }
}

static void on_timer(uv_timer_t *t)
{
    srv_conn *c = t->data;
    if (c->closing)
        return;
    if (c->resume_pending) {
        c->resume_pending = 0;
        char *tail = c->tail;
        size_t n = c->tail_len;
        c->tail = NULL;
        c->tail_len = 0;
        srv_conn_ref(c);
        conn_process(c, tail, n);
        free(tail);
        srv_conn_unref(c);
        return;
    }
    if (uv_now(c->srv->loop) >= conn_deadline(c))
        conn_timeout(c);
    else
        conn_arm_timer(c);
}

/* The response of the in-flight request is complete (or the connection should move on). */
static void conn_resume(srv_conn *c)
{
    c->resume_on_drain = 0;
    if (c->closing || c->shutting)
        return;
    if (c->srv->draining) {
        conn_close_graceful(c);
        return;
    }
    llhttp_resume(&c->parser);
    c->phase = PH_IDLE;
    c->t_idle_since = uv_now(c->srv->loop);
    srv_scan_begin_message(&c->scan);
    memset(&c->err, 0, sizeof c->err);
    if (c->tail_len) { /* pipelined bytes: parse them on the next loop turn */
        c->resume_pending = 1;
        uv_timer_start(&c->timer, on_timer, 0, 0);
        return;
    }
    if (c->peer_eof) { /* the peer half-closed: send what is queued, then close */
        conn_close_graceful(c);
        return;
    }
    conn_start_reading(c);
    conn_arm_timer(c);
}

void srv_conn_response_done(srv_conn *c)
{
    if (c->in_flight) {
        srv_hist_observe_since(&c->srv->stats.request_duration, c->t_first_byte_ns);
        conn_access_done(c, 0);
    }
    c->in_flight = 0;
    if (c->closing || c->shutting)
        return;
    if (!c->keep_alive) {
        conn_close_graceful(c);
        return;
    }
    if (srv_write_queue_size(c) > lim(c)->write_high_watermark) {
        c->resume_on_drain = 1; /* a client that does not read stops being parsed */
        return;
    }
    conn_resume(c);
}

void srv_conn_on_drained(srv_conn *c)
{
    if (c->closing)
        return;
    if (c->resume_on_drain) {
        conn_resume(c);
        return;
    }
    if (c->in_flight && c->srv->cb.on_drain)
        c->srv->cb.on_drain(c, c->srv->app);
}

/* ------------------------------------------------------------------ reading */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    srv_conn *c = h->data;
    /* One buffer per server: read_cb consumes it synchronously (tails are copied). */
    buf->base = c->srv->read_buf;
    buf->len = SRV_READ_BUF_SIZE;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    srv_conn *c = st->data;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        uv_read_stop(st);
        c->reading = 0;
        c->peer_eof = 1;
        /* EOF between requests or in the middle of one: nothing to answer. With a response
         * still to finish or send, conn_resume closes after it. */
        if (!c->in_flight && c->phase != PH_IN_FLIGHT && !c->resume_pending)
            srv_conn_close_now(c);
        return;
    }
    if (c->lingering) /* discarding after an error or Connection: close */
        return;
    if (c->phase == PH_IN_FLIGHT || c->resume_pending) {
        /* the next pipelined request while one is in flight (or its response is still queued
         * above the high watermark, or the saved tail is parsed next turn): keep the bytes after
         * the tail, stop reading (TCP backpressure), parse them when the response is done */
        char *t = realloc(c->tail, c->tail_len + (size_t)nread);
        if (!t) {
            srv_conn_close_now(c);
            return;
        }
        memcpy(t + c->tail_len, buf->base, (size_t)nread);
        c->tail = t;
        c->tail_len += (size_t)nread;
        uv_read_stop(st);
        c->reading = 0;
        return;
    }
    c->t_last_read = uv_now(c->srv->loop);
    srv_conn_ref(c);
    conn_process(c, buf->base, (size_t)nread);
    srv_conn_unref(c);
}

static void conn_start_reading(srv_conn *c)
{
    if (c->reading || c->closing || c->peer_eof)
        return;
    int r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (r) {
        srv_conn_close_now(c);
        return;
    }
    c->reading = 1;
}

/* ------------------------------------------------------------------ closing */

static void on_handle_closed(uv_handle_t *h)
{
    srv_conn *c = h->data;
    if (h == (uv_handle_t *)&c->tcp && !c->close_notified) {
        c->close_notified = 1;
        if ((c->in_flight || c->refs > 1) && c->srv->cb.on_close)
            c->srv->cb.on_close(c, c->srv->app);
    }
    if (--c->handles_open == 0) {
        srv_server *s = c->srv;
        DLIST_UNLINK(s->conns, s->conns_tail, c, prev, next);
        c->unlinked = 1;
        s->stats.connections_open--;
        srv_server_conn_gone(s);
        srv_conn_unref(c);
    }
}

static void close_handles(srv_conn *c, int reset)
{
    if (c->in_flight) /* the peer left (or a stall) before the response was complete */
        conn_access_done(c, 1);
    c->access_pending = 0; /* a request only begun is not reported */
    c->closing = 1;
    c->phase = PH_CLOSING;
    c->lingering = 0;
    c->resume_pending = 0;
    if (!reset && c->out.len && c->pending_writes == 0) {
        /* this turn's output: one non-blocking attempt, as uv_write made at once before the
         * output was coalesced; what the kernel does not take is dropped, like libuv's queue */
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned int)c->out.len);
        int r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (r > 0)
            c->srv->stats.bytes_written += (uint64_t)r;
    }
    srv_out_discard(c);
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    if (reset && uv_tcp_close_reset(&c->tcp, on_handle_closed) == 0) {
        /* closed with RST */
    } else {
        if (reset) { /* uv_tcp_close_reset refuses a handle that is shutting down */
            uv_os_fd_t fd;
            struct linger lg = {1, 0};
            if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    }
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->stall, on_handle_closed);
}

void srv_conn_close_now(srv_conn *c)
{
    if (!c->closing)
        close_handles(c, 0);
}

void srv_conn_close_reset(srv_conn *c)
{
    if (!c->closing)
        close_handles(c, 1);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    srv_conn *c = req->data;
    if (c->closing)
        return;
    if (status < 0 || c->peer_eof) {
        srv_conn_close_now(c);
        return;
    }
    /* lingering close: read and discard until EOF or SRV_LINGER_MS, so that unread request bytes
     * do not turn our close into a RST that destroys the response in flight to the client */
    c->lingering = 1;
    c->t_linger_end = uv_now(c->srv->loop) + SRV_LINGER_MS;
    conn_start_reading(c);
    conn_arm_timer(c);
}

static void conn_close_graceful(srv_conn *c)
{
    if (c->closing || c->shutting)
        return;
    c->shutting = 1;
    c->phase = PH_CLOSING;
    c->resume_pending = 0; /* a saved tail is never parsed after this */
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    uv_timer_stop(&c->timer);
    srv_flush_conn(c, 0); /* the shutdown waits for libuv's queue: put this turn's output in it */
    if (c->closing)
        return;
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown))
        srv_conn_close_now(c);
}

/* The message names the limit; add its configured value. */
static const char *error_message(srv_conn *c, const srv_http_error *e)
{
    const srv_http_limits *l = lim(c);
    const struct {
        const char *code;
        unsigned long long value;
        const char *unit;
    } limit_of[] = {
        {"header_too_large", l->max_header_bytes, " bytes"},
        {"too_many_headers", (unsigned long long)l->max_headers, ""},
        {"request_line_too_long", l->max_request_line, " bytes"},
        {"body_too_large", l->max_body, " bytes"},
        {"chunk_extension_too_large", l->max_chunk_ext_bytes, " bytes"},
        {"header_timeout", l->header_timeout, " ms"},
        {"body_timeout", l->body_idle_timeout, " ms"},
        {"request_timeout", l->request_timeout, " ms"},
    };
    for (size_t i = 0; i < sizeof limit_of / sizeof *limit_of; i++)
        if (!strcmp(e->code, limit_of[i].code)) {
            snprintf(c->errmsg, sizeof c->errmsg, "%s (%llu%s)", e->message, limit_of[i].value,
                     limit_of[i].unit);
            return c->errmsg;
        }
    return e->message;
}

static void srv_conn_send_error(srv_conn *c, const srv_http_error *e)
{
    if (c->closing || c->shutting)
        return;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    uv_timer_stop(&c->timer);
    c->keep_alive = 0;
    c->srv->stats.requests_total++;
    c->is_head = 0;
    srv_send_error_json(c, e->status, e->code, error_message(c, e), e->extra_headers);
    conn_access_done(c, 0);
    conn_close_graceful(c);
}

void srv_conn_drain(srv_conn *c)
{
    if (c->closing || c->shutting)
        return;
    if (c->phase == PH_IDLE && !c->resume_pending)
        srv_conn_close_now(c);
    /* mid-request or in flight: the response carries Connection: close, then the conn closes */
}

/* ------------------------------------------------------------------ accept */

/* c->remote: the peer as "address:port" ("[v6]:port"), for the access log. */
static void peer_name(srv_conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "";
    c->remote[0] = '\0';
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len))
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        uv_ip4_name(a, ip, sizeof ip);
        snprintf(c->remote, sizeof c->remote, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        uv_ip6_name(a, ip, sizeof ip);
        snprintf(c->remote, sizeof c->remote, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
    }
}

void srv_conn_accept(srv_server *s)
{
    srv_conn *c = calloc(1, sizeof *c);
    if (!c)
        abort(); /* internal allocation (docs/DESIGN.md §7: may abort) */
    c->srv = s;
    c->refs = 1;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    uv_timer_init(s->loop, &c->stall);
    c->tcp.data = c->timer.data = c->stall.data = c;
    c->handles_open = 3;
    DLIST_APPEND(s->conns, s->conns_tail, c, prev, next);
    s->stats.connections_open++;
    if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp)) {
        srv_conn_close_now(c);
        return;
    }
    s->stats.connections_accepted++;
    peer_name(c);
    uv_tcp_nodelay(&c->tcp, 1); /* one flushed chunk per token: no Nagle delay */
    llhttp_init(&c->parser, HTTP_REQUEST, &s->settings);
    c->parser.data = c; /* after llhttp_init, which clears the struct (B.1) */
    c->phase = PH_IDLE;
    c->t_idle_since = uv_now(s->loop);
    srv_scan_begin_message(&c->scan);
    conn_start_reading(c);
    conn_arm_timer(c);
}

/* ------------------------------------------------------------------ public: references */

void srv_conn_ref(srv_conn *c)
{
    c->refs++;
}

void srv_conn_unref(srv_conn *c)
{
    if (--c->refs > 0)
        return;
    proto_buf_free(&c->url);
    proto_buf_free(&c->body);
    proto_buf_free(&c->out);
    for (int i = 0; i < HDR_COUNT; i++)
        proto_buf_free(&c->hdr[i]);
    free(c->tail);
    free(c);
}

int srv_conn_is_closed(const srv_conn *c)
{
    return c->closing || c->shutting;
}

void srv_conn_set_user(srv_conn *c, void *user) { c->user = user; }
uint64_t srv_conn_request_start_ns(const srv_conn *c) { return c->t_first_byte_ns; }
srv_access_note *srv_conn_access_note(srv_conn *c) { return &c->note; }
void *srv_conn_get_user(const srv_conn *c) { return c->user; }
