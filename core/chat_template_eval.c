/* chat_template_eval.c — renders a parsed chat template (chat_template.h): statements, scopes,
 * operators, attribute and item access, slices, with Python Jinja's semantics (strict types,
 * undefined values that print as '' but fail on use). Every loop body run counts toward
 * RECUR_CHAT_MAX_LOOP_ITERATIONS; the output toward RECUR_CHAT_MAX_OUTPUT_BYTES; recursion toward
 * 16 x RECUR_CHAT_MAX_DEPTH frames. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chat_template.h"
#include "tokenizer.h" /* tk_utf8_next */

#define EVAL_MAX_FRAMES (16 * RECUR_CHAT_MAX_DEPTH)

struct ct_scope {
    ct_dict *vars;
    ct_scope *parent;
};

enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };

typedef struct {
    ct_eval *e;
    int flow;
} walker;

static ct_value eval(walker *W, ct_scope *s, const ct_node *n);
static void exec_block(walker *W, ct_scope *s, const ct_node *blk);

static void enter(walker *W, const ct_node *n)
{
    if (++W->e->depth > EVAL_MAX_FRAMES)
        ct_fail(W->e->c, RECUR_ESHAPE, "line %zu: evaluation nested deeper than 16 x RECUR_CHAT_MAX_DEPTH (%d)",
                n->line, EVAL_MAX_FRAMES);
}

static ct_scope *scope_new(walker *W, ct_scope *parent)
{
    ct_scope *s = ct_alloc(W->e->c, sizeof *s);
    s->vars = ct_dict_new(W->e->c, CT_DICT).u.dict;
    s->parent = parent;
    return s;
}

static ct_value lookup(ct_scope *s, const char *name, size_t n)
{
    for (; s; s = s->parent) {
        const ct_value *v = ct_dict_get(s->vars, name, n);
        if (v) return *v;
    }
    return ct_undef();
}

/* what an undefined operand was, for messages */
static void describe(const ct_node *n, char *buf, size_t len)
{
    if (n->kind == N_NAME) snprintf(buf, len, "'%s' is undefined", n->name);
    else if (n->kind == N_ATTR) snprintf(buf, len, "the attribute '%s' is undefined", n->name);
    else if (n->kind == N_ITEM) snprintf(buf, len, "an item lookup gave an undefined value");
    else snprintf(buf, len, "an undefined value");
}

__attribute__((noreturn)) static void fail_undefined(walker *W, const ct_node *operand, const char *use)
{
    char d[160];
    describe(operand, d, sizeof d);
    ct_fail(W->e->c, RECUR_EINVAL, "line %zu: %s (used in %s)", operand->line, d, use);
}

/* ---------------------------------------------------------------- access */

static ct_value get_item(walker *W, const ct_node *n, ct_value obj, ct_value key)
{
    ct_ctx *c = W->e->c;
    if (obj.kind == CT_UNDEF) fail_undefined(W, n->a, "an attribute or item lookup");
    if ((obj.kind == CT_DICT || obj.kind == CT_NS) && key.kind == CT_STR) {
        const ct_value *v = ct_dict_get(obj.u.dict, key.u.str.s, key.u.str.n);
        return v ? *v : ct_undef();
    }
    if ((obj.kind == CT_LIST || obj.kind == CT_STR) && (key.kind == CT_INT || key.kind == CT_BOOL)) {
        int64_t i = key.kind == CT_INT ? key.u.i : key.u.b;
        if (obj.kind == CT_LIST) {
            int64_t len = (int64_t)obj.u.list->n;
            if (i < 0) i += len;
            return i >= 0 && i < len ? obj.u.list->v[i] : ct_undef();
        }
        int64_t len = (int64_t)ct_utf8_count(obj.u.str.s, obj.u.str.n);
        if (i < 0) i += len;
        if (i < 0 || i >= len) return ct_undef();
        size_t at = 0;
        for (int64_t k = 0; k < i; k++) { uint32_t cp; at += tk_utf8_next(obj.u.str.s + at, &cp); }
        uint32_t cp;
        size_t l = tk_utf8_next(obj.u.str.s + at, &cp);
        return ct_str(obj.u.str.s + at, l);
    }
    (void)c;
    return ct_undef(); /* Jinja: a missing attribute or item is undefined */
}

