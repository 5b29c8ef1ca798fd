/* prefix_cache.c — the exact prefix-state cache: lookup, store, LRU, spill files
 * (prefix_cache.h). */
#include "prefix_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints.h"
#include "log.h"
#include "metrics.h"
#include "persist.h"
#include "state_blob.h"

/* A spill file (little-endian), state_dir/prefix_cache/<id>.snap:
 *   0  "RECURPX1"   8  u32 version (1)   12 u32 0
 *   16 u64 model fingerprint   24 u64 n (tokens)   32 u64 blob length B
 *   40 n x i32 token ids, then B bytes of state blob (proto/state_blob.h)
 *   then u64 FNV-1a 64 over every byte before it.
 * <id> = 10 hex digits of n, 16 of the ids' hash, then "000001" (the format): the name alone
 * says what a file claims to hold, so the index is built at start without reading any file. */
#define PX_MAGIC "RECURPX1"
#define PX_HEAD 40
#define PX_VERSION 1
#define PX_ID_FORMAT "000001"
#define PX_MAX_N 0xffffffffffULL /* n fits the name's 10 hex digits */
/* Spill writes in flight at once; past it an evicted entry is dropped, not spilled. */
#define SPILL_INFLIGHT 4

typedef struct pentry {
    uint64_t h;               /* hash of tokens[0..n) (srv_pcache_hash) */
    size_t n;
    srv_ids *ids;             /* its ids are ids->ids[0..n); in memory only (a reference) */
    uint8_t *blob;            /* state blob, in memory only */
    size_t blob_len;
    int in_mem, on_disk;
    int flushed;              /* SIGTERM: its write was tried (shutdown_pump) */
    size_t file_bytes;        /* on disk: its file (an upper bound for files found at start) */
    struct spill *pending;    /* on disk: its write is in flight; these bytes are the file */
    struct pentry *mprev, *mnext; /* memory LRU, head = most recent */
    struct pentry *dprev, *dnext; /* disk LRU, head = most recent */
} pentry;

typedef struct spill {
    uv_work_t req;
    srv_pcache *pc;
    pentry *e;                /* NULL once the entry is gone */
    char id[33];
    uint8_t *buf;             /* the file's bytes (checksum filled in by the worker) */
    size_t len;
    int err;
} spill;

typedef struct {
    pentry *head, *tail;
} plist;

struct srv_pcache {
    srv_pcache_config cfg;
    const recur_model *m;
    uint64_t fingerprint;
    int vocab;
    size_t blob_max;          /* the largest state blob of this model */
    uv_loop_t *loop;
    srv_persist *p;           /* spill directory, or NULL */
    plist mem, disk;
    int inflight;
    int shutting_down, flush_logged;
    size_t flush_queued;
    srv_pcache_stats st;
    srv_pcache_store_hook *hook; /* told of every new entry (the shared tier, prefix_redis.h) */
    void *hook_ctx;
};

/* ---------------------------------------------------------------- lists */

static void m_unlink(plist *l, pentry *e)
{
    if (e->mprev) e->mprev->mnext = e->mnext; else l->head = e->mnext;
    if (e->mnext) e->mnext->mprev = e->mprev; else l->tail = e->mprev;
    e->mprev = e->mnext = NULL;
}

static void m_push(plist *l, pentry *e)
{
    e->mprev = NULL;
    e->mnext = l->head;
    if (l->head) l->head->mprev = e; else l->tail = e;
    l->head = e;
}

static void d_unlink(plist *l, pentry *e)
{
    if (e->dprev) e->dprev->dnext = e->dnext; else l->head = e->dnext;
    if (e->dnext) e->dnext->dprev = e->dprev; else l->tail = e->dprev;
    e->dprev = e->dnext = NULL;
}

static void d_push(plist *l, pentry *e)
{
    e->dprev = NULL;
    e->dnext = l->head;
    if (l->head) l->head->dprev = e; else l->tail = e;
    l->head = e;
}

/* ---------------------------------------------------------------- hashing, names */

uint64_t srv_pcache_hash(uint64_t h, const int32_t *t, size_t n)
{
    /* FNV-1a 64 over each id's 4 little-endian bytes, inline: this is the one pass over a
     * prompt's ids that a request pays (a call per id was most of a 32k-token lookup) */
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ULL;
        }
    }
    return h;
}

