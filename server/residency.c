/* residency.c — lazy load, LRU eviction, periodic/idle/shutdown snapshots (residency.h). */
#include "residency.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "offloop.h"
#include "persist.h"
#include "readpool.h"
#include "redis_stamp.h"
#include "redis_tier.h"
#include "state_blob.h"

/* Async snapshot writes in flight at once: bounds the memory held by serialized copies
 * (each about state_bytes) and leaves libuv's threadpool (4 threads) some room. */
#define MAX_INFLIGHT 8
/* Eviction writes in flight at once; past it, evictions write on the loop thread. */
#define MAX_EVICT_INFLIGHT 16
/* Spare state copies kept for writes whose worker serializes a copy (captures; an eviction's
 * worker serializes the evicted session's own state, handed over: start_job_ex). */
#define CPOOL_MAX MAX_INFLIGHT
#define TICK_MIN_MS 50
#define TICK_MAX_MS 1000
/* With nothing in progress, the timer sleeps until the next thing due, at most this long. */
#define IDLE_WAKE_MAX_MS 60000

struct wjob;

/* An id with a snapshot file (or an eviction write of its first one in flight): resident
 * (also in the table) or on disk only. */
typedef struct entry {
    char id[33];
    int resident;
    uint64_t last_used_ms;  /* disk-only: its last use (idle_ttl) */
    struct wjob *pending;   /* disk-only: its eviction write is in flight; these bytes are it */
    struct entry *next;
} entry;

typedef enum { W_PERIODIC = 0, W_IDLE = 1, W_SHUTDOWN = 2, W_EVICT = 3 } wkind;
static const char *const WKIND[] = {"periodic", "idle", "shutdown", "evict"};

typedef struct {
    char id[33];
    wkind kind;
} qitem;

typedef struct srv_residency srv_residency;

/* A deleted id whose files are not gone yet: the unlink failed (read-only or failing disk), or
 * a snapshot write of it is in flight (its rename may bring the file back). Retried every
 * tick until srv_persist_remove succeeds; never loaded meanwhile (it is not in the index). */
typedef struct {
    char id[33];
    int tomb;    /* its tombstone is on disk (fsynced): a restart completes the removal */
    int waiting; /* a write of it is in flight: retried once that write is done */
} rmitem;

typedef enum {
    J_ATTACHED, /* s is the resident session */
    J_EVICTED,  /* s was dropped from memory: buf is its only copy until the write is done */
    J_DELETED   /* s was deleted: the file is removed again once the write is done */
} jstate;

typedef struct wjob {
    uv_work_t req;
    srv_residency *r;
    jstate st;
    srv_session *s;   /* J_ATTACHED only */
    char id[33];
    wkind kind;
    uint8_t *buf;     /* serialized on the loop thread (or, with cstate, by the worker); owned */
    size_t len;
    /* A computing session's snapshot (srv_residency_capture): only the state and logits are
     * copied at its boundary, and the worker serializes the copy (from cpool). An eviction's
     * (given): the evicted session's own state and logits, handed over untouched
     * (srv_table_drop_keep); they go back to the table's pool once the write is done. */
    recur_state *cstate;
    float *clogits;
    int given;
    int chas_logits;
    int vocab;
    uint8_t *csec;    /* with cstate: the session's checkpoint section, copied at the boundary */
    size_t csec_len;
    uint64_t gen;     /* the session's mut_gen when serialized */
    int gen_valid;    /* no request was pending: the file holds everything up to gen */
    uint64_t ver;     /* with the Redis tier: the version stamped after the bytes (redis_stamp.h) */
    int err;          /* 0 or -errno, set by the worker */
    int serr;         /* with cstate: the worker could not serialize the copy (RECUR_E*) */
} wjob;

struct srv_residency {
    srv_app *app;
    srv_persist *p;   /* NULL: persistence off */
    int tier;         /* --redis too: a file is a cache of one Redis version (residency.h) */
    int max_resident; /* 0: no budget beyond max_sessions */
    size_t snap_max;  /* largest snapshot file accepted */

    entry **buckets;  /* index of ids with a file */
    size_t n_buckets, n_entries, n_stored;

    qitem *q;         /* ids waiting for a write slot (FIFO ring) */
    size_t q_head, q_len, q_cap;
    int inflight, evict_inflight;
    int reserved;     /* write slots held for busy sessions until their next boundary */

    rmitem *rm;       /* removals pending */
    size_t n_rm, rm_cap;
    int dir_dirty;    /* unlinks since the last directory fsync */
    int dirsync_inflight;
    uv_work_t dirsync_req;

    uv_timer_t timer; /* one-shot, re-armed by each tick for the next thing due (arm) */
    int timer_on;
    uint64_t tick;    /* the cadence while work is in progress (ms) */
    uint64_t last_periodic_ms, last_expire_ms;
    int shutting_down, shutdown_logged;
    uint64_t shutdown_ok, shutdown_failed;

    /* /metrics */
    uint64_t writes_ok, writes_failed, bytes_written, evictions, loads, load_failures,
        quarantined, over_budget, deleted_files, expired_on_disk;
    uint64_t sync_evict_writes, sync_evict_us_total, sync_evict_us_max;
    uint64_t unlink_failures;
    recur_state *cpool[CPOOL_MAX]; /* spare copies for captures (wjob.cstate) */
    float *cpool_logits[CPOOL_MAX];
    int n_cpool;
    uint64_t busy_captures, capture_us_total, capture_us_max; /* copies taken at a busy
                                                                * session's boundary */
    int degraded;
    char last_error[96];
    int load_error; /* the last hook_load failed transiently (srv_residency_take_load_error) */
    srv_readpool *rp;      /* reads of snapshots not in the page cache (srv_residency_resume) */
    struct ljob *reads;    /* those reads in flight, and the one whose outcome is being told */
    uint64_t disk_reads;   /* resumes whose snapshot was read by a reader thread */
};

/* ---------------------------------------------------------------- index */

static size_t bucket_of(const srv_residency *r, const char *id)
{
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) { /* ids are random: their first 64 bits are a fine hash */
        char c = id[i];
        h = (h << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return (size_t)(h & (r->n_buckets - 1));
}

static entry *idx_find(srv_residency *r, const char *id)
{
    for (entry *e = r->buckets[bucket_of(r, id)]; e; e = e->next)
        if (!memcmp(e->id, id, 32))
            return e;
    return NULL;
}

static void idx_grow(srv_residency *r)
{
    size_t nb = r->n_buckets * 2;
    entry **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    entry **old = r->buckets;
    size_t on = r->n_buckets;
    r->buckets = b;
    r->n_buckets = nb;
    for (size_t i = 0; i < on; i++)
        for (entry *e = old[i], *n; e; e = n) {
            n = e->next;
            size_t k = bucket_of(r, e->id);
            e->next = b[k];
            b[k] = e;
        }
    free(old);
}

static void idx_set_resident(srv_residency *r, entry *e, int resident, uint64_t now)
{
    if (e->resident && !resident)
        r->n_stored++;
    else if (!e->resident && resident)
        r->n_stored--;
    e->resident = resident;
    e->last_used_ms = now;
}

static entry *idx_put(srv_residency *r, const char *id, int resident, uint64_t now)
{
    entry *e = idx_find(r, id);
    if (e) {
        idx_set_resident(r, e, resident, now);
        return e;
    }
    if (r->n_entries + 1 > r->n_buckets)
        idx_grow(r);
    e = calloc(1, sizeof *e);
    if (!e)
        abort();
    memcpy(e->id, id, 33);
    e->resident = resident;
    e->last_used_ms = now;
    size_t k = bucket_of(r, id);
    e->next = r->buckets[k];
    r->buckets[k] = e;
    r->n_entries++;
    if (!resident)
        r->n_stored++;
    return e;
}

static void idx_del(srv_residency *r, const char *id)
{
    for (entry **pp = &r->buckets[bucket_of(r, id)]; *pp; pp = &(*pp)->next)
        if (!memcmp((*pp)->id, id, 32)) {
            entry *e = *pp;
            *pp = e->next;
            if (!e->resident)
                r->n_stored--;
            r->n_entries--;
            free(e);
            return;
        }
}

static void on_found(const char *id, void *ctx)
{
    srv_residency *r = ctx;
    idx_put(r, id, 0, uv_now(r->app->loop));
}

/* ---------------------------------------------------------------- removals */

static rmitem *rm_find(srv_residency *r, const char *id)
{
    for (size_t i = 0; i < r->n_rm; i++)
        if (!memcmp(r->rm[i].id, id, 32))
            return &r->rm[i];
    return NULL;
}

static void soon(srv_residency *r);

static rmitem *rm_add(srv_residency *r, const char *id)
{
    soon(r); /* retried by the next ticks */
    rmitem *it = rm_find(r, id);
    if (it)
        return it;
    if (r->n_rm == r->rm_cap) {
        r->rm_cap = r->rm_cap ? r->rm_cap * 2 : 16;
        r->rm = realloc(r->rm, r->rm_cap * sizeof *r->rm);
        if (!r->rm)
            abort();
    }
    it = &r->rm[r->n_rm++];
    memset(it, 0, sizeof *it);
    memcpy(it->id, id, 33);
    return it;
}

static void on_pending(const char *id, void *ctx)
{
    rm_add(ctx, id)->tomb = 1; /* found at start: its tombstone is on disk */
}

/* One more try at a pending removal. Returns 1 when it is complete (the item can go). */
static int rm_try(srv_residency *r, rmitem *it)
{
    if (it->waiting)
        return 0;
    int rc = srv_persist_remove(r->p, it->id);
    if (rc == 0) {
        r->deleted_files++;
        srv_log(SRV_LOG_INFO, "snapshot_unlink_done", "\"id_prefix\":\"%.8s\"", it->id);
        return 1;
    }
    if (!it->tomb && srv_persist_tombstone(r->p, it->id) == 0)
        it->tomb = 1; /* the directory takes new files again: the removal survives a restart */
    return 0;
}

/* Retry every pending removal (each tick, and before exit). */
static void rm_retry_all(srv_residency *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n_rm; i++)
        if (!rm_try(r, &r->rm[i]))
            r->rm[k++] = r->rm[i];
    r->n_rm = k;
}

