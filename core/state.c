/* state.c — one session's state (docs/MODEL.md "Session state").
 *
 * The struct and every recurrent layer's S (and z) are one allocation. A softmax layer's KV cache
 * is calloc'd at max_context: large callocs are fresh anonymous pages, so only the rows a session
 * actually uses are ever touched; reset does not zero the cache (only rows < tokens_seen are
 * live), and copy copies live rows only. */
#include <stdlib.h>
#include <string.h>
#include "model_internal.h"

int recur_state_create(const recur_model *m, recur_state **out)
{
    if (!m || !out) return RECUR_EINVAL;
    size_t head = (sizeof(recur_state) + 63) / 64 * 64;
    recur_state *s = calloc(1, head + m->rec_floats * sizeof(float));
    if (!s) return RECUR_ENOMEM;
    s->m = m;
    s->rec = (float *)((char *)s + head);
    const recur_config *c = &m->cfg;
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    for (int l = 0; l < c->n_layers; l++) {
        if (m->layers[l].kind != RECUR_MIXER_SOFTMAX) continue;
        s->kcache[l] = calloc((size_t)c->max_context * HK, sizeof(float));
        s->vcache[l] = calloc((size_t)c->max_context * HV, sizeof(float));
        if (!s->kcache[l] || !s->vcache[l]) { recur_state_destroy(s); return RECUR_ENOMEM; }
    }
    *out = s;
    return RECUR_OK;
}

void recur_state_destroy(recur_state *s)
{
    if (!s) return;
    for (int l = 0; l < RECUR_MAX_LAYERS; l++) {
        free(s->kcache[l]);
        free(s->vcache[l]);
    }
    free(s);
}

void recur_state_reset(recur_state *s)
{
    if (!s) return;
    memset(s->rec, 0, s->m->rec_floats * sizeof(float));
    s->tokens_seen = 0;
}

int recur_state_copy(recur_state *dst, const recur_state *src)
{
    if (!dst || !src) return RECUR_EINVAL;
    if (dst->m != src->m) return RECUR_EMISMATCH;
    if (dst == src) return RECUR_OK;
    const recur_model *m = src->m;
    memcpy(dst->rec, src->rec, m->rec_floats * sizeof(float));
    size_t HK = (size_t)m->cfg.n_heads * m->cfg.head_k, HV = (size_t)m->cfg.n_heads * m->cfg.head_v;
    size_t live = (size_t)src->tokens_seen;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (!src->kcache[l]) continue;
        memcpy(dst->kcache[l], src->kcache[l], live * HK * sizeof(float));
        memcpy(dst->vcache[l], src->vcache[l], live * HV * sizeof(float));
    }
    dst->tokens_seen = src->tokens_seen;
    return RECUR_OK;
}

uint64_t recur_state_tokens_seen(const recur_state *s)
{
    return s ? s->tokens_seen : 0;
}
