/* requests.c — JSON request decoding and validation (requests.h). */
#include "requests.h"

#include <cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(proto_error *err, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(proto_error *err, int status, const char *code, const char *fmt, ...)
{
    err->status = status;
    snprintf(err->code, sizeof err->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
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

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 if some object in the tree has two members with the same name. Sorting keeps a hostile
 * object with many members at O(n log n). */
static int has_duplicate_keys(const cJSON *node, const char **dup)
{
    if (cJSON_IsObject(node)) {
        size_t n = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, node) n++;
        if (n > 1) {
            const char **keys = malloc(n * sizeof *keys);
            if (!keys)
                abort();
            size_t i = 0;
            cJSON_ArrayForEach(c, node) keys[i++] = c->string ? c->string : "";
            qsort(keys, n, sizeof *keys, cmp_str_ptr);
            for (i = 1; i < n; i++)
                if (strcmp(keys[i - 1], keys[i]) == 0) {
                    *dup = keys[i]; /* points into the tree, which outlives this call */
                    free(keys);
                    return 1;
                }
            free(keys);
        }
    }
    if (cJSON_IsObject(node) || cJSON_IsArray(node)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, node) if (has_duplicate_keys(c, dup)) return 1;
    }
    return 0;
}

/* 1 if the n bytes are well-formed UTF-8 (RFC 3629: no overlongs, surrogates, > U+10FFFF). */
static int valid_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return 0;
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* Parse a whole body as one JSON object. Returns the tree (caller deletes) or NULL with *err. */
static cJSON *parse_object(const uint8_t *body, size_t len, proto_error *err)
{
    if (!valid_utf8(body, len)) {
        fail(err, 400, "invalid_json", "request body is not valid UTF-8");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)body, len, &end, 0);
    if (!root) {
        size_t off = end ? (size_t)(end - (const char *)body) : 0;
        fail(err, 400, "invalid_json", "request body is not valid JSON (near byte %zu)", off);
        return NULL;
    }
    /* cJSON stops after the first value: anything but whitespace after it is an error. */
    size_t used = (size_t)(end - (const char *)body);
    if (!body_is_blank(body + used, len - used)) {
        cJSON_Delete(root);
        fail(err, 400, "invalid_json", "trailing bytes after the JSON value (at byte %zu)", used);
        return NULL;
    }
    const char *dup = NULL;
    if (has_duplicate_keys(root, &dup)) {
        char name[40];
        snprintf(name, sizeof name, "%s", dup);
        for (char *p = name; *p; p++) /* never echo control bytes */
            if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7F)
                *p = '?';
        cJSON_Delete(root);
        fail(err, 400, "duplicate_key", "duplicate key \"%s\" in JSON object", name);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        fail(err, 422, "invalid_body", "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Reject members not in allowed (NULL-terminated). */
static int check_fields(const cJSON *root, const char *const *allowed, proto_error *err)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, root)
    {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(c->string, *a) == 0) {
                ok = 1;
                break;
            }
        if (!ok) {
            char name[40];
            snprintf(name, sizeof name, "%s", c->string);
            for (char *p = name; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7F || *p == '"')
                    *p = '?';
            return fail(err, 422, "unknown_field", "unknown field \"%s\"", name);
        }
    }
    return 0;
}

/* An integral finite number in [lo, hi]. 0 ok, -1 not a number/not integral/out of range. */
static int get_integer(const cJSON *item, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(item))
        return -1;
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- tokens */

