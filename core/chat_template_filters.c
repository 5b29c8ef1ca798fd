/* chat_template_filters.c — what a chat template can call (chat_template.h): Jinja's filters
 * and tests, Python's str and dict methods, and the globals transformers provides
 * (raise_exception, namespace, range, strftime_now), each with Python Jinja's semantics. Case
 * mapping is utf8proc's one-to-one mapping (Python maps 'ß'.upper() to 'SS'; we keep 'ß'). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "chat_template.h"
#include "tokenizer.h" /* tk_utf8_next */

/* ---------------------------------------------------------------- arguments */

typedef struct {
    ct_eval *e;
    const ct_node *n;
    const char *what; /* "filter 'trim'", "method '.split()'", ... for messages */
    const ct_value *args;
    const char **kw;
    size_t nargs;
} call;

/* argument `pos` (positional index) or `name` (keyword); dflt when absent */
static ct_value arg(const call *k, size_t pos, const char *name, ct_value dflt)
{
    size_t seen = 0;
    for (size_t i = 0; i < k->nargs; i++) {
        if (!k->kw[i]) { if (seen++ == pos) return k->args[i]; }
        else if (name && !strcmp(k->kw[i], name)) return k->args[i];
    }
    return dflt;
}

/* refuse arguments beyond npos positional and the named ones listed */
static void check_args(const call *k, size_t npos, const char *const *names)
{
    size_t seen = 0;
    for (size_t i = 0; i < k->nargs; i++) {
        if (!k->kw[i]) {
            if (++seen > npos)
                ct_fail(k->e->c, RECUR_EINVAL, "line %zu: %s takes at most %zu positional argument(s)", k->n->line, k->what, npos);
            continue;
        }
        int ok = 0;
        for (size_t j = 0; names && names[j]; j++) ok |= !strcmp(k->kw[i], names[j]);
        if (!ok) ct_fail(k->e->c, RECUR_EINVAL, "line %zu: %s got an unexpected keyword argument '%s'", k->n->line, k->what, k->kw[i]);
    }
}

__attribute__((noreturn)) static void wrong_type(const call *k, ct_value v)
{
    ct_fail(k->e->c, RECUR_EINVAL, "line %zu: %s cannot take a '%s'", k->n->line, k->what, ct_kind_name(v.kind));
}

static ct_value need_str(const call *k, ct_value v, const char *which)
{
    if (v.kind != CT_STR)
        ct_fail(k->e->c, RECUR_EINVAL, "line %zu: %s: %s must be a string, not '%s'", k->n->line, k->what, which, ct_kind_name(v.kind));
    return v;
}

static int64_t need_int(const call *k, ct_value v, const char *which)
{
    if (v.kind == CT_INT) return v.u.i;
    if (v.kind == CT_BOOL) return v.u.b;
    ct_fail(k->e->c, RECUR_EINVAL, "line %zu: %s: %s must be an integer, not '%s'", k->n->line, k->what, which, ct_kind_name(v.kind));
}

/* ---------------------------------------------------------------- string helpers */

static int in_set(uint32_t cp, ct_value chars)
{
    const char *s = chars.u.str.s;
    size_t at = 0;
    while (at < chars.u.str.n) {
        uint32_t x;
        at += tk_utf8_next(s + at, &x);
        if (x == cp) return 1;
    }
    return 0;
}

/* str.strip / lstrip / rstrip: chars NONE = whitespace */
static ct_value strip(ct_value v, ct_value chars, int left, int right)
{
    const char *s = v.u.str.s;
    size_t a = 0, b = v.u.str.n;
    while (left && a < b) {
        uint32_t cp;
        size_t l = tk_utf8_next(s + a, &cp);
        if (chars.kind == CT_STR ? !in_set(cp, chars) : !ct_is_space(cp)) break;
        a += l;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        tk_utf8_next(s + k, &cp);
        if (chars.kind == CT_STR ? !in_set(cp, chars) : !ct_is_space(cp)) break;
        b = k;
    }
    return ct_str(s + a, b - a);
}

