/* redis_tier.c — sessions shared through Redis: keys, leases, commits, loads (redis_tier.h). */
#include "redis_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "checkpoints.h"
#include "idempotency.h"
#include "log.h"
#include "metrics.h"
#include "offloop.h"
#include "persist.h"
#include "prefix_redis.h"
#include "redis_conn.h"
#include "residency.h"

/* ---------------------------------------------------------------- the scripts
 *
 * KEYS of every script: state, ver, lease, idem, idemq of one session (one hash tag: one slot). */

/* The lease: the lease key's value "<node> <deadline>", the deadline in ms of Redis's clock
 * (TIME); the node holds it while TIME < deadline. The key has no TTL of its own (lease_put
 * gives it the version key's: it lives and dies with the session), so a lease never expires in
 * Redis. An expiring key is written to the AOF as a DEL — by the expiry cycle, and when any
 * command (a script too, REPL_NONE or not) reads the key lazily expired — and with appendfsync
 * always Redis fsyncs that before it answers the next command: the expiries of the leases a
 * burst of resumes took stalled the resumes in flight 10 s later (an fsync of 0.3-7 ms per
 * expiry cycle, up to 107 ms while the disk was busy, on this machine 2026-12-03), and a resume
 * of a session whose last lease had run out paid one itself.
 *   lease_of()          the lease's node and deadline (nil: none)
 *   lease_holder(now)   the node holding a live lease and its ms left (nil: none)
 *   lease_put(node, now, ms)  take it for ms (no session — no version key — no lease) */
#define LEASE_LUA                                                                                 \
    "local function now_ms() local t = redis.call('TIME')\n"                                      \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end\n"                    \
    "local function lease_of()\n"                                                                 \
    "  local node, dl = string.match(redis.call('GET', KEYS[3]) or '', '^(%S+) (%d+)$')\n"        \
    "  return node, tonumber(dl) end\n"                                                           \
    "local function lease_holder(now) local node, dl = lease_of()\n"                              \
    "  if node and dl > now then return node, dl - now end end\n"                                 \
    "local function lease_put(node, now, ms) local pt = redis.call('PTTL', KEYS[2])\n"            \
    "  if pt == -2 then return end\n"                                                             \
    "  local v = node .. ' ' .. string.format('%.0f', now + ms)\n"                                \
    "  if pt > 0 then redis.call('SET', KEYS[3], v, 'PX', pt) else redis.call('SET', KEYS[3], v) end\n" \
    "end\n"

/* Take (or keep) the lease and say what Redis holds. ARGV: node, lease_ms, the caller's version
 * ("" = it has no copy), ttl_ms (0 = none), "1" = return the state, "0" = not (the caller has no
 * copy and GETs the state in the same MULTI/EXEC: a state returned through Lua cost Redis 379 us
 * per call for the default model's 197,704 bytes, a plain GET 21 us and the script alone 14 us).
 * -> {-1, holder, ms left}  leased by another node
 *    {-3}                no such session
 *    {0, ver}            the caller's copy is current
 *    {1, ver, state}     the current state (the caller's copy is stale or missing); {1, ver}
 *                        with "0"
 *
 * Its writes (the lease, the TTL refresh) are not propagated to the AOF or to replicas
 * (REPL_NONE): with appendfsync always, Redis answers a script that wrote only after an fsync
 * of its AOF (12 ms p50 on this machine's disk, 2026-12-02), which was most of a resume from
 * Redis. Neither write needs to survive Redis: the lease is an optimisation of one-writer (the
 * version compare-and-set of every commit is what fences a second writer: after a Redis restart
 * or failover lost a lease, two nodes may both load the session, and the second to commit is
 * refused), and a TTL refresh lost that way leaves the key expiring idle_ttl_ms after its last
 * commit instead of its last load. Nor does anything it reads expire (LEASE_LUA): a resume
 * writes nothing to the AOF. */
static const char ACQUIRE_LUA[] =
    "redis.set_repl(redis.REPL_NONE)\n" LEASE_LUA
    "local now = now_ms()\n"
    "local h, left = lease_holder(now)\n"
    "if h and h ~= ARGV[1] then return {-1, h, left} end\n"
    "local v = redis.call('GET', KEYS[2])\n"
    "if not v then return {-3} end\n"
    "local ttl = tonumber(ARGV[4])\n"
    "if ttl > 0 then\n"
    "  redis.call('PEXPIRE', KEYS[1], ttl) redis.call('PEXPIRE', KEYS[2], ttl)\n"
    "  redis.call('PEXPIRE', KEYS[4], ttl) redis.call('PEXPIRE', KEYS[5], ttl)\n"
    "end\n"
    "lease_put(ARGV[1], now, tonumber(ARGV[2]))\n"
    "if v == ARGV[3] then return {0, v} end\n"
    "if ARGV[5] == '0' then return {1, v} end\n"
    "return {1, v, redis.call('GET', KEYS[1])}\n";

/* Commit: compare-and-set on the version. ARGV: node, expected version, state, ttl_ms,
 * lease_ms (0: the lease is not taken — a new session's first commit), the records kept at
 * most, this commit's token ("<incarnation>:<seq>"), this process's incarnation when the
 * copy has commits whose outcome is unknown ("" none) and the seq of the first of them, then
 * (Idempotency-Key, record) pairs: added to the idem hash, their keys queued in idemq, the
 * oldest past the bound forgotten. The token of the last commit is kept in the idem hash under
 * " commit" (a space: never an Idempotency-Key). A commit whose connection was reset may still
 * have been applied (its bytes were in Redis's socket). All of this copy's unknown commits
 * expected the same version, so at most one of them applied: when the version is exactly one
 * past the expected one and the last commit is one of them (this incarnation, seq at least the
 * first unknown one), this copy descends from what Redis holds, and it is committed over it
 * instead of being fenced.
 * -> {0, ver} committed; {-1, holder} leased by another node; {-2, ver} the version moved on */
