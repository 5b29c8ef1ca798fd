/* chat_template.c — the chat-template API of recur.h: parse a Jinja source, pick a built-in,
 * load a model folder's template (tokenizer_config.json), render a conversation. Each entry
 * point owns a ct_ctx whose jmp_buf catches ct_fail; the arena and the output buffer are
 * released there, on success and on failure alike. */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat_template.h"
#include "tokenizer.h" /* tk_err, tk_read_file, tk_utf8_valid_prefix, tk_utf8_sanitize */

#define RENDER_MEMORY_BYTES ((size_t)4 * RECUR_CHAT_MAX_OUTPUT_BYTES)

int recur_chat_template_parse(const char *src, size_t len, const char *bos_token, const char *eos_token,
                              recur_chat_template **out, char *err, size_t errlen)
{
    if (!out) return RECUR_EINVAL;
    *out = NULL;
    if (!src && len) return RECUR_EINVAL;
    if (err && errlen) err[0] = 0;
    if (len > RECUR_CHAT_MAX_TEMPLATE_BYTES) {
        tk_err(err, errlen, "chat template of %zu bytes is over RECUR_CHAT_MAX_TEMPLATE_BYTES (%u)", len,
               RECUR_CHAT_MAX_TEMPLATE_BYTES);
        return RECUR_ESHAPE;
    }
    size_t valid = tk_utf8_valid_prefix(src ? src : "", len);
    if (valid != len) {
        tk_err(err, errlen, "chat template: invalid UTF-8 at byte %zu", valid);
        return RECUR_EFORMAT;
    }
    /* the context lives on the heap: what longjmp returns to must not be an automatic
     * variable changed after setjmp */
    recur_chat_template *t = calloc(1, sizeof *t);
    ct_ctx *c = calloc(1, sizeof *c);
    if (!t || !c) { free(t); free(c); return RECUR_ENOMEM; }
    t->arena.limit = RENDER_MEMORY_BYTES;
    c->err = err;
    c->errlen = errlen;
    c->arena = &t->arena;
    if (setjmp(c->jmp)) {
        int code = c->code;
        recur_chat_template_free(t);
        free(c);
        return code;
    }
    /* tokens and text nodes point into this copy; Jinja reads \r\n and \r as \n (newline_sequence) */
    char *copy = ct_strdup(c, src ? src : "", len);
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (copy[i] == '\r') {
            if (i + 1 < len && copy[i + 1] == '\n') i++;
            copy[w++] = '\n';
        } else {
            copy[w++] = copy[i];
        }
    }
    len = w;
    t->bos_n = bos_token ? strlen(bos_token) : 0;
    t->eos_n = eos_token ? strlen(eos_token) : 0;
    t->bos = ct_strdup(c, bos_token ? bos_token : "", t->bos_n);
    t->eos = ct_strdup(c, eos_token ? eos_token : "", t->eos_n);
    if (tk_utf8_valid_prefix(t->bos, t->bos_n) != t->bos_n || tk_utf8_valid_prefix(t->eos, t->eos_n) != t->eos_n)
        ct_fail(c, RECUR_EFORMAT, "chat template: bos_token / eos_token is not valid UTF-8");
    ct_tok *toks;
    size_t ntoks;
    ct_lex(c, copy, len, &toks, &ntoks);
    t->root = ct_parse(c, toks, ntoks);
    free(c);
    *out = t;
    return 0;
}

int recur_chat_template_builtin(const char *name, recur_chat_template **out, char *err, size_t errlen)
{
    if (!out) return RECUR_EINVAL;
    *out = NULL;
    const char *src, *bos, *eos;
    if (!name || !ct_builtin_source(name, &src, &bos, &eos)) {
        tk_err(err, errlen, "unknown built-in chat template '%s' (built-ins: chatml, llama2, llama3, rwkv, plain)",
               name ? name : "(null)");
        return RECUR_EINVAL;
    }
    return recur_chat_template_parse(src, strlen(src), bos, eos, out, err, errlen);
}

