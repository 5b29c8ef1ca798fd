/* openai_responses.c — the OpenAI routes' JSON (openai_responses.h). */
#include "openai_responses.h"

#include <string.h>

static void str_or_null(proto_buf *b, const char *s)
{
    if (s && *s)
        proto_buf_json_str(b, s, strlen(s));
    else
        proto_buf_puts(b, "null");
}

void proto_oai_error_json(proto_buf *b, const char *message, const char *type, const char *param,
                          const char *code)
{
    proto_buf_puts(b, "{\"error\":{\"message\":");
    proto_buf_json_str(b, message, strlen(message));
    proto_buf_puts(b, ",\"type\":");
    proto_buf_json_str(b, type, strlen(type));
    proto_buf_puts(b, ",\"param\":");
    str_or_null(b, param);
    proto_buf_puts(b, ",\"code\":");
    str_or_null(b, code);
    proto_buf_puts(b, "}}");
}

void proto_oai_object_begin(proto_buf *b, const proto_oai_head *h, int chunk)
{
    const char *object = h->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                 : "text_completion";
    proto_buf_puts(b, "{\"id\":");
    proto_buf_json_str(b, h->id, strlen(h->id));
    proto_buf_printf(b, ",\"object\":\"%s\",\"created\":%llu,\"model\":", object,
                     (unsigned long long)h->created);
    proto_buf_json_str(b, h->model, strlen(h->model));
    proto_buf_puts(b, ",\"system_fingerprint\":");
    proto_buf_json_str(b, h->fingerprint, strlen(h->fingerprint));
    proto_buf_puts(b, ",\"choices\":[");
}

void proto_oai_object_end(proto_buf *b, const proto_oai_usage *u, int usage_null)
{
    proto_buf_puts(b, "]");
    if (u)
        proto_buf_printf(b,
                         ",\"usage\":{\"prompt_tokens\":%llu,\"completion_tokens\":%llu,"
                         "\"total_tokens\":%llu,\"prompt_tokens_details\":{\"cached_tokens\":%llu}}",
                         (unsigned long long)u->prompt_tokens,
                         (unsigned long long)u->completion_tokens,
                         (unsigned long long)(u->prompt_tokens + u->completion_tokens),
                         (unsigned long long)u->cached_tokens);
    else if (usage_null)
        proto_buf_puts(b, ",\"usage\":null");
    proto_buf_puts(b, "}");
}

/* "bytes":[...] of a token's text. */
static void bytes_json(proto_buf *b, const char *s, size_t n)
{
    proto_buf_puts(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++)
        proto_buf_printf(b, "%s%u", i ? "," : "", (unsigned)(unsigned char)s[i]);
    proto_buf_puts(b, "]");
}

static void chat_cand(proto_buf *b, const proto_oai_cand *c)
{
    proto_buf_puts(b, "{\"token\":");
    proto_buf_json_str(b, c->text, c->len);
    proto_buf_puts(b, ",\"logprob\":");
    proto_buf_float(b, c->logprob);
    bytes_json(b, c->text, c->len);
}