static const char COMMIT_LUA[] =
    LEASE_LUA
    "local now = now_ms()\n"
    "local h = lease_holder(now)\n"
    "if h and h ~= ARGV[1] then return {-1, h} end\n"
    "local v = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
    "if v ~= tonumber(ARGV[2]) then\n"
    "  local last = ARGV[8] ~= '' and v == tonumber(ARGV[2]) + 1 and\n"
    "              redis.call('HGET', KEYS[4], ' commit')\n"
    "  local inc, seq\n"
    "  if last then inc, seq = string.match(last, '^(%x+):(%d+)$') end\n"
    "  if not (inc == ARGV[8] and tonumber(seq) >= tonumber(ARGV[9])) then\n"
    "    return {-2, tostring(v)}\n"
    "  end\n"
    "end\n"
    "v = v + 1\n"
    "local ttl = tonumber(ARGV[4])\n"
    "if ttl > 0 then\n"
    "  redis.call('SET', KEYS[1], ARGV[3], 'PX', ttl) redis.call('SET', KEYS[2], v, 'PX', ttl)\n"
    "else\n"
    "  redis.call('SET', KEYS[1], ARGV[3]) redis.call('SET', KEYS[2], v)\n"
    "end\n"
    "if tonumber(ARGV[5]) > 0 then lease_put(ARGV[1], now, tonumber(ARGV[5])) end\n"
    "redis.call('HSET', KEYS[4], ' commit', ARGV[7])\n"
    "if #ARGV >= 10 then\n"
    "  for i = 10, #ARGV, 2 do\n"
    "    redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1]) redis.call('RPUSH', KEYS[5], ARGV[i])\n"
    "  end\n"
    "  while redis.call('LLEN', KEYS[5]) > tonumber(ARGV[6]) do\n"
    "    redis.call('HDEL', KEYS[4], redis.call('LPOP', KEYS[5]))\n"
    "  end\n"
    "end\n"
    "if ttl > 0 then redis.call('PEXPIRE', KEYS[4], ttl) redis.call('PEXPIRE', KEYS[5], ttl) end\n"
    "return {0, tostring(v)}\n";

/* Give a lease back (SIGTERM): only when this node holds it (live or run out). ARGV: node.
 * -> 1 or 0. */
static const char RELEASE_LUA[] =
    LEASE_LUA
    "if lease_of() == ARGV[1] then redis.call('DEL', KEYS[3]) return 1 end\n"
    "return 0\n";

/* Renew a lease held (or free). ARGV: node, lease_ms. -> 1, or the other holder's name. Not
 * propagated (REPL_NONE), as ACQUIRE_LUA's lease. */
static const char RENEW_LUA[] =
    "redis.set_repl(redis.REPL_NONE)\n" LEASE_LUA
    "local now = now_ms()\n"
    "local h = lease_holder(now)\n"
    "if h and h ~= ARGV[1] then return h end\n"
    "lease_put(ARGV[1], now, tonumber(ARGV[2]))\n"
    "return 1\n";

/* ---------------------------------------------------------------- state */

#define NODE_MAX 128
#define KEY_MAX 160

/* A lookup in flight (or just answered) for one id: the requests held for it read the answer. */
typedef enum { L_PENDING, L_OK, L_NOTFOUND, L_LEASED, L_UNAVAILABLE, L_INVALID } lresult;

typedef struct lookup {
    struct lookup *next;
    char id[33];
    lresult res;
    char holder[NODE_MAX + 1];
    long long holder_pttl;
    /* with state_dir (residency.h): the session read from the id's file (detached), whose
     * version the acquire sent as ours, until Redis answers; NULL when there is none (or it was
     * not trusted) */
    srv_session *cached;
} lookup;

/* States made ahead in the threadpool for sessions loaded from Redis: a state's first touch
 * (~200 KB of fresh pages for the default model: page faults and zeroing) was a third of the
 * loop's CPU time per resume (perf, 2026-12-02); made ahead it is off the loop and off the
 * request's path. Up to SPARES are kept ready in the session table's pool (freed states go there
 * too), fewer for a large state: no more than SPARES_BYTES of them (at least SPARES_MIN). A job
 * makes SPARES_BATCH at most and hands them over, and the next job starts from its completion,
 * so the first of a burst's states are ready after ~SPARES_BATCH first touches, not SPARES.
 * SPARES_NICE: the nice value they are made at where it can be put back after (offloop.h's
 * srv_nice_lower_restorable: root or RLIMIT_NICE; else at the threadpool's own). */
#define SPARES 32
#define SPARES_MIN 4
#define SPARES_BYTES (8u << 20)
#define SPARES_BATCH 4
#define SPARES_NICE 19

typedef struct srv_tier {
    srv_app *app;
    int spares_making; /* a threadpool job making spare states is in flight */
    uint64_t incarnation; /* random per process: a restarted node's tokens never match */
    uint64_t commit_seq;  /* the last commit token's sequence number */
    srv_redis *r;
    char node[NODE_MAX + 1];
    char fp[17];
    uint64_t lease_ms, ttl_ms;
    int sync;
    lookup *lookups;
    uv_timer_t tick;
    int tick_on;
    int shutting_down, closed;
    srv_hist latency;
    /* /metrics */
    uint64_t hits, misses, bytes_written, bytes_read, commits, commit_failures, lease_conflicts,
        fenced, loads_invalid, deletes, renewals;
    uint64_t file_hits, file_stale, file_rejected; /* state_dir files (srv_residency_cached) */
} srv_tier;

static srv_tier *tier_of(const srv_app *app)
{
    return app->tier;
}

int srv_tier_enabled(const srv_app *app)
{
    return app->tier != NULL;
}

struct srv_redis *srv_tier_conn(srv_app *app)
{
    srv_tier *t = tier_of(app);
    return t && srv_redis_up(t->r) && !t->closed ? t->r : NULL;
}

const char *srv_tier_fingerprint(const srv_app *app)
{
    return tier_of(app)->fp;
}

/* The keys of a session. */
#define NKEYS 5
typedef struct {
    char k[NKEYS][KEY_MAX];
    size_t len[NKEYS];
} keyset;

static void keys_of(const srv_tier *t, const char *id, keyset *ks)
{
    static const char *const suffix[NKEYS] = {"state", "ver", "lease", "idem", "idemq"};
    for (int i = 0; i < NKEYS; i++)
        ks->len[i] = (size_t)snprintf(ks->k[i], KEY_MAX, "%s:{%s:%s}:%s", t->app->cfg.redis_key_prefix,
                                      t->fp, id, suffix[i]);
}

/* EVAL script over the session's keys with argv (lens NULL: NUL-terminated strings). */
static int eval(srv_tier *t, const char *script, const keyset *ks, int argc, const char **argv,
                const size_t *lens, srv_redis_cb *cb, void *arg)
{
    int total = 3 + NKEYS + argc;
    const char **a = malloc((size_t)total * sizeof *a);
    size_t *l = malloc((size_t)total * sizeof *l);
    if (!a || !l)
        abort();
    int n = 0;
    a[n] = "EVAL", l[n++] = 4;
    a[n] = script, l[n++] = strlen(script);
    a[n] = "5", l[n++] = 1;
    for (int i = 0; i < NKEYS; i++)
        a[n] = ks->k[i], l[n++] = ks->len[i];
    for (int i = 0; i < argc; i++)
        a[n] = argv[i], l[n++] = lens ? lens[i] : strlen(argv[i]);
    int rc = srv_redis_command(t->r, cb, arg, n, a, l);
    free(a);
    free(l);
    return rc;
}

