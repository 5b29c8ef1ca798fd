/*
 * responses.h — JSON bodies of the non-streamed answers (docs/DESIGN.md §5), written without cJSON
 * so numbers print exactly and the output is always valid UTF-8 JSON.
 */
#ifndef PROTO_RESPONSES_H
#define PROTO_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "recur.h"

/* GET /v1/model: name (the served model's, given by the caller: a seeded model is not the trained
 * one its config names), vocab_size, d_model, n_layers, n_heads, head_k, head_v, d_ff,
 * mixers [n_layers], tied_embeddings, max_context (null without softmax layers: no limit),
 * n_params, state_bytes, fingerprint (hex), weights_dtype, weight_bytes, state_dtype, weights_origin,
 * isa. */
void proto_model_json(proto_buf *b, const recur_model_info *info, const char *name);

/* A session: {"id","tokens_seen","state_bytes","snapshot_bytes","pending_ops"}. */
void proto_session_json(proto_buf *b, const char *id, uint64_t tokens_seen, size_t state_bytes,
                        size_t snapshot_bytes, int pending_ops);

/* The session API's error object {"error":{"code":C,"message":M}}, as a response body and as a
 * stream's last line (ndjson.h): 0, or -1 when memory ran out (b then holds a partial object). */
int proto_error_json(proto_buf *b, const char *code, const char *message);

#endif /* PROTO_RESPONSES_H */
