/* generation.c — what one generated token produces, and when a generation may step on
 * (generation.h). */
#include "generation.h"

#include <string.h>

void srv_gen_init(srv_gen *g, const proto_generate_req *req, proto_framing framing, uint64_t rng,
                  uint64_t max_seen)
{
    proto_buf_free(&g->lines);
    proto_buf_free(&g->taken);
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
}

void srv_gen_free(srv_gen *g)
{
    proto_buf_free(&g->lines);
    proto_buf_free(&g->taken);
}

void srv_gen_token(srv_gen *g, uint64_t pos, int32_t token, float logprob, proto_buf *out)
{
    char text[16];
    size_t tl = proto_utf8_feed(&g->utf8, token, text);
    proto_gen_line(out, g->framing, pos, token, text, tl, logprob);
    g->generated++;
    if (token < 0 || token >= 256)
        return; /* not a byte: no text, cannot be part of a stop string */
    if (g->tail_len == sizeof g->tail) {
        memmove(g->tail, g->tail + 1, sizeof g->tail - 1);
        g->tail_len--;
    }
    g->tail[g->tail_len++] = (unsigned char)token;
    const proto_generate_req *r = g->req;
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t L = r->stop_len[i];
        if (L <= g->tail_len && memcmp(g->tail + g->tail_len - L, r->stop[i], L) == 0) {
            g->stop_matched = 1;
            return;
        }
    }
}

int srv_gen_may_continue(const srv_gen *g, uint64_t tokens_seen)
{
    return !g->stop_matched && g->generated < g->req->max_tokens && tokens_seen < g->max_seen;
}