/* Python's slice indices for a sequence of len items */
static void slice_bounds(walker *W, const ct_node *n, ct_scope *s, int64_t len, int64_t *start, int64_t *stop,
                         int64_t *step)
{
    ct_value v[3] = {ct_none(), ct_none(), ct_none()};
    const ct_node *parts[3] = {n->b, n->c, n->cond};
    for (int k = 0; k < 3; k++) {
        if (parts[k]) v[k] = eval(W, s, parts[k]);
        if (v[k].kind == CT_UNDEF) v[k] = ct_none();
        if (v[k].kind != CT_NONE && v[k].kind != CT_INT && v[k].kind != CT_BOOL)
            ct_fail(W->e->c, RECUR_EINVAL, "line %zu: slice indices must be integers or None, not '%s'", n->line,
                    ct_kind_name(v[k].kind));
    }
    *step = v[2].kind == CT_NONE ? 1 : v[2].kind == CT_INT ? v[2].u.i : v[2].u.b;
    if (*step == 0) ct_fail(W->e->c, RECUR_EINVAL, "line %zu: slice step cannot be zero", n->line);
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? len - 1 : len;
    for (int k = 0; k < 2; k++) {
        int64_t x;
        if (v[k].kind == CT_NONE) {
            x = (k == 0) == (*step > 0) ? lo : hi;
            if (k == 0) x = *step > 0 ? 0 : len - 1;
            else x = *step > 0 ? len : -1;
        } else {
            x = v[k].kind == CT_INT ? v[k].u.i : v[k].u.b;
            if (x < 0) { x += len; if (x < lo) x = lo; }
            else if (x > hi) x = hi;
        }
        if (k == 0) *start = x;
        else *stop = x;
    }
}

static ct_value eval_slice(walker *W, ct_scope *s, const ct_node *n)
{
    ct_ctx *c = W->e->c;
    ct_value obj = eval(W, s, n->a);
    if (obj.kind == CT_UNDEF) fail_undefined(W, n->a, "a slice");
    if (obj.kind != CT_LIST && obj.kind != CT_STR)
        ct_fail(c, RECUR_EINVAL, "line %zu: '%s' object is not subscriptable with a slice", n->line, ct_kind_name(obj.kind));
    if (obj.kind == CT_LIST) {
        int64_t start, stop, step;
        slice_bounds(W, n, s, (int64_t)obj.u.list->n, &start, &stop, &step);
        ct_value r = ct_list_new(c, 0);
        r.u.list->tuple = obj.u.list->tuple;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) ct_list_push(c, r.u.list, obj.u.list->v[i]);
        return r;
    }
    /* strings slice by code point */
    size_t n_cp = ct_utf8_count(obj.u.str.s, obj.u.str.n);
    size_t *off = ct_alloc(c, (n_cp + 1) * sizeof *off);
    size_t at = 0;
    for (size_t k = 0; k < n_cp; k++) { off[k] = at; uint32_t cp; at += tk_utf8_next(obj.u.str.s + at, &cp); }
    off[n_cp] = at;
    int64_t start, stop, step;
    slice_bounds(W, n, s, (int64_t)n_cp, &start, &stop, &step);
    if (step == 1) return start < stop ? ct_str(obj.u.str.s + off[start], off[stop] - off[start]) : ct_str("", 0);
    ct_out o = ct_scratch("a sliced string");
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        ct_out_put(c, &o, obj.u.str.s + off[i], off[i + 1] - off[i]);
    return ct_scratch_value(&o);
}

/* ---------------------------------------------------------------- operators */

static int is_num(ct_value v) { return v.kind == CT_INT || v.kind == CT_FLOAT || v.kind == CT_BOOL; }
static int is_intlike(ct_value v) { return v.kind == CT_INT || v.kind == CT_BOOL; }
static int64_t ival(ct_value v) { return v.kind == CT_INT ? v.u.i : v.u.b; }
static double fval(ct_value v) { return v.kind == CT_FLOAT ? v.u.f : (double)ival(v); }

