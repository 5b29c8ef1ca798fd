/* test_stop_match.c — stop strings over pieces of decoded text (server/stop_match.c) and the
 * text of a generation (server/gen_text.c: streaming decode, then stop strings), against a
 * reference written here: the text checked after every byte. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "gen_text.h"
#include "recur.h"
#include "stop_match.h"

/* The reference: the first byte position e at which some stop string ends; the cut is the start
 * of the longest stop string ending there. No stop: the whole text. */
static size_t ref_cut(const char *t, size_t n, const char *const *stop, const size_t *len, size_t ns,
                      int *matched)
{
    for (size_t e = 1; e <= n; e++) {
        size_t best = 0;
        for (size_t i = 0; i < ns; i++)
            if (len[i] <= e && memcmp(t + e - len[i], stop[i], len[i]) == 0 && len[i] > best)
                best = len[i];
        if (best) {
            *matched = 1;
            return e - best;
        }
    }
    *matched = 0;
    return n;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(stop_match, spans_pieces_and_keeps_text_before_it)
{
    const char *stop[] = {"\n\n", "END"};
    size_t len[] = {2, 3};
    srv_stop_match m;
    cr_assert_eq(srv_stop_init(&m, stop, len, 2), 0);
    proto_buf out;
    proto_buf_init(&out);
    cr_assert_eq(srv_stop_feed(&m, "hello\n", 6, &out), 0);
    cr_assert_eq(out.len, 5, "the \\n could begin a stop string: held");
    cr_assert_eq(srv_stop_feed(&m, "E", 1, &out), 0);
    cr_assert_eq(out.len, 6, "\\nE is no stop string's beginning: the \\n goes, E is held");
    cr_assert_eq(srv_stop_feed(&m, "N", 1, &out), 0);
    cr_assert_eq(srv_stop_feed(&m, "Dless", 5, &out), 1);
    cr_assert_eq(out.len, 6);
    cr_assert(memcmp(out.data, "hello\n", 6) == 0);
    cr_assert_eq(srv_stop_feed(&m, "more", 4, &out), 1, "after a match nothing more");
    srv_stop_flush(&m, &out);
    cr_assert_eq(out.len, 6);
    srv_stop_free(&m);
    /* no match: flush gives back what was held */
    proto_buf_clear(&out);
    cr_assert_eq(srv_stop_init(&m, stop, len, 2), 0);
    cr_assert_eq(srv_stop_feed(&m, "xyEN", 4, &out), 0);
    cr_assert_eq(out.len, 2);
    srv_stop_flush(&m, &out);
    cr_assert_str_eq(out.data, "xyEN");
    srv_stop_free(&m);
    /* bad arguments */
    size_t zero = 0;
    cr_assert_eq(srv_stop_init(&m, stop, &zero, 1), -1);
    cr_assert_eq(srv_stop_init(&m, stop, len, SRV_STOP_MAX + 1), -1);
    proto_buf_free(&out);
}

Test(stop_match, first_completed_wins_whatever_the_pieces)
{
    /* "bc" is completed (byte 3) before "abcd" (byte 4): the cut is at "bc" even when both
     * arrive in one piece */
    const char *stop[] = {"abcd", "bc"};
    size_t len[] = {4, 2};
    proto_buf out;
    proto_buf_init(&out);
    srv_stop_match m;
    srv_stop_init(&m, stop, len, 2);
    cr_assert_eq(srv_stop_feed(&m, "xabcdy", 6, &out), 1);
    cr_assert_eq(out.len, 2);
    cr_assert(memcmp(out.data, "xa", 2) == 0);
    srv_stop_free(&m);
    /* ending at the same byte: the longer one */
    const char *stop2[] = {"cd", "bcd"};
    size_t len2[] = {2, 3};
    proto_buf_clear(&out);
    srv_stop_init(&m, stop2, len2, 2);
    cr_assert_eq(srv_stop_feed(&m, "ab", 2, &out), 0);
    cr_assert_eq(srv_stop_feed(&m, "cde", 3, &out), 1);
    cr_assert_eq(out.len, 1);
    srv_stop_free(&m);
    proto_buf_free(&out);
}

/* Random texts over a small alphabet (so stop strings occur), random stop strings (some taken
 * from the text), random cuts into pieces: the released text is the reference cut, and whether
 * it matched agrees. */
Test(stop_match, property_against_every_byte_reference)
{
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    char text[96], stops[4][8];
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = rng_next(&s) % sizeof text;
        for (size_t i = 0; i < n; i++)
            text[i] = "abc\n"[rng_next(&s) % 4];
        size_t ns = rng_next(&s) % 5;
        const char *stop[4];
        size_t len[4];
        for (size_t i = 0; i < ns; i++) {
            len[i] = 1 + rng_next(&s) % 6;
            if (n >= len[i] && rng_next(&s) % 2) {
                memcpy(stops[i], text + rng_next(&s) % (n - len[i] + 1), len[i]);
            } else {
                for (size_t j = 0; j < len[i]; j++)
                    stops[i][j] = "abc\n"[rng_next(&s) % 4];
            }
            stop[i] = stops[i];
        }
        int want_match;
        size_t want = ref_cut(text, n, stop, len, ns, &want_match);
        srv_stop_match m;
        cr_assert_eq(srv_stop_init(&m, stop, len, ns), 0);
        proto_buf out;
        proto_buf_init(&out);
        int got_match = 0;
        for (size_t i = 0; i < n && !got_match;) {
            size_t k = rng_next(&s) % 5; /* empty pieces too */
            if (k > n - i)
                k = n - i;
            got_match = srv_stop_feed(&m, text + i, k, &out);
            i += k;
        }
        if (!got_match)
            srv_stop_flush(&m, &out);
        cr_assert_eq(got_match, want_match, "iter %d", iter);
        cr_assert_eq(out.len, want, "iter %d: released %zu, want %zu", iter, out.len, want);
        cr_assert(memcmp(out.data ? out.data : "", text, want) == 0, "iter %d", iter);
        srv_stop_free(&m);
        proto_buf_free(&out);
    }
}

