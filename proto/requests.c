/* requests.c — JSON request decoding and validation (requests.h). */
#include "requests.h"

#include "json_strict.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(proto_error *err, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

int proto_vfail(proto_error *err, int status, const char *code, const char *fmt, va_list ap)
{
    err->status = status;
    snprintf(err->code, sizeof err->code, "%s", code);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    return -1;
}

static int fail(proto_error *err, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    proto_vfail(err, status, code, fmt, ap);
    va_end(ap);
    return -1;
}

static int fail_field(proto_error *err, const char *field, const char *what)
{
    char code[48];
    snprintf(code, sizeof code, "invalid_%s", field);
    return fail(err, 422, code, "\"%s\" must be %s", field, what);
}

/* ---------------------------------------------------------------- parsing */

static int body_is_blank(const uint8_t *body, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n')
            return 0;
    return 1;
}

/* A name for a message: at most 39 bytes, control bytes and '"' shown as '?'. */
static void printable_name(char *dst, size_t cap, const uint8_t *src, size_t n)
{
    if (n > cap - 1)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        dst[i] = (src[i] < 0x20 || src[i] == 0x7F || src[i] == '"') ? '?' : (char)src[i];
    dst[n] = '\0';
}

/* Validate a whole body as one strict JSON object (json_strict.h). 0, or -1 with *err. */
static int parse_object(const uint8_t *body, size_t len, pj_doc *d, proto_error *err)
{
    if (pj_parse(body, len, d) != 0) {
        if (d->status == PJ_DUPLICATE) {
            char name[40];
            printable_name(name, sizeof name, (const uint8_t *)d->dup,
                           d->dup_len < sizeof d->dup ? d->dup_len : sizeof d->dup - 1);
            return fail(err, 400, "duplicate_key", "duplicate key \"%s\" in JSON object", name);
        }
        return fail(err, 400, "invalid_json", "request body is not valid JSON: %s (at byte %zu)",
                    d->reason, d->offset);
    }
    if (d->top_type != PJ_OBJECT)
        return fail(err, 422, "invalid_body", "request body must be a JSON object");
    return 0;
}

/* Reject members not in allowed (NULL-terminated, fewer than PJ_MAX_MEMBERS names: with no
 * duplicates, an object with more members than that has an unknown one among the first). */
static int check_fields(const pj_doc *d, const char *const *allowed, proto_error *err)
{
    size_t rec = d->n_members < PJ_MAX_MEMBERS ? d->n_members : PJ_MAX_MEMBERS;
    for (size_t i = 0; i < rec; i++) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (pj_string_eq(d->key[i], *a)) {
                ok = 1;
                break;
            }
        if (!ok) {
            uint8_t raw[40];
            size_t n = pj_string_len(d->key[i]);
            uint8_t *full = malloc(n ? n : 1);
            if (!full)
                abort();
            pj_string_decode(d->key[i], full);
            memcpy(raw, full, n < sizeof raw ? n : sizeof raw);
            free(full);
            char name[40];
            printable_name(name, sizeof name, raw, n < sizeof raw ? n : sizeof raw);
            return fail(err, 422, "unknown_field", "unknown field \"%s\"", name);
        }
    }
    if (d->n_members > rec)
        return fail(err, 422, "unknown_field", "too many fields (%zu)", d->n_members);
    return 0;
}

/* The member called name, or NULL (after check_fields every member is recorded). */
static const pj_span *member(const pj_doc *d, const char *name)
{
    for (size_t i = 0; i < d->n_members && i < PJ_MAX_MEMBERS; i++)
        if (pj_string_eq(d->key[i], name))
            return &d->val[i];
    return NULL;
}