static const char *op_spelling(int op)
{
    static const char *const s[] = {"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=",
                                    "in", "not in"};
    return s[op];
}

__attribute__((noreturn)) static void bad_operands(walker *W, const ct_node *n, ct_value a, ct_value b)
{
    ct_fail(W->e->c, RECUR_EINVAL, "line %zu: unsupported operand type(s) for %s: '%s' and '%s'", n->line,
            op_spelling(n->op), ct_kind_name(a.kind), ct_kind_name(b.kind));
}

static ct_value repeat(walker *W, const ct_node *n, ct_value seq, int64_t times)
{
    ct_ctx *c = W->e->c;
    if (times < 0) times = 0;
    if (seq.kind == CT_STR) {
        if (seq.u.str.n && (uint64_t)times > RECUR_CHAT_MAX_OUTPUT_BYTES / seq.u.str.n)
            ct_fail(c, RECUR_ESHAPE, "line %zu: a repeated string longer than RECUR_CHAT_MAX_OUTPUT_BYTES (%u)", n->line,
                    RECUR_CHAT_MAX_OUTPUT_BYTES);
        size_t len = seq.u.str.n * (size_t)times;
        char *p = ct_alloc(c, len + 1);
        for (int64_t k = 0; k < times; k++) memcpy(p + (size_t)k * seq.u.str.n, seq.u.str.s, seq.u.str.n);
        return ct_str(p, len);
    }
    if (seq.u.list->n && (uint64_t)times > RECUR_CHAT_MAX_LOOP_ITERATIONS / seq.u.list->n)
        ct_fail(c, RECUR_ESHAPE, "line %zu: a repeated list longer than RECUR_CHAT_MAX_LOOP_ITERATIONS (%d)", n->line,
                RECUR_CHAT_MAX_LOOP_ITERATIONS);
    ct_value r = ct_list_new(c, seq.u.list->n * (size_t)times);
    r.u.list->tuple = seq.u.list->tuple;
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < seq.u.list->n; i++) ct_list_push(c, r.u.list, seq.u.list->v[i]);
    return r;
}

static int contains(walker *W, const ct_node *n, ct_value x, ct_value in)
{
    switch (in.kind) {
    case CT_UNDEF: return 0;
    case CT_STR:
        if (x.kind != CT_STR)
            ct_fail(W->e->c, RECUR_EINVAL, "line %zu: 'in <string>' requires string as left operand, not %s", n->line,
                    ct_kind_name(x.kind));
        if (!x.u.str.n) return 1;
        return memmem(in.u.str.s, in.u.str.n, x.u.str.s, x.u.str.n) != NULL;
    case CT_LIST:
        for (size_t i = 0; i < in.u.list->n; i++)
            if (ct_equal(x, in.u.list->v[i])) return 1;
        return 0;
    case CT_DICT:
        return x.kind == CT_STR && ct_dict_get(in.u.dict, x.u.str.s, x.u.str.n) != NULL;
    default:
        ct_fail(W->e->c, RECUR_EINVAL, "line %zu: argument of type '%s' is not iterable", n->line, ct_kind_name(in.kind));
    }
}

