/* openai_chat.c — the chat template of POST /v1/chat/completions (openai.h): chosen at start,
 * rendered for every chat request (on the loop or the threadpool: a template is immutable). */
#include "openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"

static const char *const BUILTINS[] = {"chatml", "llama2", "llama3", "rwkv", "plain", NULL};

/* A Jinja file named by chat_template. */
static int load_file(const char *path, recur_chat_template **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open the file");
        return RECUR_EIO;
    }
    char *src = malloc(RECUR_CHAT_MAX_TEMPLATE_BYTES + 1);
    if (!src)
        abort();
    size_t n = fread(src, 1, RECUR_CHAT_MAX_TEMPLATE_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad) {
        snprintf(err, errlen, "cannot read the file");
        rc = RECUR_EIO;
    } else {
        rc = recur_chat_template_parse(src, n, NULL, NULL, out, err, errlen);
    }
    free(src);
    return rc;
}

/* The template chat_template names, or the model folder's, or "rwkv" for a folder with the RWKV
 * World vocabulary (RWKV models are trained on its User: / Assistant: form), or "plain". *source
 * says which. */
static int choose(srv_app *app, const char **source, char *err, size_t errlen)
{
    const char *name = app->cfg.chat_template;
    if (name[0]) {
        *source = name;
        for (const char *const *b = BUILTINS; *b; b++)
            if (!strcmp(*b, name))
                return recur_chat_template_builtin(name, &app->chat, err, errlen);
        return load_file(name, &app->chat, err, errlen);
    }
    struct stat st;
    const char *dir = app->cfg.model;
    int rc = RECUR_ENOENT;
    if (!app->cfg.model_config[0] && dir[0] && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        *source = "tokenizer_config.json";
        rc = recur_chat_template_load_dir(dir, &app->chat, err, errlen);
    }
    if (rc == RECUR_ENOENT) { /* no template in the folder: RWKV World's, else (the byte model) plain */
        *source = app->tok && recur_tokenizer_kind(app->tok) == RECUR_TOKENIZER_RWKV ? "rwkv" : "plain";
        rc = recur_chat_template_builtin(*source, &app->chat, err, errlen);
    }
    return rc;
}

/* The template's eos_token as an added token of the served tokenizer: the OpenAI routes stop
 * generating at it (as llama.cpp stops at end-of-generation tokens and vLLM at eos_token_id). An
 * eos that is no added token (none for plain and rwkv; the byte tokenizer has no added tokens)
 * gives none: then only max_tokens and stop strings end a generation. */
static void resolve_end_id(srv_app *app)
{
    app->n_end_ids = 0;
    const char *eos = recur_chat_template_eos_token(app->chat);
    int32_t id;
    const char *content;
    int special;
    for (size_t i = 0; eos[0] && recur_tokenizer_added_token(app->tok, i, &id, &content, &special) == 0; i++)
        if (!strcmp(content, eos) && id < app->info->vocab_size) {
            app->end_ids[0] = id;
            app->n_end_ids = 1;
            char e[256];
            srv_log(SRV_LOG_INFO, "chat_end_of_turn", "\"token\":\"%s\",\"id\":%d",
                    srv_log_str(eos, e, sizeof e), (int)id);
            return;
        }
}

int srv_chat_load(srv_app *app)
{
    char err[256] = "", e[512], p[512];
    const char *source = "";
    int rc = choose(app, &source, err, sizeof err);
    if (rc == 0) {
        /* a template that cannot render a one-message chat is refused now, not per request */
        recur_chat_message m = {"user", 4, "Hello", 5};
        char *text = NULL;
        size_t len = 0;
        rc = recur_chat_render(app->chat, &m, 1, 1, &text, &len, err, sizeof err);
        recur_chat_release(text);
    }
    if (rc == 0) {
        snprintf(app->chat_source, sizeof app->chat_source, "%.63s", source);
        resolve_end_id(app);
        srv_log(SRV_LOG_INFO, "chat_template", "\"source\":\"%s\"", srv_log_str(source, p, sizeof p));
        return 0;
    }
    recur_chat_template_free(app->chat);
    app->chat = NULL;
    snprintf(app->chat_error, sizeof app->chat_error, "%.60s: %.250s", source,
             err[0] ? err : recur_strerror(rc));
    /* RECUR_EINVAL from the automatic choice: librecur has no chat templates to offer (the
     * interpreter is not built in); the chat route says so per request, the rest serves. A
     * template that was named, or that the model folder holds and cannot be used, is fatal. */
    int fatal = app->cfg.chat_template[0] || rc != RECUR_EINVAL;
    srv_log(fatal ? SRV_LOG_ERROR : SRV_LOG_WARN, "chat_template_unusable",
            "\"source\":\"%s\",\"error\":\"%s\"", srv_log_str(source, p, sizeof p),
            srv_log_str(app->chat_error, e, sizeof e));
    return fatal ? -1 : 0;
}

void srv_chat_free(srv_app *app)
{
    recur_chat_template_free(app->chat);
    app->chat = NULL;
}

int srv_chat_render(const void *ctx, const proto_chat_msg *msgs, size_t n, char **text,
                    size_t *len, char *err, size_t errlen)
{
    const srv_app *app = ctx;
    if (!app->chat) {
        snprintf(err, errlen, "no chat template (%s)", app->chat_error);
        return -1;
    }
    recur_chat_message *m = malloc((n ? n : 1) * sizeof *m);
    if (!m)
        abort();
    for (size_t i = 0; i < n; i++)
        m[i] = (recur_chat_message){msgs[i].role, msgs[i].role_len, msgs[i].content,
                                    msgs[i].content_len};
    char *out = NULL;
    size_t ol = 0;
    int rc = recur_chat_render(app->chat, m, n, 1, &out, &ol, err, errlen);
    free(m);
    if (rc != 0)
        return -1;
    *text = malloc(ol + 1);
    if (!*text)
        abort();
    memcpy(*text, out, ol + 1);
    *len = ol;
    recur_chat_release(out);
    return 0;
}