/* CASE_TITLE is str.title(); CASE_TITLE_FILTER Jinja's title filter, whose words start after
 * whitespace or one of -({[< only (so "'role'" stays lower-case) */
enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE, CASE_TITLE_FILTER };

static ct_value recase(ct_ctx *c, ct_value v, int mode)
{
    ct_out o = ct_scratch("a re-cased string");
    size_t at = 0;
    int first = 1, prev_cased = 0, prev_sep = 1;
    while (at < v.u.str.n) {
        uint32_t cp;
        at += tk_utf8_next(v.u.str.s + at, &cp);
        utf8proc_int32_t x = (utf8proc_int32_t)cp, y = x;
        switch (mode) {
        case CASE_UPPER: y = utf8proc_toupper(x); break;
        case CASE_LOWER: y = utf8proc_tolower(x); break;
        case CASE_CAPITALIZE: y = first ? utf8proc_totitle(x) : utf8proc_tolower(x); break;
        case CASE_TITLE: y = prev_cased ? utf8proc_tolower(x) : utf8proc_totitle(x); break;
        case CASE_TITLE_FILTER: {
            int sep = ct_is_space(cp) || (cp < 0x80 && strchr("-({[<", (int)cp));
            y = sep ? x : prev_sep ? utf8proc_toupper(x) : utf8proc_tolower(x);
            prev_sep = sep;
            break;
        }
        }
        /* title(): a word starts after any character that is not a letter */
        utf8proc_category_t cat = utf8proc_category(x);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
                     cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
        first = 0;
        ct_out_cp(c, &o, (uint32_t)y);
    }
    return ct_scratch_value(&o);
}

/* str.replace(old, new, count) with Python's rule for an empty old (insert between characters) */
static ct_value replace(const call *k, ct_value v, ct_value from, ct_value to, int64_t count)
{
    ct_ctx *c = k->e->c;
    ct_out o = ct_scratch("a replaced string (RECUR_CHAT_MAX_OUTPUT_BYTES)");
    const char *s = v.u.str.s;
    size_t n = v.u.str.n, at = 0;
    int64_t done = 0;
    if (!from.u.str.n) {
        while (count < 0 || done < count) {
            ct_out_put(c, &o, to.u.str.s, to.u.str.n);
            done++;
            if (at >= n) break;
            uint32_t cp;
            size_t l = tk_utf8_next(s + at, &cp);
            ct_out_put(c, &o, s + at, l);
            at += l;
        }
        ct_out_put(c, &o, s + at, n - at);
    } else {
        while (at <= n && (count < 0 || done < count)) {
            const char *hit = memmem(s + at, n - at, from.u.str.s, from.u.str.n);
            if (!hit) break;
            ct_out_put(c, &o, s + at, (size_t)(hit - (s + at)));
            ct_out_put(c, &o, to.u.str.s, to.u.str.n);
            at = (size_t)(hit - s) + from.u.str.n;
            done++;
        }
        ct_out_put(c, &o, s + at, n - at);
    }
    return ct_scratch_value(&o);
}

static ct_value split(const call *k, ct_value v, ct_value sep, int64_t maxsplit)
{
    ct_ctx *c = k->e->c;
    ct_value r = ct_list_new(c, 0);
    const char *s = v.u.str.s;
    size_t n = v.u.str.n, at = 0;
    int64_t done = 0;
    if (sep.kind == CT_STR) {
        if (!sep.u.str.n) ct_fail(c, RECUR_EINVAL, "line %zu: %s: empty separator", k->n->line, k->what);
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(s + at, n - at, sep.u.str.s, sep.u.str.n) : NULL;
            if (!hit) { ct_list_push(c, r.u.list, ct_str(s + at, n - at)); break; }
            ct_list_push(c, r.u.list, ct_str(s + at, (size_t)(hit - (s + at))));
            at = (size_t)(hit - s) + sep.u.str.n;
            done++;
        }
        return r;
    }
    /* runs of whitespace separate; no empty strings at the ends */
    for (;;) {
        while (at < n) { uint32_t cp; size_t l = tk_utf8_next(s + at, &cp); if (!ct_is_space(cp)) break; at += l; }
        if (at >= n) break;
        if (maxsplit >= 0 && done >= maxsplit) {
            ct_value rest = strip(ct_str(s + at, n - at), ct_none(), 0, 1);
            ct_list_push(c, r.u.list, rest);
            break;
        }
        size_t start = at;
        while (at < n) { uint32_t cp; size_t l = tk_utf8_next(s + at, &cp); if (ct_is_space(cp)) break; at += l; }
        ct_list_push(c, r.u.list, ct_str(s + start, at - start));
        done++;
    }
    return r;
}