static int now_up(const srv_tier *t)
{
    return srv_redis_up(t->r) && !t->closed;
}

/* The session is idle: no request queued or running. */
static int idle(const srv_session *s)
{
    return s->q_len == 0 && !s->running;
}

/* A lease taken or renewed by a command sent at sent_ms: held until a little before it can
 * have expired in Redis (a tenth of it is kept as margin for clock rates). */
static void lease_taken(srv_tier *t, srv_session *s, uint64_t sent_ms)
{
    s->rv_lease_until = sent_ms + t->lease_ms - t->lease_ms / 10;
}

/* gone: deleted or expired in Redis (its state_dir file goes too). */
static void drop_copy(srv_tier *t, srv_session *s, int gone)
{
    srv_log(SRV_LOG_INFO, "redis_copy_dropped", "\"id_prefix\":\"%.8s\",\"version\":%llu", s->id,
            (unsigned long long)s->rv_version);
    srv_residency_dropping(t->app, s, gone);
    srv_table_drop(t->app->table, s);
}


/* ---------------------------------------------------------------- commits */

/* A command about one session in flight: what its reply callback needs. */
typedef struct {
    srv_tier *t;
    char id[33];
    uint64_t sent_ms;  /* uv_now when sent: a lease it takes runs from here */
    srv_op *waiter;    /* commit: the op whose response waits for it (redis_sync) */
    size_t len;        /* commit: bytes of the state */
    int took_lease;    /* commit: it takes (renews) the lease */
    int exec;          /* acquire: sent as MULTI, EVAL, GET state, EXEC (send_acquire) */
    uint64_t token;    /* commit: its sequence number (commit_token) */
} job;

static job *job_new(srv_tier *t, const char *id)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->t = t;
    memcpy(j->id, id, 33);
    j->sent_ms = uv_now(t->app->loop);
    return j;
}

static void send_commit(srv_tier *t, srv_session *s, srv_op *waiter);

/* The text of commit token seq of this process. */
static void commit_token(const srv_tier *t, uint64_t seq, char *out, size_t n)
{
    snprintf(out, n, "%016llx:%llu", (unsigned long long)t->incarnation, (unsigned long long)seq);
}

static void commit_done(srv_redis *r, redisReply *rep, void *arg)
{
    job *j = arg;
    srv_tier *t = j->t;
    srv_app *app = t->app;
    srv_session *s = srv_table_peek(app->table, j->id);
    int rc = SRV_TIER_UNAVAILABLE;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[0]->type == REDIS_REPLY_INTEGER) {
        long long code = rep->element[0]->integer;
        const char *v = rep->element[1]->type == REDIS_REPLY_STRING ? rep->element[1]->str : "";
        if (code == 0) {
            rc = SRV_TIER_OK;
            t->commits++;
            t->bytes_written += j->len;
            if (s) {
                s->rv_unsure = 0;
                s->rv_version = strtoull(v, NULL, 10);
                if (j->took_lease)
                    lease_taken(t, s, j->sent_ms);
                srv_idem_mark(s, 1, 2); /* its Idempotency-Key records are in Redis */
                s->rv_inflight = 0;
                srv_residency_committed(app, s); /* SIGTERM: its file now */
            }
        } else {
            rc = SRV_TIER_FENCED;
            t->fenced++;
            srv_log(SRV_LOG_WARN, "redis_commit_fenced",
                    "\"id_prefix\":\"%.8s\",\"reason\":\"%s\",\"stored\":\"%.64s\"", j->id,
                    code == -1 ? "leased by another node" : "version moved on", v);
        }
    } else {
        t->commit_failures++;
        if (rep && rep->type == REDIS_REPLY_ERROR)
            srv_log(SRV_LOG_ERROR, "redis_commit_error", "\"error\":\"%.200s\"", rep->str);
    }
    if (s) {
        s->rv_inflight = 0;
        if (rc == SRV_TIER_FENCED) {
            s->rv_fenced = 1;
            s->rv_dirty = 0;
        } else if (rc == SRV_TIER_UNAVAILABLE) {
            s->rv_dirty = 1; /* sent again once Redis is back (tick) */
            srv_idem_mark(s, 1, 0);
            if (!rep && !s->rv_unsure)
                s->rv_unsure = j->token; /* no answer: Redis may still apply it (the first) */
        }
    }
    srv_op *waiter = j->waiter;
    free(j);
    if (waiter) {
        srv_ops_committed(waiter, rc); /* may drop s */
        return;
    }
    if (!s)
        return;
    if (s->rv_fenced && idle(s) && !s->rv_waiter) {
        drop_copy(t, s, 0);
        return;
    }
    /* changed again while this commit was in flight: the next one, now if nothing computes */
    srv_op *w = s->rv_waiter;
    if (w && rc != SRV_TIER_OK) { /* its change cannot be committed either */
        s->rv_waiter = NULL;
        srv_ops_committed(w, rc);
        return;
    }
    if (rc == SRV_TIER_OK && s->rv_dirty && (idle(s) || w)) {
        s->rv_waiter = NULL;
        send_commit(t, s, w);
    }
}

/* Serialize s (nothing in flight on it) and send its commit. */
typedef struct {
    const char **argv;
    size_t *lens;
    int n;
} argv_ctx;

static void add_record(const srv_idem *r, void *arg)
{
    argv_ctx *c = arg;
    c->argv[c->n] = r->key, c->lens[c->n++] = strlen(r->key);
    c->argv[c->n] = r->record, c->lens[c->n++] = strlen(r->record);
}

