/*
 * prefix_cache.h — the exact prefix-state cache (issue 14; docs/API.md "Prefix cache").
 *
 * A stateless client resends its whole conversation every turn. The state after any prefix is
 * a fixed few hundred KiB, so recurd keeps the states of prefixes it has computed and a new
 * prompt folds only the tokens after the longest stored prefix of it:
 *
 *   - an entry is (the exact token ids t[0..n), the state after them): a state blob of
 *     proto/state_blob.h (core snapshot with tokens_seen = n, model fingerprint and checksum,
 *     plus the next-token logits), so a restored session scores and samples its next token
 *     exactly like the session that stored it;
 *   - an entry is found by (n, h(t[0..n))), h = FNV-1a 64 over the ids' little-endian bytes
 *     (srv_pcache_hash). A lookup makes one pass over the prompt's ids, computing h at the
 *     length of every entry no longer than the prompt (sorted by length), takes the longest
 *     entry whose hash matches, and uses it only when its token ids equal the prompt's first n
 *     ids, every one (a hash never decides a hit). The hash is never recomputed afterwards: a
 *     session that tracks its tokens carries h(pc_hist) as its history grows (pc_hist_h; a
 *     cached create's history grows slice by slice of its prefill), so a store costs the state
 *     blob, never a copy of or a pass over the history: an entry shares the id buffer of the
 *     session it was stored from (srv_ids), and a restored session's history is the entry's
 *     buffer, to which the next turn's ids are appended in place;
 *   - an entry restored from memory is applied without re-checking its blob (the bytes were
 *     written and checked by this process and never left it: srv_state_restore_own); a blob
 *     read from a spill file is checked in full (below) when it is loaded;
 *   - entries are stored at the end of every prompt (create with the cache), every
 *     prefix_checkpoint_interval tokens of a long prefill (absolute positions k * interval, so
 *     an edit late in a long prompt resumes from the last multiple of the interval before it),
 *     and at the end of every fold and generation on a session that tracks its tokens
 *     (srv_session.pc_hist): prompt + completion, the exact prefix a client's next turn starts
 *     with. A generation's last sampled token is already folded when it ends (every step of a
 *     generation samples a token and folds it in the same work item: scheduler.c run_steps), so
 *     the state stored is that of prompt + every completion token, and its logits predict the
 *     token after them;
 *   - memory is bounded by prefix_cache_bytes, byte-accurate: an entry costs its struct and
 *     its blob, and each id buffer entries refer to costs its struct and its capacity once,
 *     however many entries share it (malloc's own overhead is not counted); least recently
 *     used entries go first;
 *   - with state_dir, an entry evicted from memory is written (threadpool, atomic, persist.h) to
 *     state_dir/prefix_cache/<id>.snap, and at SIGTERM every entry not yet on disk is; files are
 *     bounded by prefix_cache_disk_bytes (least recently used removed first). A file is read
 *     back on a lookup that needs it (on the loop thread) and trusted for nothing: its header,
 *     its own checksum, the model fingerprint, the token ids, then the state blob's checks;
 *     a file that fails is moved to state_dir/prefix_cache/quarantine/ and never used;
 *   - prefix_cache_bytes 0 turns the cache off (no lookups, no stores, no files).
 *
 * Threads: the loop thread owns the cache (lookups, stores, evictions); only spill writes run on
 * libuv's threadpool, on bytes handed over to them.
 *
 * How ops use it (ops.h):
 *   - SRV_OP_CREATE with op->pc_lookup = 1 (session API: "prefix_cache": true): before folding,
 *     srv_pcache_restore; the session reports cached_tokens (srv_session.pc_cached); the prefill
 *     stores at interval boundaries and at its end; the session then tracks its tokens
 *     (pc_hist), so every later fold and generation on it stores its end state too.
 *   - a session created without it never touches the cache.
 */
#ifndef SRV_PREFIX_CACHE_H
#define SRV_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "recur.h"
#include "session_table.h"

typedef struct srv_pcache srv_pcache;

/* A buffer of token ids shared by a session's history and the cache entries stored from it:
 * ids[0..used) are written once and never change, so each holder reads its own prefix
 * [0..n) of them; the holder whose history is `used` long (the frontier) appends in place while
 * cap allows, any other holder copies first (srv_pcache_hist_append). A conversation's turns
 * thus share one buffer, and a store costs no copy of the ids. */
typedef struct srv_ids {
    int refs;          /* sessions and entries holding it */
    int entry_refs;    /* entries holding it: charged to prefix_cache_bytes once while > 0 */
    size_t cap, used;
    int32_t *ids;      /* [cap] */
} srv_ids;

typedef struct {
    size_t max_bytes;      /* prefix_cache_bytes: memory bound; 0 = the cache is off */
    size_t disk_bytes;     /* prefix_cache_disk_bytes: spill files bound (0 = no spill) */
    uint64_t interval;     /* prefix_checkpoint_interval: tokens between prefill stores (0 = none) */
    const char *spill_dir; /* "" or NULL: no spill (no state_dir); else state_dir/prefix_cache */
} srv_pcache_config;

/* A cache for model m (its fingerprint stamps the files). Opens and scans the spill directory
 * (created 0700, locked, its temp files removed, persist.h) when spill_dir is set: every file
 * there becomes a disk entry, unread until a lookup needs it. Returns 0, or -1 with err (the
 * daemon refuses to start). *out is NULL-safe to free. */
int srv_pcache_create(const srv_pcache_config *cfg, const recur_model *m, uv_loop_t *loop,
                      srv_pcache **out, char *err, size_t errlen);
/* SIGTERM (workers joined): write every memory entry not yet on disk, most recent first, within
 * the disk bound, on the threadpool (a few at a time); the loop runs until they are done. */
