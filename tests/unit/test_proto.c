/* test_proto.c — the wire formats of proto/ (requests, NDJSON/SSE lines, float printing, the
 * state trailer) and the server's top-k selection. Each case states the exact expected bytes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "ndjson.h"
#include "requests.h"
#include "recur.h"
#include "state_blob.h"

static const proto_limits LIM = {.vocab_size = 256, .max_tokens_per_request = 16};

static int decode_tokens(const char *body, proto_tokens_req *r, proto_error *e)
{
    return proto_decode_tokens_req((const uint8_t *)body, strlen(body), &LIM, r, e);
}

/* ---------------------------------------------------------------- numbers and strings */

Test(buf, float_is_exact_for_float32_and_never_nan)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_buf_float(&b, 0.1f);
    cr_assert_str_eq(b.data, "0.100000001");
    proto_buf_clear(&b);
    proto_buf_float(&b, NAN);
    proto_buf_append(&b, ",", 1);
    proto_buf_float(&b, INFINITY);
    proto_buf_append(&b, ",", 1);
    proto_buf_float(&b, -INFINITY);
    cr_assert_str_eq(b.data, "null,null,null");
    srand(1);
    for (int i = 0; i < 100000; i++) {
        uint32_t bits = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
        float v;
        memcpy(&v, &bits, 4);
        if (!isfinite(v))
            continue;
        proto_buf_clear(&b);
        proto_buf_float(&b, v);
        float back = strtof(b.data, NULL);
        cr_assert(memcmp(&back, &v, 4) == 0 || (v == 0 && back == 0), "%s", b.data);
    }
    proto_buf_free(&b);
}

Test(buf, json_strings_are_escaped_and_valid_utf8)
{
    proto_buf b;
    proto_buf_init(&b);
    const char in[] = "a\"b\\c\n\x01\x7f\xc3\xa9\xff\xed\xa0\x80z";
    proto_buf_json_str(&b, in, sizeof in - 1);
    cr_assert_str_eq(b.data, "\"a\\\"b\\\\c\\n\\u0001\\u007f\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz\"");
    proto_buf_free(&b);
}

Test(ndjson, exact_lines_in_both_framings)
{
    proto_buf b;
    proto_buf_init(&b);
    int32_t ids[2] = {7, 3};
    float lps[2] = {-0.5f, -1.25f};
    proto_fold_line(&b, PROTO_FRAME_NDJSON, 0, 65, 0, 0, ids, lps, 2);
    cr_assert_str_eq(b.data, "{\"pos\":0,\"token\":65,\"logprob\":null,\"top\":[{\"token\":7,\"logprob\":-0.5},{\"token\":3,\"logprob\":-1.25}]}\n");
    proto_buf_clear(&b);
    proto_fold_line(&b, PROTO_FRAME_NDJSON, 9, 1, 1, -2.0f, NULL, NULL, 0);
    cr_assert_str_eq(b.data, "{\"pos\":9,\"token\":1,\"logprob\":-2,\"top\":[]}\n");
    proto_buf_clear(&b);
    proto_gen_line(&b, PROTO_FRAME_SSE, 4, 10, "\n", 1, -0.25f);
    cr_assert_str_eq(b.data, "id: 4\ndata: {\"pos\":4,\"token\":10,\"text\":\"\\n\",\"logprob\":-0.25}\n\n");
    proto_buf_clear(&b);
    proto_gen_done(&b, PROTO_FRAME_SSE, "stop", NULL, 0, 12, NULL);
    cr_assert_str_eq(b.data, "id: done\ndata: {\"done\":true,\"reason\":\"stop\",\"tokens_seen\":12}\n\ndata: [DONE]\n\n");
    proto_buf_clear(&b);
    proto_gen_done(&b, PROTO_FRAME_NDJSON, "cancelled", "\xef\xbf\xbd\n", 4, 7, NULL); /* held text */
    cr_assert_str_eq(b.data, "{\"done\":true,\"reason\":\"cancelled\",\"text\":\"\xef\xbf\xbd\\n\",\"tokens_seen\":7}\n");
    proto_buf_clear(&b);
    proto_fold_done(&b, PROTO_FRAME_NDJSON, 3, NULL);
    cr_assert_str_eq(b.data, "{\"done\":true,\"tokens_seen\":3}\n");
    proto_buf_free(&b);
}

/* ---------------------------------------------------------------- requests */

