/* log.c — structured JSON log lines on stderr (log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "utf8.h"

static srv_log_level g_level = SRV_LOG_INFO;

void srv_log_set_level(const char *name)
{
    if (!strcmp(name, "debug")) g_level = SRV_LOG_DEBUG;
    else if (!strcmp(name, "warn")) g_level = SRV_LOG_WARN;
    else if (!strcmp(name, "error")) g_level = SRV_LOG_ERROR;
    else g_level = SRV_LOG_INFO;
}

const char *srv_log_str(const char *s, char *out, unsigned cap)
{
    if (cap == 0)
        return out;
    proto_buf b; /* the one escaper (proto/buf.c), then cut at a whole escape or character */
    proto_buf_init(&b);
    proto_buf_json_str(&b, s ? s : "", s ? strlen(s) : 0);
    const char *p = b.data + 1;
    size_t len = b.len - 2, n = 0; /* without the quotes */
    while (n < len) {
        size_t u = p[n] == '\\' ? (p[n + 1] == 'u' ? 6 : 2)
                                 : (size_t)proto_utf8_lead_len((unsigned char)p[n]);
        if (n + u > cap - 1)
            break;
        n += u;
    }
    memcpy(out, p, n);
    out[n] = '\0';
    proto_buf_free(&b);
    return out;
}

/* n decimal digits of v, zero-padded, at p. */
static void put_digits(char *p, unsigned v, int n)
{
    while (n-- > 0) {
        p[n] = (char)('0' + v % 10);
        v /= 10;
    }
}

void srv_log_timestamp(char *out, size_t cap)
{
    /* by hand, the date once a second per thread: snprintf of seven fields cost ~1 us, and the
     * access log stamps every request */
    static __thread time_t cached_sec = -1;
    static __thread char cached[20]; /* "2026-11-29T15:10:47" */
    if (cap < 25) {
        if (cap)
            out[0] = '\0';
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != cached_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        memcpy(cached, "0000-00-00T00:00:00", 20);
        put_digits(cached, (unsigned)(tm.tm_year + 1900) % 10000, 4);
        put_digits(cached + 5, (unsigned)tm.tm_mon + 1, 2);
        put_digits(cached + 8, (unsigned)tm.tm_mday, 2);
        put_digits(cached + 11, (unsigned)tm.tm_hour, 2);
        put_digits(cached + 14, (unsigned)tm.tm_min, 2);
        put_digits(cached + 17, (unsigned)tm.tm_sec, 2);
        cached_sec = ts.tv_sec;
    }
    memcpy(out, cached, 19);
    out[19] = '.';
    put_digits(out + 20, (unsigned)(ts.tv_nsec / 1000000), 3);
    out[23] = 'Z';
    out[24] = '\0';
}

int srv_log_enabled(srv_log_level lvl)
{
    return lvl >= g_level;
}

void srv_log(srv_log_level lvl, const char *event, const char *fields_fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (lvl < g_level)
        return;
    char line[2048], ts[32];
    srv_log_timestamp(ts, sizeof ts);
    int n = snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":\"%s\"", ts,
                     names[lvl], event);
    if (fields_fmt && n > 0 && (size_t)n < sizeof line - 4) {
        line[n++] = ',';
        va_list ap;
        va_start(ap, fields_fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 3, fields_fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
        if ((size_t)n > sizeof line - 3)
            n = (int)sizeof line - 3;
    }
    line[n++] = '}';
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
    fflush(stderr);
}
