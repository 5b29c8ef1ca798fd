/* generation.c — what one generated token produces, and when a generation may step on
 * (generation.h). */
#include "generation.h"

#include <string.h>

int srv_gen_init(srv_gen *g, const proto_generate_req *req, proto_framing framing, uint64_t rng,
                 uint64_t max_seen, const recur_tokenizer *tok)
{
    srv_gen_free(g);
    memset(g, 0, sizeof *g);
    g->req = req;
    g->framing = framing;
    g->max_seen = max_seen;
    g->rng = rng;
    atomic_init(&g->stop, 0);
    atomic_init(&g->hold, 0);
    atomic_init(&g->yield, 0);
    proto_buf_init(&g->lines);
    proto_buf_init(&g->taken);
    proto_buf_init(&g->token_text);
    const char *stop[PROTO_MAX_STOP];
    for (size_t i = 0; i < req->n_stop; i++)
        stop[i] = req->stop[i];
    return srv_gen_text_init(&g->text, tok, stop, req->stop_len, req->n_stop);
}

void srv_gen_free(srv_gen *g)
{
    proto_buf_free(&g->lines);
    proto_buf_free(&g->taken);
    proto_buf_free(&g->token_text);
    srv_gen_text_free(&g->text);
}

void srv_gen_token(srv_gen *g, uint64_t pos, int32_t token, float logprob, proto_buf *out)
{
    proto_buf *t = &g->token_text;
    proto_buf_clear(t);
    g->generated++;
    if (srv_gen_text_push(&g->text, token, t))
        g->stop_matched = 1;
    else if (g->generated >= g->req->max_tokens || pos + 1 >= g->max_seen)
        g->stop_matched = srv_gen_text_finish(&g->text, t); /* the last token: nothing stays held */
    proto_gen_line(out, g->framing, pos, token, t->len ? t->data : "", t->len, logprob);
}

void srv_gen_end_text(srv_gen *g, proto_buf *out)
{
    srv_gen_text_finish(&g->text, out);
}

int srv_gen_may_continue(const srv_gen *g, uint64_t tokens_seen)
{
    return !g->stop_matched && g->generated < g->req->max_tokens && tokens_seen < g->max_seen;
}
