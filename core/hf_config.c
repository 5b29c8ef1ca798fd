/* hf_config.c — Hugging Face JSON as Python writes it, and typed config reads (hf_config.h).
 * A recursive-descent parser of its own (cJSON refuses Infinity / NaN) that builds a cJSON tree;
 * corrupt input is an error naming the byte, never a crash. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hf_config.h"
#include "recur.h"

int recur__errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return RECUR_EFORMAT;
}

int recur__read_small_file(const char *path, size_t limit, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return RECUR_EIO;
    char *buf = malloc(limit + 1);
    if (!buf) { fclose(f); return RECUR_ENOMEM; }
    size_t n = fread(buf, 1, limit + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return RECUR_EIO; }
    if (n > limit) { free(buf); return RECUR_EFORMAT; }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return RECUR_OK;
}

/* ---------------------------------------------------------------- parser */

typedef struct {
    const char *s, *end, *p;
    const char *what;
    char *err;
    size_t errlen;
    int failed;
} jp;

static cJSON *fail(jp *j, const char *why)
{
    if (!j->failed)
        recur__errf(j->err, j->errlen, "%s: invalid JSON: %s at byte %zu", j->what, why, (size_t)(j->p - j->s));
    j->failed = 1;
    return NULL;
}

static void skip_ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int lit(jp *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return 0;
    j->p += n;
    return 1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(jp *j, unsigned *u)
{
    if (j->end - j->p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(j->p[i]);
        if (h < 0) return 0;
        v = v << 4 | (unsigned)h;
    }
    j->p += 4;
    *u = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at j->p (on the opening quote) -> malloc'd, NUL-terminated; \u0000 is refused (our
 * strings are C strings). */
static char *parse_string(jp *j)
{
    j->p++; /* '"' */
    const char *q = j->p;
    while (q < j->end && *q != '"') q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    if (q >= j->end) return (char *)fail(j, "unterminated string");
    char *out = malloc((size_t)(q - j->p) + 1), *o = out; /* escapes never lengthen */
    if (!out) return (char *)fail(j, "out of memory");
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) { free(out); return (char *)fail(j, "control character in a string"); }
        if (c != '\\') { *o++ = (char)c; j->p++; continue; }
        j->p++;
        char e = *j->p++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!hex4(j, &u)) { free(out); return (char *)fail(j, "bad \\u escape"); }
            if (u >= 0xD800 && u < 0xDC00) {
                if (!lit(j, "\\u") || !hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    free(out);
                    return (char *)fail(j, "unpaired surrogate");
                }
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if ((u >= 0xDC00 && u < 0xE000) || u == 0) {
                free(out);
                return (char *)fail(j, u ? "unpaired surrogate" : "\\u0000 in a string");
            }
            o += put_utf8(o, u);
            break;
        }
        default: free(out); return (char *)fail(j, "bad escape");
        }
    }
    j->p++; /* closing quote */
    *o = '\0';
    return out;
}

