/* chat_template_value.c — the chat-template interpreter's runtime values (chat_template.h): the
 * arena every parse and render allocates from, strings / lists / dicts, and the Python semantics
 * templates rely on: truthiness, ==, ordering, str() and json.dumps. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "tokenizer.h" /* tk_utf8_next */

/* ---------------------------------------------------------------- arena, errors */

struct ct_chunk {
    ct_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define CT_CHUNK_MIN (64u << 10)

void ct_fail(ct_ctx *c, int code, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    c->code = code;
    longjmp(c->jmp, 1);
}

void *ct_alloc(ct_ctx *c, size_t n)
{
    ct_arena *a = c->arena;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    ct_chunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > CT_CHUNK_MIN ? n : CT_CHUNK_MIN;
        if (a->total + cap > a->limit)
            ct_fail(c, RECUR_ESHAPE, "a chat template used more than %zu bytes of memory (the render "
                    "memory bound, 4 x RECUR_CHAT_MAX_OUTPUT_BYTES)", a->limit);
        h = malloc(sizeof *h + cap);
        if (!h) ct_fail(c, RECUR_ENOMEM, "chat template: out of memory");
        h->next = a->head;
        h->used = 0;
        h->cap = cap;
        a->head = h;
        a->total += cap;
    }
    void *p = h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

char *ct_strdup(ct_ctx *c, const char *s, size_t n)
{
    char *p = ct_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ct_arena_free(ct_arena *a)
{
    ct_chunk *h = a->head;
    while (h) {
        ct_chunk *next = h->next;
        free(h);
        h = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---------------------------------------------------------------- containers */

ct_value ct_str_copy(ct_ctx *c, const char *s, size_t n)
{
    return ct_str(ct_strdup(c, s, n), n);
}

ct_value ct_list_new(ct_ctx *c, size_t cap)
{
    ct_value v = {CT_LIST, {0}};
    v.u.list = ct_alloc(c, sizeof *v.u.list);
    if (cap) {
        v.u.list->v = ct_alloc(c, cap * sizeof(ct_value));
        v.u.list->cap = cap;
    }
    return v;
}

void ct_list_push(ct_ctx *c, ct_list *l, ct_value x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        ct_value *v = ct_alloc(c, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

ct_value ct_dict_new(ct_ctx *c, ct_kind kind)
{
    ct_value v = {kind, {0}};
    v.u.dict = ct_alloc(c, sizeof *v.u.dict);
    return v;
}

const ct_value *ct_dict_get(const ct_dict *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->key[i].u.str.n == kn && !memcmp(d->key[i].u.str.s, k, kn)) return &d->val[i];
    return NULL;
}

void ct_dict_set(ct_ctx *c, ct_dict *d, const char *k, size_t kn, ct_value x)
{
    ct_value *slot = (ct_value *)ct_dict_get(d, k, kn);
    if (slot) { *slot = x; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        ct_value *nk = ct_alloc(c, cap * sizeof *nk), *nv = ct_alloc(c, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->key, d->n * sizeof *nk);
            memcpy(nv, d->val, d->n * sizeof *nv);
        }
        d->key = nk;
        d->val = nv;
        d->cap = cap;
    }
    d->key[d->n] = ct_str(k, kn);
    d->val[d->n++] = x;
}

/* ---------------------------------------------------------------- Python semantics */

const char *ct_kind_name(ct_kind k)
{
    switch (k) {
    case CT_UNDEF: return "Undefined";
    case CT_NONE: return "NoneType";
    case CT_BOOL: return "bool";
    case CT_INT: return "int";
    case CT_FLOAT: return "float";
    case CT_STR: return "str";
    case CT_LIST: return "list";
    case CT_DICT: return "dict";
    case CT_NS: return "Namespace";
    }
    return "?";
}

int ct_truthy(ct_value v)
{
    switch (v.kind) {
    case CT_UNDEF: case CT_NONE: return 0;
    case CT_BOOL: return v.u.b;
    case CT_INT: return v.u.i != 0;
    case CT_FLOAT: return v.u.f != 0;
    case CT_STR: return v.u.str.n > 0;
    case CT_LIST: return v.u.list->n > 0;
    case CT_DICT: return v.u.dict->n > 0;
    case CT_NS: return 1;
    }
    return 0;
}

static int is_number(ct_value v) { return v.kind == CT_BOOL || v.kind == CT_INT || v.kind == CT_FLOAT; }
static double as_double(ct_value v) { return v.kind == CT_FLOAT ? v.u.f : v.kind == CT_INT ? (double)v.u.i : v.u.b; }
static int64_t as_int(ct_value v) { return v.kind == CT_INT ? v.u.i : v.u.b; }

int ct_equal(ct_value a, ct_value b)
{
    if (is_number(a) && is_number(b)) {
        if (a.kind != CT_FLOAT && b.kind != CT_FLOAT) return as_int(a) == as_int(b);
        return as_double(a) == as_double(b);
    }
    if (a.kind != b.kind) return 0;
    switch (a.kind) {
    case CT_UNDEF: case CT_NONE: return 1;
    case CT_STR: return a.u.str.n == b.u.str.n && !memcmp(a.u.str.s, b.u.str.s, a.u.str.n);
    case CT_LIST:
        if (a.u.list->n != b.u.list->n || a.u.list->tuple != b.u.list->tuple) return 0;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!ct_equal(a.u.list->v[i], b.u.list->v[i])) return 0;
        return 1;
    case CT_DICT:
        if (a.u.dict->n != b.u.dict->n) return 0;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            const ct_value *o = ct_dict_get(b.u.dict, a.u.dict->key[i].u.str.s, a.u.dict->key[i].u.str.n);
            if (!o || !ct_equal(a.u.dict->val[i], *o)) return 0;
        }
        return 1;
    case CT_NS: return a.u.dict == b.u.dict;
    default: return 0;
    }
}

int ct_compare(ct_ctx *c, ct_value a, ct_value b, const char *op)
{
    if (is_number(a) && is_number(b)) {
        if (a.kind != CT_FLOAT && b.kind != CT_FLOAT) return (as_int(a) > as_int(b)) - (as_int(a) < as_int(b));
        double x = as_double(a), y = as_double(b);
        return (x > y) - (x < y);
    }
    if (a.kind == CT_STR && b.kind == CT_STR) {
        /* UTF-8 byte order is code point order, which is Python's str order */
        size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
        int r = n ? memcmp(a.u.str.s, b.u.str.s, n) : 0;
        if (r) return r;
        return (a.u.str.n > b.u.str.n) - (a.u.str.n < b.u.str.n);
    }
    if (a.kind == CT_LIST && b.kind == CT_LIST && a.u.list->tuple == b.u.list->tuple) {
        size_t n = a.u.list->n < b.u.list->n ? a.u.list->n : b.u.list->n;
        for (size_t i = 0; i < n; i++) {
            if (ct_equal(a.u.list->v[i], b.u.list->v[i])) continue;
            return ct_compare(c, a.u.list->v[i], b.u.list->v[i], op);
        }
        return (a.u.list->n > b.u.list->n) - (a.u.list->n < b.u.list->n);
    }
    ct_fail(c, RECUR_EINVAL, "'%s' not supported between instances of '%s' and '%s'", op,
            ct_kind_name(a.kind), ct_kind_name(b.kind));
}

/* ---------------------------------------------------------------- UTF-8 */

size_t ct_utf8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

int ct_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---------------------------------------------------------------- output */

void ct_out_put(ct_ctx *c, ct_out *o, const char *s, size_t n)
{
    if (n > o->limit - o->n)
        ct_fail(c, RECUR_ESHAPE, "%s: longer than %zu bytes", o->what, o->limit);
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1) cap *= 2;
        char *p;
        if (o->arena) {
            p = ct_alloc(c, cap);
            if (o->n) memcpy(p, o->p, o->n);
        } else {
            p = realloc(o->p, cap);
            if (!p) ct_fail(c, RECUR_ENOMEM, "chat template: out of memory");
        }
        o->p = p;
        o->cap = cap;
    }
    if (n) memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = 0;
}