static void entry_id(const pentry *e, char id[33])
{
    snprintf(id, 33, "%010llx%016llx" PX_ID_FORMAT, (unsigned long long)e->n,
             (unsigned long long)e->h);
}

/* n and h from a file name's id; 0, or -1 for a name of another format. */
static int parse_id(const char *id, size_t *n, uint64_t *h)
{
    char a[11], b[17];
    if (strcmp(id + 26, PX_ID_FORMAT))
        return -1;
    memcpy(a, id, 10);
    a[10] = '\0';
    memcpy(b, id + 10, 16);
    b[16] = '\0';
    *n = (size_t)strtoull(a, NULL, 16);
    *h = strtoull(b, NULL, 16);
    return 0;
}

/* An entry's own bytes; the id buffer it refers to is charged once, however many entries share
 * it (ids_cost, while entry_refs > 0). */
static size_t mem_cost(const pentry *e)
{
    return sizeof *e + e->blob_len;
}

static size_t ids_cost(const srv_ids *b)
{
    return sizeof *b + b->cap * sizeof *b->ids;
}

/* ---------------------------------------------------------------- id buffers */

static srv_ids *ids_new(size_t cap)
{
    srv_ids *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    b->ids = malloc((cap ? cap : 1) * sizeof *b->ids);
    if (!b->ids)
        abort();
    b->cap = cap;
    b->refs = 1;
    return b;
}

static srv_ids *ids_ref(srv_ids *b)
{
    b->refs++;
    return b;
}

static void ids_unref(srv_ids *b)
{
    if (b && --b->refs == 0) {
        free(b->ids);
        free(b);
    }
}

static size_t file_size(size_t n, size_t blob_len)
{
    return PX_HEAD + 4 * n + blob_len + 8;
}

/* ---------------------------------------------------------------- entries */

static void free_mem_part(srv_pcache *pc, pentry *e)
{
    if (!e->in_mem)
        return;
    pc->st.bytes -= mem_cost(e);
    if (--e->ids->entry_refs == 0)
        pc->st.bytes -= ids_cost(e->ids);
    pc->st.entries--;
    m_unlink(&pc->mem, e);
    ids_unref(e->ids);
    free(e->blob);
    e->ids = NULL;
    e->blob = NULL;
    e->in_mem = 0;
}

/* Forget e's file (removed from disk when remove is set). */
static void drop_disk_part(srv_pcache *pc, pentry *e, int remove)
{
    if (!e->on_disk)
        return;
    if (remove) {
        char id[33];
        entry_id(e, id);
        srv_persist_unlink(pc->p, id, 0);
    }
    pc->st.disk_bytes -= e->file_bytes;
    pc->st.disk_entries--;
    d_unlink(&pc->disk, e);
    e->on_disk = 0;
    if (e->pending) {
        e->pending->e = NULL; /* the write completes on its own; its file is then removed */
        e->pending = NULL;
    }
}

static void entry_free_if_empty(pentry *e)
{
    if (!e->in_mem && !e->on_disk)
        free(e);
}

/* Files over prefix_cache_disk_bytes: the least recently used go (not those being written). */
static void trim_disk(srv_pcache *pc)
{
    pentry *e = pc->disk.tail;
    while (e && pc->st.disk_bytes > pc->cfg.disk_bytes) {
        pentry *prev = e->dprev;
        if (!e->pending) {
            drop_disk_part(pc, e, 1);
            entry_free_if_empty(e);
        }
        e = prev;
    }
}

/* The file bytes of the entry (ids[0..n), blob) (checksum slot left 0). */
static uint8_t *entry_file(const srv_pcache *pc, const int32_t *ids, size_t n, const uint8_t *blob,
                           size_t blob_len, size_t *len)
{
    size_t total = file_size(n, blob_len);
    uint8_t *b = malloc(total);
    if (!b)
        abort();
    memcpy(b, PX_MAGIC, 8);
    recur_put_le32(b + 8, PX_VERSION);
    recur_put_le32(b + 12, 0);
    recur_put_le64(b + 16, pc->fingerprint);
    recur_put_le64(b + 24, n);
    recur_put_le64(b + 32, blob_len);
    for (size_t i = 0; i < n; i++)
        recur_put_le32(b + PX_HEAD + 4 * i, (uint32_t)ids[i]);
    memcpy(b + PX_HEAD + 4 * n, blob, blob_len);
    recur_put_le64(b + total - 8, 0);
    *len = total;
    return b;
}