static int starts_or_ends(const call *k, ct_value v, ct_value affix, int end)
{
    if (affix.kind == CT_LIST) {
        for (size_t i = 0; i < affix.u.list->n; i++)
            if (starts_or_ends(k, v, affix.u.list->v[i], end)) return 1;
        return 0;
    }
    need_str(k, affix, "the prefix / suffix");
    if (affix.u.str.n > v.u.str.n) return 0;
    return !memcmp(v.u.str.s + (end ? v.u.str.n - affix.u.str.n : 0), affix.u.str.s, affix.u.str.n);
}

static ct_value pairs(ct_ctx *c, ct_dict *d)
{
    ct_value r = ct_list_new(c, d->n);
    for (size_t i = 0; i < d->n; i++) {
        ct_value p = ct_list_new(c, 2);
        p.u.list->tuple = 1; /* Python's (key, value) */
        ct_list_push(c, p.u.list, d->key[i]);
        ct_list_push(c, p.u.list, d->val[i]);
        ct_list_push(c, r.u.list, p);
    }
    return r;
}

/* Python's int(str) then float(str) fallback, as Jinja's int filter does */
static int parse_number(ct_value v, int want_int, ct_value *out)
{
    char buf[128];
    ct_value t = strip(v, ct_none(), 1, 1);
    if (!t.u.str.n || t.u.str.n >= sizeof buf) return 0;
    size_t k = 0;
    for (size_t i = 0; i < t.u.str.n; i++)
        if (t.u.str.s[i] != '_') buf[k++] = t.u.str.s[i];
    buf[k] = 0;
    char *end;
    if (want_int) {
        long long x = strtoll(buf, &end, 10);
        if (!*end && end != buf) { *out = ct_int(x); return 1; }
    }
    double f = strtod(buf, &end);
    if (*end || end == buf) return 0;
    *out = want_int ? ct_int((int64_t)f) : ct_float(f);
    return 1;
}

/* ---------------------------------------------------------------- filters */

