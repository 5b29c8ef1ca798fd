/* session_table.c — resident sessions keyed by random 128-bit ids (session_table.h). */
#include "session_table.h"

#include "prefix_cache.h"
#include "idempotency.h"
#include "checkpoints.h"
#include "dlist.h"
#include "state_blob.h"

#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define POOL_MAX 64 /* freed states kept for reuse: no allocator churn on create/delete */
#define SLAB_N 256  /* srv_session structs per slab block (312 bytes each: 78 KiB) */

/* A slot of the open-addressed table: empty when s == NULL, else s and id_hash(s->id). */
typedef struct {
    uint64_t h;
    srv_session *s;
} slot;

struct srv_table {
    const recur_model *model;
    int vocab;
    int max_sessions;
    size_t count;             /* sessions in the table */
    size_t n_slots;           /* power of two, >= 2 * n_live: load <= 1/2 */
    slot *slots;
    srv_session **blocks;     /* the slab: n_blocks blocks of SLAB_N structs, never freed before */
    size_t n_blocks, blocks_cap; /* srv_table_destroy */
    srv_session *free_structs; /* free list through free_next, last freed first */
    size_t n_live;            /* structs handed out: in the table or detached */
    recur_state *pool[POOL_MAX];
    float *pool_logits[POOL_MAX];
    unsigned char pool_used[POOL_MAX]; /* may hold a freed session's values: zeroed (reset)
                                        * only when a new session takes it (give_state) */
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
    t->n_slots = 1024;
    t->slots = calloc(t->n_slots, sizeof *t->slots);
    if (!t->slots) {
        free(t);
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------- the slab */

/* The bytes of a free struct left readable: free_next and in_table (foreach reads it), rounded
 * up to ASan's 8-byte granules. */
#define FREE_HEAD ((offsetof(srv_session, in_table) + sizeof(int) + 7) & ~(size_t)7)

/* Push s on the free list; the rest of a free struct is poisoned (ASan: a use after free). */
static void struct_free(srv_table *t, srv_session *s)
{
    s->free_next = t->free_structs;
    s->in_table = 0;
    t->free_structs = s;
    t->n_live--;
    POISON((char *)s + FREE_HEAD, sizeof *s - FREE_HEAD);
}

static int slab_block(srv_table *t)
{
    if (t->n_blocks == t->blocks_cap) {
        size_t cap = t->blocks_cap ? 2 * t->blocks_cap : 16;
        srv_session **b = realloc(t->blocks, cap * sizeof *b);
        if (!b)
            return -1;
        t->blocks = b;
        t->blocks_cap = cap;
    }
    srv_session *blk = calloc(SLAB_N, sizeof *blk);
    if (!blk)
        return -1;
    t->blocks[t->n_blocks++] = blk;
    t->n_live += SLAB_N;
    for (size_t i = SLAB_N; i-- > 0;) /* the lowest address on top */
        struct_free(t, &blk[i]);
    return 0;
}

static int grow(srv_table *t);

/* A zeroed struct from the slab, with a slot kept for it (the table then never grows in
 * link_in, which cannot fail); NULL when an allocation failed. */
static srv_session *struct_new(srv_table *t)
{
    if (2 * (t->n_live + 1) > t->n_slots && grow(t) != 0)
        return NULL;
    if (!t->free_structs && slab_block(t) != 0)
        return NULL;
    srv_session *s = t->free_structs;
    UNPOISON(s, sizeof *s);
    t->free_structs = s->free_next;
    t->n_live++;
    memset(s, 0, sizeof *s);
    return s;
}

/* What a session owns besides its state and logits. */
static void free_extras(srv_session *s)
{
    srv_ckpt_clear(s);
    srv_pcache_hist_drop(s);
    srv_idem_clear(s);
}

/* Keep state and logits for reuse (used: the state may not be zero); 0, or -1 when the pool is
 * full. */
static int pool_put(srv_table *t, recur_state *state, float *logits, int used)
{
    if (t->n_pool >= POOL_MAX)
        return -1;
    t->pool[t->n_pool] = state;
    t->pool_logits[t->n_pool] = logits;
    t->pool_used[t->n_pool] = (unsigned char)used;
    t->n_pool++;
    return 0;
}

/* s's state is not zeroed here: a state about to be overwritten (a resume's decode) need not
 * be, so only a new session pays for it (give_state). */
static void free_session(srv_table *t, srv_session *s)
{
    free_extras(s);
    srv_table_spare_return(t, s->state, s->logits);
    struct_free(t, s);
}

int srv_table_spare_count(const srv_table *t)
{
    return t->n_pool;
}

int srv_table_spare_add(srv_table *t, recur_state *state, float *logits)
{
    return pool_put(t, state, logits, 0);
}

void srv_table_spare_return(srv_table *t, recur_state *state, float *logits)
{
    if (state && pool_put(t, state, logits, 1) != 0) {
        recur_state_destroy(state);
        free(logits);
    }
}

void srv_table_destroy(srv_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_slots; i++) {
        srv_session *s = t->slots[i].s;
        if (s) {
            free_extras(s);
            recur_state_destroy(s->state);
            free(s->logits);
        }
    }
    for (int i = 0; i < t->n_pool; i++) {
        recur_state_destroy(t->pool[i]);
        free(t->pool_logits[i]);
    }
    for (size_t b = 0; b < t->n_blocks; b++) {
        UNPOISON(t->blocks[b], SLAB_N * sizeof(srv_session));
        free(t->blocks[b]);
    }
    free(t->blocks);
    free(t->slots);
    free(t);
}

/* ---------------------------------------------------------------- the open-addressed table
 *
 * Linear probing from h & (n_slots - 1); a run of full slots ends at an empty one (load <= 1/2:
 * a miss reads 2.5 slots on average, 40 bytes). Deletion shifts back: each later entry of the run
 * whose home is not cyclically in (hole, its slot] moves into the hole, so no tombstones. */

/* The slot holding the id (hash h), or the empty slot that ends its run (.s NULL): a miss reads
 * slots only, a hit one struct. */
static slot *probe_id(const srv_table *t, uint64_t h, const char *id)
{
    size_t mask = t->n_slots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        slot *e = &t->slots[i];
        if (!e->s || (e->h == h && memcmp(e->s->id, id, 32) == 0))
            return e;
    }
}