void srv_pcache_shutdown(srv_pcache *pc);
/* After the loop has run to its end (no spill write in flight). */
void srv_pcache_free(srv_pcache *pc);

int srv_pcache_enabled(const srv_pcache *pc);          /* pc && max_bytes > 0 */
uint64_t srv_pcache_interval(const srv_pcache *pc);    /* 0 when off */

/* h continued over the ids t[0..n): FNV-1a 64 over each id's 4 little-endian bytes; h(empty) =
 * RECUR_FNV_OFFSET. h(t[0..a+b)) = srv_pcache_hash(h(t[0..a)), t + a, b). */
uint64_t srv_pcache_hash(uint64_t h, const int32_t *t, size_t n);

/* Restore into s (a fresh session: tokens_seen 0, nothing in flight) the state after the longest
 * stored prefix t[0..m) of tokens[0..n), m <= n. Returns m (0: a miss, s unchanged) and *h =
 * h(t[0..m)). On a hit s tracks t[0..m) as its history (the entry's id buffer, shared). Counts
 * a hit (and m hit tokens) or a miss. One pass over tokens. */
size_t srv_pcache_restore_h(srv_pcache *pc, const int32_t *tokens, size_t n, srv_session *s,
                            uint64_t *h);
/* The same, without *h. */
size_t srv_pcache_restore(srv_pcache *pc, const int32_t *tokens, size_t n, srv_session *s);

/* Store s's state (nothing in flight; s->tokens_seen == n) as the state after tokens[0..n),
 * whose hash the caller has carried: h == srv_pcache_hash(RECUR_FNV_OFFSET, tokens, n) (a wrong
 * h only makes an entry no lookup finds). An entry for the same ids is only marked recently
 * used. Entries larger than the whole bound are not stored. n == 0 stores nothing. */
void srv_pcache_store_h(srv_pcache *pc, const int32_t *tokens, size_t n, uint64_t h,
                        const srv_session *s);
/* The same, hashing tokens (tests; the daemon carries h). */
void srv_pcache_store(srv_pcache *pc, const int32_t *tokens, size_t n, const srv_session *s);
/* Store s's state as the state after its history (s->pc_hist_n == s->tokens_seen): the entry
 * shares the history's id buffer (no copy, no hash: O(state)). */
void srv_pcache_store_hist(srv_pcache *pc, const srv_session *s);

/* The shared tier (prefix_redis.h). fn is told of every entry stored from a session (not of
 * entries read back from a spill file or adopted from the shared tier), before it enters
 * memory: ids[0..n), their hash h, the state blob (valid during the call). */
typedef void srv_pcache_store_hook(void *ctx, const int32_t *ids, size_t n, uint64_t h,
                                   const uint8_t *blob, size_t blob_len);
void srv_pcache_set_store_hook(srv_pcache *pc, srv_pcache_store_hook *fn, void *ctx);
/* An entry as bytes that travel: the spill file's format (header with the model fingerprint,
 * the ids, the blob, a checksum over all of it), malloc'd, *len set. */
uint8_t *srv_pcache_entry_bytes(const srv_pcache *pc, const int32_t *ids, size_t n,
                                const uint8_t *blob, size_t blob_len, size_t *len);
/* The largest such bytes for an entry of n tokens of this model (a read's bound). */
size_t srv_pcache_entry_max_bytes(const srv_pcache *pc, size_t n);
/* Bytes that claim to be the entry (n, h) of this model, trusted for nothing: the format, the
 * checksum, the fingerprint, n, the ids' hash, the ids equal tokens[0..n) one by one, then the
 * state blob's own checks and its tokens_seen == n. 0: s (a create's session before its
 * prefill; it may hold a shorter local hit) is restored to the state after tokens[0..n), tracks
 * them as its history, and the entry is kept in memory (no store hook); 1: sound bytes of
 * other ids (not a hit; s unchanged); -1: bad bytes, *why says which check (s unchanged, or
 * reset to a fresh state when only its tokens_seen was wrong: s->tokens_seen tells). */
int srv_pcache_adopt(srv_pcache *pc, const int32_t *tokens, size_t n, uint64_t h,
                     const uint8_t *bytes, size_t len, srv_session *s, const char **why);

/* Figures for /metrics and tests. */
typedef struct {
    uint64_t hits, hit_tokens, misses, evictions, stores;
    uint64_t spill_writes, spill_failures, spill_loads, quarantined;
    size_t bytes, entries;            /* in memory */
    size_t disk_bytes, disk_entries;  /* files (disk_bytes: upper bounds for files found at start) */
} srv_pcache_stats;
srv_pcache_stats srv_pcache_get_stats(const srv_pcache *pc);
/* The recurd_prefix_cache_* lines. */
void srv_pcache_metrics(const srv_pcache *pc, proto_buf *b);

/* The session's token history (srv_session.pc_hist[0..pc_hist_n), its hash pc_hist_h): append n
 * ids (the hash continues over them alone; the ids go in place when s is the buffer's frontier
 * and it has room, else into a new buffer of twice the length), or stop tracking (drop it) when
 * the history would pass max_tokens (2 * max_tokens_per_request: the longest prefix a request
 * can store). n == 0 on a session that tracks nothing starts tracking. */
void srv_pcache_hist_append(srv_session *s, const int32_t *ids, size_t n, size_t max_tokens);
/* dst tracks src's history (a fork): the same buffer, hash included. */
void srv_pcache_hist_copy(srv_session *dst, const srv_session *src);
/* Stop tracking: drop s's reference to its buffer. */
void srv_pcache_hist_drop(srv_session *s);

#endif /* SRV_PREFIX_CACHE_H */