ct_value ct_apply_filter(ct_eval *e, const ct_node *n, ct_value v, const ct_value *args, const char **kw, size_t nargs)
{
    ct_ctx *c = e->c;
    char what[48];
    snprintf(what, sizeof what, "filter '%s'", ct_filter_names[n->op]);
    call k = {e, n, what, args, kw, nargs};
    static const char *const chars_kw[] = {"chars", NULL};
    switch (n->op) {
    case F_TRIM:
        check_args(&k, 1, chars_kw);
        return strip(ct_to_str(c, v), arg(&k, 0, "chars", ct_none()), 1, 1);
    case F_LENGTH:
        check_args(&k, 0, NULL);
        if (v.kind == CT_UNDEF) return ct_int(0);
        if (v.kind == CT_STR) return ct_int((int64_t)ct_utf8_count(v.u.str.s, v.u.str.n));
        if (v.kind == CT_LIST) return ct_int((int64_t)v.u.list->n);
        if (v.kind == CT_DICT) return ct_int((int64_t)v.u.dict->n);
        wrong_type(&k, v);
    case F_TOJSON: {
        static const char *const names[] = {"indent", NULL};
        check_args(&k, 1, names);
        ct_value ind = arg(&k, 0, "indent", ct_none());
        int indent = ind.kind == CT_NONE ? -1 : (int)need_int(&k, ind, "indent");
        if (indent > 64) ct_fail(c, RECUR_EINVAL, "line %zu: tojson: indent above 64", n->line);
        ct_out o = ct_scratch("tojson output (RECUR_CHAT_MAX_OUTPUT_BYTES)");
        ct_out_json(c, &o, v, indent < 0 ? -1 : indent, 0);
            return ct_scratch_value(&o);
    }
    case F_UPPER: check_args(&k, 0, NULL); return recase(c, ct_to_str(c, v), CASE_UPPER);
    case F_LOWER: check_args(&k, 0, NULL); return recase(c, ct_to_str(c, v), CASE_LOWER);
    case F_CAPITALIZE: check_args(&k, 0, NULL); return recase(c, ct_to_str(c, v), CASE_CAPITALIZE);
    case F_TITLE: check_args(&k, 0, NULL); return recase(c, ct_to_str(c, v), CASE_TITLE_FILTER);
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean", NULL};
        check_args(&k, 2, names);
        ct_value d = arg(&k, 0, "default_value", ct_str("", 0));
        int boolean = ct_truthy(arg(&k, 1, "boolean", ct_bool(0)));
        return v.kind == CT_UNDEF || (boolean && !ct_truthy(v)) ? d : v;
    }
    case F_JOIN: {
        static const char *const names[] = {"d", NULL};
        check_args(&k, 1, names);
        ct_value sep = need_str(&k, arg(&k, 0, "d", ct_str("", 0)), "the separator");
        ct_list *items;
        if (v.kind == CT_LIST) items = v.u.list;
        else if (v.kind == CT_STR || v.kind == CT_DICT || v.kind == CT_UNDEF) {
            items = ct_list_new(c, 0).u.list;
            if (v.kind == CT_STR) {
                size_t at = 0;
                while (at < v.u.str.n) { uint32_t cp; size_t l = tk_utf8_next(v.u.str.s + at, &cp); ct_list_push(c, items, ct_str(v.u.str.s + at, l)); at += l; }
            } else if (v.kind == CT_DICT) {
                for (size_t i = 0; i < v.u.dict->n; i++) ct_list_push(c, items, v.u.dict->key[i]);
            }
        } else wrong_type(&k, v);
        ct_out o = ct_scratch("a joined string (RECUR_CHAT_MAX_OUTPUT_BYTES)");
        for (size_t i = 0; i < items->n; i++) {
            if (i) ct_out_put(c, &o, sep.u.str.s, sep.u.str.n);
            ct_out_str(c, &o, items->v[i]);
        }
            return ct_scratch_value(&o);
    }
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        check_args(&k, 3, names);
        ct_value from = need_str(&k, arg(&k, 0, "old", ct_undef()), "old");
        ct_value to = need_str(&k, arg(&k, 1, "new", ct_undef()), "new");
        ct_value cnt = arg(&k, 2, "count", ct_none());
        return replace(&k, ct_to_str(c, v), from, to, cnt.kind == CT_NONE ? -1 : need_int(&k, cnt, "count"));
    }
    case F_STRING: check_args(&k, 0, NULL); return ct_to_str(c, v);
    case F_FIRST: case F_LAST: {
        check_args(&k, 0, NULL);
        int last = n->op == F_LAST;
        if (v.kind == CT_LIST) return v.u.list->n ? v.u.list->v[last ? v.u.list->n - 1 : 0] : ct_undef();
        if (v.kind == CT_STR) {
            if (!v.u.str.n) return ct_undef();
            if (!last) { uint32_t cp; return ct_str(v.u.str.s, tk_utf8_next(v.u.str.s, &cp)); }
            size_t at = v.u.str.n - 1;
            while (at > 0 && ((unsigned char)v.u.str.s[at] & 0xC0) == 0x80) at--;
            return ct_str(v.u.str.s + at, v.u.str.n - at);
        }
        if (v.kind == CT_DICT && !last) return v.u.dict->n ? v.u.dict->key[0] : ct_undef();
        wrong_type(&k, v);
    }
    case F_ITEMS:
        check_args(&k, 0, NULL);
        if (v.kind == CT_UNDEF) return ct_list_new(c, 0);
        if (v.kind != CT_DICT) wrong_type(&k, v);
        return pairs(c, v.u.dict);
    case F_DICTSORT: {
        check_args(&k, 0, NULL);
        if (v.kind != CT_DICT) wrong_type(&k, v);
        ct_value r = pairs(c, v.u.dict);
        /* insertion sort on case-folded keys: dicts here are small */
        ct_value *a = r.u.list->v;
        for (size_t i = 1; i < r.u.list->n; i++)
            for (size_t j = i; j > 0; j--) {
                ct_value x = recase(c, a[j - 1].u.list->v[0], CASE_LOWER), y = recase(c, a[j].u.list->v[0], CASE_LOWER);
                if (ct_compare(c, x, y, "<") <= 0) break;
                ct_value t = a[j]; a[j] = a[j - 1]; a[j - 1] = t;
            }
        return r;
    }
    case F_LIST: case F_REVERSE: {
        check_args(&k, 0, NULL);
        ct_value r = ct_list_new(c, 0);
        if (v.kind == CT_LIST) for (size_t i = 0; i < v.u.list->n; i++) ct_list_push(c, r.u.list, v.u.list->v[i]);
        else if (v.kind == CT_DICT) for (size_t i = 0; i < v.u.dict->n; i++) ct_list_push(c, r.u.list, v.u.dict->key[i]);
        else if (v.kind == CT_STR) {
            size_t at = 0;
            while (at < v.u.str.n) { uint32_t cp; size_t l = tk_utf8_next(v.u.str.s + at, &cp); ct_list_push(c, r.u.list, ct_str(v.u.str.s + at, l)); at += l; }
        } else if (v.kind != CT_UNDEF) wrong_type(&k, v);
        if (n->op == F_REVERSE) {
            ct_value *a = r.u.list->v;
            for (size_t i = 0, j = r.u.list->n; i + 1 < j; i++, j--) { ct_value t = a[i]; a[i] = a[j - 1]; a[j - 1] = t; }
            if (v.kind == CT_STR) { /* a reversed string stays a string */
                ct_out o = ct_scratch("a reversed string");
                for (size_t i = 0; i < r.u.list->n; i++) ct_out_put(c, &o, a[i].u.str.s, a[i].u.str.n);
                return ct_scratch_value(&o);
            }
        }
        return r;
    }
    case F_INT: case F_FLOAT: {
        static const char *const names[] = {"default", NULL};
        check_args(&k, 1, names);
        int want_int = n->op == F_INT;
        ct_value d = arg(&k, 0, "default", want_int ? ct_int(0) : ct_float(0));
        ct_value r;
        if (v.kind == CT_UNDEF)
            ct_fail(c, RECUR_EINVAL, "line %zu: %s of an undefined value", n->line, what);
        if (v.kind == CT_INT || v.kind == CT_BOOL) return want_int ? ct_int(v.kind == CT_INT ? v.u.i : v.u.b) : ct_float(v.kind == CT_INT ? (double)v.u.i : v.u.b);
        if (v.kind == CT_FLOAT) return want_int ? ct_int((int64_t)v.u.f) : v;
        if (v.kind == CT_STR && parse_number(v, want_int, &r)) return r;
        return d;
    }
    case F_ABS:
        check_args(&k, 0, NULL);
        if (v.kind == CT_INT) {
            if (v.u.i == INT64_MIN) ct_fail(c, RECUR_ERANGE, "line %zu: integer overflow in abs", n->line);
            return ct_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.kind == CT_BOOL) return ct_int(v.u.b);
        if (v.kind == CT_FLOAT) return ct_float(v.u.f < 0 ? -v.u.f : v.u.f);
        wrong_type(&k, v);
    case F_INDENT: {
        static const char *const names[] = {"width", "first", "blank", NULL};
        check_args(&k, 3, names);
        ct_value w = arg(&k, 0, "width", ct_int(4));
        ct_value pad = w.kind == CT_STR ? w : ct_str("", 0);
        if (w.kind != CT_STR) {
            int64_t width = need_int(&k, w, "width");
            if (width < 0 || width > 256) ct_fail(c, RECUR_EINVAL, "line %zu: indent: width outside [0, 256]", n->line);
            char *sp = ct_alloc(c, (size_t)width + 1);
            memset(sp, ' ', (size_t)width);
            pad = ct_str(sp, (size_t)width);
        }
        int first = ct_truthy(arg(&k, 1, "first", ct_bool(0))), blank = ct_truthy(arg(&k, 2, "blank", ct_bool(0)));
        ct_value s = ct_to_str(c, v);
        ct_out o = ct_scratch("an indented string (RECUR_CHAT_MAX_OUTPUT_BYTES)");
        size_t at = 0;
        int line = 0;
        while (at <= s.u.str.n) {
            const char *nl = memchr(s.u.str.s + at, '\n', s.u.str.n - at);
            size_t end = nl ? (size_t)(nl - s.u.str.s) : s.u.str.n;
            int empty = end == at;
            if ((line > 0 || first) && (blank || !empty)) ct_out_put(c, &o, pad.u.str.s, pad.u.str.n);
            ct_out_put(c, &o, s.u.str.s + at, end - at);
            if (!nl) break;
            ct_out_put(c, &o, "\n", 1);
            at = end + 1;
            line++;
        }
            return ct_scratch_value(&o);
    }
    }
    ct_fail(c, RECUR_EINVAL, "line %zu: unknown filter", n->line);
}