/* The slot holding s (id hash h), or the empty slot that ends its run. */
static slot *probe_ptr(const srv_table *t, uint64_t h, const srv_session *s)
{
    size_t mask = t->n_slots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        slot *e = &t->slots[i];
        if (!e->s || e->s == s)
            return e;
    }
}

static int grow(srv_table *t)
{
    size_t n = t->n_slots * 2;
    slot *a = calloc(n, sizeof *a);
    if (!a)
        return -1;
    for (size_t i = 0; i < t->n_slots; i++) {
        slot e = t->slots[i];
        if (!e.s)
            continue;
        size_t k = e.h & (n - 1);
        while (a[k].s)
            k = (k + 1) & (n - 1);
        a[k] = e;
    }
    free(t->slots);
    t->slots = a;
    t->n_slots = n;
    return 0;
}

static void slot_delete(srv_table *t, slot *hole)
{
    size_t mask = t->n_slots - 1, i = (size_t)(hole - t->slots);
    for (size_t j = (i + 1) & mask; t->slots[j].s; j = (j + 1) & mask) {
        size_t home = t->slots[j].h & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) { /* home not in (i, j]: it may move to i */
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = (slot){0, NULL};
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

static int insert(srv_table *t, srv_session *s, uint64_t now_ms, int zero);

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
    srv_session *s = struct_new(t);
    if (!s)
        return -2;
    do {
        if (srv_random_hex(s->id, 16) != 0) {
            struct_free(t, s);
            return -2;
        }
    } while (srv_table_find(t, s->id)); /* 2^-128: never, but cheap to be sure */
    s->mut_gen = 1; /* new: not on disk yet */
    if (insert(t, s, now_ms, 1) != 0) {
        struct_free(t, s);
        return -2;
    }
    *out = s;
    return 0;
}

/* Give s a state and logits (a spare one when there is one). zero: a new session's, so a zero
 * state (a used spare is reset here); else the caller overwrites the state (a snapshot's or
 * another state's values) and its contents do not matter. 0 or -2. */
static int give_state(srv_table *t, srv_session *s, int zero)
{
    if (t->n_pool > 0) {
        t->n_pool--;
        s->state = t->pool[t->n_pool];
        s->logits = t->pool_logits[t->n_pool];
        if (zero && t->pool_used[t->n_pool])
            recur_state_reset(s->state);
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
    uint64_t h = id_hash(s->id);
    *probe_ptr(t, h, s) = (slot){h, s}; /* struct_new kept the room */
    s->in_table = 1;
    t->count++;
}

/* Give s (id set) a state and logits (zero: as give_state) and link it in. */
static int insert(srv_table *t, srv_session *s, uint64_t now_ms, int zero)
{
    if (give_state(t, s, zero) != 0)
        return -2;
    link_in(t, s, now_ms);
    return 0;
}

int srv_table_adopt(srv_table *t, const char *id, uint64_t now_ms, srv_session **out)
{
    srv_session *s = struct_new(t);
    if (!s)
        return -2;
    memcpy(s->id, id, 32);
    s->id[32] = '\0';
    if (insert(t, s, now_ms, 0) != 0) {
        struct_free(t, s);
        return -2;
    }
    *out = s;
    return 0;
}

int srv_table_detached(srv_table *t, const char *id, srv_session **out)
{
    srv_session *s = struct_new(t);
    if (!s)
        return -2;
    memcpy(s->id, id, 32);
    s->id[32] = '\0';
    if (give_state(t, s, 0) != 0) {
        struct_free(t, s);
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
    return probe_id(t, id_hash(id), id)->s;
}

void srv_table_remove(srv_table *t, srv_session *s)
{
    if (t->hooks.removed)
        t->hooks.removed(t->hooks.ctx, s);
    srv_table_drop(t, s);
}

void srv_table_drop_keep(srv_table *t, srv_session *s, recur_state **state, float **logits)
{
    *state = s->state;
    *logits = s->logits;
    s->state = NULL; /* free_session keeps no state it no longer owns */
    s->logits = NULL;
    srv_table_drop(t, s);
}

void srv_table_drop(srv_table *t, srv_session *s)
{
    slot *e = probe_ptr(t, id_hash(s->id), s);
    if (!e->s)
        return; /* not in the table */
    slot_delete(t, e);
    t->count--;
    lru_unlink(t, s);
    srv_table_changed_unlink(t, s);
    free_session(t, s);
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
    /* the slab, not the slots: removing shifts slots back, but never moves a struct */
    for (size_t b = 0; b < t->n_blocks; b++)
        for (size_t i = 0; i < SLAB_N; i++) {
            srv_session *s = &t->blocks[b][i];
            if (s->in_table)
                fn(s, arg);
        }
}

size_t srv_session_state_bytes(const srv_session *s, int vocab)
{
    return recur_snapshot_size(s->state) + (s->has_logits ? proto_state_trailer_size(vocab) : 0);
}
