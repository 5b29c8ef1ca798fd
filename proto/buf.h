/*
 * buf.h — a growable byte buffer and the JSON output helpers built on it.
 *
 * Responses are written with these instead of cJSON_Print so that every float is printed
 * exactly ("%.9g" round-trips float32) and no NaN or Inf ever reaches JSON (printed as null).
 * Out of memory aborts (docs/DESIGN.md §7: internal allocations may abort; sizes that come from
 * a request are checked against limits before anything is allocated); the proto_buf_try_*
 * variants report it instead, for the HTTP layer's buffers.
 */
#ifndef PROTO_BUF_H
#define PROTO_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;   /* NUL-terminated when len > 0 or after any append; owned */
    size_t len;
    size_t cap;
} proto_buf;

void proto_buf_init(proto_buf *b);
void proto_buf_free(proto_buf *b);        /* releases memory; b is empty and reusable */
void proto_buf_clear(proto_buf *b);       /* len = 0, keeps capacity */
void proto_buf_append(proto_buf *b, const void *p, size_t n);
/* The same without aborting, for buffers whose size a peer drives (the HTTP layer): 0, or -1
 * when memory ran out (b is unchanged). */
int proto_buf_try_reserve(proto_buf *b, size_t extra);
int proto_buf_try_append(proto_buf *b, const void *p, size_t n);
void proto_buf_puts(proto_buf *b, const char *s);
void proto_buf_printf(proto_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A JSON number for a float32 value: "%.9g" (exact), or null when not finite. */
void proto_buf_float(proto_buf *b, float v);
/* A JSON string literal (with quotes) for n bytes of s: ", \, and control bytes escaped;
 * bytes >= 0x80 are copied when they form valid UTF-8, else replaced by U+FFFD, so the output
 * is always valid UTF-8 JSON. */
void proto_buf_json_str(proto_buf *b, const char *s, size_t n);
/* The same, 0 or -1 when memory ran out (b then holds a partial literal). */
int proto_buf_try_json_str(proto_buf *b, const char *s, size_t n);

#endif /* PROTO_BUF_H */
