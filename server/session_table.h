/*
 * session_table.h — the resident sessions, keyed by 128-bit random hex ids.
 *
 * Owned and used by the loop thread only. A session's recurrent state and logits are touched
 * by a worker thread only while one of its ops is in flight (server/ops.c guarantees at most
 * one). Ids come from getrandom(); they are never derived from a counter.
 */
#ifndef SRV_SESSION_TABLE_H
#define SRV_SESSION_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "recur.h"

typedef struct srv_op srv_op;

typedef struct srv_session {
    char id[33];            /* 32 lowercase hex digits + NUL */
    recur_state *state;     /* owned */
    float *logits;          /* [vocab] logits for the next position; valid when has_logits */
    int has_logits;
    uint64_t tokens_seen;   /* loop-side mirror of recur_state_tokens_seen */
    size_t snapshot_bytes;  /* loop-side mirror of recur_snapshot_size (0 = not known yet) */
    uint64_t last_used_ms;  /* uv_now of the last request (idle TTL) */
    srv_op *q_head, *q_tail;/* FIFO of this session's requests; the head may be running */
    int q_len;
    int running;            /* the head op has started */
    struct srv_session *hnext; /* hash chain */
} srv_session;

typedef struct srv_table srv_table;

/* max_sessions bounds resident sessions; freed states are kept for reuse (up to a small pool). */
srv_table *srv_table_create(const recur_model *m, int max_sessions);
void srv_table_destroy(srv_table *t);

/* A new empty session (zero state, no logits). Returns 0, -1 when max_sessions is reached,
 * -2 when the random source or an allocation failed. */
int srv_table_new(srv_table *t, uint64_t now_ms, srv_session **out);
/* NULL when id is unknown or malformed. */
srv_session *srv_table_find(srv_table *t, const char *id);
/* Unlink and free a session (its queue must be empty and nothing in flight). */
void srv_table_remove(srv_table *t, srv_session *s);
size_t srv_table_count(const srv_table *t);
int srv_table_max(const srv_table *t);
/* Call fn for every session; fn may remove the session it is given. */
void srv_table_foreach(srv_table *t, void (*fn)(srv_session *s, void *arg), void *arg);

#endif /* SRV_SESSION_TABLE_H */
