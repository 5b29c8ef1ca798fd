/* chat_template_parse.c — tokens -> AST (chat_template.h), by recursive descent with Jinja's
 * precedence (lowest first): conditional `a if b else c`, or, and, not, comparisons and
 * (not) in, + -, ~, * / // %, **, unary - +, then postfix: .attr [item] [slice] (call)
 * |filter `is test`. Every statement, filter, test, method or function the interpreter does not
 * implement is refused here, by name, so a template either renders as Jinja would or fails to
 * load. Nesting is bounded by RECUR_CHAT_MAX_DEPTH. */
#include <stdio.h>
#include <string.h>

#include "chat_template.h"

const char *const ct_filter_names[F_COUNT_] = {
    "trim", "length", "tojson", "upper", "lower", "capitalize", "title", "default", "join", "replace",
    "string", "first", "last", "items", "list", "reverse", "int", "float", "abs", "indent",
    "dictsort"};
const char *const ct_test_names[TS_COUNT_] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true",
    "false", "mapping", "iterable", "sequence", "odd", "even", "lower", "upper"};
const char *const ct_method_names[M_COUNT_] = {
    "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "upper", "lower", "title",
    "capitalize", "replace", "items", "keys", "values", "get"};
const char *const ct_function_names[FN_COUNT_] = {"raise_exception", "namespace", "range", "strftime_now"};

typedef struct {
    ct_ctx *c;
    const ct_tok *t;
    size_t n, i;
    int depth;
    int loops; /* for-loops around the statement being parsed (break / continue need one) */
} parser;

static const ct_tok *peek(parser *P) { return &P->t[P->i]; }
static const ct_tok *next(parser *P) { const ct_tok *t = &P->t[P->i]; if (t->kind != T_EOF) P->i++; return t; }

static int is_name(const ct_tok *t, const char *s) { return t->kind == T_NAME && t->n == strlen(s) && !memcmp(t->s, s, t->n); }
static int is_op(const ct_tok *t, const char *s) { return t->kind == T_OP && t->n == strlen(s) && !memcmp(t->s, s, t->n); }

static const char *describe(const ct_tok *t)
{
    switch (t->kind) {
    case T_EOF: return "the end of the template";
    case T_TEXT: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: return NULL;
    }
}

__attribute__((noreturn)) static void unexpected(parser *P, const char *wanted)
{
    const ct_tok *t = peek(P);
    const char *d = describe(t);
    if (d) ct_fail(P->c, RECUR_EFORMAT, "line %zu: expected %s, found %s", t->line, wanted, d);
    ct_fail(P->c, RECUR_EFORMAT, "line %zu: expected %s, found '%.*s'", t->line, wanted, (int)t->n, t->s);
}

static void expect_op(parser *P, const char *op)
{
    if (!is_op(peek(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
    next(P);
}

static void expect_kind(parser *P, ct_tok_kind k, const char *what)
{
    if (peek(P)->kind != k) unexpected(P, what);
    next(P);
}

static void enter(parser *P)
{
    if (++P->depth > RECUR_CHAT_MAX_DEPTH)
        ct_fail(P->c, RECUR_EFORMAT, "line %zu: nested deeper than RECUR_CHAT_MAX_DEPTH (%d)", peek(P)->line,
                RECUR_CHAT_MAX_DEPTH);
}
static void leave(parser *P) { P->depth--; }

static ct_node *node(parser *P, ct_node_kind k)
{
    ct_node *n = ct_alloc(P->c, sizeof *n);
    n->kind = k;
    n->line = peek(P)->line;
    return n;
}

/* a growable array of child nodes while parsing */
typedef struct { ct_node **v; const char **kw; size_t n, cap; } kids;
static void kids_add(parser *P, kids *k, ct_node *x, const char *kw)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 8;
        ct_node **v = ct_alloc(P->c, cap * sizeof *v);
        const char **w = ct_alloc(P->c, cap * sizeof *w);
        if (k->n) { memcpy(v, k->v, k->n * sizeof *v); memcpy(w, k->kw, k->n * sizeof *w); }
        k->v = v;
        k->kw = w;
        k->cap = cap;
    }
    k->v[k->n] = x;
    k->kw[k->n++] = kw;
}

static int lookup(const char *const *names, int count, const ct_tok *t)
{
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == t->n && !memcmp(names[i], t->s, t->n)) return i;
    return -1;
}

