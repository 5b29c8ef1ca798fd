/*
 * openai_responses.h — the JSON of the OpenAI routes' answers (docs/API.md "OpenAI API"):
 * completion and chat completion objects, their stream chunks, usage, logprobs, the model list
 * and OpenAI's error object. Written with proto_buf (exact floats, valid UTF-8 always).
 */
#ifndef PROTO_OPENAI_RESPONSES_H
#define PROTO_OPENAI_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}; param or code NULL or
 * "" are written null. */
void proto_oai_error_json(proto_buf *b, const char *message, const char *type, const char *param,
                          const char *code);

/* What every completion object and chunk starts with. */
typedef struct {
    const char *id;          /* "cmpl-..." / "chatcmpl-..." */
    uint64_t created;        /* Unix seconds */
    const char *model;
    const char *fingerprint; /* "system_fingerprint" */
    int chat;
} proto_oai_head;

/* {"id","object","created","model","system_fingerprint","choices":[ — the caller writes the
 * choices, then proto_oai_object_end. object: chat.completion / text_completion, or the
 * chunk's (chat.completion.chunk / text_completion) when chunk is 1. */
void proto_oai_object_begin(proto_buf *b, const proto_oai_head *h, int chunk);
/* ] then ,"usage":{...} when usage (else ,"usage":null when usage_null), then }. */
typedef struct {
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
} proto_oai_usage;
void proto_oai_object_end(proto_buf *b, const proto_oai_usage *usage, int usage_null);

/* One token's logprob, with its candidates. text: the token's text alone. */
typedef struct {
    const char *text;
    size_t len;
    float logprob;
} proto_oai_cand;
typedef struct {
    proto_oai_cand tok;
    const proto_oai_cand *top; /* [n_top], highest first */
    int n_top;
    size_t text_offset;        /* completions: where the token's text starts in the choice text */
} proto_oai_lp;

/* Chat: {"content":[{"token","logprob","bytes":[...],"top_logprobs":[...]}...],"refusal":null}.
 * Completions: {"tokens":[...],"token_logprobs":[...],"top_logprobs":[{...}]|null,
 * "text_offset":[...]} (a candidate whose text repeats an earlier one's is left out of its
 * object: JSON object keys must differ). */
void proto_oai_logprobs_json(proto_buf *b, int chat, const proto_oai_lp *lps, size_t n,
                             int with_top);

/* One choice of a completion object or chunk (after proto_oai_object_begin; i > 0 writes the
 * comma). Chat: "message" ({"role":"assistant","content":text}) or, in a chunk, "delta"
 * (role when with_role, content when text is not NULL). logprobs_json: already written JSON
 * or NULL (null). finish: NULL writes null. */
void proto_oai_choice_json(proto_buf *b, const proto_oai_head *h, int chunk, int i, int index,
                           const char *text, size_t len, int with_role, const char *logprobs_json,
                           size_t logprobs_len, const char *finish);

/* SSE framing of one JSON object already in b from `start`: "data: " before it, "\n\n" after. */
void proto_oai_sse_wrap(proto_buf *b, size_t start);
/* The stream's end: "data: [DONE]\n\n". */
void proto_oai_sse_done(proto_buf *b);

/* GET /v1/models/{id}: {"id","object":"model","created","owned_by":"recurd"}; /v1/models:
 * {"object":"list","data":[that]}. */
void proto_oai_model_json(proto_buf *b, const char *name, uint64_t created);
void proto_oai_models_json(proto_buf *b, const char *name, uint64_t created);

#endif /* PROTO_OPENAI_RESPONSES_H */
