/* prefix_redis.c — the prefix-state cache shared through Redis (prefix_redis.h). */
#include "prefix_redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "prefix_cache.h"
#include "redis_conn.h"
#include "redis_tier.h"

/* Store an entry. KEYS: entry, its index, all. ARGV: the bytes, ttl_ms, max_entries, the index
 * member, its length n (the member's score), the index bound. -> entries evicted. The eviction
 * (the oldest stored past max_entries, and the expired ones' names) deletes keys named in the
 * all set: the same hash tag, so the same slot. */
static const char STORE_LUA[] =
    "local ttl = tonumber(ARGV[2])\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)\n"
    "redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])\n"
    "local cap = tonumber(ARGV[6])\n"
    "if redis.call('ZCARD', KEYS[2]) > cap then redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -cap - 1) end\n"
    "redis.call('PEXPIRE', KEYS[2], ttl)\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZADD', KEYS[3], now, KEYS[1])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - ttl)\n"
    "local evicted = 0\n"
    "while redis.call('ZCARD', KEYS[3]) > tonumber(ARGV[3]) do\n"
    "  local old = redis.call('ZPOPMIN', KEYS[3])\n"
    "  redis.call('DEL', old[1]) evicted = evicted + 1\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[3], ttl)\n"
    "return evicted\n";

/* The members of index keys KEYS of length in [ARGV[1], ARGV[2]], at most ARGV[3] per key. */
static const char INDEX_LUA[] =
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  for _, v in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])) do\n"
    "    out[#out + 1] = v\n"
    "  end\n"
    "end\n"
    "return out\n";

/* The first of the entry keys KEYS that exists: {its position (1-based), its bytes}, or {}. */
static const char FETCH_LUA[] =
    "for i = 1, #KEYS do\n"
    "  local v = redis.call('GET', KEYS[i])\n"
    "  if v then return {i, v} end\n"
    "end\n"
    "return {}\n";

#define KEY_MAX 160
#define MEMBER_LEN 26 /* 10 hex digits of n, 16 of h */
#define FETCH_MAX 4   /* candidates fetched in one round trip, longest first */
#define ANCHORS_MAX 64

typedef struct srv_pcredis {
    srv_app *app;
    uint64_t ttl_ms, max_entries;
    size_t inflight_max, inflight;
    /* /metrics */
    uint64_t lookups, hits, hit_tokens, misses, errors, invalid, bytes_read;
    uint64_t stores, store_bytes, dropped, store_failures, evicted;
} srv_pcredis;

static srv_pcredis *pcr_of(const srv_app *app)
{
    return app->pcredis;
}

static size_t key_of(const srv_pcredis *p, char *out, char kind, size_t n, uint64_t h)
{
    return (size_t)snprintf(out, KEY_MAX, "%s:pc:{%s}:%c:%010llx%016llx", p->app->cfg.redis_key_prefix,
                            srv_tier_fingerprint(p->app), kind, (unsigned long long)n,
                            (unsigned long long)h);
}

/* The index an entry of n tokens is in: the largest power of two <= n (n >= 1). */
static size_t anchor_of(size_t n)
{
    size_t a = 1;
    while (a <= n / 2)
        a *= 2;
    return a;
}

/* ---------------------------------------------------------------- stores */

typedef struct {
    srv_pcredis *p;
    size_t len;
} store_job;

static void store_done(srv_redis *r, redisReply *rep, void *arg)
{
    store_job *j = arg;
    srv_pcredis *p = j->p;
    p->inflight -= j->len;
    if (rep && rep->type == REDIS_REPLY_INTEGER) {
        p->stores++;
        p->store_bytes += j->len;
        p->evicted += (uint64_t)rep->integer;
    } else {
        p->store_failures++;
        if (rep && rep->type == REDIS_REPLY_ERROR)
            srv_log(SRV_LOG_WARN, "redis_prefix_store_error", "\"error\":\"%.200s\"", rep->str);
    }
    free(j);
}