static void send_commit(srv_tier *t, srv_session *s, srv_op *waiter)
{
    srv_app *app = t->app;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = srv_session_file_write(s, app->info->vocab_size, &buf, &len);
    if (rc != 0) {
        srv_log(SRV_LOG_ERROR, "redis_serialize_failed", "\"error\":\"%s\"", recur_strerror(rc));
        s->rv_dirty = 1;
        t->commit_failures++;
        if (waiter)
            srv_ops_committed(waiter, SRV_TIER_UNAVAILABLE);
        return;
    }
    keyset ks;
    keys_of(t, s->id, &ks);
    char ver[24], ttl[24], lease[24], maxk[24];
    snprintf(ver, sizeof ver, "%llu", (unsigned long long)s->rv_version);
    snprintf(ttl, sizeof ttl, "%llu", (unsigned long long)t->ttl_ms);
    /* A new session's first commit (create, fork) takes no lease: the node that made it is
     * rarely the one its later requests are routed to (nginx: creates go to any node, a
     * session's requests to its ring owner), which then takes the lease with its first
     * request instead of waiting out this node's. */
    int take = s->rv_version != 0 && !t->shutting_down; /* SIGTERM: its lease is given back */
    snprintf(lease, sizeof lease, "%llu", take ? (unsigned long long)t->lease_ms : 0ull);
    snprintf(maxk, sizeof maxk, "%d", app->cfg.max_idempotency_keys_per_session);
    char token[48], inc[24] = "", first[24] = "0";
    uint64_t seq = ++t->commit_seq;
    commit_token(t, seq, token, sizeof token);
    if (s->rv_unsure) {
        snprintf(inc, sizeof inc, "%016llx", (unsigned long long)t->incarnation);
        snprintf(first, sizeof first, "%llu", (unsigned long long)s->rv_unsure);
    }
    size_t n_rec = 0;
    for (int i = 0; i < s->n_idem; i++)
        n_rec += s->idem[i].sent == 0;
    argv_ctx c = {malloc((9 + 2 * n_rec) * sizeof *c.argv), malloc((9 + 2 * n_rec) * sizeof *c.lens), 0};
    if (!c.argv || !c.lens)
        abort();
    const char *fixed[9] = {t->node, ver, (const char *)buf, ttl, lease, maxk, token, inc, first};
    for (int i = 0; i < 9; i++)
        c.argv[c.n] = fixed[i], c.lens[c.n++] = i == 2 ? len : strlen(fixed[i]);
    srv_idem_each(s, 0, add_record, &c); /* the records not in Redis yet go with this state */
    job *j = job_new(t, s->id);
    j->waiter = waiter;
    j->len = len;
    j->took_lease = take;
    j->token = seq;
    int sent = now_up(t) && eval(t, COMMIT_LUA, &ks, c.n, c.argv, c.lens, commit_done, j) == 0;
    free(buf);
    free(c.argv);
    free(c.lens);
    if (!sent) {
        free(j);
        s->rv_dirty = 1;
        t->commit_failures++;
        if (waiter)
            srv_ops_committed(waiter, SRV_TIER_UNAVAILABLE);
        return;
    }
    s->rv_inflight = 1;
    s->rv_dirty = 0;
    srv_idem_mark(s, 0, 1);
}

int srv_tier_commit(srv_app *app, srv_session *s, srv_op *waiter)
{
    srv_tier *t = tier_of(app);
    if (!t || (waiter && waiter->sink))
        return 0; /* no tier, or an internal client's ephemeral session */
    if (!t->sync)
        waiter = NULL;
    if (s->rv_fenced) {
        t->fenced++; /* known refused already (a renewal found another holder) */
        if (waiter) {
            srv_ops_committed(waiter, SRV_TIER_FENCED);
            return 1;
        }
        return 0;
    }
    if (s->rv_inflight) {
        /* one commit in flight per session: this change goes with the next one */
        s->rv_dirty = 1;
        if (waiter) {
            s->rv_waiter = waiter;
            return 1;
        }
        return 0;
    }
    send_commit(t, s, waiter);
    return waiter != NULL;
}

void srv_tier_op_end(srv_app *app, srv_session *s)
{
    srv_tier *t = tier_of(app);
    if (t && s->rv_dirty && !s->rv_inflight && !s->rv_fenced && now_up(t))
        send_commit(t, s, NULL);
}

/* ---------------------------------------------------------------- delete */

typedef struct {
    srv_tier *t;
    srv_op *op;
} del_job;

static void delete_done(srv_redis *r, redisReply *rep, void *arg)
{
    del_job *j = arg;
    srv_tier *t = j->t;
    int ok = rep && rep->type == REDIS_REPLY_INTEGER;
    if (ok)
        t->deletes++;
    srv_op *op = j->op;
    free(j);
    srv_ops_committed(op, ok ? SRV_TIER_OK : SRV_TIER_UNAVAILABLE);
}

int srv_tier_delete(srv_app *app, srv_session *s, srv_op *op)
{
    srv_tier *t = tier_of(app);
    if (!t || op->sink)
        return 0;
    keyset ks;
    keys_of(t, s->id, &ks);
    const char *argv[1 + NKEYS] = {"DEL", ks.k[0], ks.k[1], ks.k[2], ks.k[3], ks.k[4]};
    size_t lens[1 + NKEYS] = {3, ks.len[0], ks.len[1], ks.len[2], ks.len[3], ks.len[4]};
    del_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->t = t;
    j->op = op;
    if (!now_up(t) || srv_redis_command(t->r, delete_done, j, 1 + NKEYS, argv, lens) != 0) {
        free(j);
        srv_ops_committed(op, SRV_TIER_UNAVAILABLE);
    }
    return 1;
}

/* ---------------------------------------------------------------- Idempotency-Key records */

typedef struct {
    srv_op *op;
} idem_job;

static void idem_done(srv_redis *r, redisReply *rep, void *arg)
{
    idem_job *j = arg;
    srv_op *op = j->op;
    free(j);
    if (rep && rep->type == REDIS_REPLY_STRING)
        srv_ops_idem_answer(op, rep->str, 1);
    else if (rep && rep->type == REDIS_REPLY_NIL)
        srv_ops_idem_answer(op, NULL, 1);
    else
        srv_ops_idem_answer(op, NULL, 0);
}

int srv_tier_idem_get(srv_app *app, srv_session *s, const char *key, srv_op *op)
{
    srv_tier *t = tier_of(app);
    if (!t || op->sink)
        return 0;
    if (!s->rv_version) /* never committed: Redis has no record of it */
        return 0;
    keyset ks;
    keys_of(t, s->id, &ks);
    const char *argv[3] = {"HGET", ks.k[3], key};
    size_t lens[3] = {4, ks.len[3], strlen(key)};
    idem_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->op = op;
    if (!now_up(t) || srv_redis_command(t->r, idem_done, j, 3, argv, lens) != 0) {
        free(j);
        srv_ops_idem_answer(op, NULL, 0);
    }
    return 1;
}

/* ---------------------------------------------------------------- lookups */

static lookup *lookup_find(srv_tier *t, const char *id)
{
    for (lookup *l = t->lookups; l; l = l->next)
        if (!strcmp(l->id, id))
            return l;
    return NULL;
}

/* A lookup in flight for id (the requests for it are held until it is answered). */
static lookup *lookup_new(srv_tier *t, const char *id)
{
    lookup *l = calloc(1, sizeof *l);
    if (!l)
        abort();
    memcpy(l->id, id, 33);
    l->res = L_PENDING;
    l->next = t->lookups;
    t->lookups = l;
    return l;
}

static void lookup_remove(srv_tier *t, lookup *x)
{
    for (lookup **pp = &t->lookups; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            srv_residency_cached_discard(t->app, x->cached);
            free(x);
            return;
        }
}