static ct_node *parse_expr(parser *P);
static ct_node *parse_or(parser *P);
static ct_node *parse_unary(parser *P);

/* ( args ) after the '(' was seen: positional and name=value arguments */
static void parse_args(parser *P, ct_node *call)
{
    kids k = {0};
    next(P); /* ( */
    while (!is_op(peek(P), ")")) {
        if (k.n) expect_op(P, ",");
        if (is_op(peek(P), ")")) break; /* trailing comma */
        const char *kw = NULL;
        if (peek(P)->kind == T_NAME && is_op(&P->t[P->i + 1], "=")) {
            kw = ct_strdup(P->c, peek(P)->s, peek(P)->n);
            next(P);
            next(P);
        } else if (is_op(peek(P), "*")) {
            ct_fail(P->c, RECUR_EFORMAT, "line %zu: argument unpacking (*args / **kwargs) is not supported", peek(P)->line);
        }
        kids_add(P, &k, parse_expr(P), kw);
    }
    next(P); /* ) */
    call->kid = k.v;
    call->kw = k.kw;
    call->nkid = k.n;
}

/* [a, b] or {k: v, ...} after its opening bracket; a trailing comma is allowed */
static ct_node *parse_display(parser *P, const char *close, ct_node_kind kind)
{
    next(P);
    enter(P);
    kids k = {0};
    while (!is_op(peek(P), close)) {
        if (k.n) expect_op(P, ",");
        if (is_op(peek(P), close)) break;
        kids_add(P, &k, parse_expr(P), NULL);
        if (kind == N_DICT) {
            expect_op(P, ":");
            kids_add(P, &k, parse_expr(P), NULL);
        }
    }
    next(P);
    leave(P);
    ct_node *n = node(P, kind);
    n->kid = k.v;
    n->nkid = k.n;
    return n;
}

static ct_node *parse_primary(parser *P)
{
    const ct_tok *t = peek(P);
    ct_node *n;
    switch (t->kind) {
    case T_STRING: {
        /* adjacent string literals concatenate, as in Python */
        n = node(P, N_LITERAL);
        size_t total = 0, j = P->i;
        while (P->t[j].kind == T_STRING) total += P->t[j++].n;
        char *s = ct_alloc(P->c, total + 1);
        size_t at = 0;
        while (peek(P)->kind == T_STRING) { memcpy(s + at, peek(P)->s, peek(P)->n); at += peek(P)->n; next(P); }
        n->lit = ct_str(s, total);
        return n;
    }
    case T_INT: n = node(P, N_LITERAL); n->lit = ct_int(next(P)->i); return n;
    case T_FLOAT: n = node(P, N_LITERAL); n->lit = ct_float(next(P)->f); return n;
    case T_NAME:
        n = node(P, N_LITERAL);
        if (is_name(t, "true") || is_name(t, "True")) { next(P); n->lit = ct_bool(1); return n; }
        if (is_name(t, "false") || is_name(t, "False")) { next(P); n->lit = ct_bool(0); return n; }
        if (is_name(t, "none") || is_name(t, "None")) { next(P); n->lit = ct_none(); return n; }
        n->kind = N_NAME;
        n->name = ct_strdup(P->c, t->s, t->n);
        n->name_n = t->n;
        next(P);
        if (is_op(peek(P), "(")) {
            int fn = lookup(ct_function_names, FN_COUNT_, t);
            if (fn < 0)
                ct_fail(P->c, RECUR_EFORMAT, "line %zu: function '%.*s' is not supported (no macros; functions: "
                        "raise_exception, namespace, range, strftime_now)", t->line, (int)t->n, t->s);
            n->kind = N_CALL;
            n->op = fn;
            parse_args(P, n);
        }
        return n;
    case T_OP:
        if (is_op(t, "(")) {
            next(P);
            enter(P);
            if (is_op(peek(P), ")")) { next(P); leave(P); n = node(P, N_LIST); n->op = 1; return n; } /* () */
            ct_node *e = parse_expr(P);
            if (is_op(peek(P), ",")) { /* a tuple: a list to this interpreter */
                kids k = {0};
                kids_add(P, &k, e, NULL);
                while (is_op(peek(P), ",")) {
                    next(P);
                    if (is_op(peek(P), ")")) break;
                    kids_add(P, &k, parse_expr(P), NULL);
                }
                e = node(P, N_LIST);
                e->op = 1; /* a tuple */
                e->kid = k.v;
                e->nkid = k.n;
            }
            expect_op(P, ")");
            leave(P);
            return e;
        }
        if (is_op(t, "[")) return parse_display(P, "]", N_LIST);
        if (is_op(t, "{")) return parse_display(P, "}", N_DICT);
        break;
    default: break;
    }
    unexpected(P, "an expression");
}