static uint8_t *file_bytes(const srv_pcache *pc, const pentry *e, size_t *len)
{
    return entry_file(pc, e->ids->ids, e->n, e->blob, e->blob_len, len);
}

static void seal(uint8_t *b, size_t len)
{
    recur_put_le64(b + len - 8, recur_fnv1a64(RECUR_FNV_OFFSET, b, len - 8));
}

/* ---------------------------------------------------------------- spill writes */

static void spill_work(uv_work_t *req)
{
    spill *j = req->data;
    j->err = srv_persist_write(j->pc->p, j->id, j->buf, j->len);
}

static void shutdown_pump(srv_pcache *pc);

static void spill_after(uv_work_t *req, int status)
{
    spill *j = req->data;
    srv_pcache *pc = j->pc;
    pc->inflight--;
    int err = status == UV_ECANCELED ? -ECANCELED : j->err;
    if (err) {
        pc->st.spill_failures++;
        srv_log(SRV_LOG_WARN, "prefix_spill_failed", "\"error\":\"%s\"", strerror(-err));
    } else {
        pc->st.spill_writes++;
    }
    pentry *e = j->e;
    if (e) {
        e->pending = NULL;
        if (err) {
            drop_disk_part(pc, e, 1);
            entry_free_if_empty(e);
        }
    } else if (!err) {
        srv_persist_unlink(pc->p, j->id, 0); /* dropped while being written */
    }
    free(j->buf);
    free(j);
    if (pc->shutting_down)
        shutdown_pump(pc);
}

/* Write memory entry e to its file on the threadpool: e is an entry on disk from now on (its
 * write pending), and still in memory. 0, or -1 when it cannot be written now (no spill
 * directory, SPILL_INFLIGHT writes running, larger than the disk bound, on disk already). */
static int spill_start(srv_pcache *pc, pentry *e)
{
    if (e->on_disk || !pc->p || pc->inflight >= SPILL_INFLIGHT ||
        file_size(e->n, e->blob_len) > pc->cfg.disk_bytes)
        return -1;
    spill *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->pc = pc;
    j->e = e;
    entry_id(e, j->id);
    j->buf = file_bytes(pc, e, &j->len);
    seal(j->buf, j->len); /* here, not on the worker: a lookup may read these bytes meanwhile */
    j->req.data = j;
    if (uv_queue_work(pc->loop, &j->req, spill_work, spill_after) != 0) {
        free(j->buf);
        free(j);
        return -1;
    }
    pc->inflight++;
    e->on_disk = 1;
    e->pending = j;
    e->file_bytes = j->len;
    pc->st.disk_bytes += j->len;
    pc->st.disk_entries++;
    d_push(&pc->disk, e);
    trim_disk(pc);
    return 0;
}

/* e leaves memory: written to the spill directory when there is one (and room), else gone. */
static void evict_one(srv_pcache *pc, pentry *e)
{
    pc->st.evictions++;
    spill_start(pc, e);
    free_mem_part(pc, e);
    entry_free_if_empty(e);
}

/* SIGTERM: every memory entry not on disk yet is written, most recent first, SPILL_INFLIGHT at a
 * time (spill_after calls this again); each is tried once. */
static void shutdown_pump(srv_pcache *pc)
{
    for (pentry *e = pc->mem.head; e && pc->inflight < SPILL_INFLIGHT; e = e->mnext) {
        if (e->flushed || e->on_disk)
            continue;
        e->flushed = 1;
        if (spill_start(pc, e) == 0)
            pc->flush_queued++;
    }
    if (pc->inflight == 0 && !pc->flush_logged) {
        pc->flush_logged = 1;
        srv_log(pc->st.spill_failures ? SRV_LOG_ERROR : SRV_LOG_INFO, "prefix_cache_flush",
                "\"written\":%zu,\"failures\":%llu,\"files\":%zu", pc->flush_queued,
                (unsigned long long)pc->st.spill_failures, pc->st.disk_entries);
    }
}

/* Memory over prefix_cache_bytes: the least recently used go, never keep. */
static void trim_mem(srv_pcache *pc, const pentry *keep)
{
    pentry *e = pc->mem.tail;
    while (e && pc->st.bytes > pc->cfg.max_bytes) {
        pentry *prev = e->mprev;
        if (e != keep)
            evict_one(pc, e);
        e = prev;
    }
}