const char *recur_chat_template_eos_token(const recur_chat_template *t)
{
    return t->eos;
}

const char *recur_chat_template_builtin_source(const char *name, const char **bos_token, const char **eos_token)
{
    const char *src, *bos, *eos;
    if (!name || !ct_builtin_source(name, &src, &bos, &eos)) return NULL;
    if (bos_token) *bos_token = bos;
    if (eos_token) *eos_token = eos;
    return src;
}

/* a special token of tokenizer_config.json: a string, {"content": "..."} (an AddedToken), or absent */
static int special_token(const cJSON *cfg, const char *key, const char **out, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) { *out = v->valuestring; return 0; }
    const cJSON *content = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
    if (cJSON_IsString(content)) { *out = content->valuestring; return 0; }
    tk_err(err, errlen, "tokenizer_config.json: %s must be a string or {\"content\": string}", key);
    return RECUR_EFORMAT;
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int recur_chat_template_load_dir(const char *dir, recur_chat_template **out, char *err, size_t errlen)
{
    if (!dir || !out) return RECUR_EINVAL;
    *out = NULL;
    char *path = join_path(dir, "tokenizer_config.json");
    if (!path) return RECUR_ENOMEM;
    struct stat st;
    if (stat(path, &st)) {
        int missing = errno == ENOENT;
        tk_err(err, errlen, "%s: %s", path, strerror(errno));
        free(path);
        return missing ? RECUR_ENOENT : RECUR_EIO;
    }
    char *buf = NULL, *jinja = NULL;
    size_t len;
    int rc = tk_read_file(path, &buf, &len, err, errlen);
    if (rc) { free(path); return rc; }
    cJSON *cfg = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!cJSON_IsObject(cfg)) {
        tk_err(err, errlen, "%s: not a JSON object", path);
        cJSON_Delete(cfg);
        free(path);
        return RECUR_EFORMAT;
    }
    const char *bos, *eos, *src = NULL;
    size_t src_len = 0;
    if ((rc = special_token(cfg, "bos_token", &bos, err, errlen)) || (rc = special_token(cfg, "eos_token", &eos, err, errlen)))
        goto done;
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(tpl)) {
        src = tpl->valuestring;
    } else if (cJSON_IsArray(tpl)) {
        /* [{"name": "default", "template": "..."}, {"name": "tool_use", ...}] */
        const cJSON *e;
        cJSON_ArrayForEach(e, tpl) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(text)) src = text->valuestring;
        }
        if (!src) {
            tk_err(err, errlen, "%s: chat_template is a list without a {\"name\": \"default\", \"template\": ...} entry", path);
            rc = RECUR_EFORMAT;
            goto done;
        }
    } else if (tpl && !cJSON_IsNull(tpl)) {
        tk_err(err, errlen, "%s: chat_template must be a string or a list of {name, template}", path);
        rc = RECUR_EFORMAT;
        goto done;
    } else {
        /* newer transformers save the template beside the config as chat_template.jinja */
        char *jpath = join_path(dir, "chat_template.jinja");
        if (!jpath) { rc = RECUR_ENOMEM; goto done; }
        if (stat(jpath, &st)) {
            tk_err(err, errlen, "%s: no chat_template (and no chat_template.jinja)", path);
            free(jpath);
            rc = RECUR_ENOENT;
            goto done;
        }
        if (st.st_size > RECUR_CHAT_MAX_TEMPLATE_BYTES) {
            tk_err(err, errlen, "%s: over RECUR_CHAT_MAX_TEMPLATE_BYTES (%u)", jpath, RECUR_CHAT_MAX_TEMPLATE_BYTES);
            free(jpath);
            rc = RECUR_ESHAPE;
            goto done;
        }
        rc = tk_read_file(jpath, &jinja, &src_len, err, errlen);
        free(jpath);
        if (rc) goto done;
        src = jinja;
    }
    if (!jinja) src_len = strlen(src);
    rc = recur_chat_template_parse(src, src_len, bos, eos, out, err, errlen);