static ct_value arith(walker *W, const ct_node *n, ct_value a, ct_value b)
{
    ct_ctx *c = W->e->c;
    int op = n->op;
    if (a.kind == CT_UNDEF) fail_undefined(W, n->a, op_spelling(op));
    if (b.kind == CT_UNDEF) fail_undefined(W, n->b, op_spelling(op));
    if (op == OP_ADD && a.kind == CT_STR && b.kind == CT_STR) {
        if (a.u.str.n + b.u.str.n > RECUR_CHAT_MAX_OUTPUT_BYTES)
            ct_fail(c, RECUR_ESHAPE, "line %zu: a string longer than RECUR_CHAT_MAX_OUTPUT_BYTES (%u)", n->line,
                    RECUR_CHAT_MAX_OUTPUT_BYTES);
        char *p = ct_alloc(c, a.u.str.n + b.u.str.n + 1);
        memcpy(p, a.u.str.s, a.u.str.n);
        memcpy(p + a.u.str.n, b.u.str.s, b.u.str.n);
        return ct_str(p, a.u.str.n + b.u.str.n);
    }
    if (op == OP_ADD && a.kind == CT_LIST && b.kind == CT_LIST && a.u.list->tuple == b.u.list->tuple) {
        ct_value r = ct_list_new(c, a.u.list->n + b.u.list->n);
        r.u.list->tuple = a.u.list->tuple;
        for (size_t i = 0; i < a.u.list->n; i++) ct_list_push(c, r.u.list, a.u.list->v[i]);
        for (size_t i = 0; i < b.u.list->n; i++) ct_list_push(c, r.u.list, b.u.list->v[i]);
        return r;
    }
    if (op == OP_MUL && (a.kind == CT_STR || a.kind == CT_LIST) && is_intlike(b)) return repeat(W, n, a, ival(b));
    if (op == OP_MUL && (b.kind == CT_STR || b.kind == CT_LIST) && is_intlike(a)) return repeat(W, n, b, ival(a));
    if (!is_num(a) || !is_num(b)) bad_operands(W, n, a, b);
    int ints = is_intlike(a) && is_intlike(b);
    if (ints && op != OP_DIV) {
        int64_t x = ival(a), y = ival(b), r = 0;
        int overflow = 0;
        switch (op) {
        case OP_ADD: overflow = __builtin_add_overflow(x, y, &r); break;
        case OP_SUB: overflow = __builtin_sub_overflow(x, y, &r); break;
        case OP_MUL: overflow = __builtin_mul_overflow(x, y, &r); break;
        case OP_FLOORDIV: case OP_MOD:
            if (y == 0) ct_fail(c, RECUR_EINVAL, "line %zu: integer division or modulo by zero", n->line);
            if (x == INT64_MIN && y == -1) { overflow = 1; break; }
            /* Python rounds the quotient toward -infinity; the remainder takes the divisor's sign */
            if (op == OP_FLOORDIV) r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
            else { r = x % y; if (r != 0 && ((r < 0) != (y < 0))) r += y; }
            break;
        case OP_POW:
            if (y < 0) return ct_float(pow((double)x, (double)y));
            r = 1;
            for (int64_t k = 0; k < y && !overflow; k++) overflow = __builtin_mul_overflow(r, x, &r);
            break;
        }
        if (overflow) ct_fail(c, RECUR_ERANGE, "line %zu: integer overflow in '%s' (64-bit integers)", n->line, op_spelling(op));
        return ct_int(r);
    }
    double x = fval(a), y = fval(b);
    switch (op) {
    case OP_ADD: return ct_float(x + y);
    case OP_SUB: return ct_float(x - y);
    case OP_MUL: return ct_float(x * y);
    case OP_DIV:
        if (y == 0) ct_fail(c, RECUR_EINVAL, "line %zu: division by zero", n->line);
        return ct_float(x / y);
    case OP_FLOORDIV:
        if (y == 0) ct_fail(c, RECUR_EINVAL, "line %zu: float floor division by zero", n->line);
        return ct_float(floor(x / y));
    case OP_MOD: {
        if (y == 0) ct_fail(c, RECUR_EINVAL, "line %zu: float modulo", n->line);
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        if (r == 0) r = copysign(0.0, y); /* Python: a zero remainder takes the divisor's sign */
        return ct_float(r);
    }
    case OP_POW: return ct_float(pow(x, y));
    }
    bad_operands(W, n, a, b);
}