/* An integral finite number in [lo, hi]. 0 ok, -1 not a number/not integral/out of range. */
static int get_integer(const pj_span *item, double lo, double hi, double *out)
{
    double v;
    if (pj_number(*item, &v) != 0)
        return -1;
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A finite number, or -1. */
static int get_number(const pj_span *item, double *out)
{
    return pj_number(*item, out) == 0 && isfinite(*out) ? 0 : -1;
}

/* An optional boolean member: 0 (absent: *out untouched), -1 not a boolean. */
static int get_bool(const pj_doc *d, const char *name, int *out)
{
    const pj_span *it = member(d, name);
    if (!it)
        return 0;
    if (pj_type_of(*it) != PJ_TRUE && pj_type_of(*it) != PJ_FALSE)
        return -1;
    *out = pj_type_of(*it) == PJ_TRUE;
    return 0;
}

/* ---------------------------------------------------------------- tokens */

/* out takes the n ids of t (malloc'd, owned; freed when n is 0). */
static int give_tokens(proto_tokens_req *out, int32_t *t, size_t n)
{
    if (n == 0) {
        free(t);
        t = NULL;
    }
    out->tokens = t;
    out->n = n;
    out->present = 1;
    return 0;
}

static int decode_token_array(const pj_span *toks, const proto_limits *lim, proto_tokens_req *out,
                              proto_error *err)
{
    if (pj_type_of(*toks) != PJ_ARRAY)
        return fail_field(err, "tokens", "an array of token ids");
    /* One pass: count every element, convert the first max_tokens_per_request. An element
     * takes at least 2 bytes ("0,"), which bounds the allocation by the body too. */
    size_t cap = toks->n / 2 + 1;
    if (cap > lim->max_tokens_per_request)
        cap = lim->max_tokens_per_request;
    int32_t *t = cap ? malloc(cap * sizeof *t) : NULL;
    if (cap && !t)
        abort();
    size_t n = 0, bad = SIZE_MAX;
    pj_iter it;
    pj_span el;
    pj_array_begin(*toks, &it);
    while (pj_array_next(&it, &el)) {
        if (n < cap && bad == SIZE_MAX) {
            double v;
            if (get_integer(&el, 0, (double)lim->vocab_size - 1, &v) != 0)
                bad = n;
            else
                t[n] = (int32_t)v;
        }
        n++;
    }
    if (n > lim->max_tokens_per_request) {
        free(t);
        return fail(err, 422, "too_many_tokens",
                    "request has %zu tokens; max_tokens_per_request is %zu", n,
                    lim->max_tokens_per_request);
    }
    if (bad != SIZE_MAX) {
        free(t);
        return fail(err, 422, "invalid_token", "tokens[%zu] is not an integer token id in [0, %d)",
                    bad, lim->vocab_size);
    }
    return give_tokens(out, t, n);
}

/* "text" encoded by lim->encode (the model's tokenizer, server/text.c). */
static int encode_text(const pj_span *text, const proto_limits *lim, int add_special,
                       proto_tokens_req *out, proto_error *err)
{
    size_t len;
    char *s = pj_string_dup(*text, &len);
    int32_t *t = NULL;
    size_t n = 0;
    int rc = lim->encode(lim->encode_ctx, (const uint8_t *)s, len, add_special, &t, &n);
    free(s);
    if (rc != 0)
        return fail(err, 422, "invalid_text", "\"text\" could not be tokenized");
    if (n > lim->max_tokens_per_request) {
        free(t);
        return fail(err, 422, "too_many_tokens",
                    "text is %zu tokens; max_tokens_per_request is %zu", n,
                    lim->max_tokens_per_request);
    }
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= lim->vocab_size) {
            int id = t[i];
            free(t);
            return fail(err, 422, "invalid_token", "text token %zu (%d) is not a token id in [0, %d)",
                        i, id, lim->vocab_size);
        }
    return give_tokens(out, t, n);
}

/* "text": with a tokenizer, its ids; else every byte of the unescaped string is one token
 * ("\u0000" is the byte 0). */
