/* json_strict.c — strict RFC 8259 validation and a cursor over validated text (json_strict.h). */
#include "json_strict.h"

#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* ---------------------------------------------------------------- bytes */

static int is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* 4 hex digits at p (p + 4 <= end checked by the caller); -1 when not hex. */
static long hex4(const uint8_t *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Plain string bytes: printable ASCII except '"' and '\\'. */
static const uint8_t PLAIN[256] = {
#define R16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
    R16(0), R16(0), /* 0x00-0x1f: control bytes */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20-0x2f: '"' */
    R16(1), R16(1),
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50-0x5f: '\\' */
    R16(1), R16(1), /* 0x60-0x7f (0x7f DEL is allowed by RFC 8259) */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), /* 0x80-0xff: UTF-8 */
#undef R16
};

/* ---------------------------------------------------------------- validation */

typedef struct {
    size_t off;   /* into the body (raw) or into scratch (escaped names) */
    uint32_t n;
    uint32_t in_scratch;
    uint64_t h;
} key_rec;

typedef struct {
    const uint8_t *s, *end;
    pj_doc *d;
    const char *why;
    const uint8_t *at;
    key_rec *keys;
    size_t nkeys, capkeys;
    uint8_t *scratch;
    size_t nscratch, capscratch;
    uint32_t *table;
    size_t captable;
    uint64_t seed;
    int dup_found;
} vstate;

static int bad(vstate *v, const uint8_t *at, const char *why)
{
    v->at = at;
    v->why = why;
    return -1;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q)
        abort();
    *cap = c;
    return q;
}

/* The string at *pp (on its opening quote). On success *pp is past the closing quote and
 * *escaped says whether it had an escape. */
static int scan_string(vstate *v, const uint8_t **pp, int *escaped)
{
    const uint8_t *p = *pp + 1, *end = v->end;
    *escaped = 0;
    for (;;) {
        while (p < end && PLAIN[*p])
            p++;
        if (p >= end)
            return bad(v, p, "unterminated string");
        uint8_t c = *p;
        if (c == '"') {
            *pp = p + 1;
            return 0;
        }
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2)
                return bad(v, p, "unterminated string");
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                if (end - p < 6)
                    return bad(v, p, "short \\u escape");
                long u = hex4(p + 2);
                if (u < 0)
                    return bad(v, p, "\\u escape needs 4 hex digits");
                if (u >= 0xDC00 && u <= 0xDFFF)
                    return bad(v, p, "lone low surrogate escape");
                if (u >= 0xD800 && u <= 0xDBFF) {
                    long lo = (end - p >= 12 && p[6] == '\\' && p[7] == 'u') ? hex4(p + 8) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return bad(v, p, "high surrogate escape without its low half");
                    p += 12;
                } else
                    p += 6;
                continue;
            }
            default:
                return bad(v, p, "unknown escape");
            }
        }
        if (c < 0x20)
            return bad(v, p, "control byte in string (must be escaped)");
        size_t len = proto_utf8_seq(p, (size_t)(end - p));
        if (!len)
            return bad(v, p, "invalid UTF-8 in string");
        p += len;
    }
}

static int scan_number(vstate *v, const uint8_t **pp)
{
    const uint8_t *p = *pp, *end = v->end;
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return bad(v, p, "digit expected");
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9')
            return bad(v, p, "leading zero in number");
    } else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return bad(v, p, "digit expected after decimal point");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return bad(v, p, "digit expected in exponent");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    *pp = p;
    return 0;
}

static uint64_t hash_bytes(uint64_t seed, const uint8_t *s, size_t n)
{
    uint64_t h = seed ^ (n * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001B3ull;
        h ^= h >> 29;
    }
    return h ^ (h >> 32);
}

static const uint8_t *key_ptr(const vstate *v, const key_rec *k)
{
    return k->in_scratch ? v->scratch + k->off : v->s + k->off;
}