static ct_value eval_binary(walker *W, ct_scope *s, const ct_node *n)
{
    ct_value a = eval(W, s, n->a), b = eval(W, s, n->b);
    switch (n->op) {
    case OP_EQ: return ct_bool(ct_equal(a, b));
    case OP_NE: return ct_bool(!ct_equal(a, b));
    case OP_LT: case OP_LE: case OP_GT: case OP_GE: {
        if (a.kind == CT_UNDEF) fail_undefined(W, n->a, op_spelling(n->op));
        if (b.kind == CT_UNDEF) fail_undefined(W, n->b, op_spelling(n->op));
        int r = ct_compare(W->e->c, a, b, op_spelling(n->op));
        return ct_bool(n->op == OP_LT ? r < 0 : n->op == OP_LE ? r <= 0 : n->op == OP_GT ? r > 0 : r >= 0);
    }
    case OP_IN: return ct_bool(contains(W, n, a, b));
    case OP_NOT_IN: return ct_bool(!contains(W, n, a, b));
    case OP_CONCAT: {
        ct_value x = ct_to_str(W->e->c, a), y = ct_to_str(W->e->c, b);
        ct_node fake = *n;
        fake.op = OP_ADD;
        return arith(W, &fake, x, y);
    }
    default: return arith(W, n, a, b);
    }
}

/* ---------------------------------------------------------------- calls */

static ct_value eval_call(walker *W, ct_scope *s, const ct_node *n, ct_value *self)
{
    ct_value *args = n->nkid ? ct_alloc(W->e->c, n->nkid * sizeof *args) : NULL;
    for (size_t i = 0; i < n->nkid; i++) args[i] = eval(W, s, n->kid[i]);
    if (n->kind == N_FILTER) return ct_apply_filter(W->e, n, *self, args, n->kw, n->nkid);
    if (n->kind == N_METHOD) {
        if (self->kind == CT_UNDEF) fail_undefined(W, n->a, "a method call");
        return ct_call_method(W->e, n, *self, args, n->kw, n->nkid);
    }
    return ct_call_function(W->e, n, args, n->kw, n->nkid);
}

/* ---------------------------------------------------------------- expressions */

static ct_value eval(walker *W, ct_scope *s, const ct_node *n)
{
    ct_ctx *c = W->e->c;
    enter(W, n);
    ct_value r;
    switch (n->kind) {
    case N_LITERAL: r = n->lit; break;
    case N_NAME: r = lookup(s, n->name, n->name_n); break;
    case N_LIST:
        r = ct_list_new(c, n->nkid);
        r.u.list->tuple = n->op;
        for (size_t i = 0; i < n->nkid; i++) ct_list_push(c, r.u.list, eval(W, s, n->kid[i]));
        break;
    case N_DICT:
        r = ct_dict_new(c, CT_DICT);
        for (size_t i = 0; i + 1 < n->nkid; i += 2) {
            ct_value k = eval(W, s, n->kid[i]);
            if (k.kind != CT_STR)
                ct_fail(c, RECUR_EINVAL, "line %zu: dict keys must be strings here, not '%s'", n->line, ct_kind_name(k.kind));
            ct_dict_set(c, r.u.dict, k.u.str.s, k.u.str.n, eval(W, s, n->kid[i + 1]));
        }
        break;
    case N_ATTR: {
        ct_value obj = eval(W, s, n->a);
        r = get_item(W, n, obj, ct_str(n->name, n->name_n));
        break;
    }
    case N_ITEM: {
        ct_value obj = eval(W, s, n->a);
        r = get_item(W, n, obj, eval(W, s, n->b));
        break;
    }
    case N_SLICE: r = eval_slice(W, s, n); break;
    case N_NOT: r = ct_bool(!ct_truthy(eval(W, s, n->a))); break;
    case N_NEG: case N_POS: {
        ct_value v = eval(W, s, n->a);
        if (v.kind == CT_UNDEF) fail_undefined(W, n->a, "a unary sign");
        if (!is_num(v)) ct_fail(c, RECUR_EINVAL, "line %zu: bad operand type for unary %c: '%s'", n->line,
                                n->kind == N_NEG ? '-' : '+', ct_kind_name(v.kind));
        if (n->kind == N_POS) r = v.kind == CT_FLOAT ? v : ct_int(ival(v));
        else if (v.kind == CT_FLOAT) r = ct_float(-v.u.f);
        else if (ival(v) == INT64_MIN) ct_fail(c, RECUR_ERANGE, "line %zu: integer overflow in unary -", n->line);
        else r = ct_int(-ival(v));
        break;
    }
    case N_BINARY: r = eval_binary(W, s, n); break;
    case N_AND: { ct_value a = eval(W, s, n->a); r = ct_truthy(a) ? eval(W, s, n->b) : a; break; }
    case N_OR: { ct_value a = eval(W, s, n->a); r = ct_truthy(a) ? a : eval(W, s, n->b); break; }
    case N_COND:
        if (ct_truthy(eval(W, s, n->a))) r = eval(W, s, n->b);
        else r = n->c ? eval(W, s, n->c) : ct_undef();
        break;
    case N_FILTER: case N_METHOD: {
        ct_value self = eval(W, s, n->a);
        r = eval_call(W, s, n, &self);
        break;
    }
    case N_TEST: r = ct_bool(ct_apply_test(W->e, n, eval(W, s, n->a)) != n->neg); break;
    case N_CALL: r = eval_call(W, s, n, NULL); break;
    default: ct_fail(c, RECUR_EINVAL, "line %zu: a statement where an expression belongs", n->line);
    }
    W->e->depth--;
    return r;
}