/* ---------------------------------------------------------------- tests */

static int all_cased(ct_value v, int upper)
{
    int cased = 0;
    size_t at = 0;
    while (at < v.u.str.n) {
        uint32_t cp;
        at += tk_utf8_next(v.u.str.s + at, &cp);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) { if (!upper) return 0; cased = 1; }
        else if (cat == UTF8PROC_CATEGORY_LL) { if (upper) return 0; cased = 1; }
    }
    return cased;
}

int ct_apply_test(ct_eval *e, const ct_node *n, ct_value v)
{
    switch (n->op) {
    case TS_DEFINED: return v.kind != CT_UNDEF;
    case TS_UNDEFINED: return v.kind == CT_UNDEF;
    case TS_NONE: return v.kind == CT_NONE;
    case TS_STRING: return v.kind == CT_STR;
    case TS_NUMBER: return v.kind == CT_INT || v.kind == CT_FLOAT || v.kind == CT_BOOL; /* bool is a Number */
    case TS_INTEGER: return v.kind == CT_INT;
    case TS_FLOAT: return v.kind == CT_FLOAT;
    case TS_BOOLEAN: return v.kind == CT_BOOL;
    case TS_TRUE: return v.kind == CT_BOOL && v.u.b;
    case TS_FALSE: return v.kind == CT_BOOL && !v.u.b;
    case TS_MAPPING: return v.kind == CT_DICT;
    /* Jinja's Undefined iterates as empty and has a length: iterable and sequence hold for it */
    case TS_ITERABLE: return v.kind == CT_STR || v.kind == CT_LIST || v.kind == CT_DICT || v.kind == CT_UNDEF;
    case TS_SEQUENCE: return v.kind == CT_STR || v.kind == CT_LIST || v.kind == CT_DICT || v.kind == CT_UNDEF;
    case TS_ODD: case TS_EVEN:
        if (v.kind != CT_INT && v.kind != CT_BOOL)
            ct_fail(e->c, RECUR_EINVAL, "line %zu: test '%s' needs an integer, not '%s'", n->line, ct_test_names[n->op],
                    ct_kind_name(v.kind));
        return (int)(((v.kind == CT_INT ? v.u.i : v.u.b) % 2 != 0) == (n->op == TS_ODD));
    case TS_LOWER: return all_cased(ct_to_str(e->c, v), 0);
    case TS_UPPER: return all_cased(ct_to_str(e->c, v), 1);
    }
    ct_fail(e->c, RECUR_EINVAL, "line %zu: unknown test", n->line);
}