typedef struct {
    uv_work_t work;
    srv_tier *t;
    const recur_model *model;
    int vocab, n;
    recur_state *state[SPARES_BATCH];
    float *logits[SPARES_BATCH];
} spares_job;

static void spares_make(uv_work_t *w)
{
    spares_job *j = w->data;
    int prev = srv_nice_lower_restorable(SPARES_NICE); /* a shared threadpool thread */
    for (int i = 0; i < j->n; i++) {
        if (recur_state_create(j->model, &j->state[i]) != 0) {
            j->n = i;
            break;
        }
        recur_state_reset(j->state[i]); /* writes every page of it here, not on the loop */
        j->logits[i] = calloc((size_t)j->vocab, sizeof(float));
        if (!j->logits[i]) {
            recur_state_destroy(j->state[i]);
            j->n = i;
            break;
        }
    }
    srv_nice_restore(prev);
}

static void spares_refill(srv_tier *t);

static void spares_made(uv_work_t *w, int status)
{
    spares_job *j = w->data;
    srv_tier *t = j->t;
    for (int i = 0; i < j->n; i++)
        if (srv_table_spare_add(t->app->table, j->state[i], j->logits[i]) != 0) {
            recur_state_destroy(j->state[i]);
            free(j->logits[i]);
        }
    t->spares_making = 0;
    int made = j->n;
    free(j);
    if (made > 0)
        spares_refill(t); /* on toward the target (a failed job waits for the next resume) */
}

/* The spare states kept ready: SPARES, bounded by SPARES_BYTES of state, at least SPARES_MIN. */
static int spares_target(const srv_app *app)
{
    size_t per = app->info->state_bytes + (size_t)app->info->vocab_size * sizeof(float);
    size_t fit = per ? SPARES_BYTES / per : SPARES;
    return fit >= SPARES ? SPARES : fit <= SPARES_MIN ? SPARES_MIN : (int)fit;
}

/* Top the table's pool up toward spares_target, in the threadpool (one job of at most
 * SPARES_BATCH states at a time). */
static void spares_refill(srv_tier *t)
{
    srv_app *app = t->app;
    int have = srv_table_spare_count(app->table), want = spares_target(app);
    if (t->spares_making || have >= want || t->shutting_down)
        return;
    spares_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->work.data = j;
    j->t = t;
    j->model = app->model;
    j->vocab = app->info->vocab_size;
    j->n = want - have < SPARES_BATCH ? want - have : SPARES_BATCH;
    if (uv_queue_work(app->loop, &j->work, spares_make, spares_made) != 0) {
        free(j);
        return;
    }
    t->spares_making = 1;
}

/* A new resident session from the state Redis holds; 0, or -1 (invalid bytes: logged). */
static int adopt_from(srv_tier *t, const char *id, const redisReply *state, uint64_t ver,
                      uint64_t sent_ms)
{
    srv_app *app = t->app;
    srv_session *s;
    /* the table's hook (residency's with state_dir, else this tier's): over max_sessions only
     * when every resident session is busy or dirty */
    srv_table_make_room(app->table);
    if (srv_table_adopt(app->table, id, uv_now(app->loop), &s) != 0)
        return -1;
    const char *why = NULL;
    if (srv_session_file_read(s, app->model, app->info->vocab_size,
                              app->cfg.max_checkpoints_per_session, (const uint8_t *)state->str,
                              state->len, &why) != 0) {
        srv_table_drop(app->table, s);
        t->loads_invalid++;
        srv_log(SRV_LOG_ERROR, "redis_state_invalid", "\"id_prefix\":\"%.8s\",\"reason\":\"%s\"", id,
                why ? why : "?");
        return -1;
    }
    s->rv_version = ver;
    lease_taken(t, s, sent_ms);
    t->bytes_read += state->len;
    srv_residency_adopted(app, s); /* its file, if any, is stale */
    spares_refill(t);
    return 0;
}

static void lookup_answer(srv_tier *t, lookup *l, lresult res, const char *holder, long long pttl);

static void acquire_done(srv_redis *r, redisReply *rep, void *arg)
{
    job *j = arg;
    srv_tier *t = j->t;
    srv_app *app = t->app;
    lookup *l = lookup_find(t, j->id);
    srv_session *s = srv_table_peek(app->table, j->id);
    /* the session read from its state_dir file, whose version was sent as ours */
    srv_session *cached = l ? l->cached : NULL;
    if (l)
        l->cached = NULL;
    lresult res = L_UNAVAILABLE;
    const redisReply *state = NULL; /* the state, from the script or from the GET beside it */
    if (j->exec && rep && rep->type == REDIS_REPLY_ARRAY) { /* EXEC: {script's answer, GET} */
        if (rep->elements == 2) {
            state = rep->element[1];
            rep = rep->element[0];
        } else {
            rep = NULL;
        }
    }
    char holder[NODE_MAX + 1] = "";
    long long pttl = 0;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
        rep->element[0]->type == REDIS_REPLY_INTEGER) {
        long long code = rep->element[0]->integer;
        if (code == -1 && rep->elements == 3) {
            res = L_LEASED;
            t->lease_conflicts++;
            snprintf(holder, sizeof holder, "%.*s", (int)rep->element[1]->len, rep->element[1]->str);
            pttl = rep->element[2]->integer;
            if (s && idle(s))
                drop_copy(t, s, 0); /* another node serves it now */
        } else if (code == -3) {
            res = L_NOTFOUND;
            t->misses++;
            if (s && idle(s) && s->rv_version)
                drop_copy(t, s, 1); /* deleted or expired elsewhere */
            else if (!s)
                srv_residency_forget(app, j->id); /* its file, if any */
        } else if (code == 0 && rep->elements == 2 && s) {
            res = L_OK;
            lease_taken(t, s, j->sent_ms);
        } else if (code == 0 && rep->elements == 2 && cached) {
            /* the file holds the version Redis holds: no state bytes were sent */
            srv_residency_cached_link(app, cached);
            cached->rv_version = strtoull(rep->element[1]->str, NULL, 10);
            lease_taken(t, cached, j->sent_ms);
            cached = NULL;
            t->file_hits++;
            spares_refill(t); /* the read took a spare state (srv_table_detached) */
            res = L_OK;
        } else if (code == 1 && (rep->elements == 3 ? (state = rep->element[2]) : state) &&
                   state->type == REDIS_REPLY_STRING) {
            uint64_t ver = strtoull(rep->element[1]->str, NULL, 10);
            t->file_stale += cached != NULL; /* another node moved it on: Redis's state */
            if (s && !idle(s)) {
                res = L_UNAVAILABLE; /* cannot swap a busy copy; the next request asks again */
            } else {
                if (s)
                    drop_copy(t, s, 0);
                t->hits++;
                res = adopt_from(t, j->id, state, ver, j->sent_ms) == 0 ? L_OK : L_INVALID;
            }
        } else if (code == 0) {
            res = L_UNAVAILABLE; /* our copy went away meanwhile: ask again */
        }
    } else if (rep && rep->type == REDIS_REPLY_ERROR) {
        srv_log(SRV_LOG_ERROR, "redis_lookup_error", "\"error\":\"%.200s\"", rep->str);
    }
    srv_residency_cached_discard(app, cached);
    free(j);
    if (l)
        lookup_answer(t, l, res, holder, pttl);
}

