/*
 * checkpoints.h — a session's state captured and put back (issue 14): the one machinery under
 * the checkpoints of the session API (POST/GET/DELETE /v1/sessions/{id}/checkpoints, POST
 * .../rollback, "checkpoint": true on a fold or generation) and the prefix cache's entries
 * (prefix_cache.h).
 *
 * A captured state is a state blob (proto/state_blob.h: core snapshot with tokens_seen, model
 * fingerprint and checksum, then the next-token logits), so putting it back is
 * proto_state_load: every check first, then O(state) copies, and the session scores and samples
 * its next token exactly like it did at capture time (bit-identical: the log-softmax constants
 * are recomputed from the same logits by the same function, scheduler.c run_steps).
 *
 * A session's checkpoints (srv_session.ckpts) are at most max_checkpoints_per_session, oldest
 * first, each {id: 16 random lowercase hex digits, tokens_seen, blob}. They are copied by fork,
 * written with the session's snapshot file (after the state blob, a section of its own:
 * srv_ckpt_section_*) and read back with it. Everything here runs on the loop thread, on
 * sessions with nothing in flight.
 */
#ifndef SRV_CHECKPOINTS_H
#define SRV_CHECKPOINTS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "recur.h"
#include "session_table.h"

#define SRV_CKPT_ID_LEN 16

typedef struct srv_ckpt {
    char id[SRV_CKPT_ID_LEN + 1];
    uint64_t tokens_seen;
    uint8_t *blob; /* state blob, owned */
    size_t len;
} srv_ckpt;

/* s's state as a state blob (*out malloc'd). 0 or RECUR_E* (proto_state_write). */
int srv_state_capture(const srv_session *s, int vocab, uint8_t **out, size_t *len);
/* Put a captured state back into s (nothing in flight): every check before anything moves
 * (a refused blob leaves s unchanged, *f says why). Sets tokens_seen and the logits; the
 * log-softmax constants are recomputed at the next step. 0 or -1. */
int srv_state_restore(const recur_model *m, int vocab, srv_session *s, const uint8_t *blob,
                      size_t len, const char **why);
/* The same for a blob this process captured (srv_state_capture) and kept in its own memory
 * since (the prefix cache's memory entries): O(1) framing checks, no checksum or value scan
 * (proto_state_load_own). A blob read from disk or the network goes through
 * srv_state_restore. */
int srv_state_restore_own(const recur_model *m, int vocab, srv_session *s, const uint8_t *blob,
                          size_t len, const char **why);

/* Take a checkpoint of s: 0 with its id in id_out, -1 when s holds max checkpoints already,
 * -2 when the state could not be captured (no memory, or a state the loader would refuse). */
int srv_ckpt_take(srv_session *s, int vocab, int max, char id_out[SRV_CKPT_ID_LEN + 1]);
/* The checkpoint with this id, or NULL (any string: an id of the wrong form is never found). */
srv_ckpt *srv_ckpt_find(srv_session *s, const char *id);
/* Remove one (0) or -1 when unknown. */
int srv_ckpt_remove(srv_session *s, const char *id);
/* Free every checkpoint of s (session teardown). */
void srv_ckpt_clear(srv_session *s);
/* dst gets copies of src's checkpoints (fork; dst has none). 0 or -1 (no memory: dst has none). */
int srv_ckpt_copy(srv_session *dst, const srv_session *src);
/* {"checkpoints":[{"checkpoint":"...","tokens_seen":n},...]} oldest first. */
void srv_ckpt_list_json(const srv_session *s, proto_buf *b);

/* The section of a session file after its state blob (docs/OPERATIONS.md):
 *   "RECURCK1", u32 count, u32 0, then per checkpoint: 16 id bytes, u64 tokens_seen, u64 len,
 *   len bytes of state blob; then u64 FNV-1a 64 over the section before it.
 * srv_ckpt_section_size: its bytes for s (0 when s has none: no section is written). */
size_t srv_ckpt_section_size(const srv_session *s);
void srv_ckpt_section_write(const srv_session *s, uint8_t *dst);
/* Where the state blob of a session file ends (the rest is the checkpoint section, if any):
 * the core snapshot's length, plus the logits trailer when one follows. */
size_t srv_ckpt_blob_end(const uint8_t *file, size_t len, int vocab);
/* Check the section (framing, checksum, every id's form, count <= max, and every blob with
 * recur_snapshot_check + its trailer for model m) and only then give s its checkpoints.
 * 0, or -1 with *why (a quarantine reason); s unchanged on failure. */
int srv_ckpt_section_read(srv_session *s, const recur_model *m, int vocab, int max,
                          const uint8_t *sec, size_t len, const char **why);

/* A whole session file (state_dir's <id>.snap, the Redis tier's state value): the state blob,
 * then the checkpoint section when s has checkpoints. Only while nothing is in flight on s.
 * *out malloc'd; 0 or RECUR_E*. */
int srv_session_file_write(const srv_session *s, int vocab, uint8_t **out, size_t *len);
/* Load a session file into s (fresh, nothing in flight): state, logits, tokens_seen, then its
 * checkpoints; every check first. 0, or -1 with *why (a quarantine reason: s must be dropped). */
int srv_session_file_read(srv_session *s, const recur_model *m, int vocab, int max_ckpts,
                          const uint8_t *buf, size_t len, const char **why);

#endif /* SRV_CHECKPOINTS_H */