/* ---------------------------------------------------------------- methods */

ct_value ct_call_method(ct_eval *e, const ct_node *n, ct_value self, const ct_value *args, const char **kw, size_t nargs)
{
    ct_ctx *c = e->c;
    char what[48];
    snprintf(what, sizeof what, "method '.%s()'", ct_method_names[n->op]);
    call k = {e, n, what, args, kw, nargs};
    int is_dict_method = n->op == M_ITEMS || n->op == M_KEYS || n->op == M_VALUES || n->op == M_GET;
    if (is_dict_method ? self.kind != CT_DICT : self.kind != CT_STR)
        ct_fail(c, RECUR_EINVAL, "line %zu: '%s' object has no attribute '%s'", n->line, ct_kind_name(self.kind),
                ct_method_names[n->op]);
    switch (n->op) {
    case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
        check_args(&k, 1, NULL);
        ct_value chars = arg(&k, 0, NULL, ct_none());
        if (chars.kind != CT_NONE) need_str(&k, chars, "chars");
        return strip(self, chars, n->op != M_RSTRIP, n->op != M_LSTRIP);
    }
    case M_STARTSWITH: case M_ENDSWITH:
        check_args(&k, 1, NULL);
        if (k.nargs < 1) ct_fail(c, RECUR_EINVAL, "line %zu: %s takes one argument", n->line, what);
        return ct_bool(starts_or_ends(&k, self, args[0], n->op == M_ENDSWITH));
    case M_SPLIT: {
        static const char *const names[] = {"sep", "maxsplit", NULL};
        check_args(&k, 2, names);
        ct_value sep = arg(&k, 0, "sep", ct_none());
        if (sep.kind != CT_NONE) need_str(&k, sep, "sep");
        return split(&k, self, sep, need_int(&k, arg(&k, 1, "maxsplit", ct_int(-1)), "maxsplit"));
    }
    case M_UPPER: check_args(&k, 0, NULL); return recase(c, self, CASE_UPPER);
    case M_LOWER: check_args(&k, 0, NULL); return recase(c, self, CASE_LOWER);
    case M_TITLE: check_args(&k, 0, NULL); return recase(c, self, CASE_TITLE);
    case M_CAPITALIZE: check_args(&k, 0, NULL); return recase(c, self, CASE_CAPITALIZE);
    case M_REPLACE: {
        static const char *const names[] = {"count", NULL};
        check_args(&k, 3, names);
        ct_value from = need_str(&k, arg(&k, 0, NULL, ct_undef()), "old");
        ct_value to = need_str(&k, arg(&k, 1, NULL, ct_undef()), "new");
        return replace(&k, self, from, to, need_int(&k, arg(&k, 2, "count", ct_int(-1)), "count"));
    }
    case M_ITEMS: check_args(&k, 0, NULL); return pairs(c, self.u.dict);
    case M_KEYS: case M_VALUES: {
        check_args(&k, 0, NULL);
        ct_value r = ct_list_new(c, self.u.dict->n);
        for (size_t i = 0; i < self.u.dict->n; i++)
            ct_list_push(c, r.u.list, n->op == M_KEYS ? self.u.dict->key[i] : self.u.dict->val[i]);
        return r;
    }
    case M_GET: {
        check_args(&k, 2, NULL);
        ct_value key = arg(&k, 0, NULL, ct_undef());
        if (key.kind == CT_UNDEF) ct_fail(c, RECUR_EINVAL, "line %zu: %s takes a key", n->line, what);
        const ct_value *v = key.kind == CT_STR ? ct_dict_get(self.u.dict, key.u.str.s, key.u.str.n) : NULL;
        return v ? *v : arg(&k, 1, NULL, ct_none());
    }
    }
    ct_fail(c, RECUR_EINVAL, "line %zu: unknown method", n->line);
}

