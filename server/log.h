/*
 * log.h — structured one-line JSON logs on stderr:
 *   {"ts":"2026-11-29T15:10:47.123Z","level":"info","event":"listening","port":8080}
 * Fields are given as a printf format producing the JSON members after "event" (or NULL);
 * strings of outside origin go through srv_log_str, which escapes control bytes. At info level
 * only counts and events are logged: never session ids or request content.
 */
#ifndef SRV_LOG_H
#define SRV_LOG_H

#include <stddef.h>

typedef enum { SRV_LOG_DEBUG = 0, SRV_LOG_INFO = 1, SRV_LOG_WARN = 2, SRV_LOG_ERROR = 3 } srv_log_level;

void srv_log_set_level(const char *name);
void srv_log(srv_log_level lvl, const char *event, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The current UTC time as the logs write it ("2026-11-29T15:10:47.123Z", 24 bytes + NUL). */
void srv_log_timestamp(char *out, size_t cap);
/* 1 when lines of level lvl are logged (log_level). */
int srv_log_enabled(srv_log_level lvl);
/* s as a JSON string body (no quotes; proto_buf_json_str: invalid UTF-8 becomes U+FFFD) into out
 * (cap bytes, always terminated, cut at a whole escape or character). */
const char *srv_log_str(const char *s, char *out, unsigned cap);

#endif /* SRV_LOG_H */