void ct_out_cp(ct_ctx *c, ct_out *o, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) { b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | (cp >> 6 & 0x3F)); b[2] = (char)(0x80 | (cp & 0x3F)); n = 3; }
    else { b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | (cp >> 12 & 0x3F)); b[2] = (char)(0x80 | (cp >> 6 & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4; }
    ct_out_put(c, o, b, n);
}

static void put_s(ct_ctx *c, ct_out *o, const char *s) { ct_out_put(c, o, s, strlen(s)); }

/* Python's repr(float): the fewest significant digits that read back the same double, fixed
 * notation for exponents in [-4, 16), else d.ddde+XX */
static void put_float(ct_ctx *c, ct_out *o, double f)
{
    char buf[64]; /* %.16e is 23 bytes; %f here has at most 17 digits and 20 decimals */
    if (isnan(f)) { put_s(c, o, "nan"); return; }
    if (isinf(f)) { put_s(c, o, f < 0 ? "-inf" : "inf"); return; }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    snprintf(buf, sizeof buf, "%.*e", p - 1, f);
    char *e = strchr(buf, 'e');
    int exp10 = atoi(e + 1);
    if (exp10 >= -4 && exp10 < 16) {
        int decimals = p - 1 - exp10;
        snprintf(buf, sizeof buf, "%.*f", decimals > 0 ? decimals : 0, f);
        put_s(c, o, buf);
        if (!strchr(buf, '.')) put_s(c, o, ".0");
        return;
    }
    *e = 0;
    char out[sizeof buf + 32];
    snprintf(out, sizeof out, "%se%c%02d", buf, exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    put_s(c, o, out);
}

/* Python's repr(str): single quotes unless the text has ' and no " */
static void put_repr_str(ct_ctx *c, ct_out *o, const char *s, size_t n)
{
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    ct_out_put(c, o, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == (unsigned char)q || ch == '\\') { esc[0] = '\\'; esc[1] = (char)ch; ct_out_put(c, o, esc, 2); }
        else if (ch == '\n') put_s(c, o, "\\n");
        else if (ch == '\r') put_s(c, o, "\\r");
        else if (ch == '\t') put_s(c, o, "\\t");
        else if (ch < 0x20 || ch == 0x7F) { snprintf(esc, sizeof esc, "\\x%02x", ch); put_s(c, o, esc); }
        else ct_out_put(c, o, s + i, 1);
    }
    ct_out_put(c, o, &q, 1);
}