done:
    free(jinja);
    cJSON_Delete(cfg);
    free(path);
    return rc;
}

int recur_chat_render(const recur_chat_template *t, const recur_chat_message *msgs, size_t n,
                      int add_generation_prompt, char **text, size_t *len, char *err, size_t errlen)
{
    if (!t || !text || (n && !msgs)) return RECUR_EINVAL;
    *text = NULL;
    if (len) *len = 0;
    if (err && errlen) err[0] = 0;
    /* heap, not automatic: it is changed between setjmp and a longjmp back */
    struct job {
        ct_ctx c;
        ct_arena arena;
        ct_eval e;
        tk_buf clean; /* a message's text with invalid UTF-8 replaced */
    } *j = calloc(1, sizeof *j);
    if (!j) return RECUR_ENOMEM;
    ct_ctx *c = &j->c;
    j->arena.limit = RENDER_MEMORY_BYTES;
    c->err = err;
    c->errlen = errlen;
    c->arena = &j->arena;
    j->e.c = c;
    j->e.out.limit = RECUR_CHAT_MAX_OUTPUT_BYTES;
    j->e.out.what = "the rendered prompt (RECUR_CHAT_MAX_OUTPUT_BYTES)";
    if (setjmp(c->jmp)) {
        int code = c->code;
        free(j->e.out.p);
        tk_buf_free(&j->clean);
        ct_arena_free(&j->arena);
        free(j);
        return code;
    }
    ct_value messages = ct_list_new(c, n);
    for (size_t i = 0; i < n; i++) {
        const char *parts[2] = {msgs[i].role, msgs[i].content};
        size_t lens[2] = {msgs[i].role_len, msgs[i].content_len};
        ct_value m = ct_dict_new(c, CT_DICT);
        for (int k = 0; k < 2; k++) {
            if (!parts[k] && lens[k]) ct_fail(c, RECUR_EINVAL, "message %zu: NULL %s", i, k ? "content" : "role");
            const char *s = parts[k] ? parts[k] : "";
            ct_value v;
            if (tk_utf8_valid_prefix(s, lens[k]) == lens[k]) {
                v = ct_str_copy(c, s, lens[k]);
            } else { /* invalid UTF-8 reads as U+FFFD, as the tokenizer does */
                if (tk_utf8_sanitize(s, lens[k], &j->clean)) ct_fail(c, RECUR_ENOMEM, "chat template: out of memory");
                v = ct_str_copy(c, j->clean.p, j->clean.n);
            }
            ct_dict_set(c, m.u.dict, k ? "content" : "role", k ? 7 : 4, v);
        }
        ct_list_push(c, messages.u.list, m);
    }
    ct_value g = ct_dict_new(c, CT_DICT);
    ct_dict_set(c, g.u.dict, "messages", 8, messages);
    ct_dict_set(c, g.u.dict, "add_generation_prompt", 21, ct_bool(add_generation_prompt));
    ct_dict_set(c, g.u.dict, "bos_token", 9, ct_str(t->bos, t->bos_n));
    ct_dict_set(c, g.u.dict, "eos_token", 9, ct_str(t->eos, t->eos_n));
    ct_dict_set(c, g.u.dict, "tools", 5, ct_none());
    ct_dict_set(c, g.u.dict, "documents", 9, ct_none());
    ct_render(&j->e, t->root, g.u.dict);
    if (!j->e.out.p) ct_out_put(c, &j->e.out, "", 0);
    *text = j->e.out.p;
    if (len) *len = j->e.out.n;
    tk_buf_free(&j->clean);
    ct_arena_free(&j->arena);
    free(j);
    return 0;
}

void recur_chat_release(void *p) { free(p); }

void recur_chat_template_free(recur_chat_template *t)
{
    if (!t) return;
    ct_arena_free(&t->arena);
    free(t);
}
