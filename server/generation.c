/* generation.c — what one generated token produces, and when a generation may step on
 * (generation.h). */
#include "generation.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(PROTO_MAX_STOP <= SRV_STOP_MAX, "a generate request's stop strings fit the matcher");

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
    free(g->seen_ids);
    free(g->seen_counts);
    free(g->seen_slot);
    g->seen_ids = NULL;
    g->seen_counts = NULL;
    g->seen_slot = NULL;
}

void srv_gen_set_openai(srv_gen *g, int want_top, const recur_logit_adjust_params *p, int vocab)
{
    g->records = 1;
    g->want_top = want_top < SRV_GEN_MAX_TOP ? want_top : SRV_GEN_MAX_TOP;
    g->adjust = *p;
    g->adjusting = p->presence != 0 || p->frequency != 0 || p->n_bias > 0;
    if (p->presence != 0 || p->frequency != 0) {
        /* at most one distinct id per generated token; the slot map finds an id's entry */
        size_t cap = g->req->max_tokens > 0 ? (size_t)g->req->max_tokens : 1;
        g->seen_ids = malloc(cap * sizeof *g->seen_ids);
        g->seen_counts = malloc(cap * sizeof *g->seen_counts);
        g->seen_slot = malloc((size_t)vocab * sizeof *g->seen_slot);
        if (!g->seen_ids || !g->seen_counts || !g->seen_slot)
            abort();
        memset(g->seen_slot, 0xff, (size_t)vocab * sizeof *g->seen_slot); /* -1 */
    }
}

const float *srv_gen_sampling_logits(srv_gen *g, const float *logits, float *adjusted, int vocab)
{
    if (!g || !g->adjusting)
        return logits;
    memcpy(adjusted, logits, (size_t)vocab * sizeof *adjusted);
    recur_logit_adjust(adjusted, vocab, &g->adjust, g->seen_ids, g->seen_counts, g->n_seen);
    return adjusted;
}

void srv_gen_keep_top(srv_gen *g, const float *logits, int vocab, const float c[2])
{
    g->n_top = 0;
    if (!g->want_top)
        return;
    /* the order of logits is the order of log p; the values as every logprob recurd reports */
    g->n_top = recur_top_k(logits, vocab, g->want_top, g->top_ids, g->top_lps);
    for (int i = 0; i < g->n_top; i++)
        g->top_lps[i] = (g->top_lps[i] - c[0]) - c[1];
}

/* A record for the token (generation.h); the penalties' counts follow it. */
static void gen_record(srv_gen *g, int32_t token, const char *text, size_t tl, float logprob,
                       proto_buf *out)
{
    srv_gen_record r = {token, logprob, (uint32_t)tl, g->n_top};
    proto_buf_append(out, &r, sizeof r);
    proto_buf_append(out, text, tl);
    for (int i = 0; i < g->n_top; i++) {
        proto_buf_append(out, &g->top_ids[i], sizeof g->top_ids[i]);
        proto_buf_append(out, &g->top_lps[i], sizeof g->top_lps[i]);
    }
    g->n_top = 0;
    if (g->seen_slot && token >= 0) {
        int32_t s = g->seen_slot[token];
        if (s < 0) {
            s = (int32_t)g->n_seen++;
            g->seen_slot[token] = s;
            g->seen_ids[s] = token;
            g->seen_counts[s] = 0;
        }
        g->seen_counts[s]++;
    }
}

int srv_gen_record_next(const char **p, const char *end, srv_gen_record *rec, const char **text,
                        int32_t *top_ids, float *top_lps)
{
    if ((size_t)(end - *p) < sizeof *rec)
        return 0;
    memcpy(rec, *p, sizeof *rec);
    const char *q = *p + sizeof *rec;
    *text = q;
    q += rec->text_len;
    for (int i = 0; i < rec->n_top; i++) {
        memcpy(&top_ids[i], q, sizeof *top_ids);
        memcpy(&top_lps[i], q + sizeof *top_ids, sizeof *top_lps);
        q += sizeof *top_ids + sizeof *top_lps;
    }
    *p = q;
    return 1;
}

void srv_gen_token(srv_gen *g, uint64_t pos, int32_t token, float logprob, proto_buf *out)
{
    proto_buf *t = &g->token_text;
    proto_buf_clear(t);
    g->generated++;
    int end = 0;
    for (int i = 0; i < g->n_end_ids; i++)
        end |= token == g->end_ids[i];
    if (end) {
        srv_gen_text_finish(&g->text, t); /* what was held back, without the end token's text */
        g->stop_matched = 1;
    } else if (srv_gen_text_push(&g->text, token, t))
        g->stop_matched = 1;
    else if (g->generated >= g->req->max_tokens || pos + 1 >= g->max_seen)
        g->stop_matched = srv_gen_text_finish(&g->text, t); /* the last token: nothing stays held */
    if (g->records)
        gen_record(g, token, t->len ? t->data : "", t->len, logprob, out);
    else
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
