/* openai_requests.c — the OpenAI routes' request bodies (openai_requests.h). */
#include "openai_requests.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_strict.h"

static int fail(proto_oai_error *e, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(proto_oai_error *e, const char *code, const char *param, const char *fmt, ...)
{
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    proto_vfail(&e->err, 400, code, fmt, ap);
    va_end(ap);
    return -1;
}

static int invalid(proto_oai_error *e, const char *param, const char *what)
{
    return fail(e, "invalid_value", param, "'%s' must be %s", param, what);
}

/* ---------------------------------------------------------------- field names */

/* Fields OpenAI defines for these routes that recurd does not implement: refused by name. */
static const char *const UNSUPPORTED[] = {
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "suffix",
    "best_of", "audio", "modalities", "prediction", "reasoning_effort", "store", "metadata",
    "service_tier", "web_search_options", "verbosity", "prompt_cache_key", "safety_identifier",
    "response_format", NULL};

static const char *const COMPLETION_FIELDS[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
    "stop", "seed", "logprobs", "echo", "presence_penalty", "frequency_penalty", "logit_bias",
    "user", "top_k", NULL};

static const char *const CHAT_FIELDS[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
    "stream", "stream_options", "stop", "seed", "logprobs", "top_logprobs", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "top_k", NULL};

static int in_list(pj_span key, const char *const *list)
{
    for (; *list; list++)
        if (pj_string_eq(key, *list))
            return 1;
    return 0;
}

/* A key for a message: at most 40 bytes, control bytes and quotes shown as '?'. */
static void key_name(pj_span key, char *out, size_t cap)
{
    size_t n;
    uint8_t *s = (uint8_t *)pj_string_dup(key, &n);
    size_t m = n < cap - 1 ? n : cap - 1;
    for (size_t i = 0; i < m; i++)
        out[i] = (s[i] < 0x20 || s[i] == 0x7F || s[i] == '"' || s[i] == '\'') ? '?' : (char)s[i];
    out[m] = '\0';
    free(s);
}

/* A refusal naming member k of param: fmt takes param, then the member's name. */
static int refuse_member(proto_oai_error *e, const char *code, const char *param, pj_span k,
                         const char *fmt)
{
    char name[41];
    key_name(k, name, sizeof name);
    return fail(e, code, param, fmt, param, name);
}

/* ---------------------------------------------------------------- values */

static int is_null(pj_span v)
{
    return pj_type_of(v) == PJ_NULL;
}

static int get_bool(pj_span v, const char *param, int *out, proto_oai_error *e)
{
    pj_type t = pj_type_of(v);
    if (t != PJ_TRUE && t != PJ_FALSE)
        return invalid(e, param, "a boolean");
    *out = t == PJ_TRUE;
    return 0;
}

/* A finite number in [lo, hi]. */
static int get_num(pj_span v, const char *param, double lo, double hi, double *out,
                   proto_oai_error *e)
{
    char what[96];
    snprintf(what, sizeof what, "a number in [%g, %g]", lo, hi);
    if (pj_number(v, out) != 0 || !isfinite(*out) || *out < lo || *out > hi)
        return invalid(e, param, what);
    return 0;
}

/* An integer in [lo, hi]. */
static int get_int(pj_span v, const char *param, double lo, double hi, double *out,
                   proto_oai_error *e)
{
    char what[96];
    snprintf(what, sizeof what, "an integer in [%.0f, %.0f]", lo, hi);
    if (pj_number(v, out) != 0 || !isfinite(*out) || *out != floor(*out) || *out < lo || *out > hi)
        return invalid(e, param, what);
    return 0;
}

/* ---------------------------------------------------------------- prompts */

static int add_prompt(proto_oai_req *r, int32_t *tokens, size_t n)
{
    proto_oai_prompt *p = realloc(r->prompts, (r->n_prompts + 1) * sizeof *p);
    if (!p)
        abort();
    r->prompts = p;
    p[r->n_prompts].tokens = tokens;
    p[r->n_prompts].n = n;
    r->n_prompts++;
    return 0;
}

/* Text -> ids with the model's tokenizer (bytes without one). */
static int encode(const char *text, size_t len, int add_special, const proto_limits *lim,
                  const char *param, proto_oai_req *r, proto_oai_error *e)
{
    int32_t *t = NULL;
    size_t n = 0;
    if (lim->encode) {
        if (lim->encode(lim->encode_ctx, (const uint8_t *)text, len, add_special, &t, &n) != 0)
            return fail(e, "invalid_value", param, "'%s' could not be tokenized", param);
    } else {
        n = len;
        if (n > lim->max_tokens_per_request)
            goto too_many;
        t = n ? malloc(n * sizeof *t) : NULL;
        if (n && !t)
            abort();
        for (size_t i = 0; i < n; i++)
            t[i] = (unsigned char)text[i];
    }
    if (n > lim->max_tokens_per_request) {
        free(t);
        goto too_many;
    }
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= lim->vocab_size) {
            int id = t[i];
            free(t);
            return fail(e, "invalid_value", param, "'%s' token %zu (%d) is not a token id in [0, %d)",
                        param, i, id, lim->vocab_size);
        }
    return add_prompt(r, t, n);
too_many:
    return fail(e, "too_many_tokens", param, "'%s' is %zu tokens; max_tokens_per_request is %zu",
                param, n, lim->max_tokens_per_request);
}

