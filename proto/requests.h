/*
 * requests.h — decoding and validating the JSON request bodies of docs/DESIGN.md §5.
 *
 * Pure functions of the body (thread-safe, no global state): a request is decoded and validated
 * completely before the server mutates anything, so a rejected request changes nothing. Bodies
 * are checked by the strict RFC 8259 validator of json_strict.h (no cJSON tree); strings keep
 * every byte, "\u0000" included. Rules:
 *   - not strict JSON, trailing garbage, invalid UTF-8, nesting > 1000 -> 400 invalid_json
 *   - duplicate keys at any depth (compared unescaped)               -> 400 duplicate_key
 *   - top level not an object                                        -> 422 invalid_body
 *   - an unknown field                                               -> 422 unknown_field
 *   - a field of the wrong type or value                             -> 422 invalid_<field>
 *   - a token that is not an integral finite number in [0, vocab)    -> 422 invalid_token
 *   - more tokens than max_tokens_per_request                        -> 422 too_many_tokens
 * Numbers are read as doubles (strtod's value), then range-checked.
 */
#ifndef PROTO_REQUESTS_H
#define PROTO_REQUESTS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_MAX_TOP_K 64      /* candidates per position in /tokens ("top_k") */
#define PROTO_MAX_PROGRESS 1e15 /* "progress": tokens between progress lines, at most */
#define PROTO_DEFAULT_TOP_K 5
#define PROTO_MAX_STOP 16       /* stop strings per generate request */
#define PROTO_MAX_STOP_BYTES 64 /* bytes per stop string */
#define PROTO_DEFAULT_MAX_TOKENS 64

typedef struct {
    int status;       /* HTTP status: 400 or 422 */
    char code[48];    /* snake_case error code */
    char message[192];
} proto_error;

/* Fill *err with status, code and the printf message; returns -1 (the decoders' refusal). */
int proto_vfail(proto_error *err, int status, const char *code, const char *fmt, va_list ap);

/* Text -> token ids with the served model's tokenizer (server/text.c): 0, or -1 when it cannot.
 * *ids malloc'd (free()), NULL when *n == 0. */
typedef int proto_encode_fn(const void *ctx, const uint8_t *text, size_t len, int add_special,
                            int32_t **ids, size_t *n);

struct proto_chat_msg;

typedef struct {
    int vocab_size;
    size_t max_tokens_per_request;
    proto_encode_fn *encode;  /* NULL: the byte tokenizer (one token per byte, as before) */
    const void *encode_ctx;
    /* the OpenAI chat route's template (openai_requests.h proto_render_fn; NULL: none) */
    int (*render)(const void *ctx, const struct proto_chat_msg *msgs, size_t n, char **text,
                  size_t *len, char *err, size_t errlen);
    const void *render_ctx;
} proto_limits;

/* Tokens to fold: from "tokens" (array of ids) or "text" (encoded by lim->encode; without one,
 * UTF-8 bytes, one token per byte). */
typedef struct {
    int32_t *tokens;  /* [n], malloc'd, owned; NULL when n == 0 */
    size_t n;
    int present;      /* 1 when "tokens" or "text" was given */
    int top_k;        /* /tokens only: candidates per position, default 5 */
    int prefix_cache; /* create only: "prefix_cache": true (server/prefix_cache.h) */
    int checkpoint;   /* /tokens only: "checkpoint": true, one taken at the end */
    int last_only;    /* /tokens only: "output": "last" answers the last position alone */
    uint64_t progress; /* /tokens only: a progress line every this many tokens (0 = none) */
} proto_tokens_req;

typedef struct {
    int64_t max_tokens;  /* >= 0, <= max_tokens_per_request; default PROTO_DEFAULT_MAX_TOKENS */
    float temperature;   /* >= 0, default 1; 0 = greedy */
    int top_k;           /* 0 = off */
    float top_p;         /* (0, 1], 1 = off */
    uint64_t seed;
    int has_seed;
    size_t n_stop;
    char stop[PROTO_MAX_STOP][PROTO_MAX_STOP_BYTES + 1];
    size_t stop_len[PROTO_MAX_STOP];
    int checkpoint;      /* "checkpoint": true: one taken at the end (server/checkpoints.h) */
} proto_generate_req;

/* POST /v1/sessions/{id}/rollback: {"checkpoint": "<id>"} (a string of 1 to 64 bytes). */
typedef struct {
    char checkpoint[65];
} proto_rollback_req;

/* POST /v1/sessions/{id}/tokens: body required, "tokens" xor "text" required, optional "top_k".
 * Returns 0, or -1 with *err filled. On success the caller frees out->tokens. */
int proto_decode_tokens_req(const uint8_t *body, size_t len, const proto_limits *lim,
                            proto_tokens_req *out, proto_error *err);
/* POST /v1/sessions: empty body, {} or {"tokens":[...]} / {"text":"..."}. */
int proto_decode_create_req(const uint8_t *body, size_t len, const proto_limits *lim,
                            proto_tokens_req *out, proto_error *err);
/* POST /v1/sessions/{id}/generate: empty body (all defaults) or an object of the parameters. */
int proto_decode_generate_req(const uint8_t *body, size_t len, const proto_limits *lim,
                              proto_generate_req *out, proto_error *err);
/* POST /v1/sessions/{id}/rollback: "checkpoint" required (missing_checkpoint, invalid_checkpoint). */
int proto_decode_rollback_req(const uint8_t *body, size_t len, proto_rollback_req *out,
                              proto_error *err);
/* A body that must be empty or "{}" (fork). */
int proto_decode_empty_req(const uint8_t *body, size_t len, proto_error *err);

/* POST /v1/tokenize: {"text": string (required), "add_special_tokens": bool (default false)}
 * -> out->tokens, encoded with lim->encode (bytes when NULL); more than max_tokens_per_request
 * ids -> 422 too_many_tokens. */
int proto_decode_tokenize_req(const uint8_t *body, size_t len, const proto_limits *lim,
                              proto_tokens_req *out, proto_error *err);
/* POST /v1/detokenize: {"tokens": [ids in [0, vocab_size)]} (required). */
int proto_decode_detokenize_req(const uint8_t *body, size_t len, const proto_limits *lim,
                                proto_tokens_req *out, proto_error *err);

void proto_tokens_req_free(proto_tokens_req *r);

#endif /* PROTO_REQUESTS_H */