static void on_store(void *ctx, const int32_t *ids, size_t n, uint64_t h, const uint8_t *blob,
                     size_t blob_len)
{
    srv_pcredis *p = ctx;
    srv_app *app = p->app;
    srv_redis *r = srv_tier_conn(app);
    size_t len = srv_pcache_entry_max_bytes(app->pcache, n); /* >= the entry's bytes */
    if (!r || p->inflight + len > p->inflight_max) {
        p->dropped++; /* never waited for: the local entry is kept, Redis just lacks this one */
        return;
    }
    uint8_t *bytes = srv_pcache_entry_bytes(app->pcache, ids, n, blob, blob_len, &len);
    size_t a = anchor_of(n);
    char ek[KEY_MAX], xk[KEY_MAX], ak[KEY_MAX], member[MEMBER_LEN + 1], ttl[24], maxe[24], sn[24],
        cap[24];
    size_t ekl = key_of(p, ek, 'e', n, h);
    size_t xkl = key_of(p, xk, 'x', a, srv_pcache_hash(RECUR_FNV_OFFSET, ids, a));
    size_t akl = (size_t)snprintf(ak, sizeof ak, "%s:pc:{%s}:all", app->cfg.redis_key_prefix,
                                  srv_tier_fingerprint(app));
    snprintf(member, sizeof member, "%010llx%016llx", (unsigned long long)n, (unsigned long long)h);
    snprintf(ttl, sizeof ttl, "%llu", (unsigned long long)p->ttl_ms);
    snprintf(maxe, sizeof maxe, "%llu", (unsigned long long)p->max_entries);
    snprintf(sn, sizeof sn, "%zu", n);
    snprintf(cap, sizeof cap, "%d", REDIS_PREFIX_INDEX_MAX);
    const char *argv[12] = {"EVAL", STORE_LUA, "3", ek, xk, ak, (const char *)bytes, ttl, maxe,
                            member, sn, cap};
    size_t lens[12] = {4, strlen(STORE_LUA), 1, ekl, xkl, akl, len, strlen(ttl), strlen(maxe),
                       MEMBER_LEN, strlen(sn), strlen(cap)};
    store_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->p = p;
    j->len = len;
    if (srv_redis_command(r, store_done, j, 12, argv, lens) != 0) {
        free(j);
        p->dropped++;
    } else {
        p->inflight += len;
    }
    free(bytes);
}

/* ---------------------------------------------------------------- lookups */

typedef struct {
    size_t n;
    uint64_t h;
} cand;

typedef struct {
    srv_pcredis *p;
    srv_op *op;
    cand c[FETCH_MAX];
    int nc;
} lookup_job;

/* The lookup ends: op goes on (s->pc_cached is what s now holds). */
static void lookup_end(lookup_job *j, int outcome)
{
    srv_pcredis *p = j->p;
    srv_op *op = j->op;
    if (outcome == 0)
        p->misses++;
    else if (outcome < 0)
        p->errors++; /* Redis down, an error or a timeout: a plain miss */
    free(j);
    op->sess->pc_cached = op->sess->tokens_seen;
    srv_ops_pc_remote_done(op);
}

static void fetch_done(srv_redis *r, redisReply *rep, void *arg)
{
    lookup_job *j = arg;
    srv_pcredis *p = j->p;
    if (!rep || rep->type != REDIS_REPLY_ARRAY) {
        if (rep && rep->type == REDIS_REPLY_ERROR)
            srv_log(SRV_LOG_WARN, "redis_prefix_lookup_error", "\"error\":\"%.200s\"", rep->str);
        lookup_end(j, -1);
        return;
    }
    if (rep->elements != 2 || rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_STRING || rep->element[0]->integer < 1 ||
        rep->element[0]->integer > j->nc) {
        lookup_end(j, 0); /* every candidate expired or evicted meanwhile */
        return;
    }
    const cand *c = &j->c[rep->element[0]->integer - 1];
    srv_op *op = j->op;
    const char *why = NULL;
    p->bytes_read += rep->element[1]->len;
    int rc = srv_pcache_adopt(p->app->pcache, op->tokens, c->n, c->h,
                              (const uint8_t *)rep->element[1]->str, rep->element[1]->len,
                              op->sess, &why);
    if (rc != 0) {
        p->invalid++;
        srv_log(SRV_LOG_WARN, "redis_prefix_entry_refused", "\"reason\":\"%s\",\"tokens\":%zu",
                why ? why : "prefix_state", c->n);
        lookup_end(j, 0);
        return;
    }
    p->hits++;
    p->hit_tokens += c->n;
    lookup_end(j, 1);
}