/* ---------------------------------------------------------------- gen_text */

static void push_all(srv_gen_text *t, const int32_t *ids, size_t n, proto_buf *all, size_t *pieces_len)
{
    for (size_t i = 0; i < n; i++) {
        proto_buf piece;
        proto_buf_init(&piece);
        srv_gen_text_push(t, ids[i], &piece);
        pieces_len[i] = piece.len;
        proto_buf_append(all, piece.len ? piece.data : "", piece.len);
        proto_buf_free(&piece);
    }
}

Test(gen_text, byte_tokenizer_holds_unfinished_characters)
{
    recur_tokenizer *tok;
    cr_assert_eq(recur_tokenizer_bytes(&tok), 0);
    srv_gen_text t;
    cr_assert_eq(srv_gen_text_init(&t, tok, NULL, NULL, 0), 0);
    /* é in two tokens; a lead byte broken by ASCII; 0xFF; an id past the vocabulary; 😀 */
    const int32_t ids[] = {0xC3, 0xA9, 'x', 0xE2, 'y', 0xFF, 300, 0xF0, 0x9F, 0x98, 0x80, 0xE2};
    const size_t want_len[] = {0, 2, 1, 0, 4, 3, 0, 0, 0, 0, 4, 0};
    size_t got[12];
    proto_buf all;
    proto_buf_init(&all);
    push_all(&t, ids, 12, &all, got);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(got[i], want_len[i], "token %d: %zu bytes", i, got[i]);
    cr_assert_eq(srv_gen_text_finish(&t, &all), 0);
    cr_assert_str_eq(all.data, "\xc3\xa9x\xef\xbf\xbdy\xef\xbf\xbd\xf0\x9f\x98\x80\xef\xbf\xbd",
                     "the unfinished E2 at the end is U+FFFD at finish");
    size_t before = all.len;
    srv_gen_text_finish(&t, &all);
    cr_assert_eq(all.len, before, "finish once");
    srv_gen_text_free(&t);
    proto_buf_free(&all);
    recur_tokenizer_free(tok);
}

/* A token vocabulary whose tokens split characters (RWKV World stores bytes): streaming equals
 * the one-shot decode cut at the stop string, which spans tokens and starts mid-token. */
Test(gen_text, stop_string_spanning_tokens_mid_token)
{
    /* every single byte b is id b + 1 (RWKV World's rule), then the tokens of the test */
    static const char extra[] = "257 b'\\xe6\\x97' 2\n258 b'\\xa5\\xe6' 2\n259 b'\\x9c\\xac' 2\n"
                                "260 'xa' 2\n261 'b\\n' 2\n";
    proto_buf v;
    proto_buf_init(&v);
    for (int b = 0; b < 256; b++)
        proto_buf_printf(&v, "%d b'\\x%02x' 1\n", b + 1, b);
    proto_buf_puts(&v, extra);
    recur_tokenizer *tok;
    char err[200];
    cr_assert_eq(recur_tokenizer_load_rwkv(v.data, v.len, &tok, err, sizeof err), 0, "%s", err);
    proto_buf_free(&v);
    /* "xa" "b\n" "\n" e6 97 | a5 e6 | 9c ac ("日本") "a": stop "ab\n\n日" starts inside "xa" */
    const int32_t ids[] = {260, 261, '\n' + 1, 257, 258, 259, 'a' + 1};
    const char *stop[] = {"zz", "ab\n\n\xe6\x97\xa5"};
    size_t len[] = {2, 7};
    srv_gen_text t;
    cr_assert_eq(srv_gen_text_init(&t, tok, stop, len, 2), 0);
    proto_buf all;
    proto_buf_init(&all);
    int matched_at = -1;
    for (int i = 0; i < 7 && matched_at < 0; i++)
        if (srv_gen_text_push(&t, ids[i], &all))
            matched_at = i;
    cr_assert_eq(matched_at, 4, "the token that completes the stop string (its last byte a5): %d [%s]", matched_at, all.data);
    cr_assert_str_eq(all.data, "x");
    cr_assert_eq(srv_gen_text_finish(&t, &all), 0);
    cr_assert_str_eq(all.data, "x");
    srv_gen_text_free(&t);
    /* without stop strings: the pieces concatenate to the one-shot decode, none holds half a
     * character */
    cr_assert_eq(srv_gen_text_init(&t, tok, NULL, NULL, 0), 0);
    proto_buf_clear(&all);
    size_t pieces[7];
    push_all(&t, ids, 7, &all, pieces);
    srv_gen_text_finish(&t, &all);
    char *one;
    size_t one_len;
    cr_assert_eq(recur_tokenizer_decode(tok, ids, 7, &one, &one_len), 0);
    cr_assert_eq(all.len, one_len);
    cr_assert(memcmp(all.data, one, one_len) == 0);
    cr_assert_eq(pieces[3], 0, "e6 97 is not a character yet");
    cr_assert_eq(pieces[4], 3, "a5 completes it; the e6 after it is held");
    recur_tokenizer_release(one);
    srv_gen_text_free(&t);
    proto_buf_free(&all);
    recur_tokenizer_free(tok);
}
