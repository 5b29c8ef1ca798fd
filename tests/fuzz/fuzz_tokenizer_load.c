/*
 * fuzz_tokenizer_load.c — libFuzzer target: loading a tokenizer (core/tokenizer_json.c,
 * core/tokenizer_rwkv.c, core/tokenizer_regex.c): malformed and hostile tokenizer.json files
 * (huge or cyclic merges, duplicate entries, bad regexes, unknown components) and RWKV vocab files.
 *
 * Byte 0 picks the format (even: tokenizer.json, odd: RWKV vocab); the rest is the file. A load
 * either fails with RECUR_EFORMAT / RECUR_ENOMEM and a message, or gives a tokenizer that must
 * encode a fixed text to ids in range and decode them as check_decode (fuzz_tok_check.h) requires:
 * valid UTF-8, the stream equal to the one-shot decode (ASan/UBSan watch); then free.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "fuzz_tok_check.h"

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
        check_decode(t, ids, n, NULL, 0);
        recur_tokenizer_release(ids);
    }
    recur_tokenizer_free(t);
    return 0;
}
