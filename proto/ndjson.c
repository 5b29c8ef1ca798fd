/* ndjson.c — NDJSON / SSE stream lines (ndjson.h). */
#include "ndjson.h"

#include <stdlib.h>
#include <string.h>

#include "responses.h"

const char *proto_frame_content_type(proto_framing f)
{
    return f == PROTO_FRAME_SSE ? "text/event-stream" : "application/x-ndjson";
}

/* Decimal integers without printf (these lines are written once per token). */
static void put_u64(proto_buf *b, unsigned long long v)
{
    char tmp[24], *e = tmp + sizeof tmp, *q = e;
    do {
        *--q = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    proto_buf_append(b, q, (size_t)(e - q));
}

static void put_int(proto_buf *b, int v)
{
    if (v < 0) {
        proto_buf_append(b, "-", 1);
        put_u64(b, (unsigned long long)(-(long long)v));
    } else {
        put_u64(b, (unsigned long long)v);
    }
}

static void begin(proto_buf *b, proto_framing f)
{
    if (f == PROTO_FRAME_SSE)
        proto_buf_append(b, "data: ", 6);
}

/* An SSE event with an id: "id: <pos>" for a token's event, "id: done" for the last one. */
static void begin_id(proto_buf *b, proto_framing f, const uint64_t *pos)
{
    if (f != PROTO_FRAME_SSE)
        return;
    if (pos) {
        proto_buf_append(b, "id: ", 4);
        put_u64(b, (unsigned long long)*pos);
        proto_buf_append(b, "\n", 1);
    } else {
        proto_buf_append(b, "id: done\n", 9);
    }
    begin(b, f);
}

const char *proto_frame_next(const char *p, const char *end, proto_framing f)
{
    if (f == PROTO_FRAME_SSE) {
        const char *e = memmem(p, (size_t)(end - p), "\n\n", 2);
        return e ? e + 2 : end;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl ? nl + 1 : end;
}

static void end(proto_buf *b, proto_framing f)
{
    if (f == PROTO_FRAME_SSE)
        proto_buf_append(b, "\n\n", 2);
    else
        proto_buf_append(b, "\n", 1);
}

/* A token's line up to its first field after "token": {"pos":P,"token":T */
static void token_head(proto_buf *b, proto_framing f, uint64_t pos, int32_t token)
{
    begin_id(b, f, &pos);
    proto_buf_append(b, "{\"pos\":", 7);
    put_u64(b, (unsigned long long)pos);
    proto_buf_append(b, ",\"token\":", 9);
    put_int(b, (int)token);
}

void proto_fold_line(proto_buf *b, proto_framing f, uint64_t pos, int32_t token, int has_logprob,
                     float logprob, const int32_t *top_ids, const float *top_lps, int n_top)
{
    token_head(b, f, pos, token);
    proto_buf_append(b, ",\"logprob\":", 11);
    if (has_logprob)
        proto_buf_float(b, logprob);
    else
        proto_buf_append(b, "null", 4);
    proto_buf_append(b, ",\"top\":[", 8);
    for (int i = 0; i < n_top; i++) {
        if (i)
            proto_buf_append(b, ",", 1);
        proto_buf_append(b, "{\"token\":", 9);
        put_int(b, (int)top_ids[i]);
        proto_buf_append(b, ",\"logprob\":", 11);
        proto_buf_float(b, top_lps[i]);
        proto_buf_append(b, "}", 1);
    }
    proto_buf_append(b, "]}", 2);
    end(b, f);
}

void proto_gen_line(proto_buf *b, proto_framing f, uint64_t pos, int32_t token, const char *text,
                    size_t text_len, float logprob)
{
    token_head(b, f, pos, token);
    proto_buf_append(b, ",\"text\":", 8);
    proto_buf_json_str(b, text, text_len);
    proto_buf_append(b, ",\"logprob\":", 11);
    proto_buf_float(b, logprob);
    proto_buf_append(b, "}", 1);
    end(b, f);
}

/* ,"checkpoint":"<id>" when a checkpoint was taken at the end (ids are hex: no escaping). */
static void put_checkpoint(proto_buf *b, const char *checkpoint)
{
    if (checkpoint)
        proto_buf_printf(b, ",\"checkpoint\":\"%s\"", checkpoint);
}

void proto_fold_progress(proto_buf *b, proto_framing f, uint64_t folded, uint64_t of,
                         uint64_t tokens_seen)
{
    begin_id(b, f, NULL);
    proto_buf_puts(b, "{\"progress\":true,\"folded\":");
    put_u64(b, (unsigned long long)folded);
    proto_buf_puts(b, ",\"of\":");
    put_u64(b, (unsigned long long)of);
    proto_buf_puts(b, ",\"tokens_seen\":");
    put_u64(b, (unsigned long long)tokens_seen);
    proto_buf_append(b, "}", 1);
    end(b, f);
}

void proto_fold_done(proto_buf *b, proto_framing f, uint64_t tokens_seen, const char *checkpoint)
{
    begin_id(b, f, NULL);
    proto_buf_append(b, "{\"done\":true,\"tokens_seen\":", 27);
    put_u64(b, (unsigned long long)tokens_seen);
    put_checkpoint(b, checkpoint);
    proto_buf_append(b, "}", 1);
    end(b, f);
    if (f == PROTO_FRAME_SSE)
        proto_buf_puts(b, "data: [DONE]\n\n");
}

void proto_gen_done(proto_buf *b, proto_framing f, const char *reason, const char *text,
                    size_t text_len, uint64_t tokens_seen, const char *checkpoint)
{
    begin_id(b, f, NULL);
    proto_buf_puts(b, "{\"done\":true,\"reason\":");
    proto_buf_json_str(b, reason, strlen(reason));
    if (text_len) {
        proto_buf_puts(b, ",\"text\":");
        proto_buf_json_str(b, text, text_len);
    }
    proto_buf_printf(b, ",\"tokens_seen\":%llu", (unsigned long long)tokens_seen);
    put_checkpoint(b, checkpoint);
    proto_buf_puts(b, "}");
    end(b, f);
    if (f == PROTO_FRAME_SSE)
        proto_buf_puts(b, "data: [DONE]\n\n");
}

void proto_stream_error(proto_buf *b, proto_framing f, const char *code, const char *message)
{
    begin(b, f);
    if (proto_error_json(b, code, message) != 0)
        abort(); /* out of memory, as proto_buf_append */
    end(b, f);
}

void proto_final_line(proto_buf *b, proto_framing f, const char *json, size_t len)
{
    begin_id(b, f, NULL);
    proto_buf_append(b, json, len);
    end(b, f);
    if (f == PROTO_FRAME_SSE)
        proto_buf_puts(b, "data: [DONE]\n\n");
}
