/*
 * chat_template.h — librecur's chat-template internals (the public API is the chat-template
 * section of recur.h; docs/API.md "Chat templates" says what is supported).
 *
 * A Jinja template becomes an AST once (parse), and each render walks it with its own arena of
 * values. One file per concern:
 *   chat_template_lex.c      source -> tokens: whitespace control ({%- -%} {{- -}}), Hugging
 *                            Face's trim_blocks + lstrip_blocks, string escapes
 *   chat_template_parse.c    tokens -> AST; every construct not implemented is refused by name
 *   chat_template_value.c    runtime values: the arena, strings, lists, dicts, truthiness,
 *                            equality and ordering, str() and tojson as Python Jinja gives them
 *   chat_template_eval.c     the AST walk: statements, operators, scopes, limits
 *   chat_template_filters.c  filters, tests, string/dict methods, global functions
 *   chat_template_builtin.c  the built-in templates (chatml, llama2, llama3, rwkv, plain)
 *   chat_template.c          the public entry points: parse, built-in, model folder, render
 *
 * Errors unwind with longjmp to the entry point (ct_fail); every allocation of a parse or a
 * render lives in an arena that the entry point frees, so unwinding leaks nothing.
 */
#ifndef RECUR_CHAT_TEMPLATE_H
#define RECUR_CHAT_TEMPLATE_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

/* ---------------------------------------------------------------- arena and errors */

typedef struct ct_chunk ct_chunk;
typedef struct {
    ct_chunk *head;
    size_t total;  /* bytes allocated so far */
    size_t limit;  /* ct_alloc fails (ct_fail, RECUR_ESHAPE) past this */
} ct_arena;

typedef struct {
    jmp_buf jmp;
    int code;        /* the RECUR_E* ct_fail carried */
    char *err;       /* the caller's message buffer (may be NULL) */
    size_t errlen;
    ct_arena *arena; /* where this parse or render allocates */
} ct_ctx;