static int decode_text(const pj_span *text, const proto_limits *lim, proto_tokens_req *out,
                       proto_error *err)
{
    if (pj_type_of(*text) != PJ_STRING)
        return fail_field(err, "text", "a string");
    if (lim->encode)
        return encode_text(text, lim, 0, out, err);
    size_t n = pj_string_len(*text);
    if (n > lim->max_tokens_per_request)
        return fail(err, 422, "too_many_tokens",
                    "text is %zu bytes (one token per byte); max_tokens_per_request is %zu", n,
                    lim->max_tokens_per_request);
    int32_t *t = n ? malloc(n * sizeof *t) : NULL;
    uint8_t *s = n ? malloc(n) : NULL;
    if (n && (!t || !s))
        abort();
    if (n)
        pj_string_decode(*text, s);
    for (size_t i = 0; i < n; i++) {
        if ((int)s[i] >= lim->vocab_size) {
            int rc = fail(err, 422, "invalid_token",
                          "text byte %zu (0x%02x) is not a token id in [0, %d)", i, s[i],
                          lim->vocab_size);
            free(s);
            free(t);
            return rc;
        }
        t[i] = s[i];
    }
    free(s);
    return give_tokens(out, t, n);
}

static int decode_tokens_fields(const pj_doc *d, const proto_limits *lim, proto_tokens_req *out,
                                proto_error *err)
{
    const pj_span *toks = member(d, "tokens");
    const pj_span *text = member(d, "text");
    if (toks && text)
        return fail(err, 422, "conflicting_fields", "give either \"tokens\" or \"text\", not both");
    if (toks)
        return decode_token_array(toks, lim, out, err);
    if (text)
        return decode_text(text, lim, out, err);
    return 0;
}

/* /tokens' "output" ("all" | "last") and "progress" (tokens between progress lines, 0 = none). */
static int decode_fold_output(const pj_doc *d, proto_tokens_req *out, proto_error *err)
{
    const pj_span *o = member(d, "output");
    if (o) {
        if (pj_type_of(*o) == PJ_STRING && pj_string_eq(*o, "last"))
            out->last_only = 1;
        else if (!(pj_type_of(*o) == PJ_STRING && pj_string_eq(*o, "all")))
            return fail(err, 422, "invalid_output", "\"output\" must be \"all\" or \"last\"");
    }
    const pj_span *p = member(d, "progress");
    double v;
    if (p && get_integer(p, 0, PROTO_MAX_PROGRESS, &v) != 0)
        return fail(err, 422, "invalid_progress",
                    "\"progress\" must be an integer in [0, %.0f] (tokens between progress lines)",
                    (double)PROTO_MAX_PROGRESS);
    if (p)
        out->progress = (uint64_t)v;
    return 0;
}

int proto_decode_tokens_req(const uint8_t *body, size_t len, const proto_limits *lim,
                            proto_tokens_req *out, proto_error *err)
{
    memset(out, 0, sizeof *out);
    out->top_k = PROTO_DEFAULT_TOP_K;
    if (body_is_blank(body, len))
        return fail(err, 400, "invalid_json", "request body must be a JSON object with \"tokens\" or \"text\"");
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {"tokens", "text", "top_k", "checkpoint", "output",
                                          "progress", NULL};
    int rc = check_fields(&d, allowed, err);
    if (rc == 0)
        rc = decode_fold_output(&d, out, err);
    if (rc == 0 && get_bool(&d, "checkpoint", &out->checkpoint) != 0)
        rc = fail_field(err, "checkpoint", "a boolean");
    if (rc == 0) {
        const pj_span *k = member(&d, "top_k");
        double v;
        if (k && get_integer(k, 0, PROTO_MAX_TOP_K, &v) != 0)
            rc = fail(err, 422, "invalid_top_k", "\"top_k\" must be an integer in [0, %d]",
                      PROTO_MAX_TOP_K);
        else if (k)
            out->top_k = (int)v;
    }
    if (rc == 0)
        rc = decode_tokens_fields(&d, lim, out, err);
    if (rc == 0 && !out->present)
        rc = fail(err, 422, "missing_tokens", "the body needs \"tokens\" or \"text\"");
    if (rc != 0)
        proto_tokens_req_free(out);
    return rc;
}

int proto_decode_create_req(const uint8_t *body, size_t len, const proto_limits *lim,
                            proto_tokens_req *out, proto_error *err)
{
    memset(out, 0, sizeof *out);
    if (body_is_blank(body, len))
        return 0;
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {"tokens", "text", "prefix_cache", NULL};
    int rc = check_fields(&d, allowed, err);
    if (rc == 0 && get_bool(&d, "prefix_cache", &out->prefix_cache) != 0)
        rc = fail_field(err, "prefix_cache", "a boolean");
    if (rc == 0)
        rc = decode_tokens_fields(&d, lim, out, err);
    if (rc != 0)
        proto_tokens_req_free(out);
    return rc;
}

