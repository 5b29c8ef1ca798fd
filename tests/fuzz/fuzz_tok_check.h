/*
 * fuzz_tok_check.h — what both tokenizer fuzz targets require of a decode: check_decode(t, ids,
 * n, expect, en) aborts unless recur_tokenizer_decode gives valid, NUL-terminated UTF-8 (equal to
 * expect when given) and the stream (one id at a time, then finish) gives the same text in
 * pieces that are each valid UTF-8.
 */
#ifndef FUZZ_TOK_CHECK_H
#define FUZZ_TOK_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        if (l == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F))) return 0;
        if (l == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))) return 0;
        i += l;
    }
    return 1;
}

static void check_decode(const recur_tokenizer *t, const int32_t *ids, size_t n, const char *expect, size_t en)
{
    char *text;
    size_t len;
    if (recur_tokenizer_decode(t, ids, n, &text, &len)) abort();
    if (!valid_utf8((const unsigned char *)text, len) || text[len] != 0) abort();
    if (expect && (len != en || memcmp(text, expect, en))) abort();
    recur_detok *d;
    if (recur_detok_new(t, &d)) abort();
    size_t at = 0;
    const char *p;
    size_t l;
    for (size_t i = 0; i <= n; i++) {
        if (i < n ? recur_detok_push(d, ids[i], &p, &l) : recur_detok_finish(d, &p, &l)) abort();
        if (!valid_utf8((const unsigned char *)p, l)) abort();
        if (at + l > len || memcmp(text + at, p, l)) abort();
        at += l;
    }
    if (at != len) abort();
    recur_detok_free(d);
    recur_tokenizer_release(text);
}

#endif
