/*
 * fuzz_chat_template.c — libFuzzer target: chat templates (core/chat_template*.c): arbitrary
 * Jinja source is parsed, and when it loads, rendered on a fixed conversation with and without
 * the generation prompt.
 *
 * A parse either succeeds or fails with RECUR_EFORMAT / RECUR_ESHAPE / RECUR_ENOMEM and a message;
 * a render either gives NUL-terminated, valid UTF-8 of the length it reports, or fails with a
 * message and one of RECUR_EINVAL (raise_exception, a type error), RECUR_ESHAPE (a bound),
 * RECUR_ERANGE (integer overflow), RECUR_ENOMEM. ASan/UBSan watch the rest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "tokenizer.h" /* tk_utf8_valid_prefix */

#define MSG(role, content) {role, sizeof role - 1, content, sizeof content - 1}
static const recur_chat_message k_msgs[] = {
    MSG("system", "Be {{ brief }}."),
    MSG("user", "Hi \"there\" \\ é 中文 🎉\n"),
    MSG("assistant", "<think>\nx\n</think>\n\nHello"),
    MSG("user", ""),
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    recur_chat_template *t = NULL;
    char err[512] = "";
    int rc = recur_chat_template_parse((const char *)data, size, "<s>", "</s>", &t, err, sizeof err);
    if (rc) {
        if (rc != RECUR_EFORMAT && rc != RECUR_ESHAPE && rc != RECUR_ENOMEM) abort();
        if (!err[0] || t) abort();
        return 0;
    }
    for (int agp = 0; agp < 2; agp++) {
        char *text = NULL;
        size_t len = 0;
        err[0] = 0;
        rc = recur_chat_render(t, k_msgs, sizeof k_msgs / sizeof *k_msgs, agp, &text, &len, err, sizeof err);
        if (rc) {
            if (rc != RECUR_EINVAL && rc != RECUR_ESHAPE && rc != RECUR_ERANGE && rc != RECUR_ENOMEM) abort();
            if (text) abort();
            continue;
        }
        if (!text || text[len] != 0 || len > RECUR_CHAT_MAX_OUTPUT_BYTES) abort();
        if (tk_utf8_valid_prefix(text, len) != len) abort();
        recur_chat_release(text);
    }
    recur_chat_template_free(t);
    return 0;
}