/* Make e a memory entry (it owns blob and a reference to ids from now on: the caller's
 * reference is taken over), most recently used; an entry larger than the whole bound is not
 * kept (the blob is freed, the reference dropped). */
static void put_mem(srv_pcache *pc, pentry *e, srv_ids *ids, uint8_t *blob, size_t blob_len)
{
    size_t extra = ids->entry_refs ? 0 : ids_cost(ids);
    if (sizeof *e + blob_len + extra > pc->cfg.max_bytes) {
        ids_unref(ids);
        free(blob);
        entry_free_if_empty(e);
        return;
    }
    e->ids = ids;
    e->blob = blob;
    e->blob_len = blob_len;
    e->in_mem = 1;
    m_push(&pc->mem, e);
    if (ids->entry_refs++ == 0)
        pc->st.bytes += extra;
    pc->st.bytes += mem_cost(e);
    pc->st.entries++;
    trim_mem(pc, e);
}

static void touch(srv_pcache *pc, pentry *e)
{
    if (e->in_mem) {
        m_unlink(&pc->mem, e);
        m_push(&pc->mem, e);
    }
    if (e->on_disk) {
        d_unlink(&pc->disk, e);
        d_push(&pc->disk, e);
    }
}

/* ---------------------------------------------------------------- reading a file */

/* Check a spill file's bytes against what its name claims and against the prompt: 0 with the
 * blob's span, 1 when it is sound but holds other ids (a hash collision: not a hit), or -1 with
 * *why (the file is bad: quarantined). */
static int check_file(const srv_pcache *pc, size_t want_n, uint64_t want_h, const uint8_t *b,
                      size_t len, const int32_t *prompt, const uint8_t **blob, size_t *blob_len,
                      const char **why)
{
    *why = "prefix_format";
    if (len < PX_HEAD + 8 || memcmp(b, PX_MAGIC, 8) || recur_get_le32(b + 8) != PX_VERSION ||
        recur_get_le32(b + 12) != 0)
        return -1;
    if (recur_fnv1a64(RECUR_FNV_OFFSET, b, len - 8) != recur_get_le64(b + len - 8)) {
        *why = "prefix_checksum";
        return -1;
    }
    if (recur_get_le64(b + 16) != pc->fingerprint) {
        *why = "othermodel";
        return -1;
    }
    uint64_t n = recur_get_le64(b + 24), bl = recur_get_le64(b + 32);
    if (n != want_n || n > (len - PX_HEAD - 8) / 4 || bl != len - PX_HEAD - 8 - 4 * n)
        return -1;
    uint64_t h = recur_fnv1a64(RECUR_FNV_OFFSET, b + PX_HEAD, 4 * n);
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same &= (int32_t)recur_get_le32(b + PX_HEAD + 4 * i) == prompt[i];
    if (h != want_h) {
        *why = "prefix_hash"; /* its ids are not what its name says */
        return -1;
    }
    *blob = b + PX_HEAD + 4 * n;
    *blob_len = (size_t)bl;
    return same ? 0 : 1;
}

/* Restore s from e's file (or its write in flight). 0 hit, 1 not a hit, -1 bad file (gone). On
 * a hit e is back in memory. */
