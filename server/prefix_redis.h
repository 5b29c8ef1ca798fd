/*
 * prefix_redis.h — the prefix-state cache shared through Redis (docs/SCALING.md "Prefix cache in
 * Redis"). With --redis, every entry a node stores in its prefix cache (prefix_cache.h) is also
 * written to Redis, and a cached create whose prompt the local cache does not cover asks Redis
 * for a longer stored prefix, so a conversation resent to another node (nginx spreads the
 * OpenAI routes) folds only its new tokens there.
 *
 * Keys (one hash tag per model: all of a model's prefix keys live in one Redis Cluster slot,
 * which is what lets one script evict across them):
 *
 *   <prefix>:pc:{<fp>}:e:<n><h>    an entry: the spill file's bytes (srv_pcache_entry_bytes:
 *                                  fingerprint, the ids t[0..n), the state blob, checksum);
 *                                  n = 10 hex digits, h = h(t[0..n)) in 16 (srv_pcache_hash)
 *   <prefix>:pc:{<fp>}:x:<a><ha>   the index of the entries whose first a tokens hash to ha, a =
 *                                  the largest power of two <= n: a sorted set of "<n><h>" by n,
 *                                  the REDIS_PREFIX_INDEX_MAX longest kept
 *   <prefix>:pc:{<fp>}:all         every entry key by the time it was stored (Redis's clock):
 *                                  the oldest go past redis_prefix_max_entries
 *
 * Every key carries PX redis_prefix_ttl_ms (refreshed by the stores that touch it).
 *
 * Store (after a local insert, asynchronously): one script (SET the entry, index it, evict the
 * oldest past the count). At most redis_prefix_inflight_bytes of entries are on their way at
 * once; an entry past it (or while Redis is down) is dropped and counted, never waited for.
 *
 * Lookup (a cached create whose local hit m is shorter than its prompt t[0..N)): the prompt's
 * hashes at the powers of two a in (m/2, N] name the index keys an entry longer than m can be
 * in (one read-only script returns their members of length in (m, N]); the members whose hash
 * equals the prompt's at their length are fetched longest first (a second script returns the
 * first that still exists), and the bytes are trusted for nothing (srv_pcache_adopt: the ids
 * must equal the prompt's, one by one). The request waits for the replies without blocking the
 * loop; a Redis error, a timeout (redis_timeout_ms) or Redis down is a plain miss, counted.
 *
 * Everything here runs on the loop thread.
 */
#ifndef SRV_PREFIX_REDIS_H
#define SRV_PREFIX_REDIS_H

#include "app.h"
#include "buf.h"
#include "ops.h"

/* Index members kept per index key (the longest prefixes stay). */
#define REDIS_PREFIX_INDEX_MAX 64

/* With the tier started and the prefix cache on, and redis_prefix_max_entries > 0: hook the
 * local cache's stores. */
void srv_pcredis_start(srv_app *app);
void srv_pcredis_free(srv_app *app);

/* op (a cached create, its local hit restored: op->sess->pc_cached tokens) asks Redis for a
 * longer stored prefix of op->tokens. 1: srv_ops_pc_remote_done(op) will be called once (with
 * op->sess->pc_cached updated on a hit); 0: nothing to ask (no shared tier, Redis down, the
 * local hit covers the prompt). */
int srv_pcredis_lookup(srv_app *app, srv_op *op);

/* The recurd_redis_prefix_* lines. */
void srv_pcredis_metrics(const srv_app *app, proto_buf *b);

#endif /* SRV_PREFIX_REDIS_H */