static int prompt_text(pj_span v, const proto_limits *lim, proto_oai_req *r, proto_oai_error *e)
{
    size_t len;
    char *s = pj_string_dup(v, &len);
    int rc = encode(s, len, 1, lim, "prompt", r, e);
    free(s);
    return rc;
}

static int prompt_ids(pj_span arr, const proto_limits *lim, proto_oai_req *r, proto_oai_error *e)
{
    size_t count = 0;
    pj_iter it;
    pj_span el;
    pj_array_begin(arr, &it);
    while (pj_array_next(&it, &el))
        count++;
    if (count > lim->max_tokens_per_request)
        return fail(e, "too_many_tokens", "prompt",
                    "a 'prompt' has %zu tokens; max_tokens_per_request is %zu", count,
                    lim->max_tokens_per_request);
    int32_t *t = count ? malloc(count * sizeof *t) : NULL;
    if (count && !t)
        abort();
    size_t i = 0;
    pj_array_begin(arr, &it);
    while (pj_array_next(&it, &el)) {
        double v;
        if (pj_type_of(el) != PJ_NUMBER || pj_number(el, &v) != 0 || v != floor(v) || v < 0 ||
            v >= lim->vocab_size) {
            free(t);
            return fail(e, "invalid_value", "prompt", "'prompt' token %zu is not a token id in [0, %d)",
                        i, lim->vocab_size);
        }
        t[i++] = (int32_t)v;
    }
    return add_prompt(r, t, count);
}

/* string | [string, ...] | [id, ...] | [[id, ...], ...] */
static int decode_prompt(pj_span v, const proto_limits *lim, proto_oai_req *r, proto_oai_error *e)
{
    static const char what[] =
        "a string, an array of strings, an array of token ids or an array of token-id arrays";
    if (pj_type_of(v) == PJ_STRING)
        return prompt_text(v, lim, r, e);
    if (pj_type_of(v) != PJ_ARRAY)
        return invalid(e, "prompt", what);
    pj_iter it;
    pj_span el;
    pj_array_begin(v, &it);
    if (!pj_array_next(&it, &el))
        return invalid(e, "prompt", "a non-empty string or array");
    pj_type first = pj_type_of(el);
    if (first == PJ_NUMBER)
        return prompt_ids(v, lim, r, e);
    pj_array_begin(v, &it);
    while (pj_array_next(&it, &el)) {
        if (pj_type_of(el) != first || (first != PJ_STRING && first != PJ_ARRAY))
            return invalid(e, "prompt", what);
        int rc = first == PJ_STRING ? prompt_text(el, lim, r, e) : prompt_ids(el, lim, r, e);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- messages */

static void msgs_free(proto_chat_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].role);
        free(m[i].content);
    }
    free(m);
}

