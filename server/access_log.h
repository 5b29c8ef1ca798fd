/*
 * access_log.h — one JSON line per finished HTTP request (docs/OPERATIONS.md "Access log"), to a
 * file or to stderr, written by a thread of its own: a slow disk (or a stderr nobody reads) never
 * stalls the loop.
 *
 * The loop thread formats a line (srv_access_log_format) and appends it to a buffer of at most
 * access_log_buffer_bytes; the writer thread takes the whole buffer and writes it, while the loop
 * fills a second one. A line that does not fit in the buffer (the output is slower than the
 * requests for that long) is dropped and counted (recurd_access_log_dropped_total): requests
 * never wait for the log. SIGHUP (srv_access_log_reopen) makes the writer open the path again —
 * logrotate's rename + HUP: lines still buffered go to the new file, none is lost.
 *
 * A line never holds a session id (a capability) or an API key: the session is a short hash,
 * the route the template ("/v1/sessions/{id}/tokens"), never the raw path.
 */
#ifndef SRV_ACCESS_LOG_H
#define SRV_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "http.h"

typedef struct srv_access_log srv_access_log;

typedef struct {
    uint64_t lines;        /* lines taken into the buffer */
    uint64_t dropped;      /* lines dropped: the buffer was full, or their write failed */
    uint64_t write_errors; /* failed writes and reopens */
    uint64_t reopens;      /* successful reopens (SIGHUP) */
} srv_access_log_stats;

/* Opens path (O_WRONLY|O_APPEND|O_CREAT, mode 0640) or "-" (stderr) and starts the writer
 * thread; buffer_bytes bounds the lines waiting to be written. 0, or -1 with err filled. The
 * caller frees it with srv_access_log_close. */
int srv_access_log_open(const char *path, size_t buffer_bytes, srv_access_log **out, char *err,
                        size_t errlen);
/* The JSON line of a (newline included) into line[cap]; its length, 0 when it does not fit.
 * id_prefix names this process in generated request ids. */
size_t srv_access_log_format(const srv_access *a, const char *id_prefix, char *line, size_t cap);
/* Formats and buffers one line (loop thread), or drops it. l may be NULL (no access log). */
void srv_access_log_record(srv_access_log *l, const srv_access *a);
/* Reopen the path at the writer's next turn (any thread; a signal handler's uv callback). */
void srv_access_log_reopen(srv_access_log *l);
/* Writes what is buffered, stops the writer, closes the file, frees l (NULL is a no-op). A
 * writer still blocked after 2 s (output stalled) is abandoned: logged, l not freed, the process
 * exits without those lines. */
void srv_access_log_close(srv_access_log *l);
srv_access_log_stats srv_access_log_get_stats(const srv_access_log *l);
/* Its /metrics lines (nothing when l is NULL). */
void srv_access_log_metrics(const srv_access_log *l, proto_buf *b);

/* The short hash the access log gives a session id (12 hex digits of FNV-1a 64 into out[13]). */
void srv_access_session_hash(const char *id, char out[13]);

#endif /* SRV_ACCESS_LOG_H */
