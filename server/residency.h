/*
 * residency.h — which sessions live in memory, and when they are written to state_dir.
 *
 * Without state_dir: max_resident_sessions (when set) caps max_sessions; nothing is written.
 * With state_dir (persist.h):
 *   - at start every "<id>.snap" is indexed; a session is loaded on first access (lazy), and a
 *     snapshot that fails any check is quarantined (404 for that id, others unaffected);
 *   - max_resident_sessions: a session that must become resident (create, fork, lazy load)
 *     when the budget is full first evicts the least recently used idle session (no queued or
 *     running request, no write in flight): written to disk if it changed, then dropped;
 *   - every snapshot_interval_ms, sessions changed since their last snapshot are written; a
 *     session computing at that moment is copied at its next boundary between two work items
 *     (srv_residency_capture; a generation is asked to come back once), so steady load never
 *     keeps a session off the disk;
 *   - every session idle for evict_idle_ms is written and dropped from memory;
 *   - idle_ttl_ms deletes resident and disk-only sessions alike (the file too);
 *   - a deleted session's file is unlinked at once (the directory fsynced within a tick); an
 *     unlink that fails leaves a durable tombstone (persist.h) and is retried every tick, and
 *     a deleted id is never loaded again (not even after a restart: the tombstone);
 *   - SIGTERM (srv_residency_shutdown) writes every changed session before exit.
 * Periodic, idle and shutdown writes run on libuv's threadpool; the state is serialized on the
 * loop thread first (a copy, no disk I/O), so a worker never reads a live session; a computing
 * session's state is only copied (recur_state_copy into a pooled spare) on the loop thread, and
 * the threadpool serializes that copy; an evicted session's state and logits are handed to the
 * write job (the session is dropped: no worker reads a live session), serialized by the
 * threadpool and returned to the table's spares when the write is done, so an eviction makes
 * no pass over the state on the loop thread. Budget evictions write on the loop thread only
 * when MAX_EVICT_INFLIGHT writes are in flight or persistence is degraded.
 *
 * Everything here runs on the loop thread, except the reads of resumes whose file is not in the
 * page cache (srv_residency_resume: reader threads, readpool.h).
 */
#ifndef SRV_RESIDENCY_H
#define SRV_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

#include "app.h"
#include "buf.h"

/* After srv_table_create: open state_dir (when configured) and install the table hooks.
 * Returns 0, or -1 after logging why (the daemon must refuse to start). */
int srv_residency_start(srv_app *app);
/* SIGTERM, after the scheduler's workers were joined: stop the timer and write every changed
 * session; the loop keeps running until the writes are done. */
void srv_residency_shutdown(srv_app *app);
/* After uv_run returned. */
void srv_residency_free(srv_app *app);

/* Between two work items of s (nothing of s in flight: ops.c calls it right before it
 * submits the next slice, step or generation, when s->snap_wanted is set): copy the state for
 * the snapshot round that found s computing, and hand the write to the threadpool. The stream
 * waits for that one copy only. */
void srv_residency_capture(srv_app *app, srv_session *s);

/* The session of a request's {id} (routes.c): resident, or loaded from state_dir. A snapshot in
 * the page cache is read and checked here on the loop thread (about 0.1 ms for the default
 * model's); one that must come from the disk is read and checked by a reader thread
 * (readpool.h) while the loop serves other requests: SRV_RESUME_HOLD, the caller holds the
 * request (srv_held_add_store_wait) and it is applied, in arrival order with any later request
 * for the id, once the read is settled (srv_held_store_ready): then the session is resident,
 * or gone (404: quarantined, expired or deleted meanwhile), or its read failed (503, file kept).
 * SRV_RESUME_PASS: *out is the session, or NULL (srv_residency_take_load_error tells 503). */
typedef enum { SRV_RESUME_PASS, SRV_RESUME_HOLD } srv_resume_gate;
srv_resume_gate srv_residency_resume(srv_app *app, const char *id, srv_session **out);

/* ---------------------------------------------------------------- with the Redis tier
 *
 * With --redis too, a state_dir file is a cache of one Redis version (docs/SCALING.md "State dir
 * with Redis"): stamped with it (redis_stamp.h), written only while Redis holds exactly the
 * session's state (committed, nothing pending or in flight, not fenced, idle), never trusted
 * before Redis confirmed its version. A file makes no session exist: it does not count against
 * max_sessions, srv_table_find never loads it, idle_ttl_ms only removes it. */

/* id's file, for a lookup of a session not resident (redis_tier.c):
 *   SRV_CACHED_NONE      no file to try (none, or its write is in flight, or an I/O error);
 *   SRV_CACHED_REJECTED  a file without a stamp, or one that failed a check (quarantined): not
 *                        trusted;
 *   SRV_CACHED_READY     *out: a detached session decoded from it (srv_table_detached), *ver
 *                        its stamp: srv_residency_cached_link or _discard it;
 *   SRV_CACHED_HOLD      a reader thread reads it: srv_tier_cached_read(app, id, s, ver, gate)
 *                        is called on the loop with one of the above. */
typedef enum { SRV_CACHED_NONE, SRV_CACHED_REJECTED, SRV_CACHED_READY, SRV_CACHED_HOLD } srv_cached_gate;
srv_cached_gate srv_residency_cached(srv_app *app, const char *id, srv_session **out, uint64_t *ver);
/* Redis confirmed the file's version: s joins the table (room made first), clean. */
void srv_residency_cached_link(srv_app *app, srv_session *s);
/* The file was not used (stale, leased elsewhere, deleted, Redis unreachable): s freed (NULL ok). */
void srv_residency_cached_discard(srv_app *app, srv_session *s);
/* s was loaded from Redis (just adopted): its file, if any, is stale, rewritten at its next
 * write (round, idle or budget eviction, SIGTERM). */
void srv_residency_adopted(srv_app *app, srv_session *s);
/* s leaves memory by the tier's decision (before srv_table_drop): gone (deleted or expired in
 * Redis) removes its file, else the file stays (a write in flight finishes). */
void srv_residency_dropping(srv_app *app, srv_session *s, int gone);
/* id (not resident) is gone from Redis: its file is removed. */
void srv_residency_forget(srv_app *app, const char *id);
/* A commit of s was accepted: after SIGTERM, s is written now (it was skipped until then). */
void srv_residency_committed(srv_app *app, srv_session *s);
/* 1 when state_dir is set. */
int srv_residency_persists(const srv_app *app);

/* 1 when the last lookup found the session's snapshot but could not read it (an I/O error
 * or no memory: the file is kept, a retry may succeed); clears the flag. */
int srv_residency_take_load_error(srv_app *app);

/* GET /healthz: fills b, returns the status code (200 {"status":"ok"}, or 200
 * {"status":"degraded","persistence":"..."} after a failed snapshot write until the next
 * successful one). */
int srv_residency_health(srv_app *app, proto_buf *b);
/* Prometheus lines for /metrics. */
void srv_residency_metrics(srv_app *app, proto_buf *b);

#endif /* SRV_RESIDENCY_H */
