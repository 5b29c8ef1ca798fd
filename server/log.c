/* log.c — structured JSON log lines on stderr (log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static srv_log_level g_level = SRV_LOG_INFO;

void srv_log_set_level(const char *name)
{
    if (!strcmp(name, "debug")) g_level = SRV_LOG_DEBUG;
    else if (!strcmp(name, "warn")) g_level = SRV_LOG_WARN;
    else if (!strcmp(name, "error")) g_level = SRV_LOG_ERROR;
    else g_level = SRV_LOG_INFO;
}

int srv_log_enabled(srv_log_level lvl)
{
    return lvl >= g_level;
}

const char *srv_log_str(const char *s, char *out, unsigned cap)
{
    unsigned n = 0;
    if (cap == 0)
        return out;
    for (; s && *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20 || c == 0x7F) {
            n += (unsigned)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
    return out;
}

void srv_log(srv_log_level lvl, const char *event, const char *fields_fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (lvl < g_level)
        return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\",\"event\":\"%s\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, names[lvl], event);
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
