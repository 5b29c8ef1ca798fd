/*
 * fuzz_tokenizer_load.c — libFuzzer target: loading a tokenizer (core/tokenizer_json.c,
 * core/tokenizer_rwkv.c, core/tokenizer_regex.c): malformed and hostile tokenizer.json files
 * (huge or cyclic merges, duplicate entries, bad regexes, unknown components) and RWKV vocab files.
 *
 * Byte 0 picks the format (even: tokenizer.json, odd: RWKV vocab); the rest is the file. A load
 * either fails with RECUR_EFORMAT / RECUR_ENOMEM and a message, or gives a tokenizer that must
 * encode and decode a fixed text (ASan/UBSan watch), stream-decode to the same text, and free.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

static const char k_text[] = "Hello wörld, it's 12345 <|eot|> <s>  привет\n\t日本語 👍🏽 ▁the [SEP] x-y,z";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    recur_tokenizer *t = NULL;
    char err[256] = "";
    int rc = (data[0] & 1) ? recur_tokenizer_load_rwkv((const char *)data + 1, size - 1, &t, err, sizeof err)
                           : recur_tokenizer_load_json((const char *)data + 1, size - 1, &t, err, sizeof err);
    if (rc) {
        if (rc != RECUR_EFORMAT && rc != RECUR_ENOMEM && rc != RECUR_ESHAPE) abort();
        if (!err[0]) abort(); /* every rejection names its reason */
        if (t) abort();
        return 0;
    }
    int32_t *ids;
    size_t n;
    for (int special = 0; special < 2; special++) {
        if (recur_tokenizer_encode(t, k_text, sizeof k_text - 1, special, &ids, &n)) abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= recur_tokenizer_vocab_size(t)) abort();
        char *text;
        size_t len;
        if (recur_tokenizer_decode(t, ids, n, &text, &len)) abort();
        recur_detok *d;
        if (recur_detok_new(t, &d)) abort();
        size_t at = 0;
        const char *p;
        size_t l;
        for (size_t i = 0; i <= n; i++) {
            if (i < n ? recur_detok_push(d, ids[i], &p, &l) : recur_detok_finish(d, &p, &l)) abort();
            if (at + l > len || memcmp(text + at, p, l)) abort();
            at += l;
        }
        if (at != len) abort();
        recur_detok_free(d);
        recur_tokenizer_release(text);
        recur_tokenizer_release(ids);
    }
    recur_tokenizer_free(t);
    return 0;
}
