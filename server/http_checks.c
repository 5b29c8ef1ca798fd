/*
 * http_checks.c — pure helpers of the HTTP layer: the C1/C6 header-section scanner, RFC 9110 token
 * and Transfer-Encoding checks (C3, C4) and reason phrases. No libuv, no
 * llhttp state: everything here is testable on byte strings.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_internal.h"

/* ------------------------------------------------------------------ C1 / C6 scanner */

void srv_scan_begin_message(srv_scan *s)
{
    memset(s, 0, sizeof *s);
    s->active = 1;
    s->in_request_line = 1;
}

void srv_scan_begin_trailers(srv_scan *s)
{
    /* total and lines carry over: max_header_bytes / max_headers cover headers + trailers */
    s->state = SCAN_LINE_START;
    s->active = 1;
    s->in_request_line = 0;
    s->started = 1;
    s->line_len = 0;
}

static srv_scan_result scan_fail(srv_http_error *err, int status, const char *code, const char *msg,
                                 size_t at, size_t *used)
{
    err->status = status;
    err->code = code;
    err->message = msg;
    *used = at;
    return SCAN_ERROR;
}

srv_scan_result srv_scan_run(srv_scan *s, const srv_http_limits *l, const char *data, size_t len,
                             size_t *used, srv_http_error *err)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)data[i];
        if (++s->total > l->max_header_bytes)
            return scan_fail(err, 431, "header_too_large",
                             "request header section exceeds max_header_bytes", i, used);
        if (ch == 0)
            return scan_fail(err, 400, "invalid_header_byte", "NUL byte in the header section", i,
                             used);
        if (s->state == SCAN_SAW_CR) {
            if (ch != '\n')
                return scan_fail(err, 400, "bare_cr", "CR not followed by LF in the header section",
                                 i, used);
            /* end of a line */
            if (s->line_len == 0) {
                if (!s->started) { /* empty line before the request line: RFC 9112 §2.2 allows it */
                    s->state = SCAN_LINE_START;
                    continue;
                }
                s->active = 0;
                *used = i + 1;
                return SCAN_END;
            }
            if (s->in_request_line) {
                s->in_request_line = 0;
            } else if (++s->lines > l->max_headers) {
                return scan_fail(err, 431, "too_many_headers",
                                 "request has more header fields than max_headers", i, used);
            }
            s->line_len = 0;
            s->state = SCAN_LINE_START;
            continue;
        }
        if (ch == '\r') {
            s->state = SCAN_SAW_CR;
            continue;
        }
        if (ch == '\n')
            return scan_fail(err, 400, "bare_lf", "LF not preceded by CR in the header section", i,
                             used);
        if (s->state == SCAN_LINE_START && (ch == ' ' || ch == '\t')) {
            if (s->started)
                return scan_fail(err, 400, "obs_fold",
                                 "header line begins with whitespace (obs-fold is not accepted)", i,
                                 used);
            return scan_fail(err, 400, "bad_request_line", "request line begins with whitespace",
                             i, used);
        }
        s->started = 1;
        s->state = SCAN_IN_LINE;
        s->line_len++;
        if (s->in_request_line && s->line_len > l->max_request_line)
            return scan_fail(err, 414, "request_line_too_long",
                             "request line exceeds max_request_line", i, used);
    }
    *used = len;
    return SCAN_MORE;
}

/* ------------------------------------------------------------------ tokens */

int srv_is_tchar(unsigned char ch)
{
    /* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" /
     *         "~" / DIGIT / ALPHA */
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
        return 1;
    return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

const char *srv_trim_ows(const char *v, size_t *n)
{
    size_t len = *n;
    while (len && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    *n = len;
    return v;
}

int srv_te_is_chunked(const char *v, size_t n)
{
    v = srv_trim_ows(v, &n);
    return n == 7 && strncasecmp(v, "chunked", 7) == 0;
}

/* ------------------------------------------------------------------ reason phrases */

const char *srv_reason_phrase(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: break;
    }
    if (status >= 200 && status < 300) return "OK";
    if (status >= 400 && status < 500) return "Client Error";
    if (status >= 500 && status < 600) return "Server Error";
    return "Unknown";
}