/* content: a string, or an array of {"type":"text","text":"..."} parts (concatenated). */
static int decode_content(pj_span v, proto_chat_msg *m, size_t idx, proto_oai_error *e)
{
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", idx);
    if (pj_type_of(v) == PJ_STRING) {
        m->content = pj_string_dup(v, &m->content_len);
        return 0;
    }
    if (pj_type_of(v) != PJ_ARRAY)
        return invalid(e, param, "a string or an array of text parts");
    size_t cap = 0;
    m->content = malloc(1);
    if (!m->content)
        abort();
    m->content_len = 0;
    pj_iter it;
    pj_span part;
    pj_array_begin(v, &it);
    while (pj_array_next(&it, &part)) {
        if (pj_type_of(part) != PJ_OBJECT)
            return invalid(e, param, "an array of {\"type\":\"text\",\"text\":...} parts");
        pj_iter pi;
        pj_span k, val, text = {0};
        int is_text = 0;
        pj_object_begin(part, &pi);
        while (pj_object_next(&pi, &k, &val)) {
            if (pj_string_eq(k, "type")) {
                if (pj_type_of(val) != PJ_STRING)
                    return invalid(e, param, "parts with a string \"type\"");
                if (!pj_string_eq(val, "text"))
                    return fail(e, "unsupported_parameter", param,
                                "'%s': only text parts are supported (recurd serves a text model)",
                                param);
                is_text = 1;
            } else if (pj_string_eq(k, "text")) {
                if (pj_type_of(val) != PJ_STRING)
                    return invalid(e, param, "parts whose \"text\" is a string");
                text = val;
            } else {
                return refuse_member(e, "unknown_parameter", param, k, "'%s': unknown part member '%s'");
            }
        }
        if (!is_text || !text.p)
            return invalid(e, param, "parts of {\"type\":\"text\",\"text\":...}");
        size_t n = pj_string_len(text);
        if (m->content_len + n + 1 > cap) {
            cap = (m->content_len + n + 1) * 2;
            char *c = realloc(m->content, cap);
            if (!c)
                abort();
            m->content = c;
        }
        pj_string_decode(text, (uint8_t *)m->content + m->content_len);
        m->content_len += n;
        m->content[m->content_len] = '\0';
    }
    return 0;
}

static int decode_message(pj_span v, proto_chat_msg *m, size_t idx, proto_oai_error *e)
{
    char param[48];
    snprintf(param, sizeof param, "messages[%zu]", idx);
    if (pj_type_of(v) != PJ_OBJECT)
        return invalid(e, param, "an object with \"role\" and \"content\"");
    pj_iter it;
    pj_span k, val, content = {0};
    int has_content = 0;
    pj_object_begin(v, &it);
    while (pj_object_next(&it, &k, &val)) {
        if (pj_string_eq(k, "role")) {
            if (pj_type_of(val) != PJ_STRING)
                return invalid(e, param, "an object whose \"role\" is a string");
            if (!pj_string_eq(val, "system") && !pj_string_eq(val, "user") &&
                !pj_string_eq(val, "assistant"))
                return fail(e, "unsupported_parameter", param,
                            "'%s.role': recurd supports the roles system, user and assistant", param);
            m->role = pj_string_dup(val, &m->role_len);
        } else if (pj_string_eq(k, "content")) {
            content = val;
            has_content = !is_null(val);
        } else if (pj_string_eq(k, "name") || pj_string_eq(k, "tool_calls") ||
                   pj_string_eq(k, "tool_call_id") || pj_string_eq(k, "function_call") ||
                   pj_string_eq(k, "refusal") || pj_string_eq(k, "audio")) {
            if (is_null(val))
                continue;
            return refuse_member(e, "unsupported_parameter", param, k,
                                 "'%s.%s' is not supported by recurd");
        } else {
            return refuse_member(e, "unknown_parameter", param, k, "'%s': unknown member '%s'");
        }
    }
    if (!m->role)
        return fail(e, "missing_required_parameter", param, "'%s.role' is required", param);
    if (!has_content)
        return fail(e, "missing_required_parameter", param, "'%s.content' is required", param);
    return decode_content(content, m, idx, e);
}

static int decode_messages(pj_span v, const proto_limits *lim, proto_render_fn *render,
                           const void *rctx, proto_oai_req *r, proto_oai_error *e)
{
    if (pj_type_of(v) != PJ_ARRAY)
        return invalid(e, "messages", "an array of messages");
    size_t n = 0;
    pj_iter it;
    pj_span el;
    pj_array_begin(v, &it);
    while (pj_array_next(&it, &el))
        n++;
    if (n == 0)
        return invalid(e, "messages", "a non-empty array");
    proto_chat_msg *m = calloc(n, sizeof *m);
    if (!m)
        abort();
    size_t i = 0;
    int rc = 0;
    pj_array_begin(v, &it);
    while (rc == 0 && pj_array_next(&it, &el)) {
        rc = decode_message(el, &m[i], i, e);
        i++;
    }
    if (rc == 0) {
        char *text = NULL, err[200] = "";
        size_t len = 0;
        if (!render || render(rctx, m, n, &text, &len, err, sizeof err) != 0)
            rc = fail(e, "invalid_value", "messages", "the chat template could not render 'messages': %s",
                      render ? err : "no chat template");
        else {
            rc = encode(text, len, 0, lim, "messages", r, e);
            free(text);
        }
    }
    msgs_free(m, n);
    return rc;
}

