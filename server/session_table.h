/*
 * session_table.h — the resident sessions, keyed by 128-bit random hex ids.
 *
 * Owned and used by the loop thread only. A session's recurrent state and logits are touched
 * by a worker thread only while one of its ops is in flight (server/ops.c guarantees at most
 * one). Ids come from getrandom(); they are never derived from a counter.
 *
 * Layout (what a lookup touches): the srv_session structs come from a slab (blocks of
 * SLAB_N structs, a free list), so they sit packed together, not one allocation each between
 * the states; the table is open-addressed (linear probing, backward-shift deletion, load <= 1/2),
 * each slot the session's 64-bit id hash beside its pointer. A miss (a resume of a session on
 * disk) reads only slots; a hit compares the hash, then reads one struct for the id.
 */
#ifndef SRV_SESSION_TABLE_H
#define SRV_SESSION_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "recur.h"

typedef struct srv_op srv_op;

typedef struct srv_session {
    /* the table's own (session_table.c): first, so a free struct's rest can be poisoned (ASan) */
    struct srv_session *free_next; /* on the slab's free list: the next free struct */
    int in_table;           /* linked in the table (not detached, not free) */
    char id[33];            /* 32 lowercase hex digits + NUL */
    recur_state *state;     /* owned */
    float *logits;          /* [vocab] logits for the next position; valid when has_logits */
    int has_logits;         /* 0 none; 1 logits; 2 logits + lsm_c (written by the workers only) */
    float lsm_c[2];         /* with has_logits == 2: max and log-sum-exp of logits, as in
                             * recur_log_softmax, so log p(token) = (logits[token] - c0) - c1 */
    uint64_t tokens_seen;   /* loop-side mirror of recur_state_tokens_seen */
    size_t snapshot_bytes;  /* loop-side mirror of srv_session_state_bytes: the length of
                             * GET .../state (0 = not known yet) */
    uint64_t last_used_ms;  /* uv_now of the last request (idle TTL); set by srv_table_touch */
    srv_op *q_head, *q_tail;/* FIFO of this session's requests; the head may be running */
    int q_len;
    int running;            /* the head op has started */
    uint64_t mut_gen;       /* bumped by every queued request: the state may have changed */
    uint64_t saved_gen;     /* mut_gen of the state on disk (persistence, residency.c) */
    void *pjob;             /* snapshot write in flight (residency.c), or NULL */
    int snap_wanted;        /* residency.c: a snapshot round found the session computing; its
                             * state is copied at the next boundary between two work items
                             * (srv_residency_capture), 1 + the kind of write */
    /* prefix cache (prefix_cache.h): the exact token ids this session's state holds, from
     * position 0, while it tracks them (created with the cache; NULL otherwise, and after a
     * state upload, a rollback, a cancelled or failed request, or an eviction to disk) */
    struct srv_ids *pc_hist; /* its ids are pc_hist->ids[0..pc_hist_n) (a shared buffer, one
                              * reference: srv_pcache_hist_drop) */
    size_t pc_hist_n;
    uint64_t pc_hist_h;     /* srv_pcache_hash of those ids */
    uint64_t pc_cached;     /* tokens of its create's prompt that came from the cache */
    /* checkpoints (checkpoints.h): [n_ckpts], oldest first, owned */
    struct srv_ckpt *ckpts;
    int n_ckpts;
    /* the Redis tier (redis_tier.h) */
    uint64_t rv_version;     /* the version of this copy in Redis (0: never committed) */
    uint64_t rv_lease_until; /* uv_now before which this node holds the session's lease */
    int rv_inflight;         /* a commit of it is in flight (at most one) */
    int rv_dirty;            /* changed since the last commit was sent, or that commit failed */
    int rv_fenced;           /* a commit was refused: another node took it over; dropped when idle */
    int rv_renewing;         /* a lease renewal is in flight */
    uint64_t rv_unsure;      /* the token (sequence) of the first commit sent whose answer was
                              * lost (the connection reset) since the last one answered: Redis
                              * may have applied it or a later one; 0 none */
    srv_op *rv_waiter;       /* redis_sync: the op whose response waits for the next commit */
    /* Idempotency-Key records (idempotency.h): [n_idem], oldest first, owned */
    struct srv_idem *idem;
    int n_idem, idem_cap;
    /* the recency list, least recently used first (srv_table_touch moves a session to its end,
     * so it is sorted by last_used_ms): evictions and idle sweeps start at its head and stop
     * at the first session too recent, never walking the idle ones they leave alone */
    struct srv_session *lru_prev, *lru_next;
    /* the changed list: every session whose state may differ from its snapshot (linked by
     * srv_table_changed and at insertion; unlinked by its owner, residency.c, once clean), so
     * a periodic snapshot round costs O(changed sessions), not O(resident sessions) */
    struct srv_session *chg_prev, *chg_next;
    int chg_linked;
} srv_session;

typedef struct srv_table srv_table;

/* n_bytes (<= 64) from getrandom() as 2 * n_bytes lowercase hex digits and a NUL into out: session
 * and checkpoint ids. 0, or -1 when the random source failed. */
int srv_random_hex(char *out, size_t n_bytes);

/* The length of s's GET /v1/sessions/{id}/state body (what its "snapshot_bytes" reports): the core
 * snapshot, plus the logits trailer when s has logits. Only while nothing is in flight on s. */