/* The files of id must go for good (DELETE, idle_ttl). write_in_flight: a snapshot write of id
 * is running and its rename may bring the file back, so a tombstone is written first and the
 * removal is completed when that write is done. An unlink that fails leaves a tombstone (when
 * the directory still takes one) and is retried every tick; kill -9 never undoes an unlink
 * made, and the directory is fsynced within a tick (power loss). */
static void remove_files(srv_residency *r, const char *id, int write_in_flight)
{
    int trc = 0;
    if (write_in_flight) {
        trc = srv_persist_tombstone(r->p, id);
        rmitem *it = rm_add(r, id);
        it->tomb = trc == 0;
        it->waiting = 1;
    }
    int rc = srv_persist_unlink(r->p, id, 0);
    if (rc == 0) {
        r->dir_dirty = 1;
        soon(r); /* the directory fsync of the next tick */
        if (!write_in_flight)
            r->deleted_files++;
        return;
    }
    r->unlink_failures++;
    rmitem *it = rm_add(r, id);
    if (!write_in_flight) {
        trc = srv_persist_tombstone(r->p, id);
        it->tomb = trc == 0;
    }
    srv_log(SRV_LOG_ERROR, "snapshot_unlink_failed",
            "\"error\":\"%s\",\"tombstone\":\"%s%s\",\"retry\":\"every tick\"", strerror(-rc),
            it->tomb ? "written" : "failed: ", it->tomb ? "" : strerror(-trc));
}

static void dirsync_work(uv_work_t *req)
{
    srv_residency *r = req->data;
    srv_persist_sync_dir(r->p);
}

static void dirsync_after(uv_work_t *req, int status)
{
    srv_residency *r = req->data;
    r->dirsync_inflight = 0;
}

/* The unlinks of this tick, durable on the threadpool (one fsync for all of them). */
static void dirsync_start(srv_residency *r)
{
    if (!r->dir_dirty || r->dirsync_inflight)
        return;
    r->dirsync_req.data = r;
    if (uv_queue_work(r->app->loop, &r->dirsync_req, dirsync_work, dirsync_after) == 0) {
        r->dir_dirty = 0;
        r->dirsync_inflight = 1;
    }
}

/* ---------------------------------------------------------------- snapshots */

/* The session's snapshot file bytes: exactly the body of GET /v1/sessions/{id}/state.
 * Only while no worker touches s. Returns 0 or a RECUR_E* code. */
static int serialize_state(int vocab, const recur_state *st, const float *logits, int has_logits,
                           uint8_t **out, size_t *out_len)
{
    return proto_state_write(st, logits, has_logits != 0, vocab, out, out_len);
}

/* The session's checkpoints (checkpoints.h) after its state blob, in the same file. */
static int append_section(uint8_t **buf, size_t *len, const uint8_t *sec, size_t sec_len)
{
    if (!sec_len)
        return 0;
    uint8_t *b = realloc(*buf, *len + sec_len);
    if (!b)
        return RECUR_ENOMEM;
    memcpy(b + *len, sec, sec_len);
    *buf = b;
    *len += sec_len;
    return 0;
}

/* With the Redis tier: the version the bytes before it are (redis_stamp.h); ver 0: none. */
static int append_stamp(uint8_t **buf, size_t *len, uint64_t ver)
{
    if (!ver)
        return 0;
    uint8_t st[SRV_STAMP_BYTES];
    srv_stamp_write(st, ver, *len);
    return append_section(buf, len, st, sizeof st);
}

/* The version a file of s is stamped with now: with the tier, the one Redis holds (writable). */
static uint64_t stamp_of(const srv_residency *r, const srv_session *s)
{
    return r->tier ? s->rv_version : 0;
}

/* A session file: the state blob, then its checkpoints' section when it has any, then (with
 * the Redis tier) its version's stamp. */