/* Record the member name whose string token is [q, e) (quotes included). */
static void add_key(vstate *v, const uint8_t *q, const uint8_t *e, int escaped)
{
    v->keys = grow(v->keys, &v->capkeys, v->nkeys + 1, sizeof *v->keys);
    key_rec *k = &v->keys[v->nkeys++];
    pj_span sp = {q, (size_t)(e - q)};
    if (!escaped) {
        k->off = (size_t)(q + 1 - v->s);
        k->n = (uint32_t)(sp.n - 2);
        k->in_scratch = 0;
    } else {
        size_t len = pj_string_len(sp);
        v->scratch = grow(v->scratch, &v->capscratch, v->nscratch + len + 1, 1);
        pj_string_decode(sp, v->scratch + v->nscratch);
        k->off = v->nscratch;
        k->n = (uint32_t)len;
        k->in_scratch = 1;
        v->nscratch += len;
    }
    k->h = hash_bytes(v->seed, key_ptr(v, k), k->n);
}

static int same_key(const vstate *v, const key_rec *a, const key_rec *b)
{
    return a->n == b->n && a->h == b->h && memcmp(key_ptr(v, a), key_ptr(v, b), a->n) == 0;
}

static void note_dup(vstate *v, const key_rec *k)
{
    if (v->dup_found)
        return;
    v->dup_found = 1;
    size_t n = k->n < sizeof v->d->dup - 1 ? k->n : sizeof v->d->dup - 1;
    memcpy(v->d->dup, key_ptr(v, k), n);
    v->d->dup[n] = '\0';
    v->d->dup_len = k->n;
}

typedef struct {
    const vstate *v;
    const key_rec *k;
} sort_rec;

static int cmp_sort_rec(const void *a, const void *b)
{
    const sort_rec *x = a, *y = b;
    if (x->k->n != y->k->n)
        return x->k->n < y->k->n ? -1 : 1;
    return memcmp(key_ptr(x->v, x->k), key_ptr(y->v, y->k), x->k->n);
}

/* Duplicate names among keys[from..nkeys): pairwise for small objects, a hash table for large
 * ones, and sorting when the table degenerates (crafted collisions): O(n log n) at worst. */
static void check_dups(vstate *v, size_t from)
{
    size_t k = v->nkeys - from;
    const key_rec *K = v->keys + from;
    if (k < 2 || v->dup_found)
        return;
    if (k <= 16) {
        for (size_t i = 1; i < k; i++)
            for (size_t j = 0; j < i; j++)
                if (same_key(v, &K[i], &K[j])) {
                    note_dup(v, &K[i]);
                    return;
                }
        return;
    }
    size_t cap = 32;
    while (cap < 2 * k)
        cap *= 2;
    v->table = grow(v->table, &v->captable, cap, sizeof *v->table);
    memset(v->table, 0, cap * sizeof *v->table);
    size_t probes = 0;
    for (size_t i = 0; i < k; i++) {
        size_t slot = (size_t)K[i].h & (cap - 1);
        while (v->table[slot]) {
            const key_rec *o = &K[v->table[slot] - 1];
            if (same_key(v, &K[i], o)) {
                note_dup(v, &K[i]);
                return;
            }
            slot = (slot + 1) & (cap - 1);
            if (++probes > 8 * k)
                goto sort;
        }
        v->table[slot] = (uint32_t)(i + 1);
    }
    return;
sort:;
    sort_rec *r = malloc(k * sizeof *r);
    if (!r)
        abort();
    for (size_t i = 0; i < k; i++)
        r[i] = (sort_rec){v, &K[i]};
    qsort(r, k, sizeof *r, cmp_sort_rec);
    for (size_t i = 1; i < k; i++)
        if (cmp_sort_rec(&r[i - 1], &r[i]) == 0) {
            note_dup(v, r[i].k);
            break;
        }
    free(r);
}