void proto_oai_logprobs_json(proto_buf *b, int chat, const proto_oai_lp *lps, size_t n,
                             int with_top)
{
    if (chat) {
        proto_buf_puts(b, "{\"content\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                proto_buf_puts(b, ",");
            chat_cand(b, &lps[i].tok);
            proto_buf_puts(b, ",\"top_logprobs\":[");
            for (int j = 0; j < lps[i].n_top; j++) {
                if (j)
                    proto_buf_puts(b, ",");
                chat_cand(b, &lps[i].top[j]);
                proto_buf_puts(b, "}");
            }
            proto_buf_puts(b, "]}");
        }
        proto_buf_puts(b, "],\"refusal\":null}");
        return;
    }
    proto_buf_puts(b, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            proto_buf_puts(b, ",");
        proto_buf_json_str(b, lps[i].tok.text, lps[i].tok.len);
    }
    proto_buf_puts(b, "],\"token_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            proto_buf_puts(b, ",");
        proto_buf_float(b, lps[i].tok.logprob);
    }
    proto_buf_puts(b, "],\"top_logprobs\":");
    if (!with_top) {
        proto_buf_puts(b, "null");
    } else {
        proto_buf_puts(b, "[");
        for (size_t i = 0; i < n; i++) {
            proto_buf_puts(b, i ? ",{" : "{");
            int written = 0;
            for (int j = 0; j < lps[i].n_top; j++) {
                const proto_oai_cand *c = &lps[i].top[j];
                int repeat = 0;
                for (int k = 0; k < j && !repeat; k++)
                    repeat = lps[i].top[k].len == c->len && !memcmp(lps[i].top[k].text, c->text, c->len);
                if (repeat)
                    continue;
                if (written++)
                    proto_buf_puts(b, ",");
                proto_buf_json_str(b, c->text, c->len);
                proto_buf_puts(b, ":");
                proto_buf_float(b, c->logprob);
            }
            proto_buf_puts(b, "}");
        }
        proto_buf_puts(b, "]");
    }
    proto_buf_puts(b, ",\"text_offset\":[");
    for (size_t i = 0; i < n; i++)
        proto_buf_printf(b, "%s%zu", i ? "," : "", lps[i].text_offset);
    proto_buf_puts(b, "]}");
}

void proto_oai_choice_json(proto_buf *b, const proto_oai_head *h, int chunk, int i, int index,
                           const char *text, size_t len, int with_role, const char *logprobs_json,
                           size_t logprobs_len, const char *finish)
{
    if (i)
        proto_buf_puts(b, ",");
    proto_buf_printf(b, "{\"index\":%d,", index);
    if (!h->chat) {
        proto_buf_puts(b, "\"text\":");
        proto_buf_json_str(b, text ? text : "", text ? len : 0);
    } else if (!chunk) {
        proto_buf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        proto_buf_json_str(b, text ? text : "", text ? len : 0);
        proto_buf_puts(b, ",\"refusal\":null}");
    } else {
        proto_buf_puts(b, "\"delta\":{");
        if (with_role)
            proto_buf_puts(b, "\"role\":\"assistant\"");
        if (text) {
            proto_buf_puts(b, with_role ? ",\"content\":" : "\"content\":");
            proto_buf_json_str(b, text, len);
        }
        proto_buf_puts(b, "}");
    }
    proto_buf_puts(b, ",\"logprobs\":");
    if (logprobs_json)
        proto_buf_append(b, logprobs_json, logprobs_len);
    else
        proto_buf_puts(b, "null");
    proto_buf_puts(b, ",\"finish_reason\":");
    str_or_null(b, finish);
    proto_buf_puts(b, "}");
}

void proto_oai_sse_wrap(proto_buf *b, size_t start)
{
    size_t n = b->len - start;
    proto_buf_append(b, "data: ", 6); /* room, then move the object behind the prefix */
    memmove(b->data + start + 6, b->data + start, n);
    memcpy(b->data + start, "data: ", 6);
    proto_buf_append(b, "\n\n", 2);
}

void proto_oai_sse_done(proto_buf *b)
{
    proto_buf_puts(b, "data: [DONE]\n\n");
}

void proto_oai_model_json(proto_buf *b, const char *name, uint64_t created)
{
    proto_buf_puts(b, "{\"id\":");
    proto_buf_json_str(b, name, strlen(name));
    proto_buf_printf(b, ",\"object\":\"model\",\"created\":%llu,\"owned_by\":\"recurd\"}",
                     (unsigned long long)created);
}

void proto_oai_models_json(proto_buf *b, const char *name, uint64_t created)
{
    proto_buf_puts(b, "{\"object\":\"list\",\"data\":[");
    proto_oai_model_json(b, name, created);
    proto_buf_puts(b, "]}");
}
