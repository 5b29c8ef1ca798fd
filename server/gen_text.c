/* gen_text.c — streaming decode + stop strings for generated tokens (gen_text.h). */
#include "gen_text.h"

#include <stdlib.h>
#include <string.h>

int srv_gen_text_init(srv_gen_text *t, const recur_tokenizer *tok, const char *const *stop,
                      const size_t *len, size_t n)
{
    memset(t, 0, sizeof *t);
    if (srv_stop_init(&t->stop, stop, len, n) != 0)
        return RECUR_EINVAL;
    int rc = recur_detok_new(tok, &t->detok);
    if (rc) {
        srv_stop_free(&t->stop);
        t->detok = NULL;
        return rc;
    }
    return 0;
}

void srv_gen_text_free(srv_gen_text *t)
{
    recur_detok_free(t->detok);
    t->detok = NULL;
    srv_stop_free(&t->stop);
}

/* The decoder fails only without memory (ids are >= 0 here), which the server treats as fatal
 * like every internal allocation (docs/DESIGN.md). */
static void must(int rc)
{
    if (rc)
        abort();
}

int srv_gen_text_push(srv_gen_text *t, int32_t token, proto_buf *out)
{
    if (t->ended)
        return t->stop.matched;
    const char *s;
    size_t n;
    must(recur_detok_push(t->detok, token, &s, &n));
    if (srv_stop_feed(&t->stop, s, n, out)) {
        t->ended = 1;
        return 1;
    }
    return 0;
}

int srv_gen_text_finish(srv_gen_text *t, proto_buf *out)
{
    if (t->ended)
        return 0;
    t->ended = 1;
    const char *s;
    size_t n;
    must(recur_detok_finish(t->detok, &s, &n));
    if (srv_stop_feed(&t->stop, s, n, out)) /* a U+FFFD may still complete a stop string */
        return 1;
    srv_stop_flush(&t->stop, out);
    return 0;
}