enum { IN_ARRAY = 0, IN_OBJECT = 1 };

static int validate(vstate *v)
{
    const uint8_t *p = v->s, *end = v->end;
    pj_doc *d = v->d;
    uint8_t kind[PJ_MAX_DEPTH];
    size_t kfrom[PJ_MAX_DEPTH], sfrom[PJ_MAX_DEPTH];
    size_t depth = 0;
    const uint8_t *top_start, *mstart = NULL;
    int escaped;

    p = skip_ws(p, end);
    top_start = p;
value:
    if (p >= end)
        return bad(v, p, "value expected");
    if (depth == 1 && kind[0] == IN_OBJECT)
        mstart = p;
    switch (*p) {
    case '{':
    case '[':
        if (depth == PJ_MAX_DEPTH)
            return bad(v, p, "nested deeper than 1000 arrays/objects");
        kind[depth] = *p == '{' ? IN_OBJECT : IN_ARRAY;
        kfrom[depth] = v->nkeys;
        sfrom[depth] = v->nscratch;
        depth++;
        p = skip_ws(p + 1, end);
        if (p < end && *p == (kind[depth - 1] == IN_OBJECT ? '}' : ']')) {
            p++;
            depth--;
            goto after;
        }
        if (kind[depth - 1] == IN_ARRAY)
            goto value;
        goto key;
    case '"':
        if (scan_string(v, &p, &escaped))
            return -1;
        goto after;
    case 't':
    case 'f':
    case 'n': {
        const char *lit = *p == 't' ? "true" : *p == 'f' ? "false" : "null";
        size_t n = strlen(lit);
        if ((size_t)(end - p) < n || memcmp(p, lit, n))
            return bad(v, p, "invalid literal");
        p += n;
        goto after;
    }
    default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) {
            if (scan_number(v, &p))
                return -1;
            goto after;
        }
        return bad(v, p, "value expected");
    }
key: /* p is on what must be a member name */
    if (p >= end || *p != '"')
        return bad(v, p, "member name (a string) expected");
    {
        const uint8_t *q = p;
        if (scan_string(v, &p, &escaped))
            return -1;
        add_key(v, q, p, escaped);
        if (depth == 1) {
            if (d->n_members < PJ_MAX_MEMBERS)
                d->key[d->n_members] = (pj_span){q, (size_t)(p - q)};
        }
    }
    p = skip_ws(p, end);
    if (p >= end || *p != ':')
        return bad(v, p, "':' expected");
    p = skip_ws(p + 1, end);
    goto value;
after: /* a value ended at p */
    if (depth == 1 && kind[0] == IN_OBJECT) {
        if (d->n_members < PJ_MAX_MEMBERS)
            d->val[d->n_members] = (pj_span){mstart, (size_t)(p - mstart)};
        d->n_members++;
    }
    if (depth == 0) {
        d->top = (pj_span){top_start, (size_t)(p - top_start)};
        d->top_type = pj_type_of(d->top);
        p = skip_ws(p, end);
        if (p != end)
            return bad(v, p, "trailing bytes after the JSON value");
        return 0;
    }
    p = skip_ws(p, end);
    if (p >= end)
        return bad(v, p, "unexpected end of the body");
    if (*p == ',') {
        p = skip_ws(p + 1, end);
        if (kind[depth - 1] == IN_ARRAY)
            goto value;
        goto key;
    }
    if (*p == (kind[depth - 1] == IN_OBJECT ? '}' : ']')) {
        depth--;
        if (kind[depth] == IN_OBJECT) {
            check_dups(v, kfrom[depth]);
            v->nkeys = kfrom[depth];
            v->nscratch = sfrom[depth];
        }
        p++;
        goto after;
    }
    return bad(v, p, kind[depth - 1] == IN_OBJECT ? "',' or '}' expected" : "',' or ']' expected");
}

