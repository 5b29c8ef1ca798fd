/* chat_template.c — the chat-template API of recur.h. PARTIAL: the interpreter is being landed;
 * until then every entry point refuses with RECUR_EINVAL and says so in err. */
#include <stdio.h>
#include <stdlib.h>

#include "recur.h"

static int not_yet(char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "chat templates: not implemented yet");
    return RECUR_EINVAL;
}

int recur_chat_template_parse(const char *src, size_t len, const char *bos_token, const char *eos_token,
                              recur_chat_template **out, char *err, size_t errlen)
{
    if (out) *out = NULL;
    return not_yet(err, errlen);
}

int recur_chat_template_builtin(const char *name, recur_chat_template **out, char *err, size_t errlen)
{
    if (out) *out = NULL;
    return not_yet(err, errlen);
}

int recur_chat_template_load_dir(const char *dir, recur_chat_template **out, char *err, size_t errlen)
{
    if (out) *out = NULL;
    return not_yet(err, errlen);
}

int recur_chat_render(const recur_chat_template *t, const recur_chat_message *msgs, size_t n,
                      int add_generation_prompt, char **text, size_t *len, char *err, size_t errlen)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    return not_yet(err, errlen);
}

void recur_chat_release(void *p) { free(p); }
void recur_chat_template_free(recur_chat_template *t) { (void)t; }