/* ---------------------------------------------------------------- the other fields */

static int decode_stop(pj_span v, proto_oai_req *r, proto_oai_error *e)
{
    static const char what[] = "a string or an array of up to 4 strings of 1 to 64 bytes";
    pj_span one[1];
    size_t n = 0;
    pj_iter it;
    pj_span el;
    if (pj_type_of(v) == PJ_STRING) {
        one[0] = v;
        n = 1;
    } else if (pj_type_of(v) != PJ_ARRAY) {
        return invalid(e, "stop", what);
    }
    if (n == 0)
        pj_array_begin(v, &it);
    for (size_t i = 0;; i++) {
        if (n == 1) {
            if (i == 1)
                break;
            el = one[0];
        } else if (!pj_array_next(&it, &el)) {
            break;
        }
        if (r->gen.n_stop == PROTO_OAI_MAX_STOP || pj_type_of(el) != PJ_STRING)
            return invalid(e, "stop", what);
        size_t len = pj_string_len(el);
        if (len == 0 || len > PROTO_MAX_STOP_BYTES)
            return invalid(e, "stop", what);
        pj_string_decode(el, (uint8_t *)r->gen.stop[r->gen.n_stop]);
        r->gen.stop[r->gen.n_stop][len] = '\0';
        r->gen.stop_len[r->gen.n_stop++] = len;
    }
    return 0;
}

static int decode_logit_bias(pj_span v, const proto_limits *lim, proto_oai_req *r,
                             proto_oai_error *e)
{
    if (pj_type_of(v) != PJ_OBJECT)
        return invalid(e, "logit_bias", "an object of token id -> bias in [-100, 100]");
    pj_iter it;
    pj_span k, val;
    pj_object_begin(v, &it);
    while (pj_object_next(&it, &k, &val)) {
        if (r->n_bias == PROTO_OAI_MAX_LOGIT_BIAS)
            return fail(e, "invalid_value", "logit_bias", "'logit_bias' has more than %d entries",
                        PROTO_OAI_MAX_LOGIT_BIAS);
        char key[24];
        size_t kl = pj_string_len(k);
        long id = -1;
        if (kl > 0 && kl < sizeof key) {
            pj_string_decode(k, (uint8_t *)key);
            key[kl] = '\0';
            char *end;
            id = strtol(key, &end, 10);
            if (*end || key[0] < '0' || key[0] > '9' || (key[0] == '0' && kl > 1))
                id = -1;
        }
        if (id < 0 || id >= lim->vocab_size)
            return fail(e, "invalid_value", "logit_bias",
                        "'logit_bias' keys must be token ids in [0, %d)", lim->vocab_size);
        double b;
        if (get_num(val, "logit_bias", -100, 100, &b, e))
            return -1;
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)b;
    }
    return 0;
}

static int decode_stream_options(pj_span v, proto_oai_req *r, proto_oai_error *e)
{
    if (pj_type_of(v) != PJ_OBJECT)
        return invalid(e, "stream_options", "an object");
    pj_iter it;
    pj_span k, val;
    pj_object_begin(v, &it);
    while (pj_object_next(&it, &k, &val)) {
        if (pj_string_eq(k, "include_usage")) {
            if (!is_null(val) && get_bool(val, "stream_options.include_usage", &r->include_usage, e))
                return -1;
        } else {
            return refuse_member(e, "unknown_parameter", "stream_options", k,
                                 "'%s.%s' is not supported by recurd");
        }
    }
    return 0;
}

