/*
 * offloop.h — request bodies decoded off the event-loop thread, in each session's arrival order.
 *
 * Decoding a JSON body costs a few ms per MiB (proto/requests.c); done on the loop, four clients
 * sending 1 MiB bodies kept every other connection waiting for tens of ms (issue 10 item 16).
 * So a body over SRV_OFFLOOP_BODY_BYTES is decoded on the libuv threadpool (uv_queue_work) while
 * the loop goes on serving everyone else; smaller bodies are decoded inline, as before.
 *
 * What a client can observe stays the same:
 *   - A rejected request changes no state: decoding touches nothing but its own copy of the
 *     request; only the loop thread, once the body is decoded, looks the session up again and
 *     queues the op (or answers the error).
 *   - Per-session arrival order (docs/API.md): while a session has a held request, every later
 *     request that queues on that session (tokens, generate, fork, delete, state get/put) is
 *     held behind it, and the held requests are applied strictly in arrival order, each as soon
 *     as it and everything before it is decoded. A read (GET /v1/sessions/{id}) is answered at
 *     once, as always. Creates have no session yet and are applied when decoded.
 * Everything here runs on the loop thread except the decode itself, which reads only the held
 * copy and writes only the held srv_body.
 */
#ifndef SRV_OFFLOOP_H
#define SRV_OFFLOOP_H

#include <stddef.h>

#include "app.h"
#include "openai_requests.h"
#include "requests.h"

/* The longest session id a held request carries (as routes.c's {id}). */
#define SRV_HELD_ID_MAX 64

/* Bodies above this are decoded on the threadpool (16 KiB: well under 0.2 ms inline). */
#define SRV_OFFLOOP_BODY_BYTES 16384
/* At most this many bodies are decoded at once: on 2 cores, one decode keeps a core for the loop
 * (and the threadpool free for snapshot writes); the rest wait their turn, in arrival order. */
#define SRV_OFFLOOP_DECODERS 1
/* ... each at this much lower CPU priority than the loop thread (nice +10). */
#define SRV_OFFLOOP_NICE 10

/* Per-thread CPU priority for work done off the loop (offloop.c, any thread): the calling
 * thread's nice value raised to `nice` (never lowered); srv_nice_restore puts back what it returns
 * (INT_MIN: nothing was changed). */
int srv_nice_lower(int nice);
/* ... only where srv_nice_restore will be able to put it back (else INT_MIN, nothing changed). */
int srv_nice_lower_restorable(int nice);
void srv_nice_restore(int prev);

typedef enum {
    SRV_BODY_NONE,     /* the route decodes no JSON body */
    SRV_BODY_CREATE,   /* proto_decode_create_req */
    SRV_BODY_TOKENS,   /* proto_decode_tokens_req */
    SRV_BODY_GENERATE, /* proto_decode_generate_req */
    SRV_BODY_EMPTY,    /* proto_decode_empty_req */
    SRV_BODY_TOKENIZE,   /* proto_decode_tokenize_req (into tr) */
    SRV_BODY_DETOKENIZE, /* proto_decode_detokenize_req (into tr) */
    SRV_BODY_ROLLBACK,   /* proto_decode_rollback_req (into rb) */
    SRV_BODY_OAI_COMPLETION, /* proto_decode_oai_req (into oai): /v1/completions */
    SRV_BODY_OAI_CHAT,       /* proto_decode_oai_req (into oai): /v1/chat/completions */
} srv_body_kind;

/* A decoded request body. */
typedef struct {
    srv_body_kind kind;
    int rc;               /* 0 decoded, -1 refused (err) */
    proto_error err;
    proto_tokens_req tr;  /* CREATE, TOKENS, (DE)TOKENIZE: the caller may take tr.tokens (set it to NULL) */
    proto_generate_req g; /* GENERATE */
    proto_rollback_req rb; /* ROLLBACK */
    /* OAI_*: rc stays 0; the OpenAI-shaped refusal is oai_rc / oai_err (openai.c answers it) */
    int oai_rc;
    proto_oai_error oai_err;
    proto_oai_req oai;    /* the handler may take oai.prompts (set them to NULL) */
} srv_body;

/* The one place a body is decoded, inline or on the threadpool. Thread-safe. */
void srv_body_decode(srv_body_kind kind, const uint8_t *body, size_t len, const proto_limits *lim,
                     srv_body *out);
void srv_body_free(srv_body *b);

/* Applies a held request on the loop thread: req is a copy of the original request (valid
 * during the call), id its session id ("" for none), b its decoded body. */
typedef void srv_held_fn(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                         srv_body *b, const void *ctx);

/* 1 when this request must be held: its session (id, "" for none) already has held requests,
 * or its JSON body is over SRV_OFFLOOP_BODY_BYTES. */
int srv_held_needed(srv_app *app, const char *id, srv_body_kind kind, size_t body_len);
/* Hold the request (copied; a reference on c is kept) and call fn(ctx) in arrival order. */
void srv_held_add(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                  srv_body_kind kind, const proto_limits *lim, srv_held_fn *fn, const void *ctx);
/* The same for a request that also waits for the Redis tier's answer about its session
 * (redis_tier.h SRV_TIER_HOLD): applied, in arrival order, once srv_held_store_ready(app, id)
 * was called (and its body is decoded). id is never "". */
void srv_held_add_store_wait(srv_app *app, srv_conn *c, const srv_request *req, const char *id,
                             srv_body_kind kind, const proto_limits *lim, srv_held_fn *fn,
                             const void *ctx);
/* The tier answered about id: its held requests waiting for that go, in order. */
void srv_held_store_ready(srv_app *app, const char *id);

#endif /* SRV_OFFLOOP_H */
