/*
 * state_blob.h — the body of GET/PUT /v1/sessions/{id}/state.
 *
 * The body is the core snapshot of DESIGN.md §6 (recur_snapshot_write), optionally followed by
 * a trailer carrying the session's next-token logits, so that a restored session can generate
 * and report the logprob of its next token exactly like the original:
 *
 *   offset 0          core snapshot (its own length: 40 + P + 8, P read at offset 32)
 *   +0   "RECURLG1"   magic (8 bytes)
 *   +8   u32 vocab_size
 *   +12  u32 reserved (0)
 *   +16  vocab_size fp32 logits
 *   +16+4V  u64 FNV-1a 64 over every byte before it, core snapshot included
 *
 * A body without the trailer is a plain core snapshot (a session restored from it has no
 * logits yet: its next folded token gets logprob null). Little-endian throughout.
 */
#ifndef PROTO_STATE_BLOB_H
#define PROTO_STATE_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "requests.h"

size_t proto_state_trailer_size(int vocab);
/* Write the trailer at dst (proto_state_trailer_size bytes); core = the snapshot before it. */
void proto_state_trailer_write(uint8_t *dst, const uint8_t *core, size_t core_len,
                               const float *logits, int vocab);
/* Split a PUT body. *core_len: bytes to hand to recur_snapshot_read (the whole body when the
 * header cannot be read, so the core reports truncation). *logits: the trailer's logits
 * (unaligned, copy with memcpy) or NULL when absent. Returns 0, or -1 (400) with *err when
 * bytes follow the snapshot that are not a valid trailer for this vocab (non-finite logits included). */
int proto_state_split(const uint8_t *body, size_t len, int vocab, size_t *core_len,
                      const uint8_t **logits, proto_error *err);

#endif /* PROTO_STATE_BLOB_H */
