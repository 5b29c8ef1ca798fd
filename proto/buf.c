/* buf.c — growable byte buffer and exact JSON number/string output (buf.h). */
#include "buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

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

int proto_buf_try_reserve(proto_buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len)
        return -1;
    size_t need = b->len + extra + 1; /* + NUL */
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int proto_buf_try_append(proto_buf *b, const void *p, size_t n)
{
    if (proto_buf_try_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* Room for extra more bytes + NUL, or abort. */
static void proto_buf_reserve(proto_buf *b, size_t extra)
{
    if (proto_buf_try_reserve(b, extra))
        abort();
}

void proto_buf_append(proto_buf *b, const void *p, size_t n)
{
    if (proto_buf_try_append(b, p, n))
        abort();
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

/* "%.9g" of v without printf for 1e-4 <= |v| < 1e9 (every logprob the streams carry): there the
 * nine significant digits are n = rint(|v| * 10^k), k = 8 - exponent in [0, 12], and that
 * product is exact in double (a 24-bit significand times 5^k < 2^28 needs at most 52 bits), so
 * rint rounds the exact value half-to-even, as glibc's printf does: the same string. Other values
 * go to snprintf. Returns the length written to out (>= 32 bytes). */
static int format_g9(char *out, float f)
{
    static const double P10[13] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                   1e11, 1e12};
    double v = f, a = fabs(v);
    if (!(a >= 1e-4 && a < 1e9))
        return snprintf(out, 32, "%.9g", v);
    int e = 8;
    while (e > -4 && a < P10[e + 4] * 1e-4) /* largest e with 10^e <= a, give or take one */
        e--;
    double n = rint(a * P10[8 - e]);
    if (n >= 1e9) { /* a rounded up to the next power of ten, or e was one too small */
        e++;
        n = rint(a * P10[8 - e]);
    } else if (n < 1e8) {
        if (e == -4)
            return snprintf(out, 32, "%.9g", v);
        e--;
        n = rint(a * P10[8 - e]);
    }
    if (n >= 1e9 || n < 1e8 || e > 8)
        return snprintf(out, 32, "%.9g", v);
    char d[9];
    uint32_t u = (uint32_t)n;
    for (int i = 8; i >= 0; i--) {
        d[i] = (char)('0' + u % 10);
        u /= 10;
    }
    int nd = 9;
    while (nd > 1 && d[nd - 1] == '0' && nd > e + 1) /* %g drops trailing fraction zeros */
        nd--;
    char *p = out;
    if (v < 0)
        *p++ = '-';
    if (e >= 0) {
        for (int i = 0; i <= e; i++)
            *p++ = d[i];
        if (nd > e + 1) {
            *p++ = '.';
            for (int i = e + 1; i < nd; i++)
                *p++ = d[i];
        }
    } else {
        *p++ = '0';
        *p++ = '.';
        for (int i = -1; i > e; i--)
            *p++ = '0';
        for (int i = 0; i < nd; i++)
            *p++ = d[i];
    }
    return (int)(p - out);
}

void proto_buf_float(proto_buf *b, float v)
{
    if (!isfinite(v)) {
        proto_buf_append(b, "null", 4);
        return;
    }
    char tmp[32];
    int n = format_g9(tmp, v);
    proto_buf_append(b, tmp, (size_t)n);
}

int proto_buf_try_json_str(proto_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    int r = proto_buf_try_reserve(b, n + 2) || proto_buf_try_append(b, "\"", 1);
    size_t i = 0;
    while (!r && i < n) {
        unsigned c = u[i];
        if (c >= 0x80) {
            size_t l = proto_utf8_seq(u + i, n - i);
            r = l ? proto_buf_try_append(b, u + i, l) : proto_buf_try_append(b, "\xEF\xBF\xBD", 3);
            i += l ? l : 1;
            continue;
        }
        char esc[6] = {'\\', (char)c};
        switch (c) {
        case '"': case '\\': r = proto_buf_try_append(b, esc, 2); break;
        case '\n': esc[1] = 'n'; r = proto_buf_try_append(b, esc, 2); break;
        case '\r': esc[1] = 'r'; r = proto_buf_try_append(b, esc, 2); break;
        case '\t': esc[1] = 't'; r = proto_buf_try_append(b, esc, 2); break;
        default:
            if (c < 0x20 || c == 0x7F) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                r = proto_buf_try_append(b, esc, 6);
            } else {
                r = proto_buf_try_append(b, &u[i], 1);
            }
        }
        i++;
    }
    return r || proto_buf_try_append(b, "\"", 1) ? -1 : 0;
}

void proto_buf_json_str(proto_buf *b, const char *s, size_t n)
{
    if (proto_buf_try_json_str(b, s, n))
        abort();
}
