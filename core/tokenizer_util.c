/* tokenizer_util.c — vectors, hash maps, byte tries and UTF-8 helpers of the tokenizer. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tokenizer.h"

void tk_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- large tables */

/* A table of at least BIG_MIN bytes is an anonymous mapping aligned to and advised for 2 MB
 * transparent huge pages; a smaller one is calloc'd. Either way BIG_HDR bytes in front of it
 * record how it was made. Why: loading a 128k vocabulary writes ~35 MB of fresh tables, and on
 * the VMs we run on the first touch of a 4 KB page costs ~12 us (docs/DESIGN.md §7): one
 * fault per page was over half of a llama3 load; a 2 MB page costs about as much as one 4 KB
 * fault. Under AddressSanitizer every table is calloc'd so that its bounds stay checked. */
#define BIG_HDR 64
#define BIG_MIN ((size_t)1 << 20)
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_TAIL ((size_t)256 << 10)
#if defined(__SANITIZE_ADDRESS__)
#define BIG_MAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIG_MAP 0
#endif
#endif
#ifndef BIG_MAP
#define BIG_MAP 1
#endif

typedef struct { size_t map_len; size_t size; } big_hdr; /* map_len 0: calloc'd */

void *tk_big_alloc(size_t n)
{
    if (n > SIZE_MAX / 2) return NULL;
    size_t need = n + BIG_HDR, map_len = 0;
    char *base;
    if (!BIG_MAP || need < BIG_MIN) {
        if (!(base = calloc(1, need))) return NULL;
    } else {
        /* a tail of at most HUGE_TAIL past the last whole 2 MB stays in 4 KB pages (a few faults);
         * a longer one is rounded up to a huge page (zeroing 2 MB costs less than 64 faults) */
        map_len = (need + 4095) & ~(size_t)4095;
        if ((map_len & (HUGE_PAGE - 1)) > HUGE_TAIL) map_len = (map_len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        size_t span = map_len + HUGE_PAGE;
        char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        base = (char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        if (base > m) munmap(m, (size_t)(base - m));
        if (m + span > base + map_len) munmap(base + map_len, (size_t)(m + span - (base + map_len)));
#ifdef MADV_HUGEPAGE
        madvise(base, map_len, MADV_HUGEPAGE); /* advisory: without it the table works as well */
#endif
    }
    big_hdr *hd = (big_hdr *)base;
    hd->map_len = map_len;
    hd->size = n;
    return base + BIG_HDR;
}

void *tk_big_resize(void *p, size_t n)
{
    if (!p) return tk_big_alloc(n);
    big_hdr *hd = (big_hdr *)((char *)p - BIG_HDR);
    if (n <= hd->size) return p;
    if (hd->map_len && n + BIG_HDR <= hd->map_len) { hd->size = n; return p; } /* the mapping has room: zero already */
    void *q = tk_big_alloc(n);
    if (!q) return NULL;
    memcpy(q, p, hd->size);
    tk_big_free(p);
    return q;
}

void tk_big_free(void *p)
{
    if (!p) return;
    big_hdr *hd = (big_hdr *)((char *)p - BIG_HDR);
    if (hd->map_len) munmap(hd, hd->map_len);
    else free(hd);
}

/* ---------------------------------------------------------------- vectors */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return RECUR_ENOMEM;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return RECUR_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* grow() for a tk_buf: its bytes are a large table when b->big */
static int buf_grow(tk_buf *b, size_t need)
{
    if (need <= b->cap) return 0;
    if (!b->big) return grow((void **)&b->p, &b->cap, need, 1);
    size_t c = b->cap ? b->cap : 4096;
    while (c < need) {
        if (c > SIZE_MAX / 4) return RECUR_ENOMEM;
        c *= 2;
    }
    char *q = tk_big_resize(b->p, c);
    if (!q) return RECUR_ENOMEM;
    b->p = q;
    b->cap = c;
    return 0;
}

int tk_buf_put(tk_buf *b, const void *s, size_t n)
{
    if (n > SIZE_MAX - b->n - 1) return RECUR_ENOMEM;
    if (buf_grow(b, b->n + n + 1)) return RECUR_ENOMEM;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tk_buf_reserve(tk_buf *b, size_t n)
{
    return n > SIZE_MAX - b->n - 1 || buf_grow(b, b->n + n + 1) ? RECUR_ENOMEM : 0;
}

int tk_buf_putc(tk_buf *b, int c)
{
    char ch = (char)c;
    return tk_buf_put(b, &ch, 1);
}

int tk_buf_put_cp(tk_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | (cp >> 6 & 63)); u[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | (cp >> 12 & 63));
        u[2] = (char)(0x80 | (cp >> 6 & 63)); u[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    return tk_buf_put(b, u, n);
}

void tk_buf_free(tk_buf *b)
{
    int big = b->big;
    if (big) tk_big_free(b->p);
    else free(b->p);
    memset(b, 0, sizeof *b);
    b->big = big;
}

int tk_ids_push(tk_ids *v, int32_t id)
{
    if (v->n == v->cap && grow((void **)&v->p, &v->cap, v->n + 1, sizeof *v->p)) return RECUR_ENOMEM;
    v->p[v->n++] = id;
    return 0;
}

void tk_ids_free(tk_ids *v)
{
    free(v->p);
    memset(v, 0, sizeof *v);
}

int tk_pieces_add(tk_pieces *p, const char *s, size_t n)
{
    if (p->n == p->cap && grow((void **)&p->s, &p->cap, p->n + 1, sizeof *p->s)) return RECUR_ENOMEM;
    size_t off = p->text.n;
    if (tk_buf_put(&p->text, s, n)) return RECUR_ENOMEM;
    p->s[p->n].off = off;
    p->s[p->n].len = n;
    p->n++;
    return 0;
}

void tk_pieces_reset(tk_pieces *p)
{
    p->n = 0;
    p->text.n = 0;
}

void tk_pieces_free(tk_pieces *p)
{
    tk_buf_free(&p->text);
    free(p->s);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- hashing */

uint64_t tk_hash(const void *s, size_t n)
{
    /* FNV-1a over 8-byte words, then a murmur finaliser. */
    const unsigned char *p = s;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    /* the last 0-7 bytes as one word from at most two loads (a byte-wise copy into a word on the
     * stack stalled store forwarding: the largest cost of hashing short keys); n is in h */
    uint64_t w = 0;
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        w = lo | (uint64_t)hi << 32;
    } else if (n) {
        w = p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16;
    }
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static inline uint64_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* ---------------------------------------------------------------- string map */

/* Each key is a record in m->keys: its index and length (two uint32) then its bytes. A slot is
 * (hash << 32 | record offset + 1), 0 when empty. A probe compares hashes without leaving the
 * slot, and the slot whose hash is equal (almost always the one) leads straight to the record:
 * a lookup costs two cache misses (slot, record), which tk_strmap_prefetch can take ahead. */
#define REC_HDR 8

static inline uint64_t slot_of(uint32_t h, size_t rec) { return (uint64_t)h << 32 | (uint32_t)(rec + 1); }

static inline uint32_t rec_u32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline int same_bytes(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static int32_t find_hashed(const tk_strmap *m, const char *s, size_t n, uint32_t h)
{
    if (!m->cap) return -1;
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint64_t v = m->slot[i];
        if (!v) return -1;
        if ((uint32_t)(v >> 32) != h) continue;
        const char *r = m->keys.p + (uint32_t)v - 1;
        if (rec_u32(r + 4) == n && same_bytes(r + REC_HDR, s, n)) return (int32_t)rec_u32(r);
    }
}

int32_t tk_strmap_find(const tk_strmap *m, const char *s, size_t n)
{
    return find_hashed(m, s, n, tk_strmap_hash(s, n));
}

const char *tk_strmap_key(const tk_strmap *m, int32_t i, size_t *n)
{
    const char *r = m->keys.p + m->rec[i];
    *n = rec_u32(r + 4);
    return r + REC_HDR;
}

/* open addressing with linear probing, at most 2/3 full (probes compare hashes in the slot) */
static size_t table_cap(size_t n)
{
    size_t cap = 64;
    while (cap / 3 * 2 < n + 1) cap *= 2;
    return cap;
}

static inline void slot_put(uint64_t *slot, size_t mask, uint32_t hash, size_t rec)
{
    size_t i = hash & mask;
    while (slot[i]) i = (i + 1) & mask;
    slot[i] = slot_of(hash, rec);
}

static int strmap_rehash(tk_strmap *m, size_t cap)
{
    uint64_t *slot = tk_big_alloc(cap * sizeof *slot);
    if (!slot) return RECUR_ENOMEM;
    for (size_t e = 0; e < m->n; e++) {
        size_t n;
        const char *k = tk_strmap_key(m, (int32_t)e, &n);
        slot_put(slot, cap - 1, tk_strmap_hash(k, n), m->rec[e]);
    }
    tk_big_free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

/* the record offsets and the records are large tables too (m->keys.big) */
static int strmap_grow_rec(tk_strmap *m, size_t need)
{
    m->keys.big = 1;
    if (need <= m->rec_cap) return 0;
    size_t c = m->rec_cap ? m->rec_cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 4 / sizeof *m->rec) return RECUR_ENOMEM;
        c *= 2;
    }
    uint32_t *r = tk_big_resize(m->rec, c * sizeof *r);
    if (!r) return RECUR_ENOMEM;
    m->rec = r;
    m->rec_cap = c;
    return 0;
}

int tk_strmap_reserve(tk_strmap *m, size_t n, size_t key_bytes)
{
    size_t cap = table_cap(n);
    if (strmap_grow_rec(m, n)) return RECUR_ENOMEM;
    if (key_bytes > SIZE_MAX / 2 - n * REC_HDR || tk_buf_reserve(&m->keys, key_bytes + n * REC_HDR)) return RECUR_ENOMEM;
    return cap <= m->cap ? 0 : strmap_rehash(m, cap);
}

int32_t tk_strmap_intern(tk_strmap *m, const char *s, size_t n, int *added)
{
    return tk_strmap_intern_hashed(m, s, n, tk_strmap_hash(s, n), added);
}

int32_t tk_strmap_intern_hashed(tk_strmap *m, const char *s, size_t n, uint32_t h, int *added)
{
    if (added) *added = 0;
    int32_t f = find_hashed(m, s, n, h);
    if (f >= 0) return f;
    if (n > UINT32_MAX / 4 || m->keys.n > UINT32_MAX / 4 || m->n >= INT32_MAX / 2) return RECUR_ESHAPE;
    if (m->n + 1 > m->cap / 3 * 2 && strmap_rehash(m, m->cap ? m->cap * 2 : 64)) return RECUR_ENOMEM;
    if (strmap_grow_rec(m, m->n + 1)) return RECUR_ENOMEM;
    size_t off = m->keys.n;
    uint32_t hdr[2] = {(uint32_t)m->n, (uint32_t)n};
    if (tk_buf_put(&m->keys, hdr, REC_HDR) || tk_buf_put(&m->keys, s, n)) return RECUR_ENOMEM;
    m->rec[m->n] = (uint32_t)off;
    slot_put(m->slot, m->cap - 1, h, off);
    if (added) *added = 1;
    return (int32_t)m->n++;
}

void tk_strmap_prefetch(const tk_strmap *m, uint32_t h, int stage)
{
    if (!m->cap) return;
    size_t mask = m->cap - 1, i = h & mask;
    if (stage == 0) { __builtin_prefetch(&m->slot[i]); return; }
    uint64_t v;
    while ((v = m->slot[i]) && (uint32_t)(v >> 32) != h) i = (i + 1) & mask;
    if (v) __builtin_prefetch(m->keys.p + (uint32_t)v - 1);
}

void tk_strmap_free(tk_strmap *m)
{
    tk_big_free(m->slot);
    tk_big_free(m->rec);
    tk_buf_free(&m->keys);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- u64 map */

/* A slot holds key + 1 (0: empty, so that a fresh table needs no filling) and its value, side by
 * side: a probe reads one cache line. At most 2/3 full. */
struct tk_u64slot { uint64_t key1; int64_t val; };

static size_t u64_cap(size_t n)
{
    size_t cap = 64;
    while (cap / 3 * 2 < n + 1) cap *= 2;
    return cap;
}

/* the slot of k in s[0..mask], or the empty slot where it would go */
static inline size_t u64_slot(const tk_u64slot *s, size_t mask, uint64_t k)
{
    uint64_t k1 = k + 1;
    size_t i = mix64(k) & mask;
    while (s[i].key1 != k1 && s[i].key1) i = (i + 1) & mask;
    return i;
}

static int u64map_rehash(tk_u64map *m, size_t cap)
{
    tk_u64slot *s = tk_big_alloc(cap * sizeof *s);
    if (!s) return RECUR_ENOMEM;
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->slot[j].key1) continue;
        s[u64_slot(s, cap - 1, m->slot[j].key1 - 1)] = m->slot[j];
    }
    tk_big_free(m->slot);
    m->slot = s;
    m->cap = cap;
    return 0;
}

int tk_u64map_reserve(tk_u64map *m, size_t n)
{
    size_t cap = u64_cap(n);
    return cap <= m->cap ? 0 : u64map_rehash(m, cap);
}

int tk_u64map_put(tk_u64map *m, uint64_t k, int64_t v)
{
    if (k == UINT64_MAX) return RECUR_EINVAL;
    if (m->n + 1 > m->cap / 3 * 2 && u64map_rehash(m, u64_cap(m->n + 1))) return RECUR_ENOMEM;
    tk_u64slot *s = &m->slot[u64_slot(m->slot, m->cap - 1, k)];
    if (!s->key1) m->n++;
    s->key1 = k + 1;
    s->val = v;
    return 0;
}

void tk_u64map_prefetch(const tk_u64map *m, uint64_t k)
{
    if (m->cap) __builtin_prefetch(&m->slot[mix64(k) & (m->cap - 1)]);
}

int tk_u64map_get(const tk_u64map *m, uint64_t k, int64_t *v)
{
    if (!m->cap) return 0;
    const tk_u64slot *s = &m->slot[u64_slot(m->slot, m->cap - 1, k)];
    if (!s->key1) return 0;
    *v = s->val;
    return 1;
}

void tk_u64map_free(tk_u64map *m)
{
    tk_big_free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- trie */

int tk_trie_init(tk_trie *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 256; i++) t->root[i] = -1;
    t->value = malloc(16 * sizeof *t->value);
    if (!t->value) return RECUR_ENOMEM;
    t->cap = 16;
    t->n = 1;
    t->value[0] = -1;
    return 0;
}

int tk_trie_add(tk_trie *t, const char *s, size_t n, int32_t value)
{
    if (!n) return RECUR_EINVAL;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int32_t child = -1;
        int64_t v;
        if (node == 0) child = t->root[c];
        else if (tk_u64map_get(&t->edge, (uint64_t)node << 8 | c, &v)) child = (int32_t)v;
        if (child < 0) {
            if (t->n >= INT32_MAX) return RECUR_ESHAPE;
            if (grow((void **)&t->value, &t->cap, t->n + 1, sizeof *t->value)) return RECUR_ENOMEM;
            child = (int32_t)t->n++;
            t->value[child] = -1;
            if (node == 0) t->root[c] = child;
            else if (tk_u64map_put(&t->edge, (uint64_t)node << 8 | c, child)) return RECUR_ENOMEM;
        }
        node = child;
    }
    t->value[node] = value;
    t->first[(unsigned char)s[0] >> 3] |= (uint8_t)(1u << ((unsigned char)s[0] & 7));
    return 0;
}

size_t tk_trie_longest(const tk_trie *t, const char *s, size_t n, int32_t *value)
{
    if (!n || !(t->first[(unsigned char)s[0] >> 3] & (1u << ((unsigned char)s[0] & 7)))) return 0;
    int32_t node = t->root[(unsigned char)s[0]];
    size_t best = 0;
    for (size_t i = 1;; i++) {
        if (t->value[node] >= 0) { best = i; *value = t->value[node]; }
        if (i == n) break;
        int64_t v;
        if (!tk_u64map_get(&t->edge, (uint64_t)node << 8 | (unsigned char)s[i], &v)) break;
        node = (int32_t)v;
    }
    return best;
}

void tk_trie_free(tk_trie *t)
{
    tk_u64map_free(&t->edge);
    free(t->value);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- UTF-8 */

/* WHATWG UTF-8 decoder step: length of the maximal valid sequence or subpart at s (n >= 1);
 * *ok = 1 when it is a complete valid sequence. */
static size_t utf8_step(const unsigned char *s, size_t n, int *ok)
{
    unsigned char c = s[0];
    *ok = 0;
    if (c < 0x80) { *ok = 1; return 1; }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 1;
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) return i;
        lo = 0x80;
        hi = 0xBF;
    }
    *ok = 1;
    return i;
}

size_t tk_utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (!(w & 0x8080808080808080ull)) { i += 8; continue; }
        }
        if (u[i] < 0x80) { i++; continue; }
        int ok;
        size_t l = utf8_step(u + i, n - i, &ok);
        if (!ok) return i;
        i += l;
    }
    return n;
}

int tk_utf8_sanitize(const char *s, size_t n, tk_buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        int ok;
        size_t l = utf8_step(u + i, n - i, &ok);
        if (ok ? tk_buf_put(out, s + i, l) : tk_buf_put(out, "\xEF\xBF\xBD", 3)) return RECUR_ENOMEM;
        i += l;
    }
    return tk_buf_put(out, "", 0);
}

size_t tk_utf8_next(const char *s, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) { *cp = u[0]; return 1; }
    if (u[0] < 0xE0) { *cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F); return 2; }
    if (u[0] < 0xF0) { *cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F); return 3; }
    *cp = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    return 4;
}
