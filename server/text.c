/* text.c — the served model's tokenizer (text.h). */
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"

int srv_text_load(srv_app *app)
{
    char err[256] = "";
    int rc;
    struct stat st;
    const char *dir = app->cfg.model;
    /* a model folder may hold a tokenizer; seeded weights (--model-config) have none */
    if (!app->cfg.model_config[0] && dir[0] && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        rc = recur_tokenizer_load(dir, &app->tok, err, sizeof err);
    else
        rc = recur_tokenizer_bytes(&app->tok);
    if (rc != 0) {
        char p[512], e[512];
        srv_log(SRV_LOG_ERROR, "tokenizer_load_failed", "\"path\":\"%s\",\"error\":\"%s\"",
                srv_log_str(dir, p, sizeof p), srv_log_str(err[0] ? err : recur_strerror(rc), e, sizeof e));
        return -1;
    }
    int32_t tv = recur_tokenizer_vocab_size(app->tok);
    /* the byte tokenizer keeps today's rule instead: a byte >= vocab_size is invalid_token */
    if (recur_tokenizer_kind(app->tok) != RECUR_TOKENIZER_BYTES && tv > app->info->vocab_size) {
        srv_log(SRV_LOG_ERROR, "tokenizer_vocab_mismatch",
                "\"tokenizer_vocab_size\":%d,\"model_vocab_size\":%d", (int)tv, app->info->vocab_size);
        recur_tokenizer_free(app->tok);
        app->tok = NULL;
        return -1;
    }
    return 0;
}

void srv_text_free(srv_app *app)
{
    recur_tokenizer_free(app->tok);
    app->tok = NULL;
}

int srv_text_active(const srv_app *app)
{
    return app->tok && recur_tokenizer_kind(app->tok) != RECUR_TOKENIZER_BYTES;
}

int srv_text_sample_limit(const srv_app *app)
{
    if (!srv_text_active(app))
        return 0;
    int32_t tv = recur_tokenizer_vocab_size(app->tok);
    return tv < app->info->vocab_size ? (int)tv : 0;
}

static int encode(const void *ctx, const uint8_t *text, size_t len, int add_special, int32_t **ids,
                  size_t *n)
{
    int32_t *t = NULL;
    size_t m = 0;
    if (recur_tokenizer_encode(ctx, (const char *)text, len, add_special, &t, &m) != 0)
        return -1;
    *ids = NULL;
    *n = m;
    if (m) {
        *ids = malloc(m * sizeof **ids);
        if (!*ids)
            abort();
        memcpy(*ids, t, m * sizeof *t);
    }
    recur_tokenizer_release(t);
    return 0;
}

void srv_text_limits(const srv_app *app, proto_limits *lim)
{
    lim->encode = srv_text_active(app) ? encode : NULL;
    lim->encode_ctx = app->tok;
}

void srv_text_model_json(const srv_app *app, proto_buf *b)
{
    static const char *const kinds[] = {"bytes", "huggingface", "rwkv"};
    int k = recur_tokenizer_kind(app->tok);
    proto_buf_printf(b, ",\"tokenizer\":{\"kind\":\"%s\",\"vocab_size\":%d,\"special_tokens\":[",
                     k >= 0 && k <= 2 ? kinds[k] : "unknown", (int)recur_tokenizer_vocab_size(app->tok));
    int32_t id;
    const char *content;
    int special, first = 1;
    for (size_t i = 0; recur_tokenizer_added_token(app->tok, i, &id, &content, &special) == 0; i++) {
        if (!special)
            continue;
        proto_buf_printf(b, "%s{\"id\":%d,\"content\":", first ? "" : ",", (int)id);
        proto_buf_json_str(b, content, strlen(content));
        proto_buf_puts(b, "}");
        first = 0;
    }
    proto_buf_puts(b, "]}");
}