static void put_repr(ct_ctx *c, ct_out *o, ct_value v, int depth);

static void put_container(ct_ctx *c, ct_out *o, ct_value v, int depth)
{
    if (depth > RECUR_CHAT_MAX_DEPTH)
        ct_fail(c, RECUR_ESHAPE, "a value nested deeper than RECUR_CHAT_MAX_DEPTH (%d)", RECUR_CHAT_MAX_DEPTH);
    if (v.kind == CT_LIST) {
        int tuple = v.u.list->tuple;
        put_s(c, o, tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i) put_s(c, o, ", ");
            put_repr(c, o, v.u.list->v[i], depth + 1);
        }
        put_s(c, o, tuple ? (v.u.list->n == 1 ? ",)" : ")") : "]");
        return;
    }
    put_s(c, o, v.kind == CT_NS ? "<Namespace {" : "{");
    for (size_t i = 0; i < v.u.dict->n; i++) {
        if (i) put_s(c, o, ", ");
        put_repr(c, o, v.u.dict->key[i], depth + 1);
        put_s(c, o, ": ");
        put_repr(c, o, v.u.dict->val[i], depth + 1);
    }
    put_s(c, o, v.kind == CT_NS ? "}>" : "}");
}

static void put_repr(ct_ctx *c, ct_out *o, ct_value v, int depth)
{
    if (v.kind == CT_STR) put_repr_str(c, o, v.u.str.s, v.u.str.n);
    else if (v.kind == CT_UNDEF) put_s(c, o, "Undefined");
    else if (v.kind == CT_LIST || v.kind == CT_DICT || v.kind == CT_NS) put_container(c, o, v, depth);
    else ct_out_str(c, o, v);
}