/* ---------------------------------------------------------------- statements */

static void assign(walker *W, ct_scope *s, const ct_node *n, ct_value v)
{
    ct_ctx *c = W->e->c;
    if (n->ntarget == 1) {
        ct_dict_set(c, s->vars, n->target[0], strlen(n->target[0]), v);
        return;
    }
    if (v.kind != CT_LIST)
        ct_fail(c, RECUR_EINVAL, "line %zu: cannot unpack a '%s' into %zu names", n->line, ct_kind_name(v.kind), n->ntarget);
    if (v.u.list->n != n->ntarget)
        ct_fail(c, RECUR_EINVAL, "line %zu: %s values to unpack (expected %zu, got %zu)", n->line,
                v.u.list->n > n->ntarget ? "too many" : "not enough", n->ntarget, v.u.list->n);
    for (size_t i = 0; i < n->ntarget; i++) ct_dict_set(c, s->vars, n->target[i], strlen(n->target[i]), v.u.list->v[i]);
}

/* the items a for-loop runs over: a list's items, a dict's keys, a string's characters */
static ct_list *iterate(walker *W, const ct_node *n, ct_value v)
{
    ct_ctx *c = W->e->c;
    ct_value r;
    switch (v.kind) {
    case CT_UNDEF: return ct_list_new(c, 0).u.list;
    case CT_LIST: return v.u.list;
    case CT_DICT:
        r = ct_list_new(c, v.u.dict->n);
        for (size_t i = 0; i < v.u.dict->n; i++) ct_list_push(c, r.u.list, v.u.dict->key[i]);
        return r.u.list;
    case CT_STR: {
        r = ct_list_new(c, 0);
        size_t at = 0;
        while (at < v.u.str.n) {
            uint32_t cp;
            size_t l = tk_utf8_next(v.u.str.s + at, &cp);
            ct_list_push(c, r.u.list, ct_str(v.u.str.s + at, l));
            at += l;
        }
        return r.u.list;
    }
    default:
        ct_fail(c, RECUR_EINVAL, "line %zu: '%s' object is not iterable", n->line, ct_kind_name(v.kind));
    }
}

static void count_iteration(walker *W, const ct_node *n)
{
    if (++W->e->iterations > RECUR_CHAT_MAX_LOOP_ITERATIONS)
        ct_fail(W->e->c, RECUR_ESHAPE, "line %zu: more than RECUR_CHAT_MAX_LOOP_ITERATIONS (%d) loop iterations",
                n->line, RECUR_CHAT_MAX_LOOP_ITERATIONS);
}