static int decode_tokens_fields(const cJSON *root, const proto_limits *lim, proto_tokens_req *out,
                                proto_error *err)
{
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    if (toks && text)
        return fail(err, 422, "conflicting_fields", "give either \"tokens\" or \"text\", not both");
    if (toks) {
        if (!cJSON_IsArray(toks))
            return fail_field(err, "tokens", "an array of token ids");
        size_t n = 0, i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, toks) n++;
        if (n > lim->max_tokens_per_request)
            return fail(err, 422, "too_many_tokens",
                        "request has %zu tokens; max_tokens_per_request is %zu", n,
                        lim->max_tokens_per_request);
        int32_t *t = n ? malloc(n * sizeof *t) : NULL;
        if (n && !t)
            abort();
        cJSON_ArrayForEach(c, toks)
        {
            double v;
            if (get_integer(c, 0, (double)lim->vocab_size - 1, &v) != 0) {
                free(t);
                return fail(err, 422, "invalid_token",
                            "tokens[%zu] is not an integer token id in [0, %d)", i,
                            lim->vocab_size);
            }
            t[i++] = (int32_t)v;
        }
        out->tokens = t;
        out->n = n;
        out->present = 1;
    } else if (text) {
        if (!cJSON_IsString(text) || !text->valuestring)
            return fail_field(err, "text", "a string");
        const unsigned char *s = (const unsigned char *)text->valuestring;
        size_t n = strlen(text->valuestring);
        if (n > lim->max_tokens_per_request)
            return fail(err, 422, "too_many_tokens",
                        "text is %zu bytes (one token per byte); max_tokens_per_request is %zu", n,
                        lim->max_tokens_per_request);
        int32_t *t = n ? malloc(n * sizeof *t) : NULL;
        if (n && !t)
            abort();
        for (size_t i = 0; i < n; i++) {
            if ((int)s[i] >= lim->vocab_size) {
                free(t);
                return fail(err, 422, "invalid_token",
                            "text byte %zu (0x%02x) is not a token id in [0, %d)", i, s[i],
                            lim->vocab_size);
            }
            t[i] = s[i];
        }
        out->tokens = t;
        out->n = n;
        out->present = 1;
    }
    return 0;
}

int proto_decode_tokens_req(const uint8_t *body, size_t len, const proto_limits *lim,
                            proto_tokens_req *out, proto_error *err)
{
    memset(out, 0, sizeof *out);
    out->top_k = PROTO_DEFAULT_TOP_K;
    if (body_is_blank(body, len))
        return fail(err, 400, "invalid_json", "request body must be a JSON object with \"tokens\" or \"text\"");
    cJSON *root = parse_object(body, len, err);
    if (!root)
        return -1;
    static const char *const allowed[] = {"tokens", "text", "top_k", NULL};
    int rc = check_fields(root, allowed, err);
    if (rc == 0) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "top_k");
        double v;
        if (k && get_integer(k, 0, PROTO_MAX_TOP_K, &v) != 0)
            rc = fail(err, 422, "invalid_top_k", "\"top_k\" must be an integer in [0, %d]",
                      PROTO_MAX_TOP_K);
        else if (k)
            out->top_k = (int)v;
    }
    if (rc == 0)
        rc = decode_tokens_fields(root, lim, out, err);
    if (rc == 0 && !out->present)
        rc = fail(err, 422, "missing_tokens", "the body needs \"tokens\" or \"text\"");
    cJSON_Delete(root);
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
    cJSON *root = parse_object(body, len, err);
    if (!root)
        return -1;
    static const char *const allowed[] = {"tokens", "text", NULL};
    int rc = check_fields(root, allowed, err);
    if (rc == 0)
        rc = decode_tokens_fields(root, lim, out, err);
    cJSON_Delete(root);
    if (rc != 0)
        proto_tokens_req_free(out);
    return rc;
}

int proto_decode_empty_req(const uint8_t *body, size_t len, proto_error *err)
{
    if (body_is_blank(body, len))
        return 0;
    cJSON *root = parse_object(body, len, err);
    if (!root)
        return -1;
    static const char *const allowed[] = {NULL};
    int rc = check_fields(root, allowed, err);
    cJSON_Delete(root);
    return rc;
}

void proto_tokens_req_free(proto_tokens_req *r)
{
    free(r->tokens);
    r->tokens = NULL;
    r->n = 0;
}