static int by_n(const void *a, const void *b)
{
    size_t x = ((const cand *)a)->n, y = ((const cand *)b)->n;
    return x < y ? -1 : x > y;
}

static void index_done(srv_redis *r, redisReply *rep, void *arg)
{
    lookup_job *j = arg;
    srv_op *op = j->op;
    size_t m = op->sess->tokens_seen, n = op->n;
    if (!rep || rep->type != REDIS_REPLY_ARRAY) {
        if (rep && rep->type == REDIS_REPLY_ERROR)
            srv_log(SRV_LOG_WARN, "redis_prefix_lookup_error", "\"error\":\"%.200s\"", rep->str);
        lookup_end(j, -1);
        return;
    }
    /* the members that can be a prefix of the prompt longer than the local hit, shortest first */
    size_t nc = 0;
    cand *cs = malloc((rep->elements ? rep->elements : 1) * sizeof *cs);
    if (!cs)
        abort();
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_STRING || e->len != MEMBER_LEN)
            continue;
        char a[11], b[17];
        memcpy(a, e->str, 10);
        a[10] = '\0';
        memcpy(b, e->str + 10, 16);
        b[16] = '\0';
        size_t cn = (size_t)strtoull(a, NULL, 16);
        if (cn > m && cn <= n)
            cs[nc++] = (cand){cn, strtoull(b, NULL, 16)};
    }
    qsort(cs, nc, sizeof *cs, by_n);
    /* one pass over the prompt's ids: keep those whose hash is the prompt's at their length */
    size_t matched = 0, at = 0;
    uint64_t h = RECUR_FNV_OFFSET;
    for (size_t i = 0; i < nc; i++) {
        h = srv_pcache_hash(h, op->tokens + at, cs[i].n - at);
        at = cs[i].n;
        if (h == cs[i].h && !(matched && cs[matched - 1].n == cs[i].n))
            cs[matched++] = cs[i];
    }
    j->nc = 0;
    while (matched > 0 && j->nc < FETCH_MAX)
        j->c[j->nc++] = cs[--matched]; /* longest first */
    free(cs);
    srv_redis *conn = srv_tier_conn(j->p->app);
    if (j->nc == 0 || !conn) {
        lookup_end(j, j->nc == 0 ? 0 : -1);
        return;
    }
    char keys[FETCH_MAX][KEY_MAX];
    const char *argv[3 + FETCH_MAX];
    size_t lens[3 + FETCH_MAX];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", j->nc);
    argv[0] = "EVAL", lens[0] = 4;
    argv[1] = FETCH_LUA, lens[1] = strlen(FETCH_LUA);
    argv[2] = nk, lens[2] = strlen(nk);
    for (int i = 0; i < j->nc; i++) {
        lens[3 + i] = key_of(j->p, keys[i], 'e', j->c[i].n, j->c[i].h);
        argv[3 + i] = keys[i];
    }
    if (srv_redis_command(conn, fetch_done, j, 3 + j->nc, argv, lens) != 0)
        lookup_end(j, -1);
}

