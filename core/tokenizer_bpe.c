/* tokenizer_bpe.c — the BPE model: one pre-token -> ids.
 *
 * Symbols are strings (raw bytes for byte-level vocabularies) interned once at load; a merge is
 * (left, right) -> (rank, merged symbol). A word starts as its characters (bytes for byte-level),
 * and the lowest-ranked adjacent pair is merged first, the leftmost on equal rank, with a binary
 * heap keyed (rank, position): O(n log n) per word. A symbol that is not in the vocabulary falls
 * back to <0xXX> byte tokens (byte_fallback, when all exist), else to unk (fused with a
 * preceding unk when fuse_unk), else nothing — the reference's order. Results of pre-tokens
 * shorter than 256 bytes are cached (a mutex taken with trylock: a busy cache is skipped). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES 65536
#define CACHE_MAX_BYTES (4u << 20)

struct tk_cache {
    pthread_mutex_t mu;
    tk_strmap keys;
    uint32_t *off, *cnt; size_t cap;
    tk_ids ids;
};

int tk_bpe_init(tk_bpe *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 256; i++) b->byte_sym[i] = b->fallback[i] = -1;
    b->unk_id = -1;
    b->cache = calloc(1, sizeof *b->cache);
    if (!b->cache) return RECUR_ENOMEM;
    pthread_mutex_init(&b->cache->mu, NULL);
    return 0;
}

void tk_bpe_free(tk_bpe *b)
{
    tk_strmap_free(&b->syms);
    tk_big_free(b->sym_id);
    tk_u64map_free(&b->merges);
    free(b->prefix);
    free(b->suffix);
    if (b->cache) {
        pthread_mutex_destroy(&b->cache->mu);
        tk_strmap_free(&b->cache->keys);
        free(b->cache->off);
        free(b->cache->cnt);
        tk_ids_free(&b->cache->ids);
        free(b->cache);
    }
    memset(b, 0, sizeof *b);
}

int tk_bpe_reserve(tk_bpe *b, size_t n_syms, size_t key_bytes)
{
    if (n_syms > b->sym_cap) {
        int32_t *p = tk_big_resize(b->sym_id, n_syms * sizeof *p);
        if (!p) return RECUR_ENOMEM;
        b->sym_id = p;
        b->sym_cap = n_syms;
    }
    return tk_strmap_reserve(&b->syms, n_syms, key_bytes);
}

int32_t tk_bpe_symbol(tk_bpe *b, const char *s, size_t n)
{
    return tk_bpe_symbol_hashed(b, s, n, tk_strmap_hash(s, n));
}

int32_t tk_bpe_symbol_hashed(tk_bpe *b, const char *s, size_t n, uint32_t h)
{
    int added;
    int32_t i = tk_strmap_intern_hashed(&b->syms, s, n, h, &added);
    if (i < 0) return i;
    if (added) {
        if ((size_t)i >= b->sym_cap) {
            size_t c = b->sym_cap ? b->sym_cap * 2 : 1024;
            int32_t *p = tk_big_resize(b->sym_id, c * sizeof *p);
            if (!p) return RECUR_ENOMEM;
            b->sym_id = p;
            b->sym_cap = c;
        }
        b->sym_id[i] = -1;
    }
    return i;
}

/* ---------------------------------------------------------------- cache */