void ct_fail(ct_ctx *c, int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
void *ct_alloc(ct_ctx *c, size_t n); /* zeroed, 16-aligned; never NULL (fails instead) */
char *ct_strdup(ct_ctx *c, const char *s, size_t n); /* n bytes + NUL */
void ct_arena_free(ct_arena *a);

/* ---------------------------------------------------------------- values */

typedef enum { CT_UNDEF, CT_NONE, CT_BOOL, CT_INT, CT_FLOAT, CT_STR, CT_LIST, CT_DICT, CT_NS } ct_kind;

typedef struct ct_list ct_list;
typedef struct ct_dict ct_dict;
typedef struct {
    ct_kind kind;
    union {
        int b;
        int64_t i;
        double f;
        struct { const char *s; size_t n; } str; /* valid UTF-8, bytes */
        ct_list *list;
        ct_dict *dict; /* CT_DICT and CT_NS (a namespace: a dict set ns.x may change) */
    } u;
} ct_value;

struct ct_list { size_t n, cap; ct_value *v; int tuple; /* prints (a, b); never == a list */ };
struct ct_dict { size_t n, cap; ct_value *key, *val; }; /* insertion order; keys are strings */

static inline ct_value ct_undef(void) { ct_value v = {CT_UNDEF, {0}}; return v; }
static inline ct_value ct_none(void) { ct_value v = {CT_NONE, {0}}; return v; }
static inline ct_value ct_bool(int b) { ct_value v = {CT_BOOL, {.b = !!b}}; return v; }
static inline ct_value ct_int(int64_t i) { ct_value v = {CT_INT, {.i = i}}; return v; }
static inline ct_value ct_float(double f) { ct_value v = {CT_FLOAT, {.f = f}}; return v; }
static inline ct_value ct_str(const char *s, size_t n) { ct_value v = {CT_STR, {.str = {s, n}}}; return v; }

ct_value ct_str_copy(ct_ctx *c, const char *s, size_t n);
ct_value ct_list_new(ct_ctx *c, size_t cap);
void ct_list_push(ct_ctx *c, ct_list *l, ct_value v);
ct_value ct_dict_new(ct_ctx *c, ct_kind kind /* CT_DICT or CT_NS */);
void ct_dict_set(ct_ctx *c, ct_dict *d, const char *k, size_t kn, ct_value v);
/* NULL when absent */
const ct_value *ct_dict_get(const ct_dict *d, const char *k, size_t kn);

const char *ct_kind_name(ct_kind k); /* Python's type names: 'str', 'list', 'dict', ... */
int ct_truthy(ct_value v);
int ct_equal(ct_value a, ct_value b);
/* <0, 0, >0; fails for types Python cannot order ("'<' not supported between ...") */
int ct_compare(ct_ctx *c, ct_value a, ct_value b, const char *op);

/* A growable output buffer bounded by limit (ct_fail RECUR_ESHAPE naming `what` past it). */
typedef struct {
    char *p;
    size_t n, cap, limit;
    const char *what;
    int arena; /* grows in the arena (a scratch string); else malloc'd (the render's output) */
} ct_out;
void ct_out_put(ct_ctx *c, ct_out *o, const char *s, size_t n);
void ct_out_cp(ct_ctx *c, ct_out *o, uint32_t cp); /* one code point, UTF-8 encoded */
/* str(v) as Python Jinja prints it: '' for undefined, None, True, 3, 0.5, ['a', 1], {'k': 'v'} */
void ct_out_str(ct_ctx *c, ct_out *o, ct_value v);
/* json.dumps(v, ensure_ascii=False) with indent (< 0: none), Python's separators */
void ct_out_json(ct_ctx *c, ct_out *o, ct_value v, int indent, int depth);
/* str(v) as a new arena string */
ct_value ct_to_str(ct_ctx *c, ct_value v);
/* a scratch output in the arena, bounded by RECUR_CHAT_MAX_OUTPUT_BYTES; its text as a value */
static inline ct_out ct_scratch(const char *what) { ct_out o = {0}; o.limit = RECUR_CHAT_MAX_OUTPUT_BYTES; o.what = what; o.arena = 1; return o; }
static inline ct_value ct_scratch_value(const ct_out *o) { ct_value v = {CT_STR, {.str = {o->p ? o->p : "", o->n}}}; return v; }

/* UTF-8 code points of s [n] */
size_t ct_utf8_count(const char *s, size_t n);
/* Python's str.isspace() for one code point */
int ct_is_space(uint32_t cp);

/* ---------------------------------------------------------------- tokens */

typedef enum {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_INT, T_FLOAT, T_STRING, T_OP
} ct_tok_kind;

typedef struct {
    ct_tok_kind kind;
    const char *s; /* T_TEXT / T_STRING: the (unescaped) text; T_NAME / T_OP: the source spelling */
    size_t n;
    int64_t i;     /* T_INT */
    double f;      /* T_FLOAT */
    size_t line;   /* 1-based, for messages */
} ct_tok;

/* Tokenize src [n] (valid UTF-8) with trim_blocks and lstrip_blocks on, as transformers and
 * @huggingface/jinja configure Jinja. *toks is arena memory. */
void ct_lex(ct_ctx *c, const char *src, size_t n, ct_tok **toks, size_t *ntoks);

/* ---------------------------------------------------------------- AST */

typedef enum {
    /* statements */
    N_BLOCK, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_ATTR, N_SET_BLOCK, N_BREAK, N_CONTINUE,
    /* expressions */
    N_LITERAL, N_NAME, N_LIST, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_NOT, N_NEG, N_POS, N_BINARY,
    N_AND, N_OR, N_COND, N_FILTER, N_TEST, N_CALL, N_METHOD
} ct_node_kind;

/* binary operators */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE,
       OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOT_IN };