int pj_parse(const uint8_t *s, size_t n, pj_doc *d)
{
    memset(d, 0, sizeof *d);
    vstate v = {0};
    v.s = s;
    v.end = s + n;
    v.d = d;
    /* The seed only spreads names over the table; the sort fallback bounds crafted collisions. */
    v.seed = (uint64_t)(uintptr_t)&v ^ ((uint64_t)(uintptr_t)s << 17) ^ 0x243F6A8885A308D3ull;
    int rc = validate(&v);
    free(v.keys);
    free(v.scratch);
    free(v.table);
    if (rc != 0) {
        d->status = PJ_INVALID;
        d->offset = (size_t)(v.at - s);
        d->reason = v.why;
        return -1;
    }
    if (v.dup_found) {
        d->status = PJ_DUPLICATE;
        return -1;
    }
    d->status = PJ_VALID;
    return 0;
}

/* ---------------------------------------------------------------- cursor */

pj_type pj_type_of(pj_span v)
{
    switch (v.p[0]) {
    case '{': return PJ_OBJECT;
    case '[': return PJ_ARRAY;
    case '"': return PJ_STRING;
    case 't': return PJ_TRUE;
    case 'f': return PJ_FALSE;
    case 'n': return PJ_NULL;
    default: return PJ_NUMBER;
    }
}

static const uint8_t *string_end(const uint8_t *p)
{
    p++;
    for (;;) {
        if (*p == '"')
            return p + 1;
        p += *p == '\\' ? 2 : 1;
    }
}

const uint8_t *pj_value_end(const uint8_t *p)
{
    switch (*p) {
    case '"':
        return string_end(p);
    case 't':
    case 'n':
        return p + 4;
    case 'f':
        return p + 5;
    case '{':
    case '[': {
        size_t depth = 0;
        for (;;) {
            uint8_t c = *p;
            if (c == '"') {
                p = string_end(p);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0)
                    return p + 1;
            }
            p++;
        }
    }
    default:
        while ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == '.' || *p == 'e' ||
               *p == 'E')
            p++;
        return p;
    }
}

void pj_array_begin(pj_span array, pj_iter *it)
{
    it->p = array.p + 1;
    it->end = array.p + array.n - 1; /* the closing ']' */
    it->first = 1;
}

/* Where the iterator's next member starts (past the ',' after the first one), NULL after the last. */
static const uint8_t *iter_member(pj_iter *it)
{
    const uint8_t *p = skip_ws(it->p, it->end);
    if (p >= it->end)
        return NULL;
    if (!it->first)
        p = skip_ws(p + 1, it->end); /* the ',' */
    it->first = 0;
    return p;
}

int pj_array_next(pj_iter *it, pj_span *elem)
{
    const uint8_t *p = iter_member(it);
    if (!p)
        return 0;
    const uint8_t *e = pj_value_end(p);
    *elem = (pj_span){p, (size_t)(e - p)};
    it->p = e;
    return 1;
}

void pj_object_begin(pj_span object, pj_iter *it)
{
    pj_array_begin(object, it);
}

int pj_object_next(pj_iter *it, pj_span *key, pj_span *val)
{
    const uint8_t *p = iter_member(it);
    if (!p)
        return 0;
    const uint8_t *e = string_end(p);
    *key = (pj_span){p, (size_t)(e - p)};
    p = skip_ws(skip_ws(e, it->end) + 1, it->end); /* the ':' */
    e = pj_value_end(p);
    *val = (pj_span){p, (size_t)(e - p)};
    it->p = e;
    return 1;
}