static int cache_get(const tk_bpe *b, const char *s, size_t n, tk_ids *out, int *hit)
{
    *hit = 0;
    tk_cache *c = b->cache;
    if (n >= CACHE_MAX_WORD || pthread_mutex_trylock(&c->mu)) return 0;
    int32_t i = tk_strmap_find(&c->keys, s, n);
    int rc = 0;
    if (i >= 0) {
        *hit = 1;
        for (uint32_t k = 0; !rc && k < c->cnt[i]; k++) rc = tk_ids_push(out, c->ids.p[c->off[i] + k]);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void cache_put(const tk_bpe *b, const char *s, size_t n, const int32_t *ids, size_t k)
{
    tk_cache *c = b->cache;
    if (n >= CACHE_MAX_WORD || pthread_mutex_trylock(&c->mu)) return;
    if (c->keys.n >= CACHE_MAX_ENTRIES || c->keys.keys.n + c->ids.n * 4 > CACHE_MAX_BYTES) {
        tk_strmap_free(&c->keys);
        c->ids.n = 0;
    }
    int added;
    size_t off = c->ids.n;
    int32_t i = tk_strmap_intern(&c->keys, s, n, &added);
    if (i >= 0 && added) {
        if ((size_t)i >= c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 1024;
            uint32_t *o = realloc(c->off, cap * sizeof *o);
            if (o) c->off = o;
            uint32_t *q = o ? realloc(c->cnt, cap * sizeof *q) : NULL;
            if (q) c->cnt = q;
            if (!o || !q) { tk_strmap_free(&c->keys); c->ids.n = 0; pthread_mutex_unlock(&c->mu); return; }
            c->cap = cap;
        }
        c->off[i] = (uint32_t)off;
        c->cnt[i] = 0;
        for (size_t j = 0; j < k; j++) {
            if (tk_ids_push(&c->ids, ids[j])) { tk_strmap_free(&c->keys); c->ids.n = 0; break; }
            c->cnt[i]++;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------- merging */

typedef struct { int32_t sym; uint32_t start, len; int32_t prev, next; uint8_t pre, suf; } sym_t;
typedef struct { uint32_t rank; uint32_t pos; } cand_t;

static inline int cand_less(cand_t a, cand_t b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(cand_t *h, size_t *n, cand_t c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(c, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand_t heap_pop(cand_t *h, size_t *n)
{
    cand_t top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t r = l + 1, c = r < m && cand_less(h[r], h[l]) ? r : l;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static inline int pair_rank(const tk_bpe *b, int32_t l, int32_t r, uint32_t *rank, int32_t *merged)
{
    if (l < 0 || r < 0) return 0;
    int64_t v;
    if (!tk_u64map_get(&b->merges, (uint64_t)(uint32_t)l << 32 | (uint32_t)r, &v)) return 0;
    *rank = (uint32_t)((uint64_t)v >> 32);
    *merged = (int32_t)(uint32_t)v;
    return 1;
}

/* the string of symbol x: interned key, or prefix + text + suffix for an unknown character */
static int sym_string(const tk_bpe *b, const char *s, const sym_t *x, tk_buf *o)
{
    o->n = 0;
    if (x->sym >= 0) {
        size_t n;
        const char *k = tk_strmap_key(&b->syms, x->sym, &n);
        return tk_buf_put(o, k, n);
    }
    if (x->pre && tk_buf_put(o, b->prefix, b->prefix_len)) return RECUR_ENOMEM;
    if (tk_buf_put(o, s + x->start, x->len)) return RECUR_ENOMEM;
    if (x->suf && tk_buf_put(o, b->suffix, b->suffix_len)) return RECUR_ENOMEM;
    return 0;
}

static int emit_unk(const tk_bpe *b, tk_ids *out, int *last_unk)
{
    if (b->unk_id < 0) return 0;
    if (b->fuse_unk && *last_unk) return 0;
    *last_unk = 1;
    return tk_ids_push(out, b->unk_id);
}

int tk_bpe_word(const tk_bpe *b, const char *s, size_t n, tk_ids *out, int *last_unk)
{
    if (!n) return 0;
    /* the cache first: it is small and warm, the vocabulary is large and cold */
    int hit;
    size_t out0 = out->n;
    int rc = cache_get(b, s, n, out, &hit);
    if (rc || hit) { if (hit && out->n > out0) *last_unk = 0; return rc; }
    if (b->ignore_merges) {
        int32_t w = tk_strmap_find(&b->syms, s, n);
        if (w >= 0 && b->sym_id[w] >= 0) {
            *last_unk = 0;
            if ((rc = tk_ids_push(out, b->sym_id[w]))) return rc;
            cache_put(b, s, n, out->p + out0, 1);
            return 0;
        }
    }
    if (n > UINT32_MAX / 2) return RECUR_ESHAPE;

    sym_t stack_syms[64];
    cand_t stack_heap[3 * 64 + 1];
    sym_t *w = n <= 64 ? stack_syms : malloc(n * sizeof *w);
    cand_t *h = n <= 64 ? stack_heap : malloc((3 * n + 1) * sizeof *h);
    tk_buf tmp = {0};
    if (!w || !h) { rc = RECUR_ENOMEM; goto done; }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t l = b->byte_level ? 1 : tk_utf8_len((unsigned char)s[i]);
        if (l > n - i) l = n - i;
        sym_t *x = &w[m];
        x->start = (uint32_t)i;
        x->len = (uint32_t)l;
        x->pre = (uint8_t)(m > 0 && b->prefix_len);
        x->suf = (uint8_t)(i + l == n && b->suffix_len);
        if (b->byte_level && !x->pre && !x->suf) x->sym = b->byte_sym[(unsigned char)s[i]];
        else if (!x->pre && !x->suf) x->sym = tk_strmap_find(&b->syms, s + i, l);
        else {
            x->sym = -1;
            if ((rc = sym_string(b, s, x, &tmp))) goto done;
            x->sym = tk_strmap_find(&b->syms, tmp.p, tmp.n);
        }
        x->prev = (int32_t)m - 1;
        x->next = (int32_t)m + 1;
        m++;
        i += l;
    }
    w[m - 1].next = -1;
    size_t hn = 0;
    uint32_t rank;
    int32_t merged;
    for (size_t i = 0; i + 1 < m; i++)
        if (pair_rank(b, w[i].sym, w[i + 1].sym, &rank, &merged)) heap_push(h, &hn, (cand_t){rank, (uint32_t)i});
    while (hn) {
        cand_t c = heap_pop(h, &hn);
        sym_t *x = &w[c.pos];
        if (x->len == 0 || x->next < 0) continue; /* merged away */
        sym_t *y = &w[x->next];
        if (!pair_rank(b, x->sym, y->sym, &rank, &merged) || rank != c.rank) continue; /* stale */
        x->sym = merged;
        x->len += y->len;
        x->suf = y->suf;
        x->next = y->next;
        if (y->next >= 0) w[y->next].prev = (int32_t)c.pos;
        y->len = 0;
        if (x->prev >= 0 && pair_rank(b, w[x->prev].sym, x->sym, &rank, &merged))
            heap_push(h, &hn, (cand_t){rank, (uint32_t)x->prev});
        if (x->next >= 0 && pair_rank(b, x->sym, w[x->next].sym, &rank, &merged))
            heap_push(h, &hn, (cand_t){rank, c.pos});
    }
    int any_unk = 0;
    for (int32_t i = 0; i >= 0; i = w[i].next) {
        const sym_t *x = &w[i];
        int32_t id = x->sym >= 0 ? b->sym_id[x->sym] : -1;
        if (id >= 0) { *last_unk = 0; if ((rc = tk_ids_push(out, id))) goto done; continue; }
        if ((rc = sym_string(b, s, x, &tmp))) goto done;
        int all = b->byte_fallback;
        for (size_t k = 0; all && k < tmp.n; k++) all = b->fallback[(unsigned char)tmp.p[k]] >= 0;
        if (all) {
            *last_unk = 0;
            for (size_t k = 0; k < tmp.n; k++)
                if ((rc = tk_ids_push(out, b->fallback[(unsigned char)tmp.p[k]]))) goto done;
        } else {
            any_unk = 1;
            if ((rc = emit_unk(b, out, last_unk))) goto done;
        }
    }
    if (!any_unk) cache_put(b, s, n, out->p + out0, out->n - out0);
done:
    if (w != stack_syms) free(w);
    if (h != stack_heap) free(h);
    tk_buf_free(&tmp);
    return rc;
}
