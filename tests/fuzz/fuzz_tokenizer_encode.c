/*
 * fuzz_tokenizer_encode.c — libFuzzer target: encode and decode of arbitrary bytes
 * (core/tokenizer_encode.c, tokenizer_text.c, tokenizer_bpe.c, tokenizer_regex.c,
 * tokenizer_decode.c, tokenizer_rwkv.c) on the synthetic tokenizers of fuzz_tokenizers.h, the
 * RWKV one and the byte tokenizer.
 *
 * Byte 0: tokenizer (low 3 bits, mod 6), add_special_tokens (bit 3), and whether the rest is
 * text to encode (bit 4 clear) or little-endian int32 ids to decode (bit 4 set). Checks: ids are
 * in [0, vocab_size); decode gives valid UTF-8; the stream (pushed one id at a time) equals the
 * one-shot decode; for valid UTF-8 text the byte-level tokenizer round-trips it exactly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "fuzz_tok_check.h"
#include "fuzz_tokenizers.h"

#define N_TOK (FUZZ_TOK_VARIANTS + 2)
static recur_tokenizer *g_tok[N_TOK];

static void init(void)
{
    char err[256];
    for (int v = 0; v < FUZZ_TOK_VARIANTS; v++) {
        char *j = fuzz_tok_json(v);
        if (!j || recur_tokenizer_load_json(j, strlen(j), &g_tok[v], err, sizeof err)) { fprintf(stderr, "variant %d: %s\n", v, err); abort(); }
        free(j);
    }
    size_t n;
    char *r = fuzz_tok_rwkv(&n);
    if (!r || recur_tokenizer_load_rwkv(r, n, &g_tok[FUZZ_TOK_VARIANTS], err, sizeof err)) { fprintf(stderr, "rwkv: %s\n", err); abort(); }
    free(r);
    if (recur_tokenizer_bytes(&g_tok[FUZZ_TOK_VARIANTS + 1])) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok[0]) init();
    if (size < 1) return 0;
    const recur_tokenizer *t = g_tok[(data[0] & 7) % N_TOK];
    int special = (data[0] >> 3) & 1;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] & 16) {
        size_t k = n / 4;
        int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
        if (!ids) return 0;
        for (size_t i = 0; i < k; i++) {
            uint32_t v;
            memcpy(&v, s + 4 * i, 4);
            ids[i] = (int32_t)(v & 0x7FFFFFFF) % (recur_tokenizer_vocab_size(t) + 64); /* some padded ids */
        }
        check_decode(t, ids, k, NULL, 0);
        free(ids);
        return 0;
    }
    int32_t *ids;
    size_t m;
    if (recur_tokenizer_encode(t, s, n, special, &ids, &m)) abort();
    for (size_t i = 0; i < m; i++)
        if (ids[i] < 0 || ids[i] >= recur_tokenizer_vocab_size(t)) abort();
    /* byte-level BPE without normalization changes, RWKV and bytes reproduce valid text exactly */
    int exact = (t == g_tok[FUZZ_TOK_VARIANTS] || t == g_tok[FUZZ_TOK_VARIANTS + 1]) && valid_utf8((const unsigned char *)s, n);
    if (t == g_tok[FUZZ_TOK_VARIANTS + 1]) exact = valid_utf8((const unsigned char *)s, n);
    check_decode(t, ids, m, exact ? s : NULL, n);
    recur_tokenizer_release(ids);
    return 0;
}