static int restore_from_disk(srv_pcache *pc, pentry *e, const int32_t *tokens, srv_session *s,
                             const recur_model *m)
{
    char id[33];
    entry_id(e, id);
    uint8_t *buf = NULL;
    size_t len = 0;
    int own = 0;
    if (e->pending) { /* being written: these bytes are the file (the worker only reads them) */
        buf = e->pending->buf;
        len = e->pending->len;
    } else {
        int rc = srv_persist_read(pc->p, id, file_size(e->n, pc->blob_max), &buf, &len);
        own = 1;
        if (rc == -ENOENT) {
            free(buf);
            drop_disk_part(pc, e, 0);
            entry_free_if_empty(e);
            return -1;
        }
        if (rc != 0) {
            const char *why = rc == -EFBIG ? "toolarge" : "notfile";
            if (rc == -EFBIG || rc == -EINVAL || rc == -ELOOP) {
                srv_persist_quarantine(pc->p, id, why);
                pc->st.quarantined++;
                drop_disk_part(pc, e, 0);
                entry_free_if_empty(e);
            }
            free(buf);
            return -1;
        }
    }
    const uint8_t *blob;
    size_t blob_len;
    const char *why = NULL;
    int rc = check_file(pc, e->n, e->h, buf, len, tokens, &blob, &blob_len, &why);
    if (rc == 0 && srv_state_restore(m, pc->vocab, s, blob, blob_len, &why) != 0)
        rc = -1;
    if (rc == 0 && s->tokens_seen != e->n) { /* a blob whose tokens_seen is not its prefix's */
        recur_state_reset(s->state);
        s->has_logits = 0;
        s->tokens_seen = 0;
        why = "prefix_tokens_seen";
        rc = -1;
    }
    if (rc < 0 && !e->pending) {
        srv_persist_quarantine(pc->p, id, why ? why : "prefix_state");
        pc->st.quarantined++;
        drop_disk_part(pc, e, 0);
        entry_free_if_empty(e);
    }
    if (rc == 0) {
        pc->st.spill_loads++;
        uint8_t *b;
        size_t b_len;
        /* in memory: this process's own bytes (restored with srv_state_restore_own), the state
         * just checked and applied written again, not the file's (an older format version or
         * another state dtype, which the own reader refuses) */
        if (!e->in_mem && srv_state_capture(s, pc->vocab, &b, &b_len) == 0) {
            srv_ids *t = ids_new(e->n);
            memcpy(t->ids, tokens, e->n * sizeof *t->ids);
            t->used = e->n;
            touch(pc, e);
            put_mem(pc, e, t, b, b_len);
        }
    }
    if (own)
        free(buf);
    return rc;
}

/* ---------------------------------------------------------------- API */

static void on_found(const char *id, void *ctx)
{
    srv_pcache *pc = ctx;
    size_t n;
    uint64_t h;
    if (parse_id(id, &n, &h) != 0 || n == 0)
        return; /* not ours: left alone */
    pentry *e = calloc(1, sizeof *e);
    if (!e)
        abort();
    e->n = n;
    e->h = h;
    e->on_disk = 1;
    e->file_bytes = file_size(n, pc->blob_max); /* unread: its largest possible size */
    pc->st.disk_bytes += e->file_bytes;
    pc->st.disk_entries++;
    d_push(&pc->disk, e);
}

static void on_pending(const char *id, void *ctx) {}

int srv_pcache_create(const srv_pcache_config *cfg, const recur_model *m, uv_loop_t *loop,
                      srv_pcache **out, char *err, size_t errlen)
{
    *out = NULL;
    srv_pcache *pc = calloc(1, sizeof *pc);
    if (!pc)
        abort();
    pc->cfg = *cfg;
    pc->cfg.spill_dir = NULL;
    pc->m = m;
    const recur_model_info *info = recur_model_get_info(m);
    pc->fingerprint = info->fingerprint;
    pc->vocab = info->vocab_size;
    pc->blob_max = proto_state_max_body(info);
    pc->loop = loop;
    if (cfg->max_bytes && cfg->disk_bytes && cfg->spill_dir && cfg->spill_dir[0]) {
        if (srv_persist_open(cfg->spill_dir, on_found, on_pending, pc, &pc->p, err, errlen) != 0) {
            free(pc);
            return -1;
        }
        pc->st.quarantined = srv_persist_scan_quarantined(pc->p);
        trim_disk(pc);
    }
    *out = pc;
    return 0;
}

int srv_pcache_enabled(const srv_pcache *pc)
{
    return pc && pc->cfg.max_bytes > 0;
}

uint64_t srv_pcache_interval(const srv_pcache *pc)
{
    return srv_pcache_enabled(pc) ? pc->cfg.interval : 0;
}

static int by_length(const void *a, const void *b)
{
    size_t x = (*(pentry *const *)a)->n, y = (*(pentry *const *)b)->n;
    return x < y ? -1 : x > y;
}