void ct_out_str(ct_ctx *c, ct_out *o, ct_value v)
{
    char buf[32];
    switch (v.kind) {
    case CT_UNDEF: return;
    case CT_NONE: put_s(c, o, "None"); return;
    case CT_BOOL: put_s(c, o, v.u.b ? "True" : "False"); return;
    case CT_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); put_s(c, o, buf); return;
    case CT_FLOAT: put_float(c, o, v.u.f); return;
    case CT_STR: ct_out_put(c, o, v.u.str.s, v.u.str.n); return;
    default: put_container(c, o, v, 0); return;
    }
}

ct_value ct_to_str(ct_ctx *c, ct_value v)
{
    if (v.kind == CT_STR) return v;
    ct_out o = ct_scratch("a string (RECUR_CHAT_MAX_OUTPUT_BYTES)");
    ct_out_str(c, &o, v);
    return ct_scratch_value(&o);
}

/* ---------------------------------------------------------------- json.dumps */

static void put_json_str(ct_ctx *c, ct_out *o, const char *s, size_t n)
{
    put_s(c, o, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20) { snprintf(ubuf, sizeof ubuf, "\\u%04x", ch); esc = ubuf; }
        if (!esc) { run++; continue; }
        ct_out_put(c, o, s + i - run, run);
        run = 0;
        put_s(c, o, esc);
    }
    ct_out_put(c, o, s + n - run, run);
    put_s(c, o, "\"");
}

static void json_newline(ct_ctx *c, ct_out *o, int indent, int depth)
{
    put_s(c, o, "\n");
    for (int i = 0; i < indent * depth; i++) put_s(c, o, " ");
}

void ct_out_json(ct_ctx *c, ct_out *o, ct_value v, int indent, int depth)
{
    if (depth > RECUR_CHAT_MAX_DEPTH)
        ct_fail(c, RECUR_ESHAPE, "tojson: a value nested deeper than RECUR_CHAT_MAX_DEPTH (%d)", RECUR_CHAT_MAX_DEPTH);
    const char *item_sep = indent >= 0 ? "," : ", ";
    switch (v.kind) {
    case CT_UNDEF:
        ct_fail(c, RECUR_EINVAL, "tojson: Object of type Undefined is not JSON serializable");
    case CT_NONE: put_s(c, o, "null"); return;
    case CT_BOOL: put_s(c, o, v.u.b ? "true" : "false"); return;
    case CT_INT: case CT_FLOAT:
        if (v.kind == CT_FLOAT && isnan(v.u.f)) { put_s(c, o, "NaN"); return; }
        if (v.kind == CT_FLOAT && isinf(v.u.f)) { put_s(c, o, v.u.f < 0 ? "-Infinity" : "Infinity"); return; }
        ct_out_str(c, o, v);
        return;
    case CT_STR: put_json_str(c, o, v.u.str.s, v.u.str.n); return;
    case CT_LIST:
        put_s(c, o, "[");
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i) put_s(c, o, item_sep);
            if (indent >= 0) json_newline(c, o, indent, depth + 1);
            ct_out_json(c, o, v.u.list->v[i], indent, depth + 1);
        }
        if (indent >= 0 && v.u.list->n) json_newline(c, o, indent, depth);
        put_s(c, o, "]");
        return;
    case CT_DICT: case CT_NS:
        if (v.kind == CT_NS) ct_fail(c, RECUR_EINVAL, "tojson: Object of type Namespace is not JSON serializable");
        put_s(c, o, "{");
        for (size_t i = 0; i < v.u.dict->n; i++) {
            if (i) put_s(c, o, item_sep);
            if (indent >= 0) json_newline(c, o, indent, depth + 1);
            put_json_str(c, o, v.u.dict->key[i].u.str.s, v.u.dict->key[i].u.str.n);
            put_s(c, o, ": ");
            ct_out_json(c, o, v.u.dict->val[i], indent, depth + 1);
        }
        if (indent >= 0 && v.u.dict->n) json_newline(c, o, indent, depth);
        put_s(c, o, "}");
        return;
    }
}
