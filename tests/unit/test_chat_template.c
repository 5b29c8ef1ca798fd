/* test_chat_template.c — the chat-template C API (recur.h) where Python cannot look: one parsed
 * template rendered from several threads at once gives every thread the single-threaded text;
 * argument checks; optional out-parameters; a failed render changes nothing for the next one. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

#define MSG(role, content) {role, sizeof role - 1, content, sizeof content - 1}
static const recur_chat_message k_msgs[] = {
    MSG("system", "Be brief."),
    MSG("user", "Hi \"there\" \\ é 中文 🎉 {{ x }}\n"),
    MSG("assistant", "Hello."),
    MSG("user", "Again?"),
};
#define N_MSGS (sizeof k_msgs / sizeof *k_msgs)

typedef struct {
    const recur_chat_template *t;
    const char *want;
    size_t want_len;
    int failures;
} job;

static void *render_many(void *arg)
{
    job *j = arg;
    for (int i = 0; i < 300; i++) {
        char *text = NULL, err[128];
        size_t len = 0;
        if (recur_chat_render(j->t, k_msgs, N_MSGS, i & 1, &text, &len, err, sizeof err)) { j->failures++; continue; }
        /* odd i: with the generation prompt, the single-threaded text; even: a prefix of it
         * (all of it for llama2, which has no generation prompt) */
        if ((i & 1) ? (len != j->want_len || memcmp(text, j->want, len)) : (len > j->want_len || memcmp(text, j->want, len)))
            j->failures++;
        recur_chat_release(text);
    }
    return NULL;
}

Test(chat_template, one_template_renders_concurrently)
{
    static const char *const names[] = {"chatml", "llama2", "llama3", "rwkv", "plain"};
    for (size_t b = 0; b < sizeof names / sizeof *names; b++) {
        recur_chat_template *t;
        cr_assert_eq(recur_chat_template_builtin(names[b], &t, NULL, 0), 0);
        char *want;
        size_t want_len;
        cr_assert_eq(recur_chat_render(t, k_msgs, N_MSGS, 1, &want, &want_len, NULL, 0), 0);
        cr_assert_eq(strlen(want), want_len);
        job jobs[4];
        pthread_t th[4];
        for (int k = 0; k < 4; k++) {
            jobs[k] = (job){t, want, want_len, 0};
            cr_assert_eq(pthread_create(&th[k], NULL, render_many, &jobs[k]), 0);
        }
        for (int k = 0; k < 4; k++) {
            pthread_join(th[k], NULL);
            cr_assert_eq(jobs[k].failures, 0, "%s: thread %d saw %d different renders", names[b], k, jobs[k].failures);
        }
        recur_chat_release(want);
        recur_chat_template_free(t);
    }
}

Test(chat_template, arguments_are_checked)
{
    recur_chat_template *t = (recur_chat_template *)1;
    char err[128] = "";
    cr_assert_eq(recur_chat_template_parse("x", 1, NULL, NULL, NULL, err, sizeof err), RECUR_EINVAL);
    cr_assert_eq(recur_chat_template_parse(NULL, 1, NULL, NULL, &t, err, sizeof err), RECUR_EINVAL);
    cr_assert_eq(recur_chat_template_builtin(NULL, &t, err, sizeof err), RECUR_EINVAL);
    cr_assert_null(t);
    cr_assert_eq(recur_chat_template_load_dir(NULL, &t, err, sizeof err), RECUR_EINVAL);
    cr_assert_null(recur_chat_template_builtin_source("nope", NULL, NULL));
    const char *bos = NULL, *eos = NULL;
    cr_assert_not_null(recur_chat_template_builtin_source("llama2", &bos, &eos));
    cr_assert_str_eq(bos, "<s>");
    cr_assert_str_eq(eos, "</s>");
    cr_assert_eq(recur_chat_template_parse("{{ 1 }}", 7, NULL, NULL, &t, NULL, 0), 0);
    char *text = NULL;
    cr_assert_eq(recur_chat_render(NULL, k_msgs, 1, 0, &text, NULL, NULL, 0), RECUR_EINVAL);
    cr_assert_eq(recur_chat_render(t, NULL, 1, 0, &text, NULL, NULL, 0), RECUR_EINVAL);
    cr_assert_eq(recur_chat_render(t, k_msgs, 1, 0, NULL, NULL, NULL, 0), RECUR_EINVAL);
    recur_chat_message bad = {NULL, 3, "x", 1};
    cr_assert_eq(recur_chat_render(t, &bad, 1, 0, &text, NULL, err, sizeof err), RECUR_EINVAL);
    cr_assert(strstr(err, "NULL role"), "%s", err);
    cr_assert_null(text);
    /* len may be NULL; err may be NULL or tiny */
    cr_assert_eq(recur_chat_render(t, NULL, 0, 0, &text, NULL, err, 1), 0);
    cr_assert_str_eq(text, "1");
    recur_chat_release(text);
    recur_chat_template_free(t);
    recur_chat_template_free(NULL);
}

Test(chat_template, a_failed_render_leaves_the_template_usable)
{
    static const char src[] = "{% if messages | length > 1 %}{{ raise_exception('one message only') }}{% endif %}"
                              "{% for m in messages %}{{ m.role }}={{ m.content }}{% endfor %}";
    recur_chat_template *t;
    cr_assert_eq(recur_chat_template_parse(src, sizeof src - 1, NULL, NULL, &t, NULL, 0), 0);
    char *text = (char *)1, err[64];
    size_t len = 7;
    cr_assert_eq(recur_chat_render(t, k_msgs, 2, 0, &text, &len, err, sizeof err), RECUR_EINVAL);
    cr_assert_str_eq(err, "one message only");
    cr_assert_null(text);
    cr_assert_eq(len, 0);
    cr_assert_eq(recur_chat_render(t, k_msgs, 1, 0, &text, &len, err, sizeof err), 0);
    cr_assert_str_eq(text, "system=Be brief.");
    recur_chat_release(text);
    recur_chat_template_free(t);
}