static ct_node *parse_subscript(parser *P, ct_node *obj)
{
    next(P); /* [ */
    enter(P);
    ct_node *parts[3] = {NULL, NULL, NULL};
    int colons = 0;
    for (;;) {
        if (is_op(peek(P), ":")) {
            if (++colons > 2) unexpected(P, "']'");
            next(P);
            continue;
        }
        if (is_op(peek(P), "]")) break;
        if (parts[colons]) unexpected(P, "':' or ']'");
        parts[colons] = parse_expr(P);
    }
    next(P);
    leave(P);
    ct_node *n;
    if (colons == 0) {
        if (!parts[0]) unexpected(P, "an index");
        n = node(P, N_ITEM);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    n = node(P, N_SLICE);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->cond = parts[2];
    return n;
}

/* .attr [item] .method(), left to right; with_filter: then |filter and `is test` too. Jinja
 * applies a unary sign before filters: -3|abs is abs(-3), -x.y is -(x.y). */
static ct_node *parse_postfix(parser *P, ct_node *n, int with_filter)
{
    for (;;) {
        const ct_tok *t = peek(P);
        if ((is_op(t, "|") || is_name(t, "is")) && !with_filter) return n;
        if (is_op(t, ".")) {
            next(P);
            const ct_tok *a = peek(P);
            if (a->kind == T_INT) { /* x.0 is x[0] in Jinja */
                ct_node *it = node(P, N_ITEM);
                it->a = n;
                it->b = node(P, N_LITERAL);
                it->b->lit = ct_int(next(P)->i);
                n = it;
                continue;
            }
            if (a->kind != T_NAME) unexpected(P, "an attribute name");
            next(P);
            if (is_op(peek(P), "(")) {
                int m = lookup(ct_method_names, M_COUNT_, a);
                if (m < 0)
                    ct_fail(P->c, RECUR_EFORMAT, "line %zu: method '.%.*s()' is not supported", a->line, (int)a->n, a->s);
                ct_node *call = node(P, N_METHOD);
                call->op = m;
                call->a = n;
                call->name = ct_method_names[m];
                parse_args(P, call);
                n = call;
                continue;
            }
            ct_node *at = node(P, N_ATTR);
            at->a = n;
            at->name = ct_strdup(P->c, a->s, a->n);
            at->name_n = a->n;
            n = at;
        } else if (is_op(t, "[")) {
            n = parse_subscript(P, n);
        } else if (is_op(t, "(")) {
            ct_fail(P->c, RECUR_EFORMAT, "line %zu: calling the result of an expression is not supported", t->line);
        } else if (is_op(t, "|")) {
            next(P);
            const ct_tok *f = peek(P);
            if (f->kind != T_NAME) unexpected(P, "a filter name");
            int id = lookup(ct_filter_names, F_COUNT_, f);
            if (id < 0 && (f->n == 1 && f->s[0] == 'd')) id = F_DEFAULT;
            if (id < 0 && (f->n == 5 && !memcmp(f->s, "count", 5))) id = F_LENGTH;
            if (id < 0) ct_fail(P->c, RECUR_EFORMAT, "line %zu: filter '%.*s' is not supported", f->line, (int)f->n, f->s);
            next(P);
            ct_node *fl = node(P, N_FILTER);
            fl->op = id;
            fl->a = n;
            if (is_op(peek(P), "(")) parse_args(P, fl);
            n = fl;
        } else if (is_name(t, "is")) {
            next(P);
            ct_node *ts = node(P, N_TEST);
            if (is_name(peek(P), "not")) { next(P); ts->neg = 1; }
            const ct_tok *f = peek(P);
            int id = -1;
            if (f->kind == T_NAME) id = lookup(ct_test_names, TS_COUNT_, f);
            if (f->kind == T_NAME && id < 0)
                ct_fail(P->c, RECUR_EFORMAT, "line %zu: test '%.*s' is not supported", f->line, (int)f->n, f->s);
            if (id < 0) unexpected(P, "a test name");
            next(P);
            if (is_op(peek(P), "(") || peek(P)->kind == T_STRING || peek(P)->kind == T_INT)
                ct_fail(P->c, RECUR_EFORMAT, "line %zu: tests with arguments are not supported ('is %.*s ...')",
                        f->line, (int)f->n, f->s);
            ts->op = id;
            ts->a = n;
            n = ts;
        } else {
            return n;
        }
    }
}

static ct_node *parse_unary_signed(parser *P, int with_filter)
{
    const ct_tok *t = peek(P);
    ct_node *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        enter(P);
        n = node(P, is_op(t, "-") ? N_NEG : N_POS);
        n->a = parse_unary_signed(P, 0);
        leave(P);
    } else {
        n = parse_postfix(P, parse_primary(P), 0);
    }
    return with_filter ? parse_postfix(P, n, 1) : n;
}

