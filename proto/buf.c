/* buf.c — growable byte buffer and exact JSON number/string output (buf.h). */
#include "buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void proto_buf_init(proto_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void proto_buf_free(proto_buf *b)
{
    free(b->data);
    proto_buf_init(b);
}

void proto_buf_clear(proto_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void proto_buf_reserve(proto_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1; /* + NUL */
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        abort();
    b->data = p;
    b->cap = cap;
}

void proto_buf_append(proto_buf *b, const void *p, size_t n)
{
    proto_buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void proto_buf_puts(proto_buf *b, const char *s)
{
    proto_buf_append(b, s, strlen(s));
}

void proto_buf_printf(proto_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        proto_buf_append(b, small, (size_t)n);
        return;
    }
    proto_buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void proto_buf_float(proto_buf *b, float v)
{
    if (!isfinite(v)) {
        proto_buf_append(b, "null", 4);
        return;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.9g", (double)v);
    proto_buf_append(b, tmp, (size_t)n);
}

/* Length of the valid UTF-8 sequence starting at s (at most n bytes), or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; min = 0x10000; }
    else return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

void proto_buf_json_str(proto_buf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    proto_buf_reserve(b, n + 2);
    proto_buf_append(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x80) {
            size_t l = utf8_seq_len(u + i, n - i);
            if (l == 0) {
                proto_buf_append(b, "\xEF\xBF\xBD", 3);
                i++;
            } else {
                proto_buf_append(b, u + i, l);
                i += l;
            }
            continue;
        }
        switch (c) {
        case '"': proto_buf_append(b, "\\\"", 2); break;
        case '\\': proto_buf_append(b, "\\\\", 2); break;
        case '\n': proto_buf_append(b, "\\n", 2); break;
        case '\r': proto_buf_append(b, "\\r", 2); break;
        case '\t': proto_buf_append(b, "\\t", 2); break;
        default:
            if (c < 0x20 || c == 0x7F)
                proto_buf_printf(b, "\\u%04x", c);
            else
                proto_buf_append(b, &u[i], 1);
        }
        i++;
    }
    proto_buf_append(b, "\"", 1);
}