size_t srv_pcache_restore_h(srv_pcache *pc, const int32_t *tokens, size_t n, srv_session *s,
                            uint64_t *h_out)
{
    *h_out = RECUR_FNV_OFFSET;
    if (!srv_pcache_enabled(pc) || n == 0)
        return 0;
    /* The entries a prefix of the prompt could be, shortest first; one pass over the prompt's
     * ids computes h(t[0..k)) at each of their lengths and keeps those whose hash matches. */
    size_t nc = 0, cap = pc->st.entries + pc->st.disk_entries;
    pentry **cand = malloc((cap ? cap : 1) * sizeof *cand);
    if (!cand)
        abort();
    for (int list = 0; list < 2; list++)
        for (pentry *e = list ? pc->disk.head : pc->mem.head; e; e = list ? e->dnext : e->mnext)
            if (!(list && e->in_mem) && e->n <= n && nc < cap)
                cand[nc++] = e;
    qsort(cand, nc, sizeof *cand, by_length);
    size_t matched = 0, at = 0;
    uint64_t h = RECUR_FNV_OFFSET;
    for (size_t i = 0; i < nc; i++) {
        h = srv_pcache_hash(h, tokens + at, cand[i]->n - at);
        at = cand[i]->n;
        if (h == cand[i]->h)
            cand[matched++] = cand[i]; /* still shortest first */
    }
    /* Longest first; a candidate that turns out not to be a hit (another prefix with the same
     * hash, or a bad file) is skipped and the next one tried. Trying one frees at most itself. */
    size_t got = 0;
    uint64_t got_h = RECUR_FNV_OFFSET;
    pentry *got_e = NULL; /* the hit's entry (still valid: nothing is freed after the hit) */
    while (matched > 0) {
        pentry *best = cand[--matched];
        size_t bn = best->n;
        uint64_t bh = best->h;
        if (best->in_mem) {
            if (memcmp(best->ids->ids, tokens, best->n * sizeof *tokens) != 0)
                continue;
            const char *why;
            if (srv_state_restore_own(pc->m, pc->vocab, s, best->blob, best->blob_len, &why) != 0) {
                /* our own bytes: cannot fail; forget the entry rather than trust it */
                free_mem_part(pc, best);
                entry_free_if_empty(best);
                continue;
            }
            touch(pc, best);
            got = bn;
            got_h = bh;
            got_e = best;
            break;
        }
        if (restore_from_disk(pc, best, tokens, s, pc->m) == 0) {
            got = bn;
            got_h = bh;
            got_e = best; /* on disk still, so not freed even when memory could not keep it */
            break;
        }
    }
    free(cand);
    if (got) {
        pc->st.hits++;
        pc->st.hit_tokens += got;
        *h_out = got_h;
        /* s's history is the entry's ids: shared, not copied (a later append by s writes
         * past them in place when no one has written there yet, srv_pcache_hist_append) */
        srv_pcache_hist_drop(s);
        if (got_e && got_e->in_mem) {
            s->pc_hist = ids_ref(got_e->ids);
            s->pc_hist_n = got;
            s->pc_hist_h = got_h;
        } else {
            srv_pcache_hist_append(s, tokens, got, got);
        }
    } else {
        pc->st.misses++;
    }
    return got;
}

/* Store s's state as the state after ids->ids[0..n) (hash h); the entry takes a reference to
 * ids, or the caller's reference is dropped. */
static void store_ids(srv_pcache *pc, srv_ids *ids, size_t n, uint64_t h, const srv_session *s)
{
    for (int list = 0; list < 2; list++)
        for (pentry *e = list ? pc->disk.head : pc->mem.head, *next; e; e = next) {
            next = list ? e->dnext : e->mnext;
            if (e->n != n || e->h != h)
                continue;
            if (e->in_mem &&
                (e->ids == ids || !memcmp(e->ids->ids, ids->ids, n * sizeof *ids->ids))) {
                touch(pc, e);
                ids_unref(ids);
                return;
            }
            if (list && !e->in_mem) {
                if (e->pending) {
                    ids_unref(ids);
                    return; /* its file is being written: it stays the entry of that name */
                }
                drop_disk_part(pc, e, 1); /* superseded: the new entry takes its name */
                entry_free_if_empty(e);
            }
        }
    uint8_t *blob;
    size_t blob_len;
    if (srv_state_capture(s, pc->vocab, &blob, &blob_len) != 0) {
        ids_unref(ids);
        return;
    }
    pentry *e = calloc(1, sizeof *e);
    if (!e)
        abort();
    e->n = n;
    e->h = h;
    if (mem_cost(e) + blob_len + (ids->entry_refs ? 0 : ids_cost(ids)) > pc->cfg.max_bytes) {
        free(blob); /* larger than the whole cache */
        free(e);
        ids_unref(ids);
        return;
    }
    pc->st.stores++;
    if (pc->hook)
        pc->hook(pc->hook_ctx, ids->ids, n, h, blob, blob_len);
    put_mem(pc, e, ids, blob, blob_len);
}

