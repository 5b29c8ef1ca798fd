/*
 * errf.h — the error-message helper config.c and persist.c share (internal to server/).
 */
#ifndef RECURD_ERRF_H
#define RECURD_ERRF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* vsnprintf the message into err[n]; returns -1, so a failing path can `return srv_errf(...)`. */
static inline int srv_errf(char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int srv_errf(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

#endif /* RECURD_ERRF_H */