/* JSON number grammar, or Infinity / -Infinity / NaN (Python's json). */
static cJSON *parse_number(jp *j)
{
    const char *b = j->p;
    int neg = j->p < j->end && *j->p == '-';
    if (neg) j->p++;
    if (lit(j, "Infinity")) return cJSON_CreateNumber(neg ? -INFINITY : INFINITY);
    if (!neg && lit(j, "NaN")) return cJSON_CreateNumber(NAN);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return fail(j, "bad number");
    if (*j->p == '0') j->p++;
    else while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return fail(j, "bad number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return fail(j, "bad number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    char buf[64];
    size_t n = (size_t)(j->p - b);
    if (n >= sizeof buf) return fail(j, "number too long");
    memcpy(buf, b, n);
    buf[n] = '\0';
    return cJSON_CreateNumber(strtod(buf, NULL));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No key twice in object o (n members). */
static int unique_keys(jp *j, const cJSON *o, int n)
{
    if (n < 2) return 1;
    const char **k = malloc(sizeof *k * (size_t)n);
    if (!k) { fail(j, "out of memory"); return 0; }
    int i = 0;
    for (const cJSON *it = o->child; it; it = it->next) k[i++] = it->string;
    qsort(k, (size_t)n, sizeof *k, cmp_str);
    int ok = 1;
    for (i = 1; i < n && ok; i++)
        if (!strcmp(k[i - 1], k[i])) {
            ok = 0;
            if (!j->failed)
                recur__errf(j->err, j->errlen, "%s: duplicate key \"%.64s\"", j->what, k[i]);
            j->failed = 1;
        }
    free(k);
    return ok;
}

static cJSON *parse_value(jp *j, int depth);

static cJSON *parse_container(jp *j, int depth, int object)
{
    if (depth >= HF_JSON_MAX_DEPTH) return fail(j, "nested too deeply");
    cJSON *c = object ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!c) return fail(j, "out of memory");
    cJSON *last = NULL;
    int n = 0;
    j->p++;
    skip_ws(j);
    if (j->p < j->end && *j->p == (object ? '}' : ']')) { j->p++; return c; }
    for (;;) {
        char *key = NULL;
        skip_ws(j);
        if (object) {
            if (j->p >= j->end || *j->p != '"') { cJSON_Delete(c); return fail(j, "expected a key"); }
            if (!(key = parse_string(j))) { cJSON_Delete(c); return NULL; }
            skip_ws(j);
            if (j->p >= j->end || *j->p != ':') { free(key); cJSON_Delete(c); return fail(j, "expected ':'"); }
            j->p++;
        }
        cJSON *v = parse_value(j, depth + 1);
        if (!v) { free(key); cJSON_Delete(c); return NULL; }
        v->string = key; /* owned by the item (cJSON_Delete frees it) */
        if (last) { last->next = v; v->prev = last; } else c->child = v;
        c->child->prev = v; /* cJSON keeps the tail in child->prev */
        last = v;
        if (++n > HF_JSON_MAX_ITEMS) { cJSON_Delete(c); return fail(j, "too many items"); }
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == (object ? '}' : ']')) { j->p++; break; }
        cJSON_Delete(c);
        return fail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    if (object && !unique_keys(j, c, n)) { cJSON_Delete(c); return NULL; }
    return c;
}

static cJSON *parse_value(jp *j, int depth)
{
    skip_ws(j);
    if (j->p >= j->end) return fail(j, "unexpected end");
    switch (*j->p) {
    case '{': return parse_container(j, depth, 1);
    case '[': return parse_container(j, depth, 0);
    case '"': {
        char *s = parse_string(j);
        if (!s) return NULL;
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v ? v : fail(j, "out of memory");
    }
    case 't': if (lit(j, "true")) return cJSON_CreateTrue(); break;
    case 'f': if (lit(j, "false")) return cJSON_CreateFalse(); break;
    case 'n': if (lit(j, "null")) return cJSON_CreateNull(); break;
    default: return parse_number(j);
    }
    return fail(j, "unexpected token");
}

int recur__hf_json_parse(const char *text, size_t len, const char *what, cJSON **out, char *err,
                         size_t errlen)
{
    if (!text || !out) return RECUR_EINVAL;
    jp j = {.s = text, .end = text + len, .p = text, .what = what ? what : "JSON", .err = err, .errlen = errlen};
    cJSON *root = parse_value(&j, 0);
    if (!root) return RECUR_EFORMAT;
    skip_ws(&j);
    if (j.p != j.end) {
        cJSON_Delete(root);
        fail(&j, "trailing text");
        return RECUR_EFORMAT;
    }
    *out = root;
    return RECUR_OK;
}

/* ---------------------------------------------------------------- typed config reads */

/* Keys any Hugging Face config may carry that never change the function computed (HFC_IGNORE for
 * every family): transformers' bookkeeping, token ids read elsewhere, training-only switches. */
static const char *const bookkeeping[] = {
    "architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id",
    "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "fuse_cross_entropy",
    "fuse_linear_cross_entropy", "use_l2warp",
};

int recur__hfc_check_keys(const recur__hfc *c, const recur__hfc_key *keys, int n)
{
    if (!cJSON_IsObject(c->root)) return recur__errf(c->err, c->errlen, "%s: not a JSON object", c->file);
    for (const cJSON *it = c->root->child; it; it = it->next) {
        int k = 0, b = 0;
        while (k < n && strcmp(keys[k].key, it->string) != 0) k++;
        while (k == n && b < (int)(sizeof bookkeeping / sizeof bookkeeping[0]) && strcmp(bookkeeping[b], it->string)) b++;
        if (k == n && b == (int)(sizeof bookkeeping / sizeof bookkeeping[0]))
            return recur__errf(c->err, c->errlen, "%s: key \"%.64s\" is not known to recurd for this model type "
                               "(it may change the model; refused)", c->file, it->string);
    }
    return RECUR_OK;
}

const cJSON *recur__hfc_get(const recur__hfc *c, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c->root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

int recur__hfc_int(const recur__hfc *c, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out)
{
    const cJSON *it = recur__hfc_get(c, key);
    if (!it) { *out = dflt; return RECUR_OK; }
    double v = it->valuedouble;
    if (!cJSON_IsNumber(it) || !isfinite(v) || v != floor(v))
        return recur__errf(c->err, c->errlen, "%s: \"%s\" must be an integer", c->file, key);
    if (v < (double)lo || v > (double)hi)
        return recur__errf(c->err, c->errlen, "%s: \"%s\" = %.17g is outside [%lld, %lld]", c->file, key, v,
                           (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return RECUR_OK;
}

int recur__hfc_double(const recur__hfc *c, const char *key, double dflt, int allow_nonfinite, double *out)
{
    const cJSON *it = recur__hfc_get(c, key);
    if (!it) { *out = dflt; return RECUR_OK; }
    if (!cJSON_IsNumber(it) || (!allow_nonfinite && !isfinite(it->valuedouble)))
        return recur__errf(c->err, c->errlen, "%s: \"%s\" must be a finite number", c->file, key);
    *out = it->valuedouble;
    return RECUR_OK;
}

int recur__hfc_bool(const recur__hfc *c, const char *key, int dflt, int *out)
{
    const cJSON *it = recur__hfc_get(c, key);
    if (!it) { *out = dflt; return RECUR_OK; }
    if (!cJSON_IsBool(it)) return recur__errf(c->err, c->errlen, "%s: \"%s\" must be true or false", c->file, key);
    *out = cJSON_IsTrue(it);
    return RECUR_OK;
}

int recur__hfc_string(const recur__hfc *c, const char *key, const char *dflt, int null_ok, const char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (!it) { *out = dflt; return RECUR_OK; }
    if (cJSON_IsNull(it) && null_ok) { *out = NULL; return RECUR_OK; }
    if (!cJSON_IsString(it)) return recur__errf(c->err, c->errlen, "%s: \"%s\" must be a string", c->file, key);
    *out = it->valuestring;
    return RECUR_OK;
}

int recur__hfc_numbers(const recur__hfc *c, const char *key, int lo, int hi, double *out, int *n)
{
    const cJSON *it = recur__hfc_get(c, key);
    *n = -1;
    if (!it) return RECUR_OK;
    int k = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : -1;
    if (k < lo || k > hi)
        return recur__errf(c->err, c->errlen, "%s: \"%s\" must be a list of %d to %d numbers", c->file, key, lo, hi);
    int i = 0;
    for (const cJSON *e = it->child; e; e = e->next) {
        if (!cJSON_IsNumber(e)) return recur__errf(c->err, c->errlen, "%s: \"%s\" must hold numbers", c->file, key);
        out[i++] = e->valuedouble;
    }
    *n = k;
    return RECUR_OK;
}

int recur__hfc_refuse(const recur__hfc *c, const char *key, const char *why)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c->root, key);
    char val[80] = "absent";
    if (it) {
        char *p = cJSON_PrintUnformatted(it); /* non-finite numbers print as null: fine for a message */
        if (p) { snprintf(val, sizeof val, "%s", p); cJSON_free(p); }
    }
    return recur__errf(c->err, c->errlen, "%s: \"%s\": %s is not implemented by recurd (%s)", c->file, key, val, why);
}