void srv_pcache_store_h(srv_pcache *pc, const int32_t *tokens, size_t n, uint64_t h,
                        const srv_session *s)
{
    if (!srv_pcache_enabled(pc) || n == 0 || n > PX_MAX_N || s->tokens_seen != n)
        return;
    srv_ids *ids = ids_new(n);
    memcpy(ids->ids, tokens, n * sizeof *tokens);
    ids->used = n;
    store_ids(pc, ids, n, h, s);
}

void srv_pcache_store_hist(srv_pcache *pc, const srv_session *s)
{
    size_t n = s->pc_hist_n;
    if (!srv_pcache_enabled(pc) || !s->pc_hist || n == 0 || n > PX_MAX_N || s->tokens_seen != n)
        return;
    store_ids(pc, ids_ref(s->pc_hist), n, s->pc_hist_h, s);
}

size_t srv_pcache_restore(srv_pcache *pc, const int32_t *tokens, size_t n, srv_session *s)
{
    uint64_t h;
    return srv_pcache_restore_h(pc, tokens, n, s, &h);
}

void srv_pcache_store(srv_pcache *pc, const int32_t *tokens, size_t n, const srv_session *s)
{
    if (srv_pcache_enabled(pc))
        srv_pcache_store_h(pc, tokens, n, srv_pcache_hash(RECUR_FNV_OFFSET, tokens, n), s);
}

void srv_pcache_set_store_hook(srv_pcache *pc, srv_pcache_store_hook *fn, void *ctx)
{
    if (!pc)
        return;
    pc->hook = fn;
    pc->hook_ctx = ctx;
}

uint8_t *srv_pcache_entry_bytes(const srv_pcache *pc, const int32_t *ids, size_t n,
                                const uint8_t *blob, size_t blob_len, size_t *len)
{
    uint8_t *b = entry_file(pc, ids, n, blob, blob_len, len);
    seal(b, *len);
    return b;
}

size_t srv_pcache_entry_max_bytes(const srv_pcache *pc, size_t n)
{
    return file_size(n, pc->blob_max);
}

int srv_pcache_adopt(srv_pcache *pc, const int32_t *tokens, size_t n, uint64_t h,
                     const uint8_t *bytes, size_t len, srv_session *s, const char **why)
{
    const uint8_t *blob;
    size_t blob_len;
    *why = NULL;
    if (!srv_pcache_enabled(pc) || n == 0 || n > PX_MAX_N) {
        *why = "prefix_disabled";
        return 1;
    }
    int rc = check_file(pc, n, h, bytes, len, tokens, &blob, &blob_len, why);
    if (rc > 0)
        *why = "prefix_ids"; /* sound, but the ids under this hash are not the prompt's */
    if (rc != 0)
        return rc;
    /* srv_state_restore checks everything before it applies anything: a refused blob leaves s
     * as it was (its local hit, if any) */
    if (srv_state_restore(pc->m, pc->vocab, s, blob, blob_len, why) != 0)
        return -1;
    if (s->tokens_seen != n) { /* a blob whose tokens_seen is not its prefix's: s starts over */
        recur_state_reset(s->state);
        s->has_logits = 0;
        s->tokens_seen = 0;
        srv_pcache_hist_drop(s);
        *why = "prefix_tokens_seen";
        return -1;
    }
    /* s tracks tokens[0..n), in a buffer the local entry shares (later turns hit locally) */
    srv_pcache_hist_drop(s);
    srv_ids *ids = ids_new(n);
    memcpy(ids->ids, tokens, n * sizeof *tokens);
    ids->used = n;
    s->pc_hist = ids_ref(ids);
    s->pc_hist_n = n;
    s->pc_hist_h = h;
    /* in memory: this process's own bytes, as in restore_from_disk (the shared tier may hold
     * another node's format version or state dtype) */
    uint8_t *own;
    size_t own_len;
    if (srv_state_capture(s, pc->vocab, &own, &own_len) != 0) {
        ids_unref(ids); /* s keeps its reference */
        return 0;
    }
    pentry *e = calloc(1, sizeof *e);
    if (!e)
        abort();
    e->n = n;
    e->h = h;
    put_mem(pc, e, ids, own, own_len); /* no store hook: it came from the shared tier */
    return 0;
}

void srv_pcache_shutdown(srv_pcache *pc)
{
    if (!pc || !pc->p || pc->shutting_down)
        return;
    pc->shutting_down = 1;
    shutdown_pump(pc);
}