static void exec_for(walker *W, ct_scope *s, const ct_node *n)
{
    ct_ctx *c = W->e->c;
    ct_list *all = iterate(W, n, eval(W, s, n->a));
    ct_scope *body = scope_new(W, s);
    ct_list *items = all;
    if (n->cond) { /* for x in xs if cond: the filter runs first; loop.* counts the kept items */
        items = ct_list_new(c, 0).u.list;
        for (size_t i = 0; i < all->n; i++) {
            count_iteration(W, n);
            assign(W, body, n, all->v[i]);
            if (ct_truthy(eval(W, body, n->cond))) ct_list_push(c, items, all->v[i]);
        }
    }
    size_t len = items->n;
    /* one loop object per for-statement, updated in place: a million iterations allocate nothing */
    ct_value loop = ct_dict_new(c, CT_DICT);
    ct_dict *d = loop.u.dict;
    for (size_t i = 0; i < len; i++) {
        count_iteration(W, n);
        ct_dict_set(c, d, "index", 5, ct_int((int64_t)i + 1));
        ct_dict_set(c, d, "index0", 6, ct_int((int64_t)i));
        ct_dict_set(c, d, "revindex", 8, ct_int((int64_t)(len - i)));
        ct_dict_set(c, d, "revindex0", 9, ct_int((int64_t)(len - i - 1)));
        ct_dict_set(c, d, "first", 5, ct_bool(i == 0));
        ct_dict_set(c, d, "last", 4, ct_bool(i + 1 == len));
        ct_dict_set(c, d, "length", 6, ct_int((int64_t)len));
        ct_dict_set(c, d, "previtem", 8, i ? items->v[i - 1] : ct_undef());
        ct_dict_set(c, d, "nextitem", 8, i + 1 < len ? items->v[i + 1] : ct_undef());
        ct_dict_set(c, body->vars, "loop", 4, loop);
        assign(W, body, n, items->v[i]);
        exec_block(W, body, n->b);
        int flow = W->flow;
        W->flow = FLOW_NONE;
        if (flow == FLOW_BREAK) break;
    }
    if (!len && n->c) exec_block(W, s, n->c);
}

static void exec_stmt(walker *W, ct_scope *s, const ct_node *n)
{
    ct_eval *e = W->e;
    ct_ctx *c = e->c;
    switch (n->kind) {
    case N_BLOCK: exec_block(W, s, n); return;
    case N_TEXT: ct_out_put(c, &e->out, n->lit.u.str.s, n->lit.u.str.n); return;
    case N_OUTPUT: ct_out_str(c, &e->out, eval(W, s, n->a)); return;
    case N_IF:
        if (ct_truthy(eval(W, s, n->a))) exec_block(W, s, n->b);
        else if (n->c) exec_block(W, s, n->c);
        return;
    case N_FOR: exec_for(W, s, n); return;
    case N_SET: assign(W, s, n, eval(W, s, n->a)); return;
    case N_SET_ATTR: {
        ct_value ns = lookup(s, n->target[0], strlen(n->target[0]));
        if (ns.kind != CT_NS)
            ct_fail(c, RECUR_EINVAL, "line %zu: cannot assign attribute on non-namespace object '%s' ('%s')", n->line,
                    n->target[0], ct_kind_name(ns.kind));
        ct_dict_set(c, ns.u.dict, n->name, n->name_n, eval(W, s, n->a));
        return;
    }
    case N_SET_BLOCK: {
        size_t mark = e->out.n;
        exec_block(W, s, n->b);
        ct_value v = ct_str_copy(c, e->out.p + mark, e->out.n - mark);
        e->out.n = mark;
        if (e->out.p) e->out.p[mark] = 0;
        ct_dict_set(c, s->vars, n->target[0], strlen(n->target[0]), v);
        return;
    }
    case N_BREAK: W->flow = FLOW_BREAK; return;
    case N_CONTINUE: W->flow = FLOW_CONTINUE; return;
    default: ct_fail(c, RECUR_EINVAL, "line %zu: an expression where a statement belongs", n->line);
    }
}

static void exec_block(walker *W, ct_scope *s, const ct_node *blk)
{
    enter(W, blk);
    for (size_t i = 0; i < blk->nkid && W->flow == FLOW_NONE; i++) exec_stmt(W, s, blk->kid[i]);
    W->e->depth--;
}

void ct_render(ct_eval *e, const ct_node *root, ct_dict *globals)
{
    walker W = {.e = e};
    ct_scope *top = ct_alloc(e->c, sizeof *top);
    top->vars = globals;
    ct_scope *s = scope_new(&W, top); /* the template's own assignments shadow, never change, globals */
    exec_block(&W, s, root);
}