/* ---------------------------------------------------------------- generate */

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
    cJSON *root = parse_object(body, len, err);
    if (!root)
        return -1;
    static const char *const allowed[] = {"max_tokens", "temperature", "top_k", "top_p",
                                          "seed", "stop", NULL};
    int rc = check_fields(root, allowed, err);
    const cJSON *it;
    double v;
    if (rc == 0 && (it = cJSON_GetObjectItemCaseSensitive(root, "max_tokens"))) {
        if (get_integer(it, 0, 9007199254740992.0, &v) != 0)
            rc = fail_field(err, "max_tokens", "a non-negative integer");
        else if (v > (double)lim->max_tokens_per_request)
            rc = fail(err, 422, "too_many_tokens",
                      "max_tokens is %.0f; max_tokens_per_request is %zu", v,
                      lim->max_tokens_per_request);
        else
            out->max_tokens = (int64_t)v;
    }
    if (rc == 0 && (it = cJSON_GetObjectItemCaseSensitive(root, "temperature"))) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble > 100)
            rc = fail_field(err, "temperature", "a number in [0, 100] (0 = greedy)");
        else
            out->temperature = (float)it->valuedouble;
    }
    if (rc == 0 && (it = cJSON_GetObjectItemCaseSensitive(root, "top_k"))) {
        if (get_integer(it, 0, lim->vocab_size, &v) != 0)
            rc = fail(err, 422, "invalid_top_k",
                      "\"top_k\" must be an integer in [0, %d] (0 = off)", lim->vocab_size);
        else
            out->top_k = (int)v;
    }
    if (rc == 0 && (it = cJSON_GetObjectItemCaseSensitive(root, "top_p"))) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble <= 0 ||
            it->valuedouble > 1)
            rc = fail_field(err, "top_p", "a number in (0, 1] (1 = off)");
        else /* a positive double below FLT_TRUE_MIN would round to 0, which means "off" */
            out->top_p = fmaxf((float)it->valuedouble, FLT_TRUE_MIN);
    }
    if (rc == 0 && (it = cJSON_GetObjectItemCaseSensitive(root, "seed"))) {
        if (get_integer(it, 0, 9007199254740991.0, &v) != 0)
            rc = fail_field(err, "seed", "an integer in [0, 2^53)");
        else {
            out->seed = (uint64_t)v;
            out->has_seed = 1;
        }
    }
    if (rc == 0 && (it = cJSON_GetObjectItemCaseSensitive(root, "stop"))) {
        if (cJSON_IsString(it)) { /* a single string is accepted as a one-element list */
            size_t n = strlen(it->valuestring);
            if (n == 0 || n > PROTO_MAX_STOP_BYTES)
                rc = fail_field(err, "stop", "strings of 1 to 64 bytes");
            else {
                memcpy(out->stop[0], it->valuestring, n + 1);
                out->stop_len[0] = n;
                out->n_stop = 1;
            }
        } else if (!cJSON_IsArray(it)) {
            rc = fail_field(err, "stop", "an array of strings");
        } else {
            const cJSON *c;
            cJSON_ArrayForEach(c, it)
            {
                if (out->n_stop == PROTO_MAX_STOP) {
                    rc = fail(err, 422, "invalid_stop", "at most %d stop strings", PROTO_MAX_STOP);
                    break;
                }
                if (!cJSON_IsString(c) || !c->valuestring || c->valuestring[0] == '\0' ||
                    strlen(c->valuestring) > PROTO_MAX_STOP_BYTES) {
                    rc = fail_field(err, "stop", "an array of strings of 1 to 64 bytes");
                    break;
                }
                size_t n = strlen(c->valuestring);
                memcpy(out->stop[out->n_stop], c->valuestring, n + 1);
                out->stop_len[out->n_stop++] = n;
            }
        }
    }
    cJSON_Delete(root);
    return rc;
}