static int serialize(srv_residency *r, srv_session *s, uint8_t **out, size_t *out_len)
{
    int rc = srv_session_file_write(s, r->app->info->vocab_size, out, out_len);
    if (!rc && (rc = append_stamp(out, out_len, stamp_of(r, s))) != 0) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* With the Redis tier, s may be written only while Redis holds exactly its state: committed,
 * no commit pending or in flight, not fenced, no request that may change it queued or running.
 * A session that is not is skipped (periodic, idle, shutdown rounds, evictions) until its
 * commit is answered; a fenced copy is never written. */
static int writable(const srv_residency *r, const srv_session *s)
{
    return !r->tier || (s->rv_version && !s->rv_dirty && !s->rv_inflight && !s->rv_fenced &&
                        !s->rv_waiter && s->q_len == 0 && !s->running);
}

static int is_clean(srv_residency *r, srv_session *s)
{
    return s->saved_gen == s->mut_gen && idx_find(r, s->id) != NULL;
}

static int is_idle(const srv_session *s)
{
    return s->q_len == 0 && !s->running && !s->pjob;
}

static void write_failed(srv_residency *r, int err, wkind kind)
{
    r->writes_failed++;
    r->degraded = 1;
    snprintf(r->last_error, sizeof r->last_error, "snapshot write failed: %s", strerror(-err));
    srv_log(SRV_LOG_ERROR, "snapshot_failed",
            "\"error\":\"%s\",\"errno\":%d,\"kind\":\"%s\",\"failures\":%llu", strerror(-err),
            -err, WKIND[kind], (unsigned long long)r->writes_failed);
}

static void write_ok(srv_residency *r, size_t len)
{
    r->writes_ok++;
    r->bytes_written += len;
    if (r->degraded)
        srv_log(SRV_LOG_INFO, "snapshot_recovered", NULL);
    r->degraded = 0;
}

static void want_clear(srv_residency *r, srv_session *s);

/* Drop an idle, clean session from memory; it stays on disk. */
static void drop_clean(srv_residency *r, srv_session *s)
{
    want_clear(r, s);
    idx_put(r, s->id, 0, s->last_used_ms); /* idle_ttl still counts from the last use */
    srv_table_drop(r->app->table, s);
    r->evictions++;
}

/* ---------------------------------------------------------------- restore */

/* A resident session id from snapshot bytes (a file, or an eviction write still in flight).
 * Returns 0 with *out, -1 when the bytes fail a check (*why: quarantine reason; nothing is
 * left in the table), -2 when no session could be allocated. */
static int restore(srv_residency *r, const char *id, const uint8_t *buf, size_t len,
                   srv_session **out, const char **why)
{
    srv_table *t = r->app->table;
    srv_session *s;
    if (srv_table_adopt(t, id, uv_now(r->app->loop), &s) != 0)
        return -2;
    if (srv_session_file_read(s, r->app->model, r->app->info->vocab_size,
                              r->app->cfg.max_checkpoints_per_session, buf, len, why) != 0) {
        srv_table_drop(t, s);
        return -1;
    }
    *out = s;
    return 0;
}

/* A resident session id from an eviction write still in flight (or failed): from its bytes, or,
 * when the worker serializes the job's state (cstate: the evicted session's own, given), from a
 * copy of that state into another spare (the worker only reads cstate meanwhile, and keeps it
 * until the write is done). The same session as a load of the file would give. Returns 0 with *out, or -2 (no memory: our own bytes cannot fail a check). */
static int restore_job(srv_residency *r, const wjob *j, srv_session **out)
{
    const char *why = NULL;
    if (!j->cstate)
        return restore(r, j->id, j->buf, j->len, out, &why) == 0 ? 0 : -2;
    srv_table *t = r->app->table;
    int vocab = r->app->info->vocab_size;
    srv_session *s;
    if (srv_table_adopt(t, j->id, uv_now(r->app->loop), &s) != 0)
        return -2;
    if (recur_state_copy(s->state, j->cstate) != 0 ||
        (j->csec_len && srv_ckpt_section_read(s, r->app->model, vocab,
                                              r->app->cfg.max_checkpoints_per_session, j->csec,
                                              j->csec_len, &why) != 0)) {
        srv_table_drop(t, s);
        return -2;
    }
    s->has_logits = j->chas_logits != 0; /* as a file gives it: the logits, no lsm_c */
    if (s->has_logits)
        memcpy(s->logits, j->clogits, (size_t)vocab * sizeof(float));
    s->tokens_seen = recur_state_tokens_seen(s->state);
    s->snapshot_bytes = srv_session_state_bytes(s, vocab);
    *out = s;
    return 0;
}

/* ---------------------------------------------------------------- async writes */

static void pump(srv_residency *r);
static void after_cb(uv_work_t *req, int status);

static void work_cb(uv_work_t *req)
{
    wjob *j = req->data;
    if (j->cstate) {
        j->serr = serialize_state(j->vocab, j->cstate, j->clogits, j->chas_logits, &j->buf, &j->len);
        if (!j->serr)
            j->serr = append_section(&j->buf, &j->len, j->csec, j->csec_len);
        if (!j->serr)
            j->serr = append_stamp(&j->buf, &j->len, j->ver);
        if (j->serr) {
            j->err = -EINVAL; /* nothing was written: reported as the loop's serialize failure */
            return;
        }
    }
    j->err = srv_persist_write(j->r->p, j->id, j->buf, j->len);
}

static void copy_put(srv_residency *r, recur_state *st, float *lg)
{
    if (r->n_cpool < CPOOL_MAX) {
        r->cpool[r->n_cpool] = st;
        r->cpool_logits[r->n_cpool++] = lg;
        return;
    }
    recur_state_destroy(st);
    free(lg);
}

/* s's state and logits into a spare copy (the one copy a computing session waits for). */
static int copy_take(srv_residency *r, srv_session *s, recur_state **st, float **lg)
{
    size_t vocab = (size_t)r->app->info->vocab_size;
    if (r->n_cpool) {
        r->n_cpool--;
        *st = r->cpool[r->n_cpool];
        *lg = r->cpool_logits[r->n_cpool];
    } else {
        *lg = malloc(vocab * sizeof(float));
        if (!*lg || recur_state_create(r->app->model, st) != 0) {
            free(*lg);
            return -1;
        }
    }
    if (recur_state_copy(*st, s->state) != 0) {
        copy_put(r, *st, *lg);
        return -1;
    }
    if (s->has_logits)
        memcpy(*lg, s->logits, vocab * sizeof(float));
    return 0;
}

/* What the loop thread does with s's state for a write (start_job_ex). */
typedef enum {
    JOB_SERIALIZE, /* serialize here; the worker writes the bytes */
    JOB_COPY,      /* copy the state and logits here, the worker serializes the copy (a
                    * computing session's stream waits for this call) */
    JOB_GIVE       /* an eviction: the worker serializes s's own state and logits, which the
                    * caller hands over at once (evict_by_job): no pass over the state here */
} jobhow;

/* Hand a write of s (no worker may be touching it) to the threadpool. */
static wjob *start_job_ex(srv_residency *r, srv_session *s, wkind kind, jobhow how)
{
    want_clear(r, s); /* whatever wanted a copy of s gets this one */
    wjob *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    if (how == JOB_GIVE) {
        j->cstate = s->state;
        j->clogits = s->logits;
        j->given = 1;
    }
    if (j->given || (how == JOB_COPY && copy_take(r, s, &j->cstate, &j->clogits) == 0)) {
        j->chas_logits = s->has_logits;
        j->vocab = r->app->info->vocab_size;
        j->csec_len = srv_ckpt_section_size(s);
        if (j->csec_len) {
            j->csec = malloc(j->csec_len);
            if (!j->csec)
                abort();
            srv_ckpt_section_write(s, j->csec);
        }
    } else {
        int rc = serialize(r, s, &j->buf, &j->len);
        if (rc != 0) {
            srv_log(SRV_LOG_ERROR, "snapshot_serialize_failed", "\"error\":\"%s\"",
                    recur_strerror(rc));
            free(j);
            return NULL;
        }
    }
    j->r = r;
    j->ver = stamp_of(r, s);
    j->st = J_ATTACHED;
    j->s = s;
    memcpy(j->id, s->id, 33);
    j->kind = kind;
    j->gen = s->mut_gen;
    j->gen_valid = r->shutting_down || s->q_len == 0;
    j->req.data = j;
    int rc = uv_queue_work(r->app->loop, &j->req, work_cb, after_cb);
    if (rc != 0) {
        srv_log(SRV_LOG_ERROR, "snapshot_queue_failed", "\"error\":\"%s\"", uv_strerror(rc));
        if (j->cstate && !j->given) /* given: still s's own */
            copy_put(r, j->cstate, j->clogits);
        free(j->csec);
        free(j->buf);
        free(j);
        return NULL;
    }
    s->pjob = j;
    r->inflight++;
    if (kind == W_EVICT)
        r->evict_inflight++;
    return j;
}

static wjob *start_job(srv_residency *r, srv_session *s, wkind kind)
{
    return start_job_ex(r, s, kind, JOB_SERIALIZE);
}

/* ---------------------------------------------------------------- eviction */

/* No request queued or running, and either no write in flight or one whose bytes are exactly
 * the session as it is now (that write then becomes its eviction write). */
static int evictable(const srv_residency *r, const srv_session *s)
{
    if (s->q_len || s->running || !writable(r, s))
        return 0;
    const wjob *j = s->pjob;
    return !j || (j->st == J_ATTACHED && !j->cstate && j->gen_valid && j->gen == s->mut_gen);
}

/* Evict s with write j in flight (holding exactly its state): the session leaves the table, its
 * index entry points at j, which no longer refers to s. A given job keeps s's state and logits
 * (the worker is reading them). */
static void evict_by_job(srv_residency *r, srv_session *s, wjob *j)
{
    s->pjob = NULL;
    j->st = J_EVICTED;
    j->s = NULL;
    entry *e = idx_put(r, s->id, 0, s->last_used_ms);
    e->pending = j;
    if (j->given) {
        recur_state *st;
        float *lg;
        srv_table_drop_keep(r->app->table, s, &st, &lg); /* they are j->cstate, j->clogits */
    } else {
        srv_table_drop(r->app->table, s);
    }
    r->evictions++;
}

/* The least recently used evictable resident session, or NULL: the first evictable one of the
 * recency list (session_table.h). It skips only sessions with a request or a write in flight,
 * so an eviction costs O(busy sessions), not O(resident sessions). */
static srv_session *lru_evictable(srv_residency *r)
{
    for (srv_session *s = srv_table_lru_first(r->app->table); s; s = s->lru_next)
        if (evictable(r, s))
            return s;
    return NULL;
}

/* Evict one idle session to make room now. Clean: dropped at once. Changed since its last
 * snapshot: dropped, its state and logits handed to a write job (no pass over them on the loop
 * thread), serialized and written on the threadpool, then back in the table's pool of spares;
 * until that write is done the state stays in memory (entry->pending), a request for it
 * restores it from a copy of it (into another spare), and a failed write restores it as a
 * resident session (nothing is lost). Only when MAX_EVICT_INFLIGHT such writes are pending, or persistence is degraded,
 * the write happens here on the loop thread (about 10 ms for a 17 KiB snapshot with fsync on
 * this machine's ext4; recurd_eviction_sync_write_seconds_* in /metrics). Returns 0, 1 when no
 * session is evictable (all busy), -1 when the eviction write failed (nothing is lost). */
static int evict_lru(srv_residency *r)
{
    srv_session *s = lru_evictable(r);
    if (!s)
        return 1;
    if (s->pjob) { /* its write in flight holds exactly its state: that is the eviction */
        evict_by_job(r, s, s->pjob);
        return 0;
    }
    if (is_clean(r, s)) {
        drop_clean(r, s);
        return 0;
    }
    if (r->evict_inflight < MAX_EVICT_INFLIGHT && !r->degraded) {
        /* the worker serializes s's own state (the checksum pass over the state, ~0.1-0.2 ms
         * for the default model, is off the resume that made room); the loop neither copies
         * nor zeroes it: a cold state costs the loop thread no page touches */
        wjob *j = start_job_ex(r, s, W_EVICT, JOB_GIVE);
        if (!j)
            return -1;
        evict_by_job(r, s, j);
        return 0;
    }
    uint8_t *buf;
    size_t len;
    int rc = serialize(r, s, &buf, &len);
    if (rc != 0) {
        srv_log(SRV_LOG_ERROR, "snapshot_serialize_failed", "\"error\":\"%s\"",
                recur_strerror(rc));
        return -1;
    }
    uint64_t t0 = uv_hrtime();
    int err = srv_persist_write(r->p, s->id, buf, len);
    uint64_t us = (uv_hrtime() - t0) / 1000;
    free(buf);
    r->sync_evict_writes++;
    r->sync_evict_us_total += us;
    if (us > r->sync_evict_us_max)
        r->sync_evict_us_max = us;
    if (err) {
        write_failed(r, err, W_EVICT);
        return -1; /* the session stays resident: nothing is lost */
    }
    write_ok(r, len);
    s->saved_gen = s->mut_gen;
    drop_clean(r, s);
    return 0;
}

/* ---------------------------------------------------------------- write completion */

static void enqueue(srv_residency *r, const char *id, wkind kind)
{
    if (r->q_len == r->q_cap) {
        size_t nc = r->q_cap ? r->q_cap * 2 : 64;
        qitem *nq = malloc(nc * sizeof *nq);
        if (!nq)
            abort();
        for (size_t i = 0; i < r->q_len; i++)
            nq[i] = r->q[(r->q_head + i) % r->q_cap];
        free(r->q);
        r->q = nq;
        r->q_cap = nc;
        r->q_head = 0;
    }
    qitem *it = &r->q[(r->q_head + r->q_len) % r->q_cap];
    memcpy(it->id, id, 33);
    it->kind = kind;
    r->q_len++;
}

static void shutdown_check_done(srv_residency *r)
{
    if (r->shutting_down && !r->shutdown_logged && r->inflight == 0 && r->q_len == 0) {
        r->shutdown_logged = 1;
        size_t no_tomb = 0;
        for (size_t i = 0; i < r->n_rm; i++)
            no_tomb += !r->rm[i].tomb;
        srv_log(r->shutdown_failed || no_tomb ? SRV_LOG_ERROR : SRV_LOG_INFO,
                "snapshot_flush_done",
                "\"written\":%llu,\"failed\":%llu,\"sessions_on_disk\":%zu,"
                "\"removals_pending\":%zu,\"removals_not_durable\":%zu",
                (unsigned long long)r->shutdown_ok, (unsigned long long)r->shutdown_failed,
                r->n_entries, r->n_rm, no_tomb);
    }
}

/* An eviction write failed: its bytes are the only copy of the session's latest state. */
static void evicted_write_failed(srv_residency *r, wjob *j)
{
    entry *e = idx_find(r, j->id);
    srv_session *s;
    if (r->tier)
        return; /* Redis holds this version: the file keeps what it had (its stamp says which) */
    if (restore_job(r, j, &s) != 0) {
        /* Our own bytes of a moment ago: cannot fail but for memory. */
        srv_log(SRV_LOG_ERROR, "session_lost", "\"reason\":\"no memory\"");
        if (e)
            idx_del(r, j->id);
        return;
    }
    s->mut_gen = 2; /* resident and changed since its last snapshot: written again later */
    s->saved_gen = 1;
    if (e)
        idx_set_resident(r, e, 1, uv_now(r->app->loop));
    else
        idx_put(r, j->id, 1, uv_now(r->app->loop));
    srv_log(SRV_LOG_WARN, "eviction_undone", "\"resident\":%zu",
            srv_table_count(r->app->table));
}

static void after_cb(uv_work_t *req, int status)
{
    wjob *j = req->data;
    srv_residency *r = j->r;
    r->inflight--;
    if (j->kind == W_EVICT)
        r->evict_inflight--;
    int err = status == UV_ECANCELED ? -ECANCELED : j->err;
    if (j->serr) {
        srv_log(SRV_LOG_ERROR, "snapshot_serialize_failed", "\"error\":\"%s\"",
                recur_strerror(j->serr));
    } else if (err) {
        write_failed(r, err, j->kind);
        if (j->kind == W_SHUTDOWN)
            r->shutdown_failed++;
    } else {
        write_ok(r, j->len);
        if (j->kind == W_SHUTDOWN)
            r->shutdown_ok++;
    }
    if (j->st == J_DELETED) {
        /* Deleted while its write ran: the rename may have brought the file back. */
        rmitem *it = rm_find(r, j->id);
        if (it) {
            it->waiting = 0;
            if (rm_try(r, it))
                *it = r->rm[--r->n_rm];
        }
    } else if (j->st == J_EVICTED) {
        entry *e = idx_find(r, j->id);
        if (e && e->pending == j)
            e->pending = NULL;
        if (e && srv_table_peek(r->app->table, j->id)) /* loaded from Redis meanwhile (tier) */
            idx_set_resident(r, e, 1, uv_now(r->app->loop));
        else if (err) {
            evicted_write_failed(r, j);
            if (r->shutting_down)
                enqueue(r, j->id, W_SHUTDOWN); /* one more try before exit */
        }
    } else {
        srv_session *s = j->s;
        s->pjob = NULL;
        uint64_t now = uv_now(r->app->loop);
        if (!err) {
            if (j->gen_valid)
                s->saved_gen = j->gen;
            idx_put(r, s->id, 1, now);
            if (j->kind == W_IDLE && is_idle(s) && s->saved_gen == s->mut_gen &&
                now - s->last_used_ms >= r->app->cfg.evict_idle_ms)
                drop_clean(r, s);
            else if (r->shutting_down && s->saved_gen != s->mut_gen)
                enqueue(r, s->id, W_SHUTDOWN); /* changed while this write ran */
        } else if (r->shutting_down && j->kind != W_SHUTDOWN) {
            enqueue(r, s->id, W_SHUTDOWN); /* a round's write failed: one more try before exit */
        }
    }
    if (j->given)
        srv_table_spare_return(r->app->table, j->cstate, j->clogits); /* reset only if a new
                                                                        * session takes it */
    else if (j->cstate)
        copy_put(r, j->cstate, j->clogits);
    free(j->csec);
    free(j->buf);
    free(j);
    pump(r);
    shutdown_check_done(r);
}

/* ---------------------------------------------------------------- busy sessions */

/* A worker is computing on s: its state may be read only between two work items. */
static int computing(const srv_session *s)
{
    return s->q_head && s->q_head->in_flight;
}

static void want_clear(srv_residency *r, srv_session *s)
{
    if (s->snap_wanted) {
        s->snap_wanted = 0;
        r->reserved--;
    }
}

/* s is computing: hold a write slot for it and take its state at its next boundary (ops.c
 * calls srv_residency_capture before it submits the next item). A generation steps on the
 * workers without such boundaries: it is asked to come back once (yield). Under steady load a
 * session is thus written every round instead of never. */
static void want(srv_residency *r, srv_session *s, wkind kind)
{
    if (!s->snap_wanted) {
        s->snap_wanted = 1 + (int)kind;
        r->reserved++;
        soon(r); /* a stream paused meanwhile is copied by a tick */
    }
    if (s->q_head->kind == SRV_OP_GENERATE)
        atomic_store(&s->q_head->run.yield, 1);
}

void srv_residency_capture(srv_app *app, srv_session *s)
{
    srv_residency *r = app->res;
    if (!s->snap_wanted)
        return;
    wkind kind = (wkind)(s->snap_wanted - 1);
    want_clear(r, s);
    if (s->pjob || is_clean(r, s))
        return;
    uint64_t t0 = uv_hrtime();
    if (start_job_ex(r, s, kind, JOB_COPY)) {
        uint64_t us = (uv_hrtime() - t0) / 1000;
        r->busy_captures++;
        r->capture_us_total += us;
        if (us > r->capture_us_max)
            r->capture_us_max = us;
    }
}

/* Hand one queued session to the threadpool (or drop it when it is clean and idle-due). */
static void dispatch(srv_residency *r, const qitem *it)
{
    srv_session *s = srv_table_peek(r->app->table, it->id);
    if (!s || s->pjob || s->snap_wanted)
        return;
    if (is_clean(r, s)) {
        if (it->kind == W_IDLE && is_idle(s))
            drop_clean(r, s);
        return;
    }
    if (!writable(r, s))
        return; /* its commit is pending: the next round */
    /* A worker may be writing the state: only between two work items (after SIGTERM the
     * workers are joined, so everything is safe then). */
    if (!r->shutting_down && computing(s)) {
        want(r, s, it->kind);
        return;
    }
    start_job(r, s, it->kind);
}

static void pump(srv_residency *r)
{
    while (r->inflight + r->reserved < MAX_INFLIGHT && r->q_len > 0) {
        qitem it = r->q[r->q_head];
        r->q_head = (r->q_head + 1) % r->q_cap;
        r->q_len--;
        dispatch(r, &it);
    }
}

/* ---------------------------------------------------------------- table hooks */

static int make_room(srv_residency *r);

/* A resume's read and decode: what settle judges. */
typedef struct {
    int rc;          /* the read's: 0 or -errno (srv_persist_read*) */
    uint8_t *buf;    /* the file's bytes, owned (freed by settle) */
    size_t len;
    srv_session *s;  /* detached, decoded into (srv_table_detached); NULL when the read failed */
    int dec;         /* the decode's: 0, or -1 with why (a quarantine reason) */
    const char *why;
    int stamped;     /* the file ends with a stamp (redis_stamp.h) of version ver */
    uint64_t ver;
} readout;

/* The outcome of a resume's read and decode, on the loop thread: the file is quarantined (a
 * failed check) or forgotten (gone), or the error is kept for the answer (load_error: 503, the
 * file kept), or:
 *   cached NULL (no tier): s joins the table (first making room) and is returned;
 *   cached set (the Redis tier, srv_residency_cached): s is returned detached when the file had
 *   a stamp, with *cached = SRV_CACHED_READY; a file without one is not trusted
 *   (SRV_CACHED_REJECTED, as a quarantined one), an error or a vanished file is
 *   SRV_CACHED_NONE.
 * o->buf is freed and o->s linked, returned or discarded. */
static srv_session *settle(srv_residency *r, const char *id, readout *o, srv_cached_gate *cached)
{
    srv_table *t = r->app->table;
    entry *e = idx_find(r, id);
    srv_session *out = NULL, *s = o->rc == 0 ? o->s : NULL;
    srv_cached_gate g = SRV_CACHED_NONE;
    int rc = o->rc;
    if (!e || e->resident || e->pending) {
        /* changed while a reader had it: expired or deleted (404), or resident already */
        out = cached ? NULL : srv_table_peek(t, id);
    } else if (rc == -ENOENT) { /* removed behind our back */
        idx_del(r, id);
    } else if (rc == -EFBIG || rc == -EINVAL || rc == -ELOOP) {
        r->quarantined++;
        srv_persist_quarantine(r->p, id, rc == -EFBIG ? proto_state_toolarge_reason(r->app->model, o->buf, o->len)
                                                      : "notfile");
        idx_del(r, id);
        g = SRV_CACHED_REJECTED;
    } else if (rc != 0) {
        r->load_failures++;
        srv_log(SRV_LOG_ERROR, "snapshot_read_failed", "\"error\":\"%s\"", strerror(-rc));
        r->load_error = !cached; /* kept: a later request may succeed (EMFILE, EIO) */
    } else if (o->dec != 0) {
        r->quarantined++;
        srv_persist_quarantine(r->p, id, o->why);
        idx_del(r, id);
        g = SRV_CACHED_REJECTED;
    } else if (cached) {
        if (o->stamped) {
            out = s;
            s = NULL;
            g = SRV_CACHED_READY;
        } else {
            g = SRV_CACHED_REJECTED; /* written without Redis: no version to check */
        }
    } else {
        if (make_room(r) != 0) {
            /* The eviction write failed (logged): load anyway rather than answer 404 or 503
             * for a session that exists. */
            r->over_budget++;
        }
        uint64_t now = uv_now(r->app->loop);
        srv_table_link(t, s, now);
        s->mut_gen = s->saved_gen = 1;
        idx_set_resident(r, e, 1, now);
        r->loads++;
        out = s;
        s = NULL;
    }
    free(o->buf);
    o->buf = NULL;
    if (s)
        srv_table_discard(t, s);
    if (cached)
        *cached = g;
    return out;
}

/* The read bytes into o->s: 0 in o->dec, or -1 when they fail a check (o->why: the quarantine
 * reason). A stamp (redis_stamp.h) is checked and taken off first; with the Redis tier a file
 * without one is not decoded (it is not trusted). Any thread: it touches o only. */
static void decode(srv_residency *r, readout *o)
{
    size_t body = o->len;
    int st = srv_stamp_split(o->buf, o->len, &o->ver, &body, &o->why);
    o->stamped = st == 1;
    if (st < 0 || (r->tier && st == 0)) {
        o->dec = st < 0 ? -1 : 0;
        return;
    }
    o->dec = srv_session_file_read(o->s, r->app->model, r->app->info->vocab_size,
                                   r->app->cfg.max_checkpoints_per_session, o->buf, body,
                                   &o->why) != 0 ? -1 : 0;
}

/* A resume read on the loop thread (o->rc, buf, len from srv_persist_read*): decoded here. */
static srv_session *load_here(srv_residency *r, const char *id, readout *o, srv_cached_gate *cached)
{
    if (o->rc == 0) {
        if (srv_table_detached(r->app->table, id, &o->s) != 0) {
            free(o->buf);
            r->load_failures++;
            srv_log(SRV_LOG_ERROR, "snapshot_load_no_memory", NULL);
            r->load_error = !cached;
            if (cached)
                *cached = SRV_CACHED_NONE;
            return NULL;
        }
        decode(r, o);
    }
    return settle(r, id, o, cached);
}

static srv_session *hook_load(void *ctx, const char *id)
{
    srv_residency *r = ctx;
    r->load_error = 0;
    if (r->tier)
        return NULL; /* a file makes no session exist: the tier asks Redis (srv_tier_lookup) */
    entry *e = idx_find(r, id);
    if (!e || e->resident)
        return NULL;
    if (e->pending) {
        /* Evicted a moment ago and still being written: back from those very bytes, and the
         * write in flight becomes this session's (it is clean once that write is done). */
        if (make_room(r) != 0)
            r->over_budget++; /* as in settle */
        wjob *j = e->pending;
        srv_session *s = NULL;
        if (restore_job(r, j, &s) != 0) {
            r->load_error = 1; /* only without memory: our own bytes */
            return NULL;
        }
        e->pending = NULL;
        j->st = J_ATTACHED;
        j->s = s;
        j->gen = 2;
        j->gen_valid = 1;
        s->pjob = j;
        s->mut_gen = 2;
        s->saved_gen = 1;
        idx_set_resident(r, e, 1, uv_now(r->app->loop));
        r->loads++;
        return s;
    }
    readout o = {0};
    o.rc = srv_persist_read(r->p, id, r->snap_max, &o.buf, &o.len);
    return load_here(r, id, &o, NULL);
}

/* ---------------------------------------------------------------- resumes read off the loop */

/* A resume whose snapshot is not in the page cache: a reader thread reads the file and decodes
 * it into a detached session (ljob_work); the loop settles the outcome (ljob_done), and the
 * requests held for the id meanwhile (offloop.h) go on — or, with the Redis tier, the tier
 * checks the file's version with Redis (srv_tier_cached_read), the requests still held. */
typedef struct ljob {
    srv_readjob rj;      /* first: the pool hands back &rj */
    srv_residency *r;
    struct ljob *next;   /* r->loads */
    char id[33];
    readout o;           /* the read's and the decode's results (settle); o.s detached */
    int finished;        /* settled: the held requests are being applied */
    int failed;          /* ... and it failed transiently: they answer 503 */
} ljob;

static ljob *ljob_find(srv_residency *r, const char *id)
{
    for (ljob *j = r->reads; j; j = j->next)
        if (!memcmp(j->id, id, 33))
            return j;
    return NULL;
}

static void ljob_work(srv_readjob *rj)
{
    ljob *j = (ljob *)rj;
    j->o.rc = srv_persist_read(j->r->p, j->id, j->r->snap_max, &j->o.buf, &j->o.len);
    if (j->o.rc == 0)
        decode(j->r, &j->o);
}

static void ljob_done(srv_readjob *rj)
{
    ljob *j = (ljob *)rj;
    srv_residency *r = j->r;
    r->load_error = 0;
    srv_session *detached = j->o.s;
    srv_cached_gate g = SRV_CACHED_NONE;
    srv_session *s = settle(r, j->id, &j->o, r->tier ? &g : NULL);
    if (j->o.rc != 0)
        srv_table_discard(r->app->table, detached);
    j->failed = !s && r->load_error;
    r->load_error = 0;
    j->finished = 1;
    if (r->tier)
        srv_tier_cached_read(r->app, j->id, s, j->o.ver, g); /* its version, asked of Redis */
    else
        srv_held_store_ready(r->app, j->id); /* they find it resident, or answer 404 / 503 */
    for (ljob **pp = &r->reads; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    free(j);
}

/* A read of id's file, on the loop thread from the page cache, else on a reader thread:
 * SRV_RESUME_PASS with the settled outcome (load_here: *out, and *cached with the tier), or
 * SRV_RESUME_HOLD (ljob_done settles it). */
static srv_resume_gate read_file(srv_residency *r, const char *id, srv_session **out,
                                 srv_cached_gate *cached, uint64_t *ver)
{
    readout o = {0};
    r->load_error = 0;
    o.rc = r->app->cfg.resume_cached_on_loop ? srv_persist_read_cached(r->p, id, r->snap_max, &o.buf, &o.len)
                                             : -EAGAIN;
    if (o.rc != -EAGAIN) {
        *out = load_here(r, id, &o, cached);
        *ver = o.ver;
        return SRV_RESUME_PASS;
    }
    ljob *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    if (srv_table_detached(r->app->table, id, &j->o.s) != 0) {
        free(j);
        r->load_failures++;
        srv_log(SRV_LOG_ERROR, "snapshot_load_no_memory", NULL);
        r->load_error = !cached;
        return SRV_RESUME_PASS;
    }
    j->r = r;
    memcpy(j->id, id, 33);
    j->rj.work = ljob_work;
    j->rj.done = ljob_done;
    j->next = r->reads;
    r->reads = j;
    r->disk_reads++;
    srv_readpool_submit(r->rp, &j->rj);
    return SRV_RESUME_HOLD;
}

srv_resume_gate srv_residency_resume(srv_app *app, const char *id, srv_session **out)
{
    srv_residency *r = app->res;
    *out = srv_table_peek(app->table, id);
    if (*out)
        return SRV_RESUME_PASS;
    if (!r || !r->rp || r->shutting_down || !srv_persist_valid_id(id)) {
        *out = srv_table_find(app->table, id);
        return SRV_RESUME_PASS;
    }
    ljob *j = ljob_find(r, id);
    if (j && !j->finished)
        return SRV_RESUME_HOLD;
    if (j && j->failed) {
        r->load_error = 1; /* session_missing answers 503 */
        return SRV_RESUME_PASS;
    }
    entry *e = idx_find(r, id);
    if (j || !e || e->resident || e->pending) {
        *out = srv_table_find(app->table, id); /* 404, or its eviction's bytes in memory */
        return SRV_RESUME_PASS;
    }
    uint64_t ver;
    return read_file(r, id, out, NULL, &ver);
}

/* ---------------------------------------------------------------- with the Redis tier */

srv_cached_gate srv_residency_cached(srv_app *app, const char *id, srv_session **out, uint64_t *ver)
{
    srv_residency *r = app->res;
    *out = NULL;
    *ver = 0;
    if (!r || !r->tier || !r->rp || r->shutting_down || ljob_find(r, id))
        return SRV_CACHED_NONE;
    entry *e = idx_find(r, id);
    if (!e || e->resident || e->pending)
        return SRV_CACHED_NONE; /* no file, or its write is in flight (Redis has that state) */
    srv_cached_gate g = SRV_CACHED_NONE;
    if (read_file(r, id, out, &g, ver) == SRV_RESUME_HOLD)
        return SRV_CACHED_HOLD;
    r->load_error = 0;
    return g;
}

void srv_residency_cached_link(srv_app *app, srv_session *s)
{
    srv_residency *r = app->res;
    if (make_room(r) != 0)
        r->over_budget++; /* as in settle */
    uint64_t now = uv_now(app->loop);
    srv_table_link(app->table, s, now);
    entry *e = idx_find(r, s->id);
    s->mut_gen = 1;
    s->saved_gen = e ? 1 : 0; /* the file holds it (unless it expired meanwhile) */
    if (e)
        idx_set_resident(r, e, 1, now);
    r->loads++;
}

void srv_residency_cached_discard(srv_app *app, srv_session *s)
{
    if (s)
        srv_table_discard(app->table, s);
}

void srv_residency_adopted(srv_app *app, srv_session *s)
{
    srv_residency *r = app->res;
    if (!r || !r->p)
        return;
    s->mut_gen = 1; /* not what its file holds (if it has one): written at its next write */
    s->saved_gen = 0;
    entry *e = idx_find(r, s->id);
    if (e && !e->resident && !e->pending)
        idx_set_resident(r, e, 1, uv_now(app->loop));
}

static void hook_removed(void *ctx, srv_session *s);

void srv_residency_dropping(srv_app *app, srv_session *s, int gone)
{
    srv_residency *r = app->res;
    if (!r || !r->p)
        return;
    if (gone) {
        hook_removed(r, s);
        return;
    }
    want_clear(r, s);
    wjob *j = s->pjob;
    if (j) { /* its write goes on without it: the bytes are a version Redis accepted */
        s->pjob = NULL;
        j->st = J_EVICTED;
        j->s = NULL;
        idx_put(r, s->id, 0, s->last_used_ms)->pending = j;
        return;
    }
    entry *e = idx_find(r, s->id);
    if (e)
        idx_set_resident(r, e, 0, s->last_used_ms);
}

void srv_residency_forget(srv_app *app, const char *id)
{
    srv_residency *r = app->res;
    if (!r || !r->p)
        return;
    entry *e = idx_find(r, id);
    if (!e)
        return;
    wjob *j = e->pending;
    if (j)
        j->st = J_DELETED; /* its rename may bring the file back: removed again after it */
    idx_del(r, id);
    remove_files(r, id, j != NULL);
}

void srv_residency_committed(srv_app *app, srv_session *s)
{
    srv_residency *r = app->res;
    if (!r || !r->p || !r->shutting_down || s->pjob || is_clean(r, s) || !writable(r, s))
        return;
    enqueue(r, s->id, W_SHUTDOWN); /* SIGTERM skipped it: its change was not committed yet */
    pump(r);
}

int srv_residency_persists(const srv_app *app)
{
    return app->res && app->res->p;
}

/* Evict until one more session fits (more than one after loads that went over the budget).
 * Returns 0 or -1. */
static int make_room(srv_residency *r)
{
    while (r->max_resident && srv_table_count(r->app->table) >= (size_t)r->max_resident) {
        int rc = evict_lru(r);
        if (rc > 0) {
            /* Every resident session has a request (or a write) in flight: go over the
             * budget rather than refuse. Bounded by the requests in progress; the next
             * evictions bring it back under. */
            r->over_budget++;
            srv_log(SRV_LOG_DEBUG, "resident_budget_exceeded", "\"resident\":%zu,\"max\":%d",
                    srv_table_count(r->app->table), r->max_resident);
            return 0;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int hook_make_room(void *ctx)
{
    return make_room(ctx);
}

static void hook_removed(void *ctx, srv_session *s)
{
    srv_residency *r = ctx;
    want_clear(r, s);
    int in_flight = 0;
    if (s->pjob) {
        wjob *j = s->pjob;
        j->st = J_DELETED;
        j->s = NULL;
        s->pjob = NULL;
        in_flight = 1;
    }
    entry *e = idx_find(r, s->id);
    if (e && e->pending) {
        /* with the tier: loaded from Redis while its eviction write still ran (that write's
         * rename may bring the file back: removed again after it) */
        e->pending->st = J_DELETED;
        in_flight = 1;
    }
    if (e || in_flight) {
        idx_del(r, s->id);
        remove_files(r, s->id, in_flight);
    }
}

static size_t hook_stored(void *ctx)
{
    srv_residency *r = ctx;
    return r->tier ? 0 : r->n_stored; /* with the tier a file is a cache, not a session */
}

/* ---------------------------------------------------------------- timer */

/* A session of the changed list, at a tick: a capture still waiting for its boundary, or (in
 * a periodic round) a write to queue. A clean session leaves the list. */
static void tick_changed(srv_residency *r, srv_session *s, int periodic)
{
    if (s->snap_wanted) {
        /* Still waiting for a boundary: the stream paused (backpressure) or ended since. */
        if (!computing(s))
            srv_residency_capture(r->app, s);
        else if (s->q_head->kind == SRV_OP_GENERATE)
            atomic_store(&s->q_head->run.yield, 1); /* on_drain may have raced it */
        return;
    }
    if (s->pjob)
        return;
    if (is_clean(r, s)) {
        srv_table_changed_unlink(r->app->table, s);
        return;
    }
    if (periodic)
        enqueue(r, s->id, W_PERIODIC);
}

/* Sessions idle for evict_idle_ms: the head of the recency list, up to the first session used
 * more recently (the list is sorted by last use), so idle sessions already on disk or not yet
 * due cost nothing. */
static void evict_idle(srv_residency *r, uint64_t now)
{
    uint64_t after = r->app->cfg.evict_idle_ms;
    for (srv_session *s = srv_table_lru_first(r->app->table), *n; s; s = n) {
        if (now - s->last_used_ms < after)
            break;
        n = s->lru_next; /* drop_clean frees s only */
        if (s->snap_wanted || s->pjob || !is_idle(s) || !writable(r, s))
            continue;
        if (is_clean(r, s))
            drop_clean(r, s);
        else
            enqueue(r, s->id, W_IDLE);
    }
}

/* Delete disk-only sessions idle for idle_ttl_ms. A sweep walks the whole index, so it runs
 * every ttl/8 (between 1 s and 60 s), not every tick. */
static void expire_on_disk(srv_residency *r, uint64_t now)
{
    uint64_t ttl = r->app->cfg.idle_ttl_ms;
    if (!ttl || !r->n_stored)
        return;
    uint64_t every = ttl / 8 < 1000 ? 1000 : ttl / 8 > 60000 ? 60000 : ttl / 8;
    if (now - r->last_expire_ms < every)
        return;
    r->last_expire_ms = now;
    size_t gone = 0;
    for (size_t b = 0; b < r->n_buckets; b++)
        for (entry **pp = &r->buckets[b]; *pp;) {
            entry *e = *pp;
            if (!e->resident && !e->pending && now - e->last_used_ms >= ttl) {
                remove_files(r, e->id, 0);
                *pp = e->next;
                r->n_stored--;
                r->n_entries--;
                free(e);
                gone++;
            } else {
                pp = &e->next;
            }
        }
    if (gone) {
        r->expired_on_disk += gone;
        if (!r->tier) /* with the tier the session lives on in Redis (its own TTL) */
            r->app->counters.sessions_expired += gone;
        srv_log(SRV_LOG_INFO, "sessions_expired_on_disk", "\"count\":%zu", gone);
    }
}

/* Work in progress that the ticks drive or watch: writes queued or in flight, captures waiting
 * for a boundary, removals to retry, unlinks to fsync. */
static int busy(const srv_residency *r)
{
    return r->q_len || r->inflight || r->reserved || r->n_rm || r->dir_dirty || r->dirsync_inflight;
}

static void on_tick(uv_timer_t *t);

/* Arm the one-shot timer for the next thing due: the next periodic round, the moment the least
 * recently used session becomes idle-due, the next sweep of sessions on disk; every tick while
 * work is in progress; never later than IDLE_WAKE_MAX_MS (and evict_idle_ms / 4). An idle
 * daemon thus wakes about once a minute instead of every second: on a VM that charges each
 * wake-up by the process's resident memory, that was 4 % of a core at 100k sessions. */
static void arm(srv_residency *r, uint64_t now)
{
    const srv_config *cfg = &r->app->cfg;
    uint64_t cap = IDLE_WAKE_MAX_MS;
    if (cfg->evict_idle_ms && cfg->evict_idle_ms / 4 < cap)
        cap = cfg->evict_idle_ms / 4;
    uint64_t next = now + (cap > r->tick ? cap : r->tick);
    if (busy(r))
        next = now + r->tick;
    if (cfg->snapshot_interval_ms && r->last_periodic_ms + cfg->snapshot_interval_ms < next)
        next = r->last_periodic_ms + cfg->snapshot_interval_ms;
    srv_session *head = srv_table_lru_first(r->app->table);
    if (cfg->evict_idle_ms && head && head->last_used_ms + cfg->evict_idle_ms < next)
        next = head->last_used_ms + cfg->evict_idle_ms;
    if (cfg->idle_ttl_ms && r->n_stored) {
        uint64_t ttl = cfg->idle_ttl_ms;
        uint64_t every = ttl / 8 < 1000 ? 1000 : ttl / 8 > 60000 ? 60000 : ttl / 8;
        if (r->last_expire_ms + every < next)
            next = r->last_expire_ms + every;
    }
    /* something already due but left alone (a busy session at the head): the usual cadence */
    if (next < now + r->tick)
        next = now + r->tick;
    uv_timer_start(&r->timer, on_tick, next - now, 0);
}

/* Work was added outside a tick: make sure a tick comes within the cadence. */
static void soon(srv_residency *r)
{
    if (r->timer_on && !r->shutting_down && uv_timer_get_due_in(&r->timer) > r->tick)
        uv_timer_start(&r->timer, on_tick, r->tick, 0);
}

static void on_tick(uv_timer_t *t)
{
    srv_residency *r = t->data;
    uint64_t now = uv_now(r->app->loop);
    uint64_t every = r->app->cfg.snapshot_interval_ms;
    /* A new round only when the last one is written: a slow disk gets no pile-up. */
    int periodic = every && now - r->last_periodic_ms >= every && r->q_len == 0;
    if (periodic)
        r->last_periodic_ms = now;
    if (r->app->cfg.evict_idle_ms)
        evict_idle(r, now);
    if (periodic || r->reserved)
        for (srv_session *s = srv_table_changed_first(r->app->table), *n; s; s = n) {
            n = s->chg_next; /* tick_changed unlinks s at most (a capture frees nothing) */
            tick_changed(r, s, periodic);
        }
    expire_on_disk(r, now);
    if (r->n_rm)
        rm_retry_all(r);
    dirsync_start(r);
    pump(r);
    arm(r, uv_now(r->app->loop));
}

static void timer_closed(uv_handle_t *h) {}

/* ---------------------------------------------------------------- lifecycle */

int srv_residency_start(srv_app *app)
{
    srv_residency *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->app = app;
    app->res = r;
    const srv_config *cfg = &app->cfg;
    if (!cfg->state_dir[0]) {
        if (cfg->max_resident_sessions && cfg->max_resident_sessions < cfg->max_sessions) {
            /* Nowhere to evict to: the budget is a plain session limit (503 + Retry-After). */
            srv_table_set_max(app->table, cfg->max_resident_sessions);
            srv_log(SRV_LOG_INFO, "max_resident_without_state_dir",
                    "\"max_sessions\":%d", cfg->max_resident_sessions);
        }
        return 0;
    }
    r->tier = cfg->redis[0] != 0;
    r->max_resident = cfg->max_resident_sessions;
    if (r->tier && !r->max_resident)
        r->max_resident = cfg->max_sessions; /* room for a load from Redis: evict one (as the
                                              * tier does without state_dir) */
    r->snap_max = proto_state_max_body(app->info); /* a file of any state dtype: its state and trailer */
    /* and its checkpoints (checkpoints.h): each a state blob and its 32 bytes of framing */
    r->snap_max += (size_t)cfg->max_checkpoints_per_session * (proto_state_max_body(app->info) + 32) + 24;
    r->n_buckets = 1024;
    r->buckets = calloc(r->n_buckets, sizeof *r->buckets);
    if (!r->buckets)
        abort();
    char err[600];
    if (srv_persist_open(cfg->state_dir, on_found, on_pending, r, &r->p, err, sizeof err) != 0) {
        char e[1400];
        srv_log(SRV_LOG_ERROR, "state_dir_unusable", "\"message\":\"%s; refusing to start\"",
                srv_log_str(err, e, sizeof e));
        return -1;
    }
    r->quarantined = srv_persist_scan_quarantined(r->p);
    if (srv_readpool_start(app->loop, &r->rp) != 0) {
        srv_log(SRV_LOG_ERROR, "state_dir_unusable",
                "\"message\":\"no reader threads could be started; refusing to start\"");
        return -1;
    }
    srv_table_hooks h = {hook_load, hook_make_room, hook_removed, hook_stored, r};
    srv_table_set_hooks(app->table, &h);
    uint64_t tick = TICK_MAX_MS;
    if (cfg->snapshot_interval_ms && cfg->snapshot_interval_ms / 2 < tick)
        tick = cfg->snapshot_interval_ms / 2;
    if (cfg->evict_idle_ms && cfg->evict_idle_ms / 4 < tick)
        tick = cfg->evict_idle_ms / 4;
    if (tick < TICK_MIN_MS)
        tick = TICK_MIN_MS;
    uv_timer_init(app->loop, &r->timer);
    r->timer.data = r;
    r->last_periodic_ms = uv_now(app->loop);
    r->tick = tick;
    uv_timer_start(&r->timer, on_tick, tick, 0);
    r->timer_on = 1;
    srv_log(SRV_LOG_INFO, "persistence",
            "\"sessions_on_disk\":%zu,\"max_resident_sessions\":%d,\"snapshot_interval_ms\":%llu,"
            "\"evict_idle_ms\":%llu",
            r->n_entries, r->max_resident, (unsigned long long)cfg->snapshot_interval_ms,
            (unsigned long long)cfg->evict_idle_ms);
    return 0;
}

static void shutdown_one(srv_session *s, void *arg)
{
    srv_residency *r = arg;
    want_clear(r, s); /* the workers are joined: nothing computes any more */
    if (!is_clean(r, s) && !s->pjob && writable(r, s))
        enqueue(r, s->id, W_SHUTDOWN); /* with the tier, the others once committed
                                        * (srv_residency_committed) */
}

void srv_residency_shutdown(srv_app *app)
{
    srv_residency *r = app->res;
    if (!r || !r->p || r->shutting_down)
        return;
    r->shutting_down = 1;
    srv_readpool_stop(r->rp); /* the reads in flight are settled (their requests answered) */
    r->rp = NULL;
    if (r->timer_on) {
        uv_timer_stop(&r->timer);
        uv_close((uv_handle_t *)&r->timer, timer_closed);
        r->timer_on = 0;
    }
    rm_retry_all(r); /* one more try at pending removals before exit */
    if (r->dir_dirty)
        srv_persist_sync_dir(r->p);
    r->dir_dirty = 0;
    r->q_len = 0; /* periodic/idle rounds are superseded by this one */
    srv_table_foreach(app->table, shutdown_one, r);
    srv_log(SRV_LOG_INFO, "snapshot_flush", "\"sessions\":%zu,\"in_flight\":%d",
            r->q_len, r->inflight);
    pump(r);
    shutdown_check_done(r);
}

void srv_residency_free(srv_app *app)
{
    srv_residency *r = app->res;
    if (!r)
        return;
    for (size_t b = 0; b < r->n_buckets; b++)
        for (entry *e = r->buckets[b], *n; e; e = n) {
            n = e->next;
            free(e);
        }
    free(r->buckets);
    free(r->q);
    free(r->rm);
    for (int i = 0; i < r->n_cpool; i++) {
        recur_state_destroy(r->cpool[i]);
        free(r->cpool_logits[i]);
    }
    srv_persist_close(r->p);
    free(r);
    app->res = NULL;
}

int srv_residency_take_load_error(srv_app *app)
{
    srv_residency *r = app->res;
    if (!r || !r->load_error)
        return 0;
    r->load_error = 0;
    return 1;
}

/* ---------------------------------------------------------------- health, metrics */

int srv_residency_health(srv_app *app, proto_buf *b)
{
    srv_residency *r = app->res;
    if (r && r->p && r->degraded) {
        proto_buf_puts(b, "{\"status\":\"degraded\",\"persistence\":");
        proto_buf_json_str(b, r->last_error, strlen(r->last_error));
        proto_buf_puts(b, "}");
    } else {
        proto_buf_puts(b, "{\"status\":\"ok\"}");
    }
    return 200;
}

void srv_residency_metrics(srv_app *app, proto_buf *b)
{
    srv_residency *r = app->res;
    if (!r)
        return;
    srv_metric(b, "recurd_persistence_enabled", "gauge", "1 when state_dir is set.", r->p != NULL);
    if (!r->p)
        return;
    const srv_metric_row metrics[] = {
        {"recurd_persistence_degraded", "gauge",
         "1 after a failed snapshot write, until the next successful one.", r->degraded},
        {"recurd_snapshots_total", "counter",
         "Snapshot files written.", r->writes_ok},
        {"recurd_snapshot_failures_total", "counter",
         "Snapshot writes that failed (the previous file stays).", r->writes_failed},
        {"recurd_snapshot_bytes_total", "counter",
         "Bytes of snapshot files written.", r->bytes_written},
        {"recurd_snapshot_writes_in_flight", "gauge",
         "Snapshot writes on the threadpool.", r->inflight},
        {"recurd_sessions_on_disk", "gauge",
         "Sessions with a snapshot file.", r->n_entries},
        {"recurd_sessions_stored", "gauge",
         "Sessions on disk only (not resident).", r->n_stored},
        {"recurd_sessions_max_resident", "gauge",
         "max_resident_sessions (0 = max_sessions).", r->max_resident},
        {"recurd_sessions_evicted_total", "counter",
         "Sessions dropped from memory to disk.", r->evictions},
        {"recurd_sessions_loaded_total", "counter",
         "Sessions loaded from disk.", r->loads},
        {"recurd_session_disk_reads_total", "counter",
         "Resumes whose snapshot was not in the page cache: read and checked by a reader "
         "thread while the loop served other requests.", r->disk_reads},
        {"recurd_session_load_failures_total", "counter",
         "Snapshot reads that failed with an I/O error (file kept).", r->load_failures},
        {"recurd_snapshots_quarantined_total", "counter",
         "Snapshot files that failed a check (at start or on load), moved to quarantine/.", r->quarantined},
        {"recurd_resident_budget_exceeded_total", "counter",
         "Sessions made resident over max_resident_sessions (every resident one was busy).", r->over_budget},
        {"recurd_session_removals_pending", "gauge",
         "Deleted sessions whose snapshot file could not be removed yet (retried every tick).", r->n_rm},
        {"recurd_snapshot_unlink_failures_total", "counter",
         "Snapshot removals (DELETE, idle_ttl) whose first unlink failed.", r->unlink_failures},
        {"recurd_snapshot_busy_captures_total", "counter",
         "Snapshots of a computing session, copied between two of its work items.", r->busy_captures},
        {"recurd_eviction_sync_writes_total", "counter",
         "Eviction writes done on the loop thread.", r->sync_evict_writes},
        /* kept in microseconds, shown in seconds */
        {"recurd_snapshot_capture_seconds_total", "counter",
         "Seconds the loop spent in those copies.", (double)r->capture_us_total / 1e6},
        {"recurd_snapshot_capture_seconds_max", "gauge",
         "Longest such copy (seconds): what the session's stream waited.", (double)r->capture_us_max / 1e6},
        {"recurd_eviction_sync_write_seconds_total", "counter",
         "Seconds spent in eviction writes on the loop thread.", (double)r->sync_evict_us_total / 1e6},
        {"recurd_eviction_sync_write_seconds_max", "gauge",
         "Longest eviction write on the loop thread (seconds).", (double)r->sync_evict_us_max / 1e6},
    };
    srv_metric_rows(b, metrics, sizeof metrics / sizeof *metrics);
}