/* The lookup l is answered: the requests held for it read res. */
static void lookup_answer(srv_tier *t, lookup *l, lresult res, const char *holder, long long pttl)
{
    srv_app *app = t->app;
    l->res = res;
    snprintf(l->holder, sizeof l->holder, "%s", holder);
    l->holder_pttl = pttl;
    char id[33];
    memcpy(id, l->id, 33);
    srv_held_store_ready(app, id); /* the held requests read l->res */
    l = lookup_find(t, id);
    if (l && l->res != L_PENDING)
        lookup_remove(t, l);
}

static void ignore_reply(srv_redis *r, redisReply *rep, void *arg);

/* The version to send as ours for a state_dir file read with gate g (srv_residency_cached):
 * ver when it is trusted, else 0 (none), a rejected file counted. */
static uint64_t file_version(srv_tier *t, srv_cached_gate g, uint64_t ver)
{
    t->file_rejected += g == SRV_CACHED_REJECTED;
    return g == SRV_CACHED_READY ? ver : 0;
}

/* Ask Redis for the lease (and the state when our copy, of version have, is stale; have 0: we
 * have none). The copy is a resident session or its state_dir file. */
static int send_acquire(srv_tier *t, const char *id, uint64_t have)
{
    keyset ks;
    keys_of(t, id, &ks);
    char ver[24] = "", ttl[24], lease[24];
    if (have)
        snprintf(ver, sizeof ver, "%llu", (unsigned long long)have);
    snprintf(ttl, sizeof ttl, "%llu", (unsigned long long)t->ttl_ms);
    snprintf(lease, sizeof lease, "%llu", (unsigned long long)t->lease_ms);
    const char *argv[5] = {t->node, lease, ver, ttl, have ? "1" : "0"};
    job *j = job_new(t, id);
    if (!now_up(t)) {
        free(j);
        return -1;
    }
    if (have) { /* the state only when our copy is stale: through the script */
        if (eval(t, ACQUIRE_LUA, &ks, 5, argv, NULL, acquire_done, j) != 0) {
            free(j);
            return -1;
        }
        return 0;
    }
    /* No copy (a resume): the state by a plain GET in the same transaction, so it is the one
     * the script's version names. Commands on one connection are answered in order; only EXEC
     * answers the lookup (a failure before it: the connection is down, EXEC gets NULL). */
    j->exec = 1;
    const char *get[2] = {"GET", ks.k[0]};
    size_t get_len[2] = {3, ks.len[0]};
    const char *word[1];
    size_t word_len[1];
    word[0] = "MULTI", word_len[0] = 5;
    if (srv_redis_command(t->r, ignore_reply, NULL, 1, word, word_len) != 0) {
        free(j);
        return -1;
    }
    eval(t, ACQUIRE_LUA, &ks, 5, argv, NULL, ignore_reply, NULL);
    srv_redis_command(t->r, ignore_reply, NULL, 2, get, get_len);
    word[0] = "EXEC", word_len[0] = 4;
    if (srv_redis_command(t->r, acquire_done, j, 1, word, word_len) != 0) {
        free(j);
        return -1;
    }
    return 0;
}

static void unavailable(srv_conn *c)
{
    srv_respond_error_ex(c, 503, "store_unavailable",
                         "the session store (Redis) cannot be reached just now; retry",
                         "Retry-After: 1\r\n");
}

static void answer(srv_tier *t, srv_conn *c, const lookup *l)
{
    char msg[320], hdr[NODE_MAX + 40];
    switch (l->res) {
    case L_LEASED:
        snprintf(msg, sizeof msg,
                 "the session is served by node %s (its lease ends in %lld ms unless renewed); send "
                 "the request there",
                 l->holder, l->holder_pttl);
        snprintf(hdr, sizeof hdr, "Recurd-Lease-Holder: %s\r\n", l->holder);
        srv_respond_error_ex(c, 409, "session_leased", msg, hdr);
        return;
    case L_NOTFOUND:
        srv_respond_error(c, 404, "session_not_found", "no such session");
        return;
    case L_INVALID:
        srv_respond_error(c, 500, "store_invalid",
                          "the session's state in Redis failed its checks (logged)");
        return;
    default:
        unavailable(c);
    }
}

srv_tier_gate srv_tier_lookup(srv_app *app, srv_conn *c, const char *id, int mutating,
                              srv_session **out)
{
    srv_tier *t = tier_of(app);
    *out = NULL;
    if (!srv_persist_valid_id(id)) {
        srv_respond_error(c, 404, "session_not_found", "no such session");
        return SRV_TIER_ANSWERED;
    }
    lookup *l = lookup_find(t, id);
    if (l && l->res != L_PENDING) { /* a request held for this answer */
        if (l->res != L_OK) {
            answer(t, c, l);
            return SRV_TIER_ANSWERED;
        }
        srv_session *s = srv_table_peek(app->table, id);
        if (s) {
            *out = s;
            return SRV_TIER_PASS;
        }
        lookup_remove(t, l); /* gone since: ask again */
        l = NULL;
    }
    if (l)
        return SRV_TIER_HOLD; /* behind the lookup in flight */
    srv_session *s = srv_table_peek(app->table, id);
    uint64_t now = uv_now(app->loop);
    if (s && s->rv_fenced) {
        if (!idle(s)) {
            unavailable(c); /* its last request is still running; the next one reloads */
            return SRV_TIER_ANSWERED;
        }
        drop_copy(t, s, 0);
        s = NULL;
    }
    if (s) {
        if (now < s->rv_lease_until || s->rv_inflight || s->rv_version == 0 || !idle(s)) {
            if (t->sync && mutating && !now_up(t)) {
                unavailable(c); /* the commit could not be made */
                return SRV_TIER_ANSWERED;
            }
            *out = s; /* ours: held lease, a commit about to renew it, new, or busy */
            return SRV_TIER_PASS;
        }
        if (!now_up(t)) {
            if (t->sync && mutating) {
                unavailable(c);
                return SRV_TIER_ANSWERED;
            }
            *out = s; /* degraded: a resident session keeps serving; its commit waits */
            return SRV_TIER_PASS;
        }
    } else if (!now_up(t)) {
        unavailable(c);
        return SRV_TIER_ANSWERED;
    }
    uint64_t have = s ? s->rv_version : 0;
    srv_session *cached = NULL;
    if (!s) { /* state_dir: its file first (residency.h), then its version asked of Redis */
        srv_cached_gate g = srv_residency_cached(app, id, &cached, &have);
        if (g == SRV_CACHED_HOLD) {
            lookup_new(t, id); /* srv_tier_cached_read goes on */
            return SRV_TIER_HOLD;
        }
        have = file_version(t, g, have);
    }
    if (send_acquire(t, id, have) != 0) {
        srv_residency_cached_discard(app, cached);
        if (s) {
            *out = s;
            return SRV_TIER_PASS;
        }
        unavailable(c);
        return SRV_TIER_ANSWERED;
    }
    lookup_new(t, id)->cached = cached;
    return SRV_TIER_HOLD;
}