int pj_number(pj_span v, double *out)
{
    if (pj_type_of(v) != PJ_NUMBER)
        return -1;
    const uint8_t *p = v.p, *e = v.p + v.n;
    int neg = *p == '-';
    p += neg;
    /* Fast path: up to 15 digits and nothing else is an exact integer. */
    if ((size_t)(e - p) <= 15) {
        uint64_t x = 0;
        const uint8_t *q = p;
        while (q < e && *q >= '0' && *q <= '9')
            x = x * 10 + (uint64_t)(*q++ - '0');
        if (q == e) {
            *out = neg ? -(double)x : (double)x;
            return 0;
        }
    }
    char small[64];
    char *buf = v.n < sizeof small ? small : malloc(v.n + 1);
    if (!buf)
        abort();
    memcpy(buf, v.p, v.n);
    buf[v.n] = '\0';
    *out = strtod(buf, NULL); /* the grammar was checked; C locale (the daemon never sets one) */
    if (buf != small)
        free(buf);
    return 0;
}

/* Decode one escape at p (on the backslash): the code point, and *adv bytes consumed. */
static unsigned long escape_cp(const uint8_t *p, size_t *adv)
{
    switch (p[1]) {
    case 'b': *adv = 2; return '\b';
    case 'f': *adv = 2; return '\f';
    case 'n': *adv = 2; return '\n';
    case 'r': *adv = 2; return '\r';
    case 't': *adv = 2; return '\t';
    case 'u': {
        unsigned long u = (unsigned long)hex4(p + 2);
        if (u >= 0xD800 && u <= 0xDBFF) {
            unsigned long lo = (unsigned long)hex4(p + 8);
            *adv = 12;
            return 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        *adv = 6;
        return u;
    }
    default: *adv = 2; return p[1]; /* " \ / */
    }
}

static size_t utf8_len(unsigned long cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

size_t pj_string_len(pj_span str)
{
    const uint8_t *p = str.p + 1, *e = str.p + str.n - 1;
    size_t n = 0;
    while (p < e) {
        const uint8_t *b = memchr(p, '\\', (size_t)(e - p));
        if (!b)
            return n + (size_t)(e - p);
        n += (size_t)(b - p);
        size_t adv;
        n += utf8_len(escape_cp(b, &adv));
        p = b + adv;
    }
    return n;
}

size_t pj_string_decode(pj_span str, uint8_t *out)
{
    const uint8_t *p = str.p + 1, *e = str.p + str.n - 1;
    uint8_t *o = out;
    while (p < e) {
        const uint8_t *b = memchr(p, '\\', (size_t)(e - p));
        size_t plain = (size_t)((b ? b : e) - p);
        memcpy(o, p, plain);
        o += plain;
        if (!b)
            break;
        size_t adv;
        unsigned long cp = escape_cp(b, &adv);
        p = b + adv;
        if (cp < 0x80)
            *o++ = (uint8_t)cp;
        else if (cp < 0x800) {
            *o++ = (uint8_t)(0xC0 | (cp >> 6));
            *o++ = (uint8_t)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *o++ = (uint8_t)(0xE0 | (cp >> 12));
            *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (uint8_t)(0x80 | (cp & 0x3F));
        } else {
            *o++ = (uint8_t)(0xF0 | (cp >> 18));
            *o++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (uint8_t)(0x80 | (cp & 0x3F));
        }
    }
    return (size_t)(o - out);
}

int pj_string_eq(pj_span str, const char *lit)
{
    size_t ln = strlen(lit);
    if (str.n < 2 || str.p[0] != '"')
        return 0;
    if (!memchr(str.p + 1, '\\', str.n - 2))
        return str.n - 2 == ln && memcmp(str.p + 1, lit, ln) == 0;
    uint8_t buf[64];
    if (ln > sizeof buf || pj_string_len(str) != ln)
        return 0;
    pj_string_decode(str, buf);
    return memcmp(buf, lit, ln) == 0;
}

char *pj_string_dup(pj_span str, size_t *len)
{
    size_t n = pj_string_len(str);
    char *s = malloc(n + 1);
    if (!s)
        abort();
    *len = pj_string_decode(str, (uint8_t *)s);
    s[*len] = '\0';
    return s;
}