/* ---------------------------------------------------------------- functions */

ct_value ct_call_function(ct_eval *e, const ct_node *n, const ct_value *args, const char **kw, size_t nargs)
{
    ct_ctx *c = e->c;
    char what[48];
    snprintf(what, sizeof what, "function '%s'", ct_function_names[n->op]);
    call k = {e, n, what, args, kw, nargs};
    switch (n->op) {
    case FN_RAISE_EXCEPTION: {
        check_args(&k, 1, NULL);
        ct_value msg = ct_to_str(c, arg(&k, 0, NULL, ct_str("", 0)));
        ct_fail(c, RECUR_EINVAL, "%.*s", (int)(msg.u.str.n > 4096 ? 4096 : msg.u.str.n), msg.u.str.s);
    }
    case FN_NAMESPACE: {
        size_t npos = 0; /* every keyword is an attribute; one positional dict at most */
        for (size_t i = 0; i < nargs; i++) npos += !kw[i];
        if (npos > 1) ct_fail(c, RECUR_EINVAL, "line %zu: namespace expected at most 1 positional argument", n->line);
        ct_value ns = ct_dict_new(c, CT_NS);
        ct_value init = arg(&k, 0, NULL, ct_undef());
        if (init.kind == CT_DICT)
            for (size_t i = 0; i < init.u.dict->n; i++)
                ct_dict_set(c, ns.u.dict, init.u.dict->key[i].u.str.s, init.u.dict->key[i].u.str.n, init.u.dict->val[i]);
        else if (init.kind != CT_UNDEF) wrong_type(&k, init);
        for (size_t i = 0; i < nargs; i++)
            if (kw[i]) ct_dict_set(c, ns.u.dict, kw[i], strlen(kw[i]), args[i]);
        return ns;
    }
    case FN_RANGE: {
        check_args(&k, 3, NULL);
        size_t np = 0;
        for (size_t i = 0; i < nargs; i++) np += !kw[i];
        if (np < 1) ct_fail(c, RECUR_EINVAL, "line %zu: range expected at least 1 argument", n->line);
        int64_t start = 0, stop, step = 1;
        if (np == 1) stop = need_int(&k, arg(&k, 0, NULL, ct_undef()), "stop");
        else {
            start = need_int(&k, arg(&k, 0, NULL, ct_undef()), "start");
            stop = need_int(&k, arg(&k, 1, NULL, ct_undef()), "stop");
            if (np == 3) step = need_int(&k, arg(&k, 2, NULL, ct_undef()), "step");
        }
        if (step == 0) ct_fail(c, RECUR_EINVAL, "line %zu: range() arg 3 must not be zero", n->line);
        ct_value r = ct_list_new(c, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (r.u.list->n >= RECUR_CHAT_MAX_LOOP_ITERATIONS)
                ct_fail(c, RECUR_ESHAPE, "line %zu: range() longer than RECUR_CHAT_MAX_LOOP_ITERATIONS (%d)", n->line,
                        RECUR_CHAT_MAX_LOOP_ITERATIONS);
            ct_list_push(c, r.u.list, ct_int(i));
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
        }
        return r;
    }
    case FN_STRFTIME_NOW: {
        /* transformers: datetime.now().strftime(format), local time */
        check_args(&k, 1, NULL);
        ct_value fmt = need_str(&k, arg(&k, 0, NULL, ct_undef()), "format");
        if (fmt.u.str.n > 256) ct_fail(c, RECUR_EINVAL, "line %zu: strftime_now: format longer than 256 bytes", n->line);
        char f[260], out[1024];
        memcpy(f, fmt.u.str.s, fmt.u.str.n);
        f[fmt.u.str.n] = 0;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t len = strftime(out, sizeof out, f, &tm);
        return ct_str_copy(c, out, len);
    }
    }
    ct_fail(c, RECUR_EINVAL, "line %zu: unknown function", n->line);
}
