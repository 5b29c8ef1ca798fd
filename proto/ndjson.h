/*
 * ndjson.h — the streamed lines of /tokens and /generate (docs/DESIGN.md §5), NDJSON or SSE framing.
 *
 * Every line is one JSON object followed by "\n" (NDJSON); in SSE framing the same object is
 * sent as "data: {...}\n\n" and the stream ends with "data: [DONE]\n\n". In SSE a token's event
 * carries "id: <pos>" and the last ({"done":true}) event "id: done", so a client that reconnects
 * sends Last-Event-ID (the routes answer that with 204, never a second run). Floats use "%.9g"
 * (exact for float32) and a non-finite value is written as null, never as NaN.
 */
#ifndef PROTO_NDJSON_H
#define PROTO_NDJSON_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

typedef enum { PROTO_FRAME_NDJSON = 0, PROTO_FRAME_SSE = 1 } proto_framing;

/* Content-Type of a stream in this framing. */
const char *proto_frame_content_type(proto_framing f);
/* The end of the first whole line (NDJSON) or event (SSE) in [p, end), or end. */
const char *proto_frame_next(const char *p, const char *end, proto_framing f);

/* /tokens line: {"pos":P,"token":T,"logprob":L|null,"top":[{"token":t,"logprob":l},...]}.
 * has_logprob 0 writes null (a session's very first token). top_ids/top_lps [n_top]. */
void proto_fold_line(proto_buf *b, proto_framing f, uint64_t pos, int32_t token, int has_logprob,
                     float logprob, const int32_t *top_ids, const float *top_lps, int n_top);
/* /generate line: {"pos":P,"token":T,"text":"...","logprob":L}. text [text_len] is the UTF-8
 * text this token makes final (server/gen_text.h; may be empty). */
void proto_gen_line(proto_buf *b, proto_framing f, uint64_t pos, int32_t token, const char *text,
                    size_t text_len, float logprob);
/* A long fold's progress line (its "progress" field): {"progress":true,"folded":F,"of":N,
 * "tokens_seen":S} — F of the request's N tokens folded, the session now at S. */
void proto_fold_progress(proto_buf *b, proto_framing f, uint64_t folded, uint64_t of,
                         uint64_t tokens_seen);
/* Last line of /tokens: {"done":true,"tokens_seen":N}, with ,"checkpoint":"<id>" when
 * checkpoint is not NULL (a checkpoint taken at the end, server/checkpoints.h). */
void proto_fold_done(proto_buf *b, proto_framing f, uint64_t tokens_seen, const char *checkpoint);
/* Last line of /generate: {"done":true,"reason":"...","tokens_seen":N}, plus "data: [DONE]"
 * in SSE framing. text [text_len] > 0 (the text a cancelled stream still held back) is written
 * as "text" after "reason"; text_len 0 writes no "text". With ,"checkpoint":"<id>" when
 * checkpoint is not NULL. */
void proto_gen_done(proto_buf *b, proto_framing f, const char *reason, const char *text,
                    size_t text_len, uint64_t tokens_seen, const char *checkpoint);
/* An error in the middle of a stream (the status line is already sent):
 * {"error":{"code":...,"message":...}} as a line. */
void proto_stream_error(proto_buf *b, proto_framing f, const char *code, const char *message);
/* A stored final line (a JSON object, json[len]) framed as a stream's last line: what an
 * Idempotency-Key replay answers (server/idempotency.h). */
void proto_final_line(proto_buf *b, proto_framing f, const char *json, size_t len);

#endif /* PROTO_NDJSON_H */