void srv_tier_cached_read(srv_app *app, const char *id, srv_session *s, uint64_t ver, int gate)
{
    srv_tier *t = tier_of(app);
    lookup *l = t ? lookup_find(t, id) : NULL;
    if (!l || l->res != L_PENDING || l->cached) { /* cannot happen: the lookup waits for this */
        srv_residency_cached_discard(app, s);
        srv_held_store_ready(app, id);
        return;
    }
    if (!now_up(t) || send_acquire(t, id, file_version(t, gate, ver)) != 0) {
        srv_residency_cached_discard(app, s);
        lookup_answer(t, l, L_UNAVAILABLE, "", 0);
        return;
    }
    l->cached = s;
}

/* ---------------------------------------------------------------- tick: renewals, retries */

static void renew_done(srv_redis *r, redisReply *rep, void *arg)
{
    job *j = arg;
    srv_tier *t = j->t;
    srv_session *s = srv_table_peek(t->app->table, j->id);
    if (s) {
        s->rv_renewing = 0;
        if (rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) {
            lease_taken(t, s, j->sent_ms);
            t->renewals++;
        } else if (rep && rep->type == REDIS_REPLY_STRING) {
            s->rv_fenced = 1; /* another node took it over: our next commit would be refused */
            t->lease_conflicts++;
            if (idle(s))
                drop_copy(t, s, 0);
        }
    }
    free(j);
}

static void tick_one(srv_session *s, void *arg)
{
    srv_tier *t = arg;
    srv_app *app = t->app;
    if (s->rv_fenced)
        return;
    if (s->rv_dirty && !s->rv_inflight && idle(s)) {
        send_commit(t, s, NULL); /* a commit that failed while Redis was down */
        return;
    }
    uint64_t now = uv_now(app->loop);
    /* a long request keeps its lease: renewed when half of it is left */
    if (!idle(s) && !s->rv_renewing && !s->rv_inflight && s->rv_version &&
        now + t->lease_ms / 2 >= s->rv_lease_until) {
        keyset ks;
        keys_of(t, s->id, &ks);
        char lease[24];
        snprintf(lease, sizeof lease, "%llu", (unsigned long long)t->lease_ms);
        const char *argv[2] = {t->node, lease};
        job *j = job_new(t, s->id);
        if (eval(t, RENEW_LUA, &ks, 2, argv, NULL, renew_done, j) == 0)
            s->rv_renewing = 1;
        else
            free(j);
    }
}

static void on_tick(uv_timer_t *h)
{
    srv_tier *t = h->data;
    if (!now_up(t))
        return;
    srv_table_foreach(t->app->table, tick_one, t);
}

static void on_state(void *ctx, int up)
{
    srv_tier *t = ctx;
    if (up && t->tick_on)
        on_tick(&t->tick); /* commits that waited for Redis go now */
}

/* ---------------------------------------------------------------- lifecycle */

/* Room for a session loaded from Redis or created: the least recently used idle session whose
 * state Redis holds as it is (committed, nothing pending) is dropped from memory. The recency
 * list (session_table.h) is walked from its head: it skips only the sessions Redis does not hold
 * yet, not every resident one. */
static int droppable(const srv_session *s)
{
    return idle(s) && s->rv_version && !s->rv_dirty && !s->rv_inflight && !s->rv_waiter;
}

static int hook_make_room(void *ctx)
{
    srv_tier *t = ctx;
    srv_app *app = t->app;
    int max = app->cfg.max_resident_sessions ? app->cfg.max_resident_sessions : app->cfg.max_sessions;
    while (srv_table_count(app->table) >= (size_t)max) {
        srv_session *s = srv_table_lru_first(app->table);
        while (s && !droppable(s))
            s = s->lru_next;
        if (!s)
            return 0; /* srv_table_new then refuses with max_sessions */
        srv_table_drop(app->table, s);
    }
    return 0;
}

int srv_tier_start(srv_app *app, int port)
{
    const srv_config *cfg = &app->cfg;
    if (!cfg->redis[0])
        return 0;
    srv_redis_url url;
    char err[512];
    if (srv_redis_url_parse(cfg->redis, &url, err, sizeof err) != 0) {
        srv_log(SRV_LOG_ERROR, "redis_url_invalid", "\"message\":\"%s\"", err);
        return -1;
    }
    srv_tier *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    t->app = app;
    if (cfg->node_name[0]) {
        snprintf(t->node, sizeof t->node, "%s", cfg->node_name);
    } else {
        char host[100] = "localhost";
        if (gethostname(host, sizeof host - 1) != 0)
            snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        snprintf(t->node, sizeof t->node, "%s:%d", host, port);
    }
    snprintf(t->fp, sizeof t->fp, "%016llx", (unsigned long long)app->info->fingerprint);
    t->lease_ms = cfg->redis_lease_ms;
    t->ttl_ms = cfg->idle_ttl_ms;
    if (getrandom(&t->incarnation, sizeof t->incarnation, 0) != (ssize_t)sizeof t->incarnation)
        t->incarnation = uv_hrtime() ^ ((uint64_t)getpid() << 32);
    t->sync = cfg->redis_sync;
    static const double le[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                0.05, 0.1, 0.25, 0.5, 1};
    srv_hist_init(&t->latency, le, (int)(sizeof le / sizeof *le), 1e9);
    t->r = srv_redis_create(app->loop, &url, cfg->redis_timeout_ms, &t->latency, on_state, t, err,
                            sizeof err);
    if (!t->r) {
        srv_log(SRV_LOG_ERROR, "redis_unusable", "\"message\":\"%s; refusing to start\"", err);
        free(t);
        return -1;
    }
    app->tier = t;
    if (!srv_residency_persists(app)) { /* with state_dir, residency's hooks make room */
        srv_table_hooks h = {NULL, hook_make_room, NULL, NULL, t};
        srv_table_set_hooks(app->table, &h);
    }
    uv_timer_init(app->loop, &t->tick);
    t->tick.data = t;
    uint64_t every = t->lease_ms / 4 < 20 ? 20 : t->lease_ms / 4;
    uv_timer_start(&t->tick, on_tick, every, every);
    t->tick_on = 1;
    spares_refill(t);
    srv_pcredis_start(app);
    srv_log(SRV_LOG_INFO, "redis_tier",
            "\"node\":\"%s\",\"host\":\"%s\",\"port\":%d,\"db\":%d,\"sync\":%s,\"lease_ms\":%llu,"
            "\"timeout_ms\":%llu,\"key_prefix\":\"%s\",\"fingerprint\":\"%s\"",
            t->node, url.host, url.port, url.db, t->sync ? "true" : "false",
            (unsigned long long)t->lease_ms, (unsigned long long)cfg->redis_timeout_ms,
            cfg->redis_key_prefix, t->fp);
    return 0;
}