static ct_node *parse_unary(parser *P) { return parse_unary_signed(P, 1); }

static ct_node *binary(parser *P, int op, ct_node *a, ct_node *b)
{
    ct_node *n = node(P, N_BINARY);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* left-associative chains count toward the nesting bound: the evaluator recurses on them */
static ct_node *chain(parser *P, ct_node *n, int *links)
{
    if (++*links > RECUR_CHAT_MAX_DEPTH * 4)
        ct_fail(P->c, RECUR_EFORMAT, "line %zu: an operator chain longer than 4 x RECUR_CHAT_MAX_DEPTH (%d)",
                peek(P)->line, RECUR_CHAT_MAX_DEPTH * 4);
    return n;
}

/* the arithmetic levels, loosest first (Jinja's math1, concat, math2, pow); all left-associative */
static const struct {
    const char *spell[4];
    int op[4];
} levels[] = {
    {{"+", "-"}, {OP_ADD, OP_SUB}},
    {{"~"}, {OP_CONCAT}},
    {{"*", "/", "//", "%"}, {OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD}},
    {{"**"}, {OP_POW}},
};

static ct_node *parse_arith(parser *P, size_t level)
{
    if (level == sizeof levels / sizeof *levels) return parse_unary(P);
    ct_node *n = parse_arith(P, level + 1);
    int links = 0;
    for (;;) {
        int op = -1;
        for (int k = 0; k < 4 && levels[level].spell[k]; k++)
            if (is_op(peek(P), levels[level].spell[k])) op = levels[level].op[k];
        if (op < 0) return n;
        next(P);
        n = chain(P, binary(P, op, n, parse_arith(P, level + 1)), &links);
    }
}

static ct_node *parse_compare(parser *P)
{
    ct_node *n = parse_arith(P, 0);
    int links = 0;
    for (;;) {
        const ct_tok *t = peek(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
               : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : -1;
        if (op < 0 && is_name(t, "not") && is_name(&P->t[P->i + 1], "in")) { next(P); op = OP_NOT_IN; }
        if (op < 0) return n;
        if (links) /* a < b < c means a < b and b < c in Jinja */
            ct_fail(P->c, RECUR_EFORMAT, "line %zu: chained comparisons (a < b < c) are not supported", t->line);
        next(P);
        n = chain(P, binary(P, op, n, parse_arith(P, 0)), &links);
    }
}

static ct_node *parse_not(parser *P)
{
    if (is_name(peek(P), "not")) {
        next(P);
        enter(P);
        ct_node *n = node(P, N_NOT);
        n->a = parse_not(P);
        leave(P);
        return n;
    }
    return parse_compare(P);
}

/* `and` binds tighter than `or`: parse_logic(P, 1) is a chain of `or` over chains of `and` */
static ct_node *parse_logic(parser *P, int is_or)
{
    ct_node *n = is_or ? parse_logic(P, 0) : parse_not(P);
    int links = 0;
    while (is_name(peek(P), is_or ? "or" : "and")) {
        next(P);
        ct_node *x = node(P, is_or ? N_OR : N_AND);
        x->a = n;
        x->b = is_or ? parse_logic(P, 0) : parse_not(P);
        n = chain(P, x, &links);
    }
    return n;
}

static ct_node *parse_or(parser *P) { return parse_logic(P, 1); }

static ct_node *parse_expr(parser *P)
{
    enter(P);
    ct_node *n = parse_or(P);
    if (is_name(peek(P), "if")) {
        next(P);
        ct_node *x = node(P, N_COND);
        x->b = n;
        x->a = parse_or(P);
        if (is_name(peek(P), "else")) { next(P); x->c = parse_expr(P); }
        n = x;
    }
    leave(P);
    return n;
}

/* ---------------------------------------------------------------- statements */

static ct_node *parse_body(parser *P, const char *const *ends, size_t nends, size_t *which);

static void end_block(parser *P) { expect_kind(P, T_BLOCK_END, "'%}'"); }

static const char **parse_targets(parser *P, size_t *n)
{
    kids k = {0};
    do {
        if (k.n) next(P); /* , */
        const ct_tok *t = peek(P);
        if (t->kind != T_NAME) unexpected(P, "a variable name");
        kids_add(P, &k, NULL, ct_strdup(P->c, t->s, t->n));
        next(P);
    } while (is_op(peek(P), ","));
    *n = k.n;
    return k.kw;
}

/* the %} of the tag just read, the body up to {% end %}, and that tag's %} */
static ct_node *parse_until(parser *P, const char *end)
{
    end_block(P);
    const char *const ends[] = {end};
    size_t w = 0;
    ct_node *body = parse_body(P, ends, 1, &w);
    end_block(P);
    return body;
}

static ct_node *parse_if(parser *P)
{
    ct_node *n = node(P, N_IF);
    n->a = parse_expr(P);
    end_block(P);
    static const char *const ends[] = {"elif", "else", "endif"};
    size_t w = 0;
    n->b = parse_body(P, ends, 3, &w);
    if (w == 0) {
        n->c = node(P, N_BLOCK);
        n->c->kid = ct_alloc(P->c, sizeof(ct_node *));
        n->c->kid[0] = parse_if(P); /* consumes through endif */
        n->c->nkid = 1;
        return n;
    }
    if (w == 1) n->c = parse_until(P, "endif");
    else end_block(P);
    return n;
}

static ct_node *parse_for(parser *P)
{
    ct_node *n = node(P, N_FOR);
    n->target = parse_targets(P, &n->ntarget);
    if (!is_name(peek(P), "in")) unexpected(P, "'in'");
    next(P);
    n->a = parse_or(P); /* `for x in xs if cond`: the if filters, it is no conditional expression */
    if (is_name(peek(P), "if")) { next(P); n->cond = parse_or(P); }
    if (is_name(peek(P), "recursive"))
        ct_fail(P->c, RECUR_EFORMAT, "line %zu: recursive for-loops are not supported", peek(P)->line);
    end_block(P);
    static const char *const ends[] = {"else", "endfor"};
    size_t w = 0;
    P->loops++;
    n->b = parse_body(P, ends, 2, &w);
    P->loops--;
    if (w == 0) n->c = parse_until(P, "endfor");
    else end_block(P);
    return n;
}

static ct_node *parse_set(parser *P)
{
    const ct_tok *t = peek(P);
    if (t->kind == T_NAME && is_op(&P->t[P->i + 1], ".")) {
        ct_node *n = node(P, N_SET_ATTR);
        n->target = ct_alloc(P->c, sizeof(char *));
        n->target[0] = ct_strdup(P->c, t->s, t->n);
        n->ntarget = 1;
        next(P);
        next(P);
        const ct_tok *a = peek(P);
        if (a->kind != T_NAME) unexpected(P, "an attribute name");
        n->name = ct_strdup(P->c, a->s, a->n);
        n->name_n = a->n;
        next(P);
        expect_op(P, "=");
        n->a = parse_expr(P);
        end_block(P);
        return n;
    }
    ct_node *n = node(P, N_SET);
    n->target = parse_targets(P, &n->ntarget);
    if (is_op(peek(P), "=")) {
        next(P);
        n->a = parse_expr(P);
        if (is_op(peek(P), ",")) {
            /* set a, b = x, y: the right side is a tuple */
            ct_node *l = node(P, N_LIST);
            l->op = 1; /* a tuple */
            kids k = {0};
            kids_add(P, &k, n->a, NULL);
            while (is_op(peek(P), ",")) { next(P); kids_add(P, &k, parse_expr(P), NULL); }
            l->kid = k.v;
            l->nkid = k.n;
            n->a = l;
        }
        end_block(P);
        return n;
    }
    if (n->ntarget != 1) unexpected(P, "'='");
    if (is_op(peek(P), "|"))
        ct_fail(P->c, RECUR_EFORMAT, "line %zu: filtered block assignments ({%% set x | f %%}) are not supported", peek(P)->line);
    n->kind = N_SET_BLOCK;
    n->b = parse_until(P, "endset");
    return n;
}

/* One {% ... %} after its '{%' was consumed; NULL when it is one of `ends` (left unconsumed). */
static ct_node *parse_statement(parser *P, const char *const *ends, size_t nends, size_t *which)
{
    const ct_tok *t = peek(P);
    if (t->kind != T_NAME) unexpected(P, "a statement name");
    for (size_t k = 0; k < nends; k++)
        if (is_name(t, ends[k])) { next(P); *which = k; return NULL; }
    next(P);
    ct_node *n;
    enter(P);
    if (is_name(t, "if")) n = parse_if(P);
    else if (is_name(t, "for")) n = parse_for(P);
    else if (is_name(t, "set")) n = parse_set(P);
    else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops) ct_fail(P->c, RECUR_EFORMAT, "line %zu: '%.*s' outside a for-loop", t->line, (int)t->n, t->s);
        n = node(P, is_name(t, "break") ? N_BREAK : N_CONTINUE);
        end_block(P);
    } else if (is_name(t, "generation")) {
        /* transformers' {% generation %} marks assistant text for masks; it renders its body */
        n = parse_until(P, "endgeneration");
    } else {
        static const char *const known[] = {"macro", "call", "filter", "raw", "include", "import", "from",
                                            "extends", "block", "with", "autoescape", "do", "trans"};
        for (size_t k = 0; k < sizeof known / sizeof *known; k++)
            if (is_name(t, known[k]))
                ct_fail(P->c, RECUR_EFORMAT, "line %zu: the '%s' statement is not supported", t->line, known[k]);
        ct_fail(P->c, RECUR_EFORMAT, "line %zu: unknown statement '%.*s'", t->line, (int)t->n, t->s);
    }
    leave(P);
    return n;
}

