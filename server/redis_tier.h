/*
 * redis_tier.h — sessions shared through Redis (--redis URL; docs/SCALING.md "Redis tier").
 *
 * RAM stays the fast tier: a resident session is served from memory. Redis holds, per session,
 * under keys that carry the model fingerprint (two models never share a key) and a hash tag (a
 * session's keys live in one Redis Cluster slot):
 *
 *   <prefix>:{<fp>:<id>}:state   the session file: exactly the bytes of a state_dir snapshot
 *                                (state blob + checkpoint section, checkpoints.h)
 *   <prefix>:{<fp>:<id>}:ver     its version, +1 per commit
 *   <prefix>:{<fp>:<id>}:lease   the node that may fold into it and until when: "<node>
 *                                <deadline>", ms of Redis's clock (TIME), redis_lease_ms after
 *                                it was taken; no TTL of its own (LEASE_LUA)
 *   <prefix>:{<fp>:<id>}:idem    Idempotency-Key records (hash: key -> result summary), and the
 *                                last commit's token under " commit" (a late commit, COMMIT_LUA)
 *
 * <fp> is the model fingerprint in 16 hex digits. state, ver, lease and idem expire with the
 * session's idle_ttl_ms (PEXPIRE, refreshed by every commit and every lease taken); nothing of a
 * session expires before that (an expiry is an AOF write Redis fsyncs before it answers on).
 *
 * One writer per session: a node serves a session only while it holds its lease. Every commit
 * is one Lua script: refused when another node holds the lease or the stored version is not
 * the one this copy started from (compare-and-set); a refused commit means another node took
 * the session over: this copy is stale, it is dropped (recurd_redis_fenced_commits_total).
 * A request for a session leased by another live node is answered 409 session_leased with
 * the holder's name (header Recurd-Lease-Holder); it is never forwarded.
 *
 * Commits: at the end of every request that changed a session (fold, generate, create, fork,
 * state upload, checkpoint take/delete, rollback). With redis_sync the response waits for the
 * commit; without, it is sent first and the commit follows at once (one commit in flight per
 * session; Redis is behind the node by at most that commit while Redis is up).
 *
 * Everything here runs on the loop thread.
 */
#ifndef SRV_REDIS_TIER_H
#define SRV_REDIS_TIER_H

#include "app.h"
#include "buf.h"
#include "ops.h"

/* Start the tier when --redis is set (after the listener: the default node name is
 * hostname:port). 0, or -1 after logging why (the daemon must refuse to start). */
int srv_tier_start(srv_app *app, int port);
/* 1 when --redis is set. */
int srv_tier_enabled(const srv_app *app);
/* SIGTERM after the workers were joined: commit every changed session, then close the
 * connection. */
void srv_tier_shutdown(srv_app *app);
void srv_tier_free(srv_app *app);

/* A request names session id (routes.c, before its handler). mutating: it queues an op.
 *   SRV_TIER_PASS      *s is the resident session, this node may serve it;
 *   SRV_TIER_ANSWERED  answered (404, 409 session_leased, 503 store_unavailable);
 *   SRV_TIER_HOLD      Redis is asked (lease, state): hold the request (offloop.h
 *                      srv_held_add with wait_store) and look it up again once
 *                      srv_held_store_ready(app, id) is called. */
typedef enum { SRV_TIER_PASS, SRV_TIER_ANSWERED, SRV_TIER_HOLD } srv_tier_gate;
srv_tier_gate srv_tier_lookup(srv_app *app, srv_conn *c, const char *id, int mutating,
                              srv_session **s);

/* With state_dir: the read of id's file that srv_tier_lookup started (srv_residency_cached:
 * SRV_CACHED_HOLD) is settled: s (detached, or NULL) of stamp ver, gate an srv_cached_gate
 * (residency.h). Its version is asked of Redis, the requests still held. */
void srv_tier_cached_read(srv_app *app, const char *id, srv_session *s, uint64_t ver, int gate);

/* s changed (nothing in flight on it): commit it, with its Idempotency-Key records not in
 * Redis yet (idempotency.h). waiter: an op whose response waits for the commit (redis_sync), or
 * NULL. Returns 1 when srv_ops_committed(waiter, rc) will be called, 0 when the caller goes on at
 * once (no tier, async, or an internal client's session). */
int srv_tier_commit(srv_app *app, srv_session *s, srv_op *waiter);
/* op (head of s, key not among s's own records) asks Redis for key's record: 1 when
 * srv_ops_idem_answer(op, ...) will be called, 0 when there is nothing to ask (no tier, or s was
 * never committed). */
int srv_tier_idem_get(srv_app *app, srv_session *s, const char *key, srv_op *op);
/* The session's op ended (any kind): a commit left pending is sent now. */
void srv_tier_op_end(srv_app *app, srv_session *s);
/* DELETE: remove the session's keys. Returns 1 when srv_ops_committed(op, rc) will be called
 * (the local session stays until then), 0 when there is no tier. */
int srv_tier_delete(srv_app *app, srv_session *s, srv_op *op);

/* For the other users of the tier's connection (prefix_redis.h): the connection while Redis is
 * up, else NULL; the model fingerprint as the keys spell it (16 hex digits). */
struct srv_redis *srv_tier_conn(srv_app *app);
const char *srv_tier_fingerprint(const srv_app *app);

/* rc of srv_ops_committed */
enum { SRV_TIER_OK = 0, SRV_TIER_UNAVAILABLE = 1, SRV_TIER_FENCED = 2 };

/* GET /healthz with the tier on: {"status":"ok"|"degraded","redis":{...}}; returns 200. */
int srv_tier_health(srv_app *app, proto_buf *b);
/* Prometheus lines for /metrics. */
void srv_tier_metrics(srv_app *app, proto_buf *b);

#endif /* SRV_REDIS_TIER_H */