/* One top-level member (not null, known). */
static int decode_member(pj_span k, pj_span v, const proto_limits *lim, proto_render_fn *render,
                         const void *rctx, proto_oai_req *r, int *seen_max, proto_oai_error *e)
{
    double d;
    if (pj_string_eq(k, "model")) {
        if (pj_type_of(v) != PJ_STRING || pj_string_len(v) > PROTO_OAI_MODEL_MAX)
            return invalid(e, "model", "a string of at most 256 bytes");
        r->model_len = pj_string_decode(v, (uint8_t *)r->model);
        r->model[r->model_len] = '\0';
    } else if (pj_string_eq(k, "prompt")) {
        return decode_prompt(v, lim, r, e);
    } else if (pj_string_eq(k, "messages")) {
        return decode_messages(v, lim, render, rctx, r, e);
    } else if (pj_string_eq(k, "max_tokens") || pj_string_eq(k, "max_completion_tokens")) {
        const char *name = pj_string_eq(k, "max_tokens") ? "max_tokens" : "max_completion_tokens";
        if (++*seen_max > 1)
            return fail(e, "invalid_value", name, "give 'max_tokens' or 'max_completion_tokens', not both");
        if (get_int(v, name, 0, 9007199254740991.0, &d, e))
            return -1;
        if (d > (double)lim->max_tokens_per_request)
            return fail(e, "too_many_tokens", name, "'%s' is %.0f; max_tokens_per_request is %zu",
                        name, d, lim->max_tokens_per_request);
        r->gen.max_tokens = (int64_t)d;
        r->has_max_tokens = 1;
    } else if (pj_string_eq(k, "temperature")) {
        if (get_num(v, "temperature", 0, 2, &d, e))
            return -1;
        r->gen.temperature = (float)d;
    } else if (pj_string_eq(k, "top_p")) {
        if (get_num(v, "top_p", 0, 1, &d, e))
            return -1;
        r->gen.top_p = fmaxf((float)d, FLT_TRUE_MIN); /* 0 keeps only the most likely token */
    } else if (pj_string_eq(k, "top_k")) {
        if (get_int(v, "top_k", 0, lim->vocab_size, &d, e))
            return -1;
        r->gen.top_k = (int)d;
    } else if (pj_string_eq(k, "n")) {
        if (get_int(v, "n", 1, 128, &d, e))
            return -1;
        r->n = (int)d;
    } else if (pj_string_eq(k, "stream")) {
        return get_bool(v, "stream", &r->stream, e);
    } else if (pj_string_eq(k, "stream_options")) {
        return decode_stream_options(v, r, e);
    } else if (pj_string_eq(k, "stop")) {
        return decode_stop(v, r, e);
    } else if (pj_string_eq(k, "seed")) {
        /* OpenAI takes any 64-bit integer; the bits are the seed */
        if (get_int(v, "seed", -9007199254740991.0, 9007199254740991.0, &d, e))
            return -1;
        r->gen.seed = (uint64_t)(int64_t)d;
        r->gen.has_seed = 1;
    } else if (pj_string_eq(k, "logprobs")) {
        if (r->chat)
            return get_bool(v, "logprobs", &r->logprobs, e);
        if (get_int(v, "logprobs", 0, PROTO_OAI_MAX_TOP_LOGPROBS, &d, e))
            return -1;
        r->logprobs = 1;
        r->top_logprobs = (int)d;
    } else if (pj_string_eq(k, "top_logprobs")) {
        if (get_int(v, "top_logprobs", 0, PROTO_OAI_MAX_TOP_LOGPROBS, &d, e))
            return -1;
        r->top_logprobs = (int)d;
    } else if (pj_string_eq(k, "echo")) {
        return get_bool(v, "echo", &r->echo, e);
    } else if (pj_string_eq(k, "presence_penalty") || pj_string_eq(k, "frequency_penalty")) {
        int pres = pj_string_eq(k, "presence_penalty");
        if (get_num(v, pres ? "presence_penalty" : "frequency_penalty", -2, 2, &d, e))
            return -1;
        *(pres ? &r->presence_penalty : &r->frequency_penalty) = (float)d;
    } else if (pj_string_eq(k, "logit_bias")) {
        return decode_logit_bias(v, lim, r, e);
    } else if (pj_string_eq(k, "user")) {
        if (pj_type_of(v) != PJ_STRING) /* an end-user id for abuse tracking: accepted, unused */
            return invalid(e, "user", "a string");
    }
    return 0;
}

/* Refusals that need the whole body: which members it has and how they combine. */
static int check_combination(const proto_oai_req *r, int chat_top_logprobs_given,
                             proto_oai_error *e)
{
    if (!r->model_len)
        return fail(e, "missing_required_parameter", "model", "'model' is required");
    if (!r->n_prompts)
        return fail(e, "missing_required_parameter", r->chat ? "messages" : "prompt",
                    "'%s' is required", r->chat ? "messages" : "prompt");
    for (size_t i = 0; i < r->n_prompts; i++)
        if (r->prompts[i].n == 0)
            return fail(e, "invalid_value", r->chat ? "messages" : "prompt",
                        "prompt %zu has no tokens: a recurrent model needs at least one token to "
                        "predict from", i);
    if (r->include_usage && !r->stream)
        return fail(e, "invalid_value", "stream_options",
                    "'stream_options' is only allowed when 'stream' is true");
    if (r->chat && chat_top_logprobs_given && !r->logprobs && r->top_logprobs)
        return fail(e, "invalid_value", "top_logprobs",
                    "'top_logprobs' needs 'logprobs' set to true");
    if (r->echo && r->logprobs)
        return fail(e, "unsupported_parameter", "echo",
                    "'echo' with 'logprobs' (logprobs of the prompt) is not supported by recurd");
    return 0;
}

