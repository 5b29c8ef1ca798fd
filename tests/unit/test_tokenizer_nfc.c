/* test_tokenizer_nfc.c — core/tokenizer_text.c normalizes only the stretches a Unicode form can
 * change (the rest is copied). The reference here is utf8proc run over the whole text, which is
 * what the tokenizer did before: for NFC, NFKC, NFD and NFKD, every code point of planes 0-3 and
 * 14 inside a text that puts it after and before starters, composable pairs (Latin, Hangul
 * L/V/T jamo, Oriya's starter-second vowel sign), and reorderable marks; then seeded random
 * strings over those building blocks. Output must be byte-identical. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

static const struct { tk_nm_kind kind; int flags; const char *name; } k_forms[] = {
    {TK_NM_NFC, UTF8PROC_STABLE | UTF8PROC_COMPOSE, "NFC"},
    {TK_NM_NFKC, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, "NFKC"},
    {TK_NM_NFD, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, "NFD"},
    {TK_NM_NFKD, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, "NFKD"},
};

/* the neighbours X is put between, in this order: X then each pair (before, after) */
static const uint32_t k_around[][2] = {
    {'e', 0x301},      /* e X combining acute */
    {0x1100, 0x11A8},  /* Hangul L X T */
    {0xAC00, 0x1161},  /* LV syllable X V */
    {0x0B47, 0x0B3E},  /* Oriya: starter X starter-second */
    {0x301, 0x316},    /* marks of classes 230 and 220 around X */
    {0x304B, 0x3099},  /* kana X dakuten */
    {0x0F71, 0x0F72},  /* Tibetan marks (U+0F73 decomposes to them) */
};

static void put(tk_buf *b, uint32_t cp) { cr_assert_eq(tk_buf_put_cp(b, cp), 0); }

static void check(int f, const char *s, size_t n, tk_buf *got)
{
    tk_normalizer nm = {.kind = k_forms[f].kind};
    cr_assert_eq(tk_normalize(&nm, 1, s, n, got), 0);
    utf8proc_uint8_t *want = NULL;
    utf8proc_ssize_t wn = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &want,
                                       (utf8proc_option_t)k_forms[f].flags);
    cr_assert_geq(wn, 0);
    if (got->n != (size_t)wn || memcmp(got->p, want, got->n)) {
        char hex[256] = "";
        for (size_t i = 0, k = 0; i < n && k + 4 < sizeof hex; i++, k += 3) snprintf(hex + k, 4, "%02X ", (unsigned char)s[i]);
        cr_assert_fail("%s differs from utf8proc on the whole text for bytes %s", k_forms[f].name, hex);
    }
    free(want);
}

Test(tokenizer_nfc, every_code_point_in_context_matches_whole_text)
{
    tk_buf text = {0}, got = {0};
    for (int f = 0; f < 4; f++)
        for (uint32_t c = 0; c < 0xF0000; c++) {
            if ((c >= 0xD800 && c <= 0xDFFF) || (c >= 0x40000 && c < 0xE0000)) continue;
            text.n = 0;
            put(&text, c);
            for (size_t k = 0; k < sizeof k_around / sizeof *k_around; k++) {
                put(&text, k_around[k][0]);
                put(&text, c);
                put(&text, k_around[k][1]);
            }
            put(&text, c);
            check(f, text.p, text.n, &got);
        }
    tk_buf_free(&text);
    tk_buf_free(&got);
}

Test(tokenizer_nfc, random_mixtures_match_whole_text)
{
    static const uint32_t pool[] = {
        'a', 'e', 'A', ' ', '\n', 0xE9, 0xC5, 0x212B, 0x301, 0x308, 0x316, 0x327, 0x344, 0x1E0B, 0x1E63,
        0x1100, 0x1112, 0x1161, 0x1175, 0x11A7, 0x11A8, 0x11C2, 0xAC00, 0xAC01, 0xD7A3, 0x3131,
        0x0B47, 0x0B3E, 0x0B57, 0x0BC6, 0x0BBE, 0x0F71, 0x0F72, 0x0F73, 0x0F80, 0x304B, 0x304C, 0x3099,
        0x309A, 0xFB01, 0xFF21, 0x2460, 0x4E00, 0xF900, 0x1D15E, 0x1D165, 0x1D16E, 0x2F800, 0x05D9,
        0x05B4, 0xFB1D, 0x0915, 0x093C, 0x0958, 0x00A0, 0x1F44D, 0x1F3FD, 0x200D, 0x0CC6, 0x0CC2, 0x0CD5,
    };
    tk_buf text = {0}, got = {0};
    unsigned seed = 12;
    for (int f = 0; f < 4; f++)
        for (int it = 0; it < 20000; it++) {
            text.n = 0;
            int len = 1 + (int)(rand_r(&seed) % 12);
            for (int k = 0; k < len; k++) put(&text, pool[rand_r(&seed) % (sizeof pool / sizeof *pool)]);
            check(f, text.p, text.n, &got);
        }
    tk_buf_free(&text);
    tk_buf_free(&got);
}
