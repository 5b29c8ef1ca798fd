/* test_openai.c — the OpenAI routes' wire formats (proto/openai_requests.c, openai_responses.c)
 * and core's logit adjustment (core/logit_adjust.c). Each case states the exact expectation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "openai_requests.h"
#include "openai_responses.h"
#include "recur.h"

static const proto_limits LIM = {.vocab_size = 256, .max_tokens_per_request = 32};

static int dec(const char *body, int chat, proto_oai_req *r, proto_oai_error *e)
{
    return proto_decode_oai_req((const uint8_t *)body, strlen(body), chat, &LIM, NULL, NULL, r, e);
}

/* A renderer for chat cases: "role:content|" per message. */
static int render(const void *ctx, const proto_chat_msg *m, size_t n, char **text, size_t *len,
                  char *err, size_t errlen)
{
    proto_buf b;
    proto_buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        proto_buf_append(&b, m[i].role, m[i].role_len);
        proto_buf_append(&b, ":", 1);
        proto_buf_append(&b, m[i].content, m[i].content_len);
        proto_buf_append(&b, "|", 1);
    }
    *text = malloc(b.len + 1);
    memcpy(*text, b.data, b.len + 1);
    *len = b.len;
    proto_buf_free(&b);
    return 0;
}

/* ---------------------------------------------------------------- requests */

Test(oai_requests, prompt_forms_and_defaults)
{
    proto_oai_req r;
    proto_oai_error e;
    cr_assert_eq(dec("{\"model\":\"m\",\"prompt\":\"ab\"}", 0, &r, &e), 0);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.prompts[0].n, 2);
    cr_assert_eq(r.prompts[0].tokens[1], 'b');
    cr_assert_eq(r.gen.max_tokens, PROTO_OAI_DEFAULT_MAX_TOKENS);
    cr_assert_eq(r.n, 1);
    cr_assert_float_eq(r.gen.temperature, 1.0f, 0);
    proto_oai_req_free(&r);
    cr_assert_eq(dec("{\"model\":\"m\",\"prompt\":[[1,2],[3]],\"n\":2,\"seed\":null}", 0, &r, &e), 0);
    cr_assert_eq(r.n_prompts, 2);
    cr_assert_eq(r.prompts[1].tokens[0], 3);
    cr_assert_eq(r.gen.has_seed, 0); /* null is absent */
    proto_oai_req_free(&r);
    cr_assert_eq(dec("{\"model\":\"m\",\"prompt\":[\"a\",\"bc\"]}", 0, &r, &e), 0);
    cr_assert_eq(r.prompts[1].n, 2);
    proto_oai_req_free(&r);
    cr_assert_eq(dec("{\"model\":\"m\",\"prompt\":[5,6,7]}", 0, &r, &e), 0);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.prompts[0].n, 3);
    proto_oai_req_free(&r);
}

Test(oai_requests, refusals_name_the_field)
{
    static const struct {
        const char *body, *code, *param;
    } cases[] = {
        {"{\"model\":\"m\",\"prompt\":\"a\",\"suffix\":\"x\"}", "unsupported_parameter", "suffix"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"best_of\":1}", "unsupported_parameter", "best_of"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"zzz\":1}", "unknown_parameter", "zzz"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"messages\":[]}", "unsupported_parameter", "messages"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"temperature\":2.5}", "invalid_value", "temperature"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":21}", "invalid_value", "logprobs"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\"]}", "invalid_value", "stop"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"stop\":\"\"}", "invalid_value", "stop"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"logit_bias\":{\"256\":1}}", "invalid_value", "logit_bias"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"logit_bias\":{\"01\":1}}", "invalid_value", "logit_bias"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"logit_bias\":{\"1\":101}}", "invalid_value", "logit_bias"},
        {"{\"model\":\"m\",\"prompt\":[256]}", "invalid_value", "prompt"},
        {"{\"model\":\"m\",\"prompt\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "too_many_tokens", "prompt"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"max_tokens\":33}", "too_many_tokens", "max_tokens"},
        {"{\"model\":\"m\",\"prompt\":\"\"}", "invalid_value", "prompt"},
        {"{\"model\":\"m\"}", "missing_required_parameter", "prompt"},
        {"{\"prompt\":\"a\"}", "missing_required_parameter", "model"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", "invalid_value", "stream_options"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true,\"logprobs\":1}", "unsupported_parameter", "echo"},
        {"{\"model\":\"m\",\"prompt\":\"a\",\"model\":\"n\"}", "duplicate_key", "model"},
        {"{\"model\":\"m\",", "invalid_json", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_oai_req r;
        proto_oai_error e;
        cr_assert_eq(dec(cases[i].body, 0, &r, &e), -1, "%s", cases[i].body);
        cr_assert_eq(e.err.status, 400);
        cr_assert_str_eq(e.err.code, cases[i].code, "%s: %s", cases[i].body, e.err.code);
        cr_assert_str_eq(e.param, cases[i].param, "%s: %s", cases[i].body, e.param);
    }
}

Test(oai_requests, chat_messages_rendered_and_refusals)
{
    proto_oai_req r;
    proto_oai_error e;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                       "{\"type\":\"text\",\"text\":\"b\"}]}],\"logprobs\":true,\"top_logprobs\":2,"
                       "\"max_completion_tokens\":3,\"response_format\":{\"type\":\"text\"}}";
    cr_assert_eq(proto_decode_oai_req((const uint8_t *)body, strlen(body), 1, &LIM, render, NULL,
                                      &r, &e), 0, "%s", e.err.message);
    const char want[] = "system:s|user:ab|";
    cr_assert_eq(r.prompts[0].n, strlen(want));
    for (size_t i = 0; i < strlen(want); i++)
        cr_assert_eq(r.prompts[0].tokens[i], (unsigned char)want[i]);
    cr_assert_eq(r.logprobs, 1);
    cr_assert_eq(r.top_logprobs, 2);
    cr_assert_eq(r.gen.max_tokens, 3);
    proto_oai_req_free(&r);
    static const struct {
        const char *body, *code, *param;
    } bad[] = {
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "unsupported_parameter", "messages[0]"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
         "unsupported_parameter", "messages[0].content"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]}", "unsupported_parameter", "messages[0]"},
        {"{\"model\":\"m\",\"messages\":[]}", "invalid_value", "messages"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[]}", "unsupported_parameter", "tools"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
         "unsupported_parameter", "response_format"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1,\"max_completion_tokens\":1}",
         "invalid_value", "max_completion_tokens"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "invalid_value", "top_logprobs"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", "unsupported_parameter", "echo"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(proto_decode_oai_req((const uint8_t *)bad[i].body, strlen(bad[i].body), 1, &LIM,
                                          render, NULL, &r, &e), -1, "%s", bad[i].body);
        cr_assert_str_eq(e.err.code, bad[i].code, "%s: %s", bad[i].body, e.err.code);
        cr_assert_str_eq(e.param, bad[i].param, "%s: %s", bad[i].body, e.param);
    }
}