int proto_decode_rollback_req(const uint8_t *body, size_t len, proto_rollback_req *out,
                              proto_error *err)
{
    memset(out, 0, sizeof *out);
    if (body_is_blank(body, len))
        return fail(err, 400, "invalid_json", "request body must be a JSON object with \"checkpoint\"");
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {"checkpoint", NULL};
    if (check_fields(&d, allowed, err))
        return -1;
    const pj_span *c = member(&d, "checkpoint");
    if (!c)
        return fail(err, 422, "missing_checkpoint", "the body needs \"checkpoint\"");
    size_t n = pj_type_of(*c) == PJ_STRING ? pj_string_len(*c) : 0;
    if (n == 0 || n >= sizeof out->checkpoint)
        return fail_field(err, "checkpoint", "a checkpoint id (a string of 1 to 64 bytes)");
    pj_string_decode(*c, (uint8_t *)out->checkpoint);
    out->checkpoint[n] = '\0';
    if (memchr(out->checkpoint, 0, n)) /* an id never holds a NUL: no prefix of it may match */
        return fail_field(err, "checkpoint", "a checkpoint id (a string of 1 to 64 bytes)");
    return 0;
}

int proto_decode_empty_req(const uint8_t *body, size_t len, proto_error *err)
{
    if (body_is_blank(body, len))
        return 0;
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {NULL};
    return check_fields(&d, allowed, err);
}

int proto_decode_tokenize_req(const uint8_t *body, size_t len, const proto_limits *lim,
                              proto_tokens_req *out, proto_error *err)
{
    memset(out, 0, sizeof *out);
    if (body_is_blank(body, len))
        return fail(err, 400, "invalid_json", "request body must be a JSON object with \"text\"");
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {"text", "add_special_tokens", NULL};
    int rc = check_fields(&d, allowed, err);
    if (rc != 0)
        return rc;
    const pj_span *a = member(&d, "add_special_tokens");
    int add = 0;
    if (a && pj_type_of(*a) != PJ_TRUE && pj_type_of(*a) != PJ_FALSE)
        return fail_field(err, "add_special_tokens", "a boolean");
    if (a)
        add = pj_type_of(*a) == PJ_TRUE;
    const pj_span *text = member(&d, "text");
    if (!text)
        return fail(err, 422, "missing_text", "the body needs \"text\"");
    if (pj_type_of(*text) != PJ_STRING)
        return fail_field(err, "text", "a string");
    if (lim->encode)
        return encode_text(text, lim, add, out, err);
    return decode_text(text, lim, out, err); /* the byte tokenizer: no special tokens */
}

int proto_decode_detokenize_req(const uint8_t *body, size_t len, const proto_limits *lim,
                                proto_tokens_req *out, proto_error *err)
{
    memset(out, 0, sizeof *out);
    if (body_is_blank(body, len))
        return fail(err, 400, "invalid_json", "request body must be a JSON object with \"tokens\"");
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {"tokens", NULL};
    int rc = check_fields(&d, allowed, err);
    if (rc != 0)
        return rc;
    const pj_span *toks = member(&d, "tokens");
    if (!toks)
        return fail(err, 422, "missing_tokens", "the body needs \"tokens\"");
    return decode_token_array(toks, lim, out, err);
}

void proto_tokens_req_free(proto_tokens_req *r)
{
    free(r->tokens);
    r->tokens = NULL;
    r->n = 0;
}

/* ---------------------------------------------------------------- generate */

/* One stop string: 1 to PROTO_MAX_STOP_BYTES bytes after unescaping, NUL bytes included. */
static int decode_stop(const pj_span *s, proto_generate_req *out)
{
    if (pj_type_of(*s) != PJ_STRING)
        return -1;
    size_t n = pj_string_len(*s);
    if (n == 0 || n > PROTO_MAX_STOP_BYTES)
        return -1;
    pj_string_decode(*s, (uint8_t *)out->stop[out->n_stop]);
    out->stop[out->n_stop][n] = '\0';
    out->stop_len[out->n_stop++] = n;
    return 0;
}