static void tick_closed(uv_handle_t *h) {}

static void redis_closed(void *ctx) {}

static void ignore_reply(srv_redis *r, redisReply *rep, void *arg) {}

/* SIGTERM: commit what Redis does not have yet, then give the lease back (after the commit on
 * the same connection), so another node — or this one restarted — takes the session at once
 * instead of after redis_lease_ms. */
static void shutdown_one(srv_session *s, void *arg)
{
    srv_tier *t = arg;
    if (!now_up(t) || s->rv_fenced)
        return;
    if (s->rv_dirty && !s->rv_inflight)
        send_commit(t, s, NULL);
    if (s->rv_version || s->rv_inflight) {
        keyset ks;
        keys_of(t, s->id, &ks);
        const char *argv[1] = {t->node};
        eval(t, RELEASE_LUA, &ks, 1, argv, NULL, ignore_reply, NULL);
    }
}

/* Close once every commit is answered (or redis_timeout_ms resets the connection). */
static void close_when_done(uv_timer_t *h)
{
    srv_tier *t = h->data;
    if (srv_redis_pending(t->r) && srv_redis_up(t->r))
        return;
    uv_timer_stop(&t->tick);
    uv_close((uv_handle_t *)&t->tick, tick_closed);
    t->tick_on = 0;
    t->closed = 1;
    srv_redis_close(t->r, redis_closed, t);
    t->r = NULL;
}

void srv_tier_shutdown(srv_app *app)
{
    srv_tier *t = tier_of(app);
    if (!t || t->shutting_down)
        return;
    t->shutting_down = 1;
    srv_table_foreach(app->table, shutdown_one, t);
    srv_log(SRV_LOG_INFO, "redis_flush", "\"pending\":%zu", srv_redis_pending(t->r));
    uv_timer_stop(&t->tick);
    uv_timer_start(&t->tick, close_when_done, 0, 10);
}

void srv_tier_free(srv_app *app)
{
    srv_tier *t = tier_of(app);
    if (!t)
        return;
    while (t->lookups)
        lookup_remove(t, t->lookups);
    srv_pcredis_free(app);
    free(t);
    app->tier = NULL;
}

/* ---------------------------------------------------------------- health, metrics */

int srv_tier_health(srv_app *app, proto_buf *b)
{
    srv_tier *t = tier_of(app);
    int up = now_up(t);
    proto_buf_printf(b, "{\"status\":\"%s\",\"redis\":{\"reachable\":%s,\"node\":", up ? "ok" : "degraded",
                     up ? "true" : "false");
    proto_buf_json_str(b, t->node, strlen(t->node));
    if (!up) {
        const char *e = t->r ? srv_redis_last_error(t->r) : "closed";
        proto_buf_puts(b, ",\"error\":");
        proto_buf_json_str(b, e, strlen(e));
    }
    proto_buf_puts(b, "}}");
    return 200;
}

void srv_tier_metrics(srv_app *app, proto_buf *b)
{
    srv_tier *t = tier_of(app);
    srv_metric(b, "recurd_redis_enabled", "gauge", "1 when --redis is set.", t != NULL);
    if (!t)
        return;
    const srv_metric_row m[] = {
        {"recurd_redis_up", "gauge", "1 while the connection to Redis is up.", now_up(t)},
        {"recurd_redis_hits_total", "counter",
         "Sessions not resident loaded from Redis.", t->hits},
        {"recurd_redis_misses_total", "counter",
         "Lookups of a session Redis does not hold (404).", t->misses},
        {"recurd_redis_bytes_written_total", "counter", "Session bytes committed to Redis.",
         t->bytes_written},
        {"recurd_redis_bytes_read_total", "counter", "Session bytes loaded from Redis.", t->bytes_read},
        {"recurd_redis_commits_total", "counter", "Commits Redis accepted.", t->commits},
        {"recurd_redis_commit_failures_total", "counter",
         "Commits not made (Redis unreachable or timed out; retried).", t->commit_failures},
        {"recurd_redis_lease_conflicts_total", "counter",
         "Requests or renewals that found the session leased by another node.", t->lease_conflicts},
        {"recurd_redis_fenced_commits_total", "counter",
         "Commits refused because another node took the session over (the copy was dropped).",
         t->fenced},
        {"recurd_redis_invalid_states_total", "counter",
         "States in Redis that failed their checks on load.", t->loads_invalid},
        {"recurd_redis_deletes_total", "counter", "Sessions deleted from Redis.", t->deletes},
        {"recurd_redis_file_hits_total", "counter",
         "Sessions loaded from their state_dir file after Redis confirmed its version (no state "
         "bytes read from Redis).", t->file_hits},
        {"recurd_redis_file_stale_total", "counter",
         "state_dir files older than Redis's version: the session came from Redis (the file is "
         "rewritten at its next write).", t->file_stale},
        {"recurd_redis_file_rejected_total", "counter",
         "state_dir files not trusted: no version stamp, or one (or the state) that failed its "
         "checks (quarantined).", t->file_rejected},
        {"recurd_redis_lease_renewals_total", "counter", "Leases renewed during long requests.",
         t->renewals},
        {"recurd_redis_reconnects_total", "counter", "Connection attempts after the first.",
         srv_redis_reconnects(t->r)},
        {"recurd_redis_pending_commands", "gauge", "Commands sent and not answered yet.",
         srv_redis_pending(t->r)},
    };
    srv_metric_rows(b, m, sizeof m / sizeof *m);
    srv_hist_render(&t->latency, b, "recurd_redis_latency_seconds",
                    "Time from sending a Redis command to its reply.");
    srv_pcredis_metrics(app, b);
}