int proto_decode_oai_req(const uint8_t *body, size_t len, int chat, const proto_limits *lim,
                         proto_render_fn *render, const void *rctx, proto_oai_req *out,
                         proto_oai_error *err)
{
    memset(out, 0, sizeof *out);
    out->chat = chat;
    out->n = 1;
    out->gen.temperature = 1.0f;
    out->gen.top_p = 1.0f;
    out->gen.max_tokens = chat ? (int64_t)lim->max_tokens_per_request : PROTO_OAI_DEFAULT_MAX_TOKENS;
    if ((size_t)out->gen.max_tokens > lim->max_tokens_per_request)
        out->gen.max_tokens = (int64_t)lim->max_tokens_per_request;
    pj_doc d;
    if (pj_parse(body, len, &d) != 0) {
        if (d.status == PJ_DUPLICATE) {
            char name[41];
            size_t n = d.dup_len < sizeof d.dup ? d.dup_len : sizeof d.dup - 1;
            memcpy(name, d.dup, n);
            name[n] = '\0';
            for (size_t i = 0; i < n; i++)
                if ((unsigned char)name[i] < 0x20 || name[i] == '\'')
                    name[i] = '?';
            return fail(err, "duplicate_key", name, "duplicate key '%s' in the JSON body", name);
        }
        return fail(err, "invalid_json", NULL, "the body is not valid JSON: %s (at byte %zu)",
                    d.reason, d.offset);
    }
    if (d.top_type != PJ_OBJECT)
        return fail(err, "invalid_json", NULL, "the body must be a JSON object");
    const char *const *fields = chat ? CHAT_FIELDS : COMPLETION_FIELDS;
    /* Names first: an unsupported or unknown field is named even when another one is invalid. */
    pj_iter it;
    pj_span k, v;
    pj_object_begin(d.top, &it);
    while (pj_object_next(&it, &k, &v)) {
        if (in_list(k, fields))
            continue;
        char name[41];
        key_name(k, name, sizeof name);
        if (in_list(k, UNSUPPORTED) || (!chat && (pj_string_eq(k, "messages") ||
                                                  pj_string_eq(k, "top_logprobs"))) ||
            (chat && (pj_string_eq(k, "prompt") || pj_string_eq(k, "echo")))) {
            if (is_null(v))
                continue;
            /* {"type":"text"} is OpenAI's default: it asks for nothing else */
            if (pj_string_eq(k, "response_format") && pj_type_of(v) == PJ_OBJECT) {
                pj_iter ri;
                pj_span rk, rv;
                int plain = 1, members = 0;
                pj_object_begin(v, &ri);
                while (pj_object_next(&ri, &rk, &rv))
                    plain &= ++members == 1 && pj_string_eq(rk, "type") && pj_string_eq(rv, "text");
                if (plain && members == 1)
                    continue;
            }
            return fail(err, "unsupported_parameter", name,
                        "'%s' is not supported by recurd (docs/API.md \"OpenAI API\")", name);
        }
        return fail(err, "unknown_parameter", name, "unrecognized request argument '%s'", name);
    }
    int seen_max = 0, top_given = 0, rc = 0;
    pj_object_begin(d.top, &it);
    while (rc == 0 && pj_object_next(&it, &k, &v)) {
        if (is_null(v) || !in_list(k, fields))
            continue;
        top_given |= pj_string_eq(k, "top_logprobs");
        rc = decode_member(k, v, lim, render, rctx, out, &seen_max, err);
    }
    if (rc == 0)
        rc = check_combination(out, top_given, err);
    if (rc != 0)
        proto_oai_req_free(out);
    return rc;
}

void proto_oai_req_free(proto_oai_req *r)
{
    for (size_t i = 0; i < r->n_prompts; i++)
        free(r->prompts[i].tokens);
    free(r->prompts);
    r->prompts = NULL;
    r->n_prompts = 0;
}