Test(requests, tokens_and_text)
{
    proto_tokens_req r;
    proto_error e;
    cr_assert_eq(decode_tokens("{\"tokens\":[0, 255, 7.0],\"top_k\":3}", &r, &e), 0);
    cr_assert_eq(r.n, 3);
    cr_assert_eq(r.tokens[1], 255);
    cr_assert_eq(r.tokens[2], 7);
    cr_assert_eq(r.top_k, 3);
    proto_tokens_req_free(&r);
    cr_assert_eq(decode_tokens(" {\"text\":\"h\\u00e9\"} \n", &r, &e), 0);
    cr_assert_eq(r.n, 3);
    cr_assert_eq(r.tokens[0], 'h');
    cr_assert_eq(r.tokens[1], 0xC3);
    cr_assert_eq(r.tokens[2], 0xA9);
    cr_assert_eq(r.top_k, PROTO_DEFAULT_TOP_K);
    proto_tokens_req_free(&r);
}

Test(requests, every_rejection_has_its_status_and_code)
{
    static const struct {
        const char *body;
        int status;
        const char *code;
    } cases[] = {
        {"", 400, "invalid_json"},
        {"{", 400, "invalid_json"},
        {"{\"tokens\":[1]} x", 400, "invalid_json"},
        {"{\"tokens\":[1],\"tokens\":[2]}", 400, "duplicate_key"},
        {"{\"tokens\":[1],\"x\":{\"a\":1,\"a\":2}}", 400, "duplicate_key"},
        {"{\"text\":\"\xff\"}", 400, "invalid_json"},
        {"[1]", 422, "invalid_body"},
        {"{\"tokens\":[1],\"nope\":1}", 422, "unknown_field"},
        {"{\"TOKENS\":[1]}", 422, "unknown_field"},
        {"{\"tokens\":[1],\"text\":\"a\"}", 422, "conflicting_fields"},
        {"{}", 422, "missing_tokens"},
        {"{\"tokens\":1}", 422, "invalid_tokens"},
        {"{\"text\":1}", 422, "invalid_text"},
        {"{\"tokens\":[1,256]}", 422, "invalid_token"},
        {"{\"tokens\":[1,-1]}", 422, "invalid_token"},
        {"{\"tokens\":[1.5]}", 422, "invalid_token"},
        {"{\"tokens\":[1e400]}", 422, "invalid_token"},
        {"{\"tokens\":[3e9]}", 422, "invalid_token"},
        {"{\"tokens\":[\"1\"]}", 422, "invalid_token"},
        {"{\"tokens\":[null]}", 422, "invalid_token"},
        {"{\"tokens\":[true]}", 422, "invalid_token"},
        {"{\"tokens\":[1],\"top_k\":65}", 422, "invalid_top_k"},
        {"{\"tokens\":[1],\"top_k\":\"2\"}", 422, "invalid_top_k"},
        {"{\"tokens\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}", 422, "too_many_tokens"},
        {"{\"text\":\"aaaaaaaaaaaaaaaaa\"}", 422, "too_many_tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_tokens_req r;
        proto_error e;
        cr_assert_eq(decode_tokens(cases[i].body, &r, &e), -1, "case %zu accepted", i);
        cr_assert_eq(e.status, cases[i].status, "case %zu: %d %s", i, e.status, e.code);
        cr_assert_str_eq(e.code, cases[i].code, "case %zu", i);
        cr_assert_null(r.tokens);
    }
    proto_tokens_req r;
    proto_error e;
    decode_tokens("{\"tokens\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}", &r, &e);
    cr_assert(strstr(e.message, "max_tokens_per_request") != NULL);
    decode_tokens("{\"tokens\":[1,2,300]}", &r, &e);
    cr_assert(strstr(e.message, "tokens[2]") != NULL);
}

Test(requests, generate_defaults_and_errors)
{
    proto_generate_req g;
    proto_error e;
    cr_assert_eq(proto_decode_generate_req((const uint8_t *)"", 0, &LIM, &g, &e), 0);
    cr_assert_eq(g.max_tokens, 16); /* default 64 capped by max_tokens_per_request */
    cr_assert_float_eq(g.temperature, 1.0f, 0);
    cr_assert_eq(g.has_seed, 0);
    const char *ok = "{\"max_tokens\":5,\"temperature\":0,\"top_k\":40,\"top_p\":0.9,\"seed\":123,\"stop\":[\"\\n\",\"ab\"]}";
    cr_assert_eq(proto_decode_generate_req((const uint8_t *)ok, strlen(ok), &LIM, &g, &e), 0);
    cr_assert_eq(g.max_tokens, 5);
    cr_assert_eq(g.top_k, 40);
    cr_assert_eq(g.seed, 123);
    cr_assert_eq(g.n_stop, 2);
    cr_assert_str_eq(g.stop[0], "\n");
    cr_assert_eq(g.stop_len[1], 2);
    static const struct { const char *body; const char *code; } bad[] = {
        {"{\"max_tokens\":17}", "too_many_tokens"},
        {"{\"max_tokens\":-1}", "invalid_max_tokens"},
        {"{\"temperature\":-1}", "invalid_temperature"},
        {"{\"top_p\":0}", "invalid_top_p"},
        {"{\"top_k\":257}", "invalid_top_k"},
        {"{\"seed\":0.5}", "invalid_seed"},
        {"{\"stop\":[1]}", "invalid_stop"},
        {"{\"stop\":{}}", "invalid_stop"},
        {"{\"max_token\":1}", "unknown_field"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(proto_decode_generate_req((const uint8_t *)bad[i].body, strlen(bad[i].body),
                                               &LIM, &g, &e), -1, "%s", bad[i].body);
        cr_assert_eq(e.status, 422);
        cr_assert_str_eq(e.code, bad[i].code, "%s", bad[i].body);
    }
}

/* ---------------------------------------------------------------- state trailer */

Test(state_blob, trailer_round_trip_and_rejections)
{
    enum { P = 64, V = 8 };
    uint8_t blob[48 + P + 16 + 4 * V + 8];
    memset(blob, 0xAB, sizeof blob);
    memcpy(blob, "RECURST1", 8);
    uint64_t p = P;
    memcpy(blob + 32, &p, 8);
    float logits[V] = {1, 2, 3, 4, 5, 6, 7, -8.5f};
    cr_assert_eq(proto_state_trailer_size(V), 16 + 4 * V + 8);
    proto_state_trailer_write(blob + 48 + P, blob, 48 + P, logits, V);
    size_t core;
    const uint8_t *lg;
    proto_error e;
    cr_assert_eq(proto_state_split(blob, sizeof blob, V, &core, &lg, &e), 0);
    cr_assert_eq(core, 48 + P);
    float back[V];
    memcpy(back, lg, sizeof back);
    cr_assert(memcmp(back, logits, sizeof back) == 0);
    /* no trailer: the whole body is the core snapshot */
    cr_assert_eq(proto_state_split(blob, 48 + P, V, &core, &lg, &e), 0);
    cr_assert_eq(core, 48 + P);
    cr_assert_null(lg);
    /* truncated: handed to the core whole, which reports it */
    cr_assert_eq(proto_state_split(blob, 30, V, &core, &lg, &e), 0);
    cr_assert_eq(core, 30);
    /* a flipped byte anywhere (core or trailer) breaks the trailer checksum */
    blob[50] ^= 1;
    cr_assert_eq(proto_state_split(blob, sizeof blob, V, &core, &lg, &e), -1);
    cr_assert_eq(e.status, 400);
    blob[50] ^= 1;
    cr_assert_eq(proto_state_split(blob, sizeof blob, V + 1, &core, &lg, &e), -1); /* other vocab */
    cr_assert_eq(proto_state_split(blob, sizeof blob - 1, V, &core, &lg, &e), -1);
}

/* ---------------------------------------------------------------- log-softmax, top-k */

Test(log_softmax, consts_agree_with_libm_and_score_a_token)
{
    enum { V = 1000 };
    float x[V], a[V], b[V], c[2];
    for (int i = 0; i < V; i++)
        x[i] = (float)((i * 7919) % 1000) * 0.037f - 20.0f;
    recur_log_softmax(x, V, a);
    recur_log_softmax_consts(x, V, b, c);
    for (int i = 0; i < V; i++) {
        cr_assert_float_eq(b[i], a[i], 1e-5f, "%d: %g vs %g", i, b[i], a[i]);
        cr_assert_eq(b[i], (x[i] - c[0]) - c[1], "the constants give the same value bit for bit");
    }
}

Test(topk, highest_first_lower_id_on_ties_nan_skipped)
{
    float lp[6] = {-1.0f, -0.5f, NAN, -0.5f, -3.0f, -0.1f};
    int32_t ids[8];
    float vals[8];
    int n = recur_top_k(lp, 6, 4, ids, vals);
    cr_assert_eq(n, 4);
    int32_t want[4] = {5, 1, 3, 0};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ids[i], want[i], "rank %d: %d", i, ids[i]);
    cr_assert_eq(recur_top_k(lp, 6, 64, ids, vals), 5); /* k clamps to vocab; NaN never ranks */
}