/* filters, tests, methods and functions: resolved to an id when parsed */
enum {
    F_TRIM, F_LENGTH, F_TOJSON, F_UPPER, F_LOWER, F_CAPITALIZE, F_TITLE, F_DEFAULT, F_JOIN, F_REPLACE,
    F_STRING, F_FIRST, F_LAST, F_ITEMS, F_LIST, F_REVERSE, F_INT, F_FLOAT, F_ABS, F_INDENT,
    F_DICTSORT, F_COUNT_
};
enum {
    TS_DEFINED, TS_UNDEFINED, TS_NONE, TS_STRING, TS_NUMBER, TS_INTEGER, TS_FLOAT, TS_BOOLEAN,
    TS_TRUE, TS_FALSE, TS_MAPPING, TS_ITERABLE, TS_SEQUENCE, TS_ODD, TS_EVEN, TS_LOWER, TS_UPPER,
    TS_COUNT_
};
enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_STARTSWITH, M_ENDSWITH, M_SPLIT, M_UPPER, M_LOWER, M_TITLE,
    M_CAPITALIZE, M_REPLACE, M_ITEMS, M_KEYS, M_VALUES, M_GET, M_COUNT_
};
enum { FN_RAISE_EXCEPTION, FN_NAMESPACE, FN_RANGE, FN_STRFTIME_NOW, FN_COUNT_ };

typedef struct ct_node ct_node;
struct ct_node {
    ct_node_kind kind;
    int op;              /* OP_*, F_*, TS_*, M_*, FN_*; N_LIST: 1 for a tuple; N_TEST: negated in neg */
    int neg;
    size_t line;
    ct_value lit;        /* N_LITERAL */
    const char *name;    /* N_NAME, N_ATTR, N_SET_ATTR's attribute, N_SET_BLOCK's target */
    size_t name_n;
    ct_node *a, *b, *c;  /* operands: N_IF cond/then/else, N_FOR iter/body/else, N_SLICE start/stop/step ... */
    ct_node *cond;       /* N_FOR's inline filter (for x in xs if cond) */
    ct_node **kid;       /* N_BLOCK statements; N_LIST items; N_DICT keys,values interleaved; call args */
    const char **kw;     /* call args: keyword name or NULL for positional, [nkid] */
    size_t nkid;
    const char **target; /* N_FOR / N_SET: names unpacked into */
    size_t ntarget;
};

/* tokens -> the template's root N_BLOCK (arena memory); refuses unsupported constructs */
ct_node *ct_parse(ct_ctx *c, const ct_tok *toks, size_t ntoks);

extern const char *const ct_filter_names[F_COUNT_];
extern const char *const ct_test_names[TS_COUNT_];
extern const char *const ct_method_names[M_COUNT_];
extern const char *const ct_function_names[FN_COUNT_];

/* ---------------------------------------------------------------- evaluation */

typedef struct ct_scope ct_scope;
typedef struct {
    ct_ctx *c;
    ct_out out;
    ct_scope *globals;
    uint64_t iterations; /* for-loop bodies run so far */
    int depth;
} ct_eval;

/* Render root with the variables in globals (a dict) into e->out. */
void ct_render(ct_eval *e, const ct_node *root, ct_dict *globals);

ct_value ct_apply_filter(ct_eval *e, const ct_node *n, ct_value v, const ct_value *args, const char **kw, size_t nargs);
int ct_apply_test(ct_eval *e, const ct_node *n, ct_value v);
ct_value ct_call_method(ct_eval *e, const ct_node *n, ct_value self, const ct_value *args, const char **kw, size_t nargs);
ct_value ct_call_function(ct_eval *e, const ct_node *n, const ct_value *args, const char **kw, size_t nargs);

/* ---------------------------------------------------------------- the template object */

struct recur_chat_template {
    ct_arena arena; /* the AST, its strings */
    ct_node *root;
    char *bos, *eos; /* NUL-terminated, arena */
    size_t bos_n, eos_n;
};

/* the built-in's Jinja source and its bos / eos, or NULL */
int ct_builtin_source(const char *name, const char **src, const char **bos, const char **eos);

#endif