size_t srv_session_state_bytes(const srv_session *s, int vocab);

/* max_sessions bounds sessions (resident, plus those on disk with persistence); freed states
 * are kept for reuse (up to a small pool), not zeroed: a new session's state is zeroed when it
 * is given out (srv_table_new), a state about to be overwritten is not (adopt, detached). */
srv_table *srv_table_create(const recur_model *m, int max_sessions);
void srv_table_destroy(srv_table *t);

/* States kept for reuse (freed ones, or made ahead: srv_table_spare_add). */
int srv_table_spare_count(const srv_table *t);
/* Keep state (zero, of the table's model) and logits ([vocab]) for the next session: 0, or -1
 * when the pool is full (the caller still owns them). */
int srv_table_spare_add(srv_table *t, recur_state *state, float *logits);
/* Give back state (of the table's model, any values; NULL: nothing) and logits, as a freed
 * session's: kept for reuse, or freed when the pool is full. */
void srv_table_spare_return(srv_table *t, recur_state *state, float *logits);

/* A new empty session (zero state, no logits). Returns 0, -1 when max_sessions is reached,
 * -2 when the random source or an allocation failed, or no resident slot could be freed
 * (max_resident_sessions with every resident session busy, or the eviction write failed). */
int srv_table_new(srv_table *t, uint64_t now_ms, srv_session **out);
/* NULL when id is unknown or malformed. */
srv_session *srv_table_find(srv_table *t, const char *id);
/* Unlink and free a session (its queue must be empty and nothing in flight). */
void srv_table_remove(srv_table *t, srv_session *s);
size_t srv_table_count(const srv_table *t);
int srv_table_max(const srv_table *t);
/* s was used now: last_used_ms = now_ms, and s moves to the end of the recency list. now_ms
 * must be uv_now (never behind an earlier touch): the list stays sorted by last_used_ms. */
void srv_table_touch(srv_table *t, srv_session *s, uint64_t now_ms);
/* The least recently used resident session (NULL when none); s->lru_next is the next one. */
srv_session *srv_table_lru_first(srv_table *t);
/* A request may change s: mut_gen++ and s joins the changed list (if not on it). */
void srv_table_changed(srv_table *t, srv_session *s);
/* The first session of the changed list (NULL when empty); s->chg_next is the next one. */
srv_session *srv_table_changed_first(srv_table *t);
/* Take s off the changed list (its snapshot holds its state). No-op when not on it. */
void srv_table_changed_unlink(srv_table *t, srv_session *s);
/* Call fn for every session (in slab order); fn may remove the session it is given. O(structs
 * in the slab, at most the peak of resident sessions): for shutdown and rare sweeps only, never
 * per request or per tick. */
void srv_table_foreach(srv_table *t, void (*fn)(srv_session *s, void *arg), void *arg);

/* Persistence and the resident budget (server/residency.c). With hooks set:
 *   srv_table_find   on a miss for a well-formed id, returns load(ctx, id) (lazy load);
 *   srv_table_new    counts stored(ctx) (sessions on disk only) against max_sessions, then
 *                    calls make_room(ctx) (0: room, may evict; else it returns -2);
 *   srv_table_remove calls removed(ctx, s) first: the session is gone for good.
 * So with hooks, srv_table_find and srv_table_new may evict (free) another session that is
 * idle (no queued op): never hold a pointer to an idle session across those calls. */
typedef struct {
    srv_session *(*load)(void *ctx, const char *id);
    int (*make_room)(void *ctx);
    void (*removed)(void *ctx, srv_session *s);
    size_t (*stored)(void *ctx);
    void *ctx;
} srv_table_hooks;
void srv_table_set_hooks(srv_table *t, const srv_table_hooks *h);
/* Room for one more resident session: the make_room hook's answer (0 without hooks). */
int srv_table_make_room(srv_table *t);
void srv_table_set_max(srv_table *t, int max_sessions);
/* The resident session with this id, never loading (NULL when not resident). */
srv_session *srv_table_peek(srv_table *t, const char *id);
/* A new empty session with the given (valid, not resident) id: no limit checks, no hooks.
 * Returns 0 or -2 (allocation). */
int srv_table_adopt(srv_table *t, const char *id, uint64_t now_ms, srv_session **out);
/* Unlink and free a session without the removed hook (eviction: it lives on on disk). */
void srv_table_drop(srv_table *t, srv_session *s);
/* srv_table_drop, but s's state and logits go to the caller (*state, *logits) instead of the
 * pool, untouched: an eviction's write job serializes them, then srv_table_spare_return. */
void srv_table_drop_keep(srv_table *t, srv_session *s, recur_state **state, float **logits);
/* A session being built off the table (a resume read on another thread, residency.c): an empty
 * session with this id and a state and logits of its own, not in the table; 0 or -2. Then
 * either srv_table_link (loop thread: s joins the table as srv_table_adopt's would, no limit
 * checks, no hooks) or srv_table_discard (freed as a dropped session is). */
int srv_table_detached(srv_table *t, const char *id, srv_session **out);
void srv_table_link(srv_table *t, srv_session *s, uint64_t now_ms);
void srv_table_discard(srv_table *t, srv_session *s);

#endif /* SRV_SESSION_TABLE_H */