/* statements until {% one-of-ends %} (its name consumed, *which set) or the end (ends == NULL) */
static ct_node *parse_body(parser *P, const char *const *ends, size_t nends, size_t *which)
{
    ct_node *blk = node(P, N_BLOCK);
    kids k = {0};
    for (;;) {
        const ct_tok *t = peek(P);
        if (t->kind == T_EOF) {
            if (nends) ct_fail(P->c, RECUR_EFORMAT, "line %zu: missing {%% %s %%}", t->line, ends[nends - 1]);
            break;
        }
        if (t->kind == T_TEXT) {
            ct_node *x = node(P, N_TEXT);
            x->lit = ct_str(t->s, t->n);
            next(P);
            kids_add(P, &k, x, NULL);
        } else if (t->kind == T_VAR_BEGIN) {
            next(P);
            ct_node *x = node(P, N_OUTPUT);
            x->a = parse_expr(P);
            expect_kind(P, T_VAR_END, "'}}'");
            kids_add(P, &k, x, NULL);
        } else if (t->kind == T_BLOCK_BEGIN) {
            next(P);
            ct_node *x = parse_statement(P, ends, nends, which);
            if (!x) break;
            kids_add(P, &k, x, NULL);
        } else {
            unexpected(P, "text, '{{' or '{%'");
        }
    }
    blk->kid = k.v;
    blk->nkid = k.n;
    return blk;
}

ct_node *ct_parse(ct_ctx *c, const ct_tok *toks, size_t ntoks)
{
    parser P = {.c = c, .t = toks, .n = ntoks};
    size_t w = 0;
    ct_node *root = parse_body(&P, NULL, 0, &w);
    return root;
}