void srv_pcache_free(srv_pcache *pc)
{
    if (!pc)
        return;
    while (pc->mem.head) {
        pentry *e = pc->mem.head;
        free_mem_part(pc, e);
        entry_free_if_empty(e);
    }
    while (pc->disk.head) {
        pentry *e = pc->disk.head;
        drop_disk_part(pc, e, 0);
        entry_free_if_empty(e);
    }
    srv_persist_close(pc->p);
    free(pc);
}

srv_pcache_stats srv_pcache_get_stats(const srv_pcache *pc)
{
    srv_pcache_stats z;
    memset(&z, 0, sizeof z);
    return pc ? pc->st : z;
}

void srv_pcache_metrics(const srv_pcache *pc, proto_buf *b)
{
    srv_pcache_stats st = srv_pcache_get_stats(pc);
    srv_metric(b, "recurd_prefix_cache_hits_total", "counter",
               "Cached creates whose prompt started with a stored prefix.", st.hits);
    srv_metric(b, "recurd_prefix_cache_hit_tokens_total", "counter",
               "Prompt tokens restored from the prefix cache instead of folded.", st.hit_tokens);
    srv_metric(b, "recurd_prefix_cache_misses_total", "counter",
               "Cached creates with no stored prefix.", st.misses);
    srv_metric(b, "recurd_prefix_cache_bytes", "gauge",
               "Bytes of prefix-cache entries in memory (entries, token ids, states).", st.bytes);
    srv_metric(b, "recurd_prefix_cache_entries", "gauge", "Prefix-cache entries in memory.",
               st.entries);
    srv_metric(b, "recurd_prefix_cache_evictions_total", "counter",
               "Entries that left memory over prefix_cache_bytes (spilled or dropped).",
               st.evictions);
    srv_metric(b, "recurd_prefix_cache_disk_bytes", "gauge",
               "Bytes of prefix-cache spill files (upper bounds for files found at start).",
               st.disk_bytes);
    srv_metric(b, "recurd_prefix_cache_spill_writes_total", "counter",
               "Prefix-cache entries written to state_dir/prefix_cache.", st.spill_writes);
    srv_metric(b, "recurd_prefix_cache_spill_loads_total", "counter",
               "Prefix-cache hits read back from a spill file.", st.spill_loads);
    srv_metric(b, "recurd_prefix_cache_quarantined_total", "counter",
               "Spill files that failed a check, moved to quarantine/.", st.quarantined);
}

/* ---------------------------------------------------------------- a session's history */

void srv_pcache_hist_drop(srv_session *s)
{
    ids_unref(s->pc_hist);
    s->pc_hist = NULL;
    s->pc_hist_n = 0;
    s->pc_hist_h = 0;
}

void srv_pcache_hist_append(srv_session *s, const int32_t *ids, size_t n, size_t max_tokens)
{
    size_t need = s->pc_hist_n + n;
    if (need > max_tokens) {
        srv_pcache_hist_drop(s);
        return;
    }
    srv_ids *b = s->pc_hist;
    if (!b || s->pc_hist_n != b->used || need > b->cap) {
        /* no buffer, or another holder has written past our end, or no room: a new buffer
         * (room for as much again, so appends cost O(1) per id amortized) */
        size_t cap = need < 32 ? 64 : 2 * need;
        if (cap > max_tokens)
            cap = max_tokens > need ? max_tokens : need;
        srv_ids *nb = ids_new(cap);
        if (b)
            memcpy(nb->ids, b->ids, s->pc_hist_n * sizeof *b->ids);
        else
            s->pc_hist_h = RECUR_FNV_OFFSET;
        nb->used = s->pc_hist_n;
        ids_unref(b);
        s->pc_hist = b = nb;
    }
    if (n)
        memcpy(b->ids + b->used, ids, n * sizeof *ids);
    b->used += n;
    s->pc_hist_n = need;
    s->pc_hist_h = srv_pcache_hash(s->pc_hist_h, ids, n);
}

void srv_pcache_hist_copy(srv_session *dst, const srv_session *src)
{
    srv_pcache_hist_drop(dst);
    if (!src->pc_hist)
        return;
    dst->pc_hist = ids_ref(src->pc_hist); /* shared: whichever appends second copies */
    dst->pc_hist_n = src->pc_hist_n;
    dst->pc_hist_h = src->pc_hist_h;
}
