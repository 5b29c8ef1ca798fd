/* session_table.c — resident sessions keyed by random 128-bit ids (session_table.h). */
#include "session_table.h"

#include "prefix_cache.h"
#include "idempotency.h"
#include "checkpoints.h"
#include "dlist.h"
#include "state_blob.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define POOL_MAX 64 /* freed states kept for reuse: no allocator churn on create/delete */

struct srv_table {
    const recur_model *model;
    int vocab;
    int max_sessions;
    size_t count;
    size_t n_buckets;         /* power of two */
    srv_session **buckets;
    recur_state *pool[POOL_MAX];
    float *pool_logits[POOL_MAX];
    int n_pool;
    srv_table_hooks hooks; /* persistence / residency (all NULL: memory only) */
    srv_session *lru_head, *lru_tail; /* recency list: head least recently used */
    srv_session *chg_head, *chg_tail; /* changed list (order does not matter) */
};

/* ---------------------------------------------------------------- the two lists */

static void lru_unlink(srv_table *t, srv_session *s)
{
    DLIST_UNLINK(t->lru_head, t->lru_tail, s, lru_prev, lru_next);
}

static void lru_append(srv_table *t, srv_session *s)
{
    DLIST_APPEND(t->lru_head, t->lru_tail, s, lru_prev, lru_next);
}

void srv_table_touch(srv_table *t, srv_session *s, uint64_t now_ms)
{
    s->last_used_ms = now_ms;
    if (t->lru_tail != s) {
        lru_unlink(t, s);
        lru_append(t, s);
    }
}

srv_session *srv_table_lru_first(srv_table *t)
{
    return t->lru_head;
}

static void chg_link(srv_table *t, srv_session *s)
{
    if (s->chg_linked)
        return;
    DLIST_APPEND(t->chg_head, t->chg_tail, s, chg_prev, chg_next);
    s->chg_linked = 1;
}

void srv_table_changed_unlink(srv_table *t, srv_session *s)
{
    if (!s->chg_linked)
        return;
    DLIST_UNLINK(t->chg_head, t->chg_tail, s, chg_prev, chg_next);
    s->chg_linked = 0;
}

void srv_table_changed(srv_table *t, srv_session *s)
{
    s->mut_gen++;
    chg_link(t, s);
}

srv_session *srv_table_changed_first(srv_table *t)
{
    return t->chg_head;
}

