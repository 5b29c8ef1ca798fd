/* fuzz_json.c — libFuzzer target for proto/json_strict.c, the strict RFC 8259 validator that
 * runs on every request body. The input is the whole text, in an exact-size buffer (ASan sees any
 * read past it). Invariants:
 *   - a refusal has an offset within the text and a reason;
 *   - an accepted text is accepted by cJSON too (RFC 8259 is a subset of what cJSON takes), and
 *     walking it with the cursor gives the same tree: types, numbers (bit for bit, up to cJSON's
 *     63-character number buffer), strings (cJSON
 *     stops at a NUL byte, so up to that), array lengths, member names and values in order;
 *   - a decoded string is well-formed UTF-8 of pj_string_len bytes;
 *   - the recorded top-level members are the object's first members. */
#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_strict.h"

static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                   : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!len || n - i < len)
            return 0;
        unsigned cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* The decoded string (malloc'd, *n bytes), checked against pj_string_len and UTF-8. */
static uint8_t *decode(pj_span s, size_t *n)
{
    uint8_t *b = (uint8_t *)pj_string_dup(s, n);
    if (*n != pj_string_len(s) || !utf8_ok(b, *n))
        abort();
    return b;
}

static void same_string(pj_span s, const char *cj)
{
    size_t n;
    uint8_t *b = decode(s, &n);
    size_t cl = strlen(cj);
    if (cl > n || memcmp(b, cj, cl) != 0 || (cl < n && b[cl] != 0))
        abort();
    free(b);
}

static void walk(pj_span v, const cJSON *c)
{
    switch (pj_type_of(v)) {
    case PJ_OBJECT: {
        if (!cJSON_IsObject(c))
            abort();
        pj_iter it;
        pj_span k, val;
        const cJSON *m = c->child;
        pj_object_begin(v, &it);
        while (pj_object_next(&it, &k, &val)) {
            if (!m || !m->string)
                abort();
            same_string(k, m->string);
            walk(val, m);
            m = m->next;
        }
        if (m)
            abort();
        break;
    }
    case PJ_ARRAY: {
        if (!cJSON_IsArray(c))
            abort();
        pj_iter it;
        pj_span el;
        const cJSON *m = c->child;
        pj_array_begin(v, &it);
        while (pj_array_next(&it, &el)) {
            if (!m)
                abort();
            walk(el, m);
            m = m->next;
        }
        if (m)
            abort();
        break;
    }
    case PJ_STRING:
        if (!cJSON_IsString(c) || !c->valuestring)
            abort();
        same_string(v, c->valuestring);
        break;
    case PJ_NUMBER: {
        double d;
        if (!cJSON_IsNumber(c) || pj_number(v, &d) != 0)
            abort();
        /* cJSON reads at most 63 characters of a number; compare values only below that */
        if (v.n < 64 && memcmp(&d, &c->valuedouble, sizeof d))
            abort();
        break;
    }
    case PJ_TRUE:
        if (!cJSON_IsTrue(c))
            abort();
        break;
    case PJ_FALSE:
        if (!cJSON_IsFalse(c))
            abort();
        break;
    case PJ_NULL:
        if (!cJSON_IsNull(c))
            abort();
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    pj_doc d;
    int rc = pj_parse(text, size, &d);
    if (rc != 0) {
        if (d.status == PJ_INVALID && (d.offset > size || !d.reason || !d.reason[0]))
            abort();
        if (d.status != PJ_INVALID && d.status != PJ_DUPLICATE)
            abort();
        if (d.status == PJ_DUPLICATE && strlen(d.dup) > d.dup_len)
            abort();
        free(text);
        return 0;
    }
    if (d.status != PJ_VALID || d.top.p < text || d.top.p + d.top.n > text + size)
        abort();
    /* cJSON gets a NUL-terminated copy (it reads strings up to a NUL) */
    char *z = malloc(size + 1);
    if (!z)
        abort();
    memcpy(z, text, size);
    z[size] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(z, size, &end, 0);
    if (!root)
        abort();
    if ((size_t)(end - z) != (size_t)(d.top.p - text) + d.top.n)
        abort();
    /* the walk compares the cursor's view with cJSON's (the top value may be a scalar at the
     * very end of the buffer: the cursor functions are only used inside containers) */
    walk(d.top, root);
    if (d.top_type == PJ_OBJECT) {
        pj_iter it;
        pj_span k, v;
        size_t i = 0;
        pj_object_begin(d.top, &it);
        while (pj_object_next(&it, &k, &v)) {
            if (i < PJ_MAX_MEMBERS && (k.p != d.key[i].p || k.n != d.key[i].n ||
                                       v.p != d.val[i].p || v.n != d.val[i].n))
                abort();
            i++;
        }
        if (i != d.n_members)
            abort();
    }
    cJSON_Delete(root);
    free(z);
    free(text);
    return 0;
}
