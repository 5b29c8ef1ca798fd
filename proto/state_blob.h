/*
 * state_blob.h — the body of GET/PUT /v1/sessions/{id}/state, which is also a snapshot file of
 * --state-dir (docs/API.md "State", docs/OPERATIONS.md).
 *
 * The body is the core snapshot of docs/DESIGN.md §6 (recur_snapshot_write), optionally followed by
 * a trailer carrying the session's next-token logits, so that a restored session can generate
 * and report the logprob of its next token exactly like the original:
 *
 *   offset 0          core snapshot (its own length: recur_snapshot_length)
 *   +0   "RECURLG1"   magic (8 bytes)
 *   +8   u32 vocab_size
 *   +12  u32 reserved (0)
 *   +16  vocab_size fp32 logits, every one finite
 *   +16+4V  u64 checksum: after a core of version 4 or 5 (the ones written), FNV-1a 64 over the
 *           core's own 8-byte checksum, then the trailer's bytes before this one (the core's
 *           checksum covers the core); after a core of version 1-3, FNV-1a 64 over every byte
 *           before it, core snapshot included
 *
 * A body without the trailer is a plain core snapshot (a session restored from it has no
 * logits yet: its next folded token gets logprob null). Little-endian throughout.
 *
 * One home for both directions: proto_state_write builds the body (GET, snapshot files),
 * proto_state_load checks and applies it (PUT, loading a file), and names a refusal with the
 * PUT error code and the quarantine reason of the check that failed.
 */
#ifndef PROTO_STATE_BLOB_H
#define PROTO_STATE_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "recur.h"
#include "requests.h"

/* Why a body was refused: the 400 code of PUT …/state (docs/API.md) and the quarantine reason
 * of a snapshot file (docs/OPERATIONS.md), both naming the failed check. */
typedef struct {
    const char *code;
    const char *reason;
    char message[160];
} proto_state_fault;

size_t proto_state_trailer_size(int vocab);
/* Write the trailer at dst (proto_state_trailer_size bytes); core = the whole snapshot before it. */
void proto_state_trailer_write(uint8_t *dst, const uint8_t *core, size_t core_len,
                               const float *logits, int vocab);
/* Split a body. *core_len: bytes to hand to recur_snapshot_read (the whole body when the
 * header cannot be read, so the core reports truncation). *logits: the trailer's logits
 * (unaligned, copy with memcpy) or NULL when absent. Returns 0, or -1 (400) with *err when
 * bytes follow the snapshot that are not a valid trailer for this vocab (malformed:
 * invalid_snapshot; checksum: snapshot_checksum; a non-finite logit: snapshot_nonfinite).
 * Checks the trailer only: proto_state_load checks the core first. */
int proto_state_split(const uint8_t *body, size_t len, int vocab, size_t *core_len,
                      const uint8_t **logits, proto_error *err);

/* The body for s: its snapshot, then the trailer when has_logits. *out is malloc'd. Returns 0 or
 * a RECUR_E* code (RECUR_ENOMEM; RECUR_ENONFINITE / RECUR_ERANGE for a state or logits the
 * loader would refuse: nothing is written that proto_state_load refuses). */
int proto_state_write(const recur_state *s, const float *logits, int has_logits, int vocab,
                      uint8_t **out, size_t *out_len);

/* Check body for model m — the core snapshot first (recur_snapshot_check: a flipped bit in it
 * is its checksum, whatever follows), then the trailer — and only when all of it is valid apply
 * it: s, logits [vocab] and *has_logits (1 with a trailer, else 0). Returns 0, or -1 with *f. */
int proto_state_load(const recur_model *m, recur_state *s, int vocab, const uint8_t *body,
                     size_t len, float *logits, int *has_logits, proto_state_fault *f);

/* Apply a body this process wrote (proto_state_write) and kept in its own memory since, with
 * only O(1) framing checks (recur_snapshot_read_own): no checksum, no value scan. 0, or -1 (s
 * unchanged) for bytes that are not such a body. */
int proto_state_load_own(const recur_model *m, recur_state *s, int vocab, const uint8_t *body,
                         size_t len, float *logits, int *has_logits);

/* The quarantine reason of a file too large for any snapshot of m, from its first n bytes:
 * "othermodel" when its header names another model, else "toolarge". */
const char *proto_state_toolarge_reason(const recur_model *m, const uint8_t *head, size_t n);

/* The largest PUT …/state body a model can need, which max_body must admit: its state, the core
 * snapshot's framing and the logits trailer (16 + 4V + 8 bytes), bounded generously as
 * state bytes + PROTO_STATE_BODY_SLACK + 8 bytes per vocabulary entry; the state bytes as fp32
 * whatever the daemon's state dtype (a snapshot of another dtype loads too: docs/API.md). */
#define PROTO_STATE_BODY_SLACK 4096
size_t proto_state_max_body(const recur_model_info *info);

#endif /* PROTO_STATE_BLOB_H */