static uint64_t id_hash(const char *id)
{
    /* The id is random: its first 16 hex digits are a fine hash. */
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = id[i];
        h = (h << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return h;
}

/* Session states come from the heap, not one mapping each. glibc serves an allocation above
 * M_MMAP_THRESHOLD (128 KiB until a mapped block is freed) with its own mmap: each state then
 * costs its rounding to whole pages (3 KiB for the default model's 192 KiB f32 state), and once
 * sessions come and go every freed state punches a hole that splits the mapping around it, so
 * churn among 100k sessions heads for vm.max_map_count (65530 by default), where allocations
 * fail. Above the state's size, states are heap blocks; larger transient buffers still map. */
static void states_from_heap(size_t state_bytes)
{
    size_t want = state_bytes + (64u << 10); /* + the state's header and the logits */
    if (want <= (128u << 10) || want > (32u << 20))
        return; /* already heap blocks / too large for many sessions to fit anyway */
    mallopt(M_MMAP_THRESHOLD, (int)want);
    /* and the top of the heap stays mapped: setting the threshold also froze the trim threshold
     * at 128 KiB, so each freed snapshot buffer (a resume's read, an eviction's copy) went back to
     * the kernel and the next one paid its first touch again (11.6 us per page here, much more
     * under load: a resume from the page cache took 4-13 ms, not 1) */
    mallopt(M_TRIM_THRESHOLD, (int)(want * 64 < (64u << 20) ? (64u << 20) : want * 64 > (1u << 30) ? (1u << 30) : want * 64));
}

srv_table *srv_table_create(const recur_model *m, int max_sessions)
{
    srv_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->model = m;
    t->vocab = recur_model_get_info(m)->vocab_size;
    states_from_heap(recur_model_get_info(m)->state_bytes);
    t->max_sessions = max_sessions;
    t->n_buckets = 1024;
    t->buckets = calloc(t->n_buckets, sizeof *t->buckets);
    if (!t->buckets) {
        free(t);
        return NULL;
    }
    return t;
}

/* What a session owns besides its state and logits. */
static void free_extras(srv_session *s)
{
    srv_ckpt_clear(s);
    srv_pcache_hist_drop(s);
    srv_idem_clear(s);
}

static void free_session(srv_table *t, srv_session *s)
{
    free_extras(s);
    if (t->n_pool < POOL_MAX) {
        recur_state_reset(s->state);
        t->pool[t->n_pool] = s->state;
        t->pool_logits[t->n_pool] = s->logits;
        t->n_pool++;
    } else {
        recur_state_destroy(s->state);
        free(s->logits);
    }
    free(s);
}

int srv_table_spare_count(const srv_table *t)
{
    return t->n_pool;
}

int srv_table_spare_add(srv_table *t, recur_state *state, float *logits)
{
    if (t->n_pool >= POOL_MAX)
        return -1;
    t->pool[t->n_pool] = state;
    t->pool_logits[t->n_pool] = logits;
    t->n_pool++;
    return 0;
}

void srv_table_destroy(srv_table *t)
{
    if (!t)
        return;
    for (size_t b = 0; b < t->n_buckets; b++) {
        srv_session *s = t->buckets[b];
        while (s) {
            srv_session *n = s->hnext;
            free_extras(s);
            recur_state_destroy(s->state);
            free(s->logits);
            free(s);
            s = n;
        }
    }
    for (int i = 0; i < t->n_pool; i++) {
        recur_state_destroy(t->pool[i]);
        free(t->pool_logits[i]);
    }
    free(t->buckets);
    free(t);
}

static void grow(srv_table *t)
{
    size_t nb = t->n_buckets * 2;
    srv_session **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i < t->n_buckets; i++) {
        srv_session *s = t->buckets[i];
        while (s) {
            srv_session *n = s->hnext;
            size_t k = id_hash(s->id) & (nb - 1);
            s->hnext = b[k];
            b[k] = s;
            s = n;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->n_buckets = nb;
}

int srv_random_hex(char *out, size_t n_bytes)
{
    uint8_t r[64];
    if (n_bytes > sizeof r)
        return -1;
    size_t got = 0;
    while (got < n_bytes) {
        ssize_t n = getrandom(r + got, n_bytes - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n_bytes; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[2 * n_bytes] = '\0';
    return 0;
}

static int insert(srv_table *t, srv_session *s, uint64_t now_ms);

int srv_table_make_room(srv_table *t)
{
    return t->hooks.make_room ? t->hooks.make_room(t->hooks.ctx) : 0;
}

int srv_table_new(srv_table *t, uint64_t now_ms, srv_session **out)
{
    size_t stored = t->hooks.stored ? t->hooks.stored(t->hooks.ctx) : 0;
    if (t->count + stored >= (size_t)t->max_sessions)
        return -1;
    if (srv_table_make_room(t) != 0)
        return -2;
    srv_session *s = calloc(1, sizeof *s);
    if (!s)
        return -2;
    do {
        if (srv_random_hex(s->id, 16) != 0) {
            free(s);
            return -2;
        }
    } while (srv_table_find(t, s->id)); /* 2^-128: never, but cheap to be sure */
    s->mut_gen = 1; /* new: not on disk yet */
    if (insert(t, s, now_ms) != 0) {
        free(s);
        return -2;
    }
    *out = s;
    return 0;
}

/* Give s a state and logits (a spare one when there is one). 0 or -2. */
static int give_state(srv_table *t, srv_session *s)
{
    if (t->n_pool > 0) {
        t->n_pool--;
        s->state = t->pool[t->n_pool];
        s->logits = t->pool_logits[t->n_pool];
    } else {
        if (recur_state_create(t->model, &s->state) != 0)
            return -2;
        s->logits = calloc((size_t)t->vocab, sizeof *s->logits);
        if (!s->logits) {
            recur_state_destroy(s->state);
            return -2;
        }
    }
    return 0;
}

/* Link s (id, state and logits set) in. */
static void link_in(srv_table *t, srv_session *s, uint64_t now_ms)
{
    s->last_used_ms = now_ms;
    lru_append(t, s);
    chg_link(t, s); /* new or restored: its owner decides whether it is clean */
    if (t->count + 1 > t->n_buckets)
        grow(t);
    size_t k = id_hash(s->id) & (t->n_buckets - 1);
    s->hnext = t->buckets[k];
    t->buckets[k] = s;
    t->count++;
}

/* Give s (id set) a state and logits and link it in. */
static int insert(srv_table *t, srv_session *s, uint64_t now_ms)
{
    if (give_state(t, s) != 0)
        return -2;
    link_in(t, s, now_ms);
    return 0;
}

int srv_table_adopt(srv_table *t, const char *id, uint64_t now_ms, srv_session **out)
{
    srv_session *s = calloc(1, sizeof *s);
    if (!s)
        return -2;
    memcpy(s->id, id, 32);
    s->id[32] = '\0';
    if (insert(t, s, now_ms) != 0) {
        free(s);
        return -2;
    }
    *out = s;
    return 0;
}

int srv_table_detached(srv_table *t, const char *id, srv_session **out)
{
    srv_session *s = calloc(1, sizeof *s);
    if (!s)
        return -2;
    memcpy(s->id, id, 32);
    s->id[32] = '\0';
    if (give_state(t, s) != 0) {
        free(s);
        return -2;
    }
    *out = s;
    return 0;
}

void srv_table_link(srv_table *t, srv_session *s, uint64_t now_ms)
{
    link_in(t, s, now_ms);
}

void srv_table_discard(srv_table *t, srv_session *s)
{
    free_session(t, s);
}

void srv_table_set_hooks(srv_table *t, const srv_table_hooks *h)
{
    t->hooks = *h;
}

void srv_table_set_max(srv_table *t, int max_sessions)
{
    t->max_sessions = max_sessions;
}

srv_session *srv_table_find(srv_table *t, const char *id)
{
    srv_session *s = srv_table_peek(t, id);
    if (!s && t->hooks.load && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32)
        s = t->hooks.load(t->hooks.ctx, id);
    return s;
}

srv_session *srv_table_peek(srv_table *t, const char *id)
{
    if (strlen(id) != 32)
        return NULL;
    for (int i = 0; i < 32; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return NULL;
    size_t k = id_hash(id) & (t->n_buckets - 1);
    for (srv_session *s = t->buckets[k]; s; s = s->hnext)
        if (memcmp(s->id, id, 32) == 0)
            return s;
    return NULL;
}

void srv_table_remove(srv_table *t, srv_session *s)
{
    if (t->hooks.removed)
        t->hooks.removed(t->hooks.ctx, s);
    srv_table_drop(t, s);
}

void srv_table_drop(srv_table *t, srv_session *s)
{
    size_t k = id_hash(s->id) & (t->n_buckets - 1);
    for (srv_session **p = &t->buckets[k]; *p; p = &(*p)->hnext)
        if (*p == s) {
            *p = s->hnext;
            t->count--;
            lru_unlink(t, s);
            srv_table_changed_unlink(t, s);
            free_session(t, s);
            return;
        }
}

size_t srv_table_count(const srv_table *t)
{
    return t->count;
}

int srv_table_max(const srv_table *t)
{
    return t->max_sessions;
}

void srv_table_foreach(srv_table *t, void (*fn)(srv_session *s, void *arg), void *arg)
{
    for (size_t b = 0; b < t->n_buckets; b++) {
        srv_session *s = t->buckets[b];
        while (s) {
            srv_session *n = s->hnext; /* fn may remove s */
            fn(s, arg);
            s = n;
        }
    }
}

size_t srv_session_state_bytes(const srv_session *s, int vocab)
{
    return recur_snapshot_size(s->state) + (s->has_logits ? proto_state_trailer_size(vocab) : 0);
}
