/*
 * openai_requests.h — decoding and validating the bodies of the OpenAI routes (docs/API.md
 * "OpenAI API"): POST /v1/completions and POST /v1/chat/completions.
 *
 * As requests.h: pure functions of the body and the limits (thread-safe), a body is decoded and
 * validated completely before anything runs, strings keep every byte. What differs is the error
 * shape: every refusal is OpenAI's {"error":{"message","type","param","code"}} with status 400
 * (404 for an unknown model is the route's), and it names the field in "param":
 *   - not strict JSON, duplicate keys, not an object        -> code invalid_json / duplicate_key
 *   - a field OpenAI defines that recurd does not implement -> code unsupported_parameter
 *     (tools, tool_choice, functions, function_call, response_format other than {"type":"text"},
 *     suffix, best_of, ...: never silently ignored)
 *   - a field nobody defines                                -> code unknown_parameter
 *   - a field of the wrong type or value                    -> code invalid_value
 *   - a prompt over max_tokens_per_request tokens           -> code too_many_tokens
 * A member whose value is null is absent (OpenAI's clients send null for "not given").
 */
#ifndef PROTO_OPENAI_REQUESTS_H
#define PROTO_OPENAI_REQUESTS_H

#include <stddef.h>
#include <stdint.h>

#include "requests.h"

#define PROTO_OAI_MAX_STOP 4            /* stop sequences (OpenAI's limit) */
#define PROTO_OAI_MAX_TOP_LOGPROBS 20   /* top_logprobs (chat) / logprobs (completions) */
#define PROTO_OAI_MAX_LOGIT_BIAS 300    /* logit_bias entries (OpenAI's limit) */
#define PROTO_OAI_DEFAULT_MAX_TOKENS 16 /* completions' default max_tokens, as OpenAI's */
#define PROTO_OAI_MODEL_MAX 256         /* bytes of "model" */

typedef struct {
    proto_error err;    /* status 400, code (snake_case), message */
    char param[48];     /* the field, or "" (JSON null) */
} proto_oai_error;

/* One message of a chat, as the template renders it (role and content unescaped, owned). */
typedef struct proto_chat_msg {
    char *role;         /* "system", "user" or "assistant" */
    size_t role_len;
    char *content;      /* the text, parts concatenated */
    size_t content_len;
} proto_chat_msg;

/* One prompt: its token ids (the text encoded with the model's tokenizer, or given as ids). */
typedef struct {
    int32_t *tokens;    /* [n], malloc'd, owned */
    size_t n;
} proto_oai_prompt;

typedef struct {
    int chat;                      /* 1: /v1/chat/completions */
    char model[PROTO_OAI_MODEL_MAX + 1];
    size_t model_len;
    proto_oai_prompt *prompts;     /* [n_prompts]: chat has 1, the rendered conversation */
    size_t n_prompts;
    proto_generate_req gen;        /* max_tokens, temperature, top_k, top_p, seed, stop */
    int has_max_tokens;            /* 0: the route's default (16 for completions, the
                                    * request limit for chat) */
    int n;                         /* choices per prompt, >= 1 */
    int stream, include_usage;
    int logprobs;                  /* 1: report logprobs */
    int top_logprobs;              /* candidates per token, 0..PROTO_OAI_MAX_TOP_LOGPROBS */
    int echo;                      /* completions: the prompt's text before the completion */
    float presence_penalty, frequency_penalty; /* [-2, 2] */
    size_t n_bias;
    int32_t bias_ids[PROTO_OAI_MAX_LOGIT_BIAS];
    float bias[PROTO_OAI_MAX_LOGIT_BIAS];     /* [-100, 100] */
} proto_oai_req;

/* A chat conversation -> prompt text (the served model's chat template, server/openai_chat.c):
 * 0 with *text malloc'd (free()) of *len bytes, or -1 with err filled. */
typedef int proto_render_fn(const void *ctx, const proto_chat_msg *msgs, size_t n, char **text,
                            size_t *len, char *err, size_t errlen);

/* Decode a /v1/completions (chat = 0) or /v1/chat/completions (chat = 1) body. Text is encoded
 * with lim->encode (bytes when NULL); completion prompts with the tokenizer's special tokens
 * (BOS), chat prompts without (the template writes them). A chat is rendered with render(rctx).
 * Returns 0, or -1 with *err filled; on success free with proto_oai_req_free. */
int proto_decode_oai_req(const uint8_t *body, size_t len, int chat, const proto_limits *lim,
                         proto_render_fn *render, const void *rctx, proto_oai_req *out,
                         proto_oai_error *err);
void proto_oai_req_free(proto_oai_req *r);

#endif /* PROTO_OPENAI_REQUESTS_H */