/* ---------------------------------------------------------------- responses */

Test(oai_responses, error_chunk_and_logprobs_bytes)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_oai_error_json(&b, "bad \"x\"", "invalid_request_error", "x", NULL);
    cr_assert_str_eq(b.data, "{\"error\":{\"message\":\"bad \\\"x\\\"\",\"type\":\"invalid_request_error\","
                             "\"param\":\"x\",\"code\":null}}");
    proto_buf_clear(&b);
    proto_oai_head h = {"chatcmpl-1", 7, "m", "fp_0", 1};
    proto_oai_object_begin(&b, &h, 1);
    proto_oai_choice_json(&b, &h, 1, 0, 0, "", 0, 1, NULL, 0, NULL);
    proto_oai_object_end(&b, NULL, 1);
    proto_oai_sse_wrap(&b, 0);
    cr_assert_str_eq(b.data, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":7,"
                             "\"model\":\"m\",\"system_fingerprint\":\"fp_0\",\"choices\":[{\"index\":0,"
                             "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                             "\"finish_reason\":null}],\"usage\":null}\n\n");
    proto_buf_clear(&b);
    proto_oai_cand top[2] = {{"a", 1, -0.5f}, {"a", 1, -1.0f}};
    proto_oai_lp lp = {{"\xc3\xa9", 2, -0.25f}, top, 2, 3};
    proto_oai_logprobs_json(&b, 0, &lp, 1, 1);
    cr_assert_str_eq(b.data, "{\"tokens\":[\"\xc3\xa9\"],\"token_logprobs\":[-0.25],"
                             "\"top_logprobs\":[{\"a\":-0.5}],\"text_offset\":[3]}");
    proto_buf_clear(&b);
    proto_oai_logprobs_json(&b, 1, &lp, 1, 1);
    cr_assert_str_eq(b.data, "{\"content\":[{\"token\":\"\xc3\xa9\",\"logprob\":-0.25,\"bytes\":[195,169],"
                             "\"top_logprobs\":[{\"token\":\"a\",\"logprob\":-0.5,\"bytes\":[97]},"
                             "{\"token\":\"a\",\"logprob\":-1,\"bytes\":[97]}]}],\"refusal\":null}");
    proto_buf_free(&b);
}

/* ---------------------------------------------------------------- core: logit adjustment */

Test(logit_adjust, openai_formula_and_validation)
{
    float x[5] = {1, 2, 3, 4, 5};
    int32_t ids[2] = {1, 3};
    uint32_t counts[2] = {2, 1};
    int32_t bid[2] = {0, 3};
    float bias[2] = {-100, 0.5f};
    recur_logit_adjust_params p = {0.25f, 0.5f, bid, bias, 2};
    cr_assert_eq(recur_logit_adjust(x, 5, &p, ids, counts, 2), 0);
    /* x[1] = 2 - 2*0.5 - 0.25; x[3] = 4 - 1*0.5 - 0.25 + 0.5; x[0] = 1 - 100 */
    cr_assert_float_eq(x[0], -99.0f, 0);
    cr_assert_float_eq(x[1], 0.75f, 0);
    cr_assert_float_eq(x[2], 3.0f, 0);
    cr_assert_float_eq(x[3], 3.75f, 0);
    cr_assert_float_eq(x[4], 5.0f, 0);
    int32_t bad[1] = {5};
    float y[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(recur_logit_adjust(y, 5, &p, bad, counts, 1), RECUR_ETOKEN);
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(y[i], (float)(i + 1), 0); /* refused: nothing changed */
}