int srv_pcredis_lookup(srv_app *app, srv_op *op)
{
    srv_pcredis *p = pcr_of(app);
    if (!p || op->n == 0)
        return 0;
    size_t m = op->sess->tokens_seen, n = op->n;
    if (m >= n)
        return 0;
    p->lookups++;
    srv_redis *r = srv_tier_conn(app);
    if (!r) {
        p->errors++;
        return 0;
    }
    /* EVAL INDEX_LUA numkeys, the index keys an entry of length in (m, n] is in (anchors a = 2^k
     * with m/2 < a <= n, the prompt's hash at each), then the bounds and the limit */
    char keys[ANCHORS_MAX][KEY_MAX], snk[8], lo[24], hi[24], lim[24];
    const char *argv[3 + ANCHORS_MAX + 3];
    size_t lens[3 + ANCHORS_MAX + 3];
    int c = 3, nk = 0;
    size_t at = 0;
    uint64_t h = RECUR_FNV_OFFSET;
    for (size_t a = 1; a <= n && nk < ANCHORS_MAX; a *= 2) {
        h = srv_pcache_hash(h, op->tokens + at, a - at);
        at = a;
        if (2 * a > m) {
            lens[c] = key_of(p, keys[nk], 'x', a, h);
            argv[c++] = keys[nk++];
        }
        if (a > n / 2)
            break;
    }
    snprintf(snk, sizeof snk, "%d", nk);
    snprintf(lo, sizeof lo, "%zu", m + 1);
    snprintf(hi, sizeof hi, "%zu", n);
    snprintf(lim, sizeof lim, "%d", REDIS_PREFIX_INDEX_MAX);
    argv[0] = "EVAL", lens[0] = 4;
    argv[1] = INDEX_LUA, lens[1] = strlen(INDEX_LUA);
    argv[2] = snk, lens[2] = strlen(snk);
    argv[c] = lo, lens[c++] = strlen(lo);
    argv[c] = hi, lens[c++] = strlen(hi);
    argv[c] = lim, lens[c++] = strlen(lim);
    lookup_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->p = p;
    j->op = op;
    if (srv_redis_command(r, index_done, j, c, argv, lens) != 0) {
        free(j);
        p->errors++;
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- life, metrics */

void srv_pcredis_start(srv_app *app)
{
    const srv_config *cfg = &app->cfg;
    if (!srv_tier_enabled(app) || !srv_pcache_enabled(app->pcache) || cfg->redis_prefix_max_entries == 0)
        return;
    srv_pcredis *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->app = app;
    p->ttl_ms = cfg->redis_prefix_ttl_ms;
    p->max_entries = cfg->redis_prefix_max_entries;
    p->inflight_max = cfg->redis_prefix_inflight_bytes;
    app->pcredis = p;
    srv_pcache_set_store_hook(app->pcache, on_store, p);
}

void srv_pcredis_free(srv_app *app)
{
    srv_pcache_set_store_hook(app->pcache, NULL, NULL);
    free(app->pcredis);
    app->pcredis = NULL;
}

void srv_pcredis_metrics(const srv_app *app, proto_buf *b)
{
    const srv_pcredis *p = pcr_of(app);
    srv_pcredis z;
    if (!p) {
        memset(&z, 0, sizeof z);
        p = &z;
    }
    const srv_metric_row m[] = {
        {"recurd_redis_prefix_lookups_total", "counter",
         "Cached creates that asked Redis for a prefix longer than the local hit.", p->lookups},
        {"recurd_redis_prefix_hits_total", "counter",
         "Lookups answered by a prefix-cache entry from Redis.", p->hits},
        {"recurd_redis_prefix_hit_tokens_total", "counter",
         "Prompt tokens restored from Redis's prefix-cache entries instead of folded.", p->hit_tokens},
        {"recurd_redis_prefix_misses_total", "counter",
         "Lookups with no usable longer entry in Redis.", p->misses},
        {"recurd_redis_prefix_errors_total", "counter",
         "Lookups that got no answer (Redis down, an error, a timeout): plain misses.", p->errors},
        {"recurd_redis_prefix_invalid_total", "counter",
         "Entries read from Redis that failed a check (other ids, format, checksum, state): misses.",
         p->invalid},
        {"recurd_redis_prefix_bytes_read_total", "counter",
         "Bytes of prefix-cache entries read from Redis.", p->bytes_read},
        {"recurd_redis_prefix_stores_total", "counter",
         "Prefix-cache entries Redis accepted.", p->stores},
        {"recurd_redis_prefix_bytes_written_total", "counter",
         "Bytes of prefix-cache entries Redis accepted.", p->store_bytes},
        {"recurd_redis_prefix_dropped_total", "counter",
         "Entries not sent to Redis (redis_prefix_inflight_bytes reached, or Redis down).", p->dropped},
        {"recurd_redis_prefix_store_failures_total", "counter",
         "Entry stores Redis refused or did not answer.", p->store_failures},
        {"recurd_redis_prefix_evicted_total", "counter",
         "Entries this node's stores evicted from Redis past redis_prefix_max_entries.", p->evicted},
        {"recurd_redis_prefix_inflight_bytes", "gauge",
         "Bytes of entry stores sent and not answered yet.", p->inflight},
    };
    srv_metric_rows(b, m, sizeof m / sizeof *m);
}