int proto_decode_generate_req(const uint8_t *body, size_t len, const proto_limits *lim,
                              proto_generate_req *out, proto_error *err)
{
    memset(out, 0, sizeof *out);
    out->max_tokens = PROTO_DEFAULT_MAX_TOKENS;
    if ((size_t)out->max_tokens > lim->max_tokens_per_request)
        out->max_tokens = (int64_t)lim->max_tokens_per_request;
    out->temperature = 1.0f;
    out->top_k = 0;
    out->top_p = 1.0f;
    if (body_is_blank(body, len))
        return 0;
    pj_doc d;
    if (parse_object(body, len, &d, err))
        return -1;
    static const char *const allowed[] = {"max_tokens", "temperature", "top_k", "top_p",
                                          "seed", "stop", "checkpoint", NULL};
    int rc = check_fields(&d, allowed, err);
    if (rc == 0 && get_bool(&d, "checkpoint", &out->checkpoint) != 0)
        rc = fail_field(err, "checkpoint", "a boolean");
    const pj_span *it;
    double v;
    if (rc == 0 && (it = member(&d, "max_tokens"))) {
        if (get_integer(it, 0, 9007199254740992.0, &v) != 0)
            rc = fail_field(err, "max_tokens", "a non-negative integer");
        else if (v > (double)lim->max_tokens_per_request)
            rc = fail(err, 422, "too_many_tokens",
                      "max_tokens is %.0f; max_tokens_per_request is %zu", v,
                      lim->max_tokens_per_request);
        else
            out->max_tokens = (int64_t)v;
    }
    if (rc == 0 && (it = member(&d, "temperature"))) {
        if (get_number(it, &v) != 0 || v < 0 || v > 100)
            rc = fail_field(err, "temperature", "a number in [0, 100] (0 = greedy)");
        else
            out->temperature = (float)v;
    }
    if (rc == 0 && (it = member(&d, "top_k"))) {
        if (get_integer(it, 0, lim->vocab_size, &v) != 0)
            rc = fail(err, 422, "invalid_top_k",
                      "\"top_k\" must be an integer in [0, %d] (0 = off)", lim->vocab_size);
        else
            out->top_k = (int)v;
    }
    if (rc == 0 && (it = member(&d, "top_p"))) {
        if (get_number(it, &v) != 0 || v <= 0 || v > 1)
            rc = fail_field(err, "top_p", "a number in (0, 1] (1 = off)");
        else /* a positive double below FLT_TRUE_MIN would round to 0, which means "off" */
            out->top_p = fmaxf((float)v, FLT_TRUE_MIN);
    }
    if (rc == 0 && (it = member(&d, "seed"))) {
        if (get_integer(it, 0, 9007199254740991.0, &v) != 0)
            rc = fail_field(err, "seed", "an integer in [0, 2^53)");
        else {
            out->seed = (uint64_t)v;
            out->has_seed = 1;
        }
    }
    if (rc == 0 && (it = member(&d, "stop"))) {
        if (pj_type_of(*it) == PJ_STRING) { /* a single string is accepted as a one-element list */
            if (decode_stop(it, out) != 0)
                rc = fail_field(err, "stop", "strings of 1 to 64 bytes");
        } else if (pj_type_of(*it) != PJ_ARRAY) {
            rc = fail_field(err, "stop", "an array of strings");
        } else {
            pj_iter si;
            pj_span el;
            pj_array_begin(*it, &si);
            while (pj_array_next(&si, &el)) {
                if (out->n_stop == PROTO_MAX_STOP) {
                    rc = fail(err, 422, "invalid_stop", "at most %d stop strings", PROTO_MAX_STOP);
                    break;
                }
                if (decode_stop(&el, out) != 0) {
                    rc = fail_field(err, "stop", "an array of strings of 1 to 64 bytes");
                    break;
                }
            }
        }
    }
    return rc;
}
