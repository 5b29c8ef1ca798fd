/* model_quant.c — a model whose GEMM matrices are block-quantized (Q8_0 / Q4_0, quant.h) from a
 * loaded one (recur.h: recur_model_quantize). Every other tensor is copied as it is; the packed
 * F32 / F16 / BF16 panels of the source are quantized row block by row block (the exact fp32
 * value of each weight, so an F16 file and its fp32 widening quantize alike). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "block_rwkv7.h"
#include "hf_config.h"
#include "model_internal.h"
#include "quant.h"

int recur__parse_weights_dtype(const char *s, recur_wtype *out)
{
    if (!s) return RECUR_EINVAL;
    if (!strcasecmp(s, "q8_0")) *out = RECUR_WT_Q8_0;
    else if (!strcasecmp(s, "q4_0")) *out = RECUR_WT_Q4_0;
    else return RECUR_EINVAL;
    return RECUR_OK;
}

void recur__quant_each_matrix(recur_model *m, const recur_model *src, recur__quant_matrix_fn fn, void *ctx)
{
    const recur_config *c = &m->cfg;
    const int d = c->d_model, HV = c->n_heads * c->head_v, ff = c->d_ff;
    for (int l = 0; l < c->n_layers; l++) {
        recur_layer *L = &m->layers[l];
        const recur_layer *S = &src->layers[l];
        if (L->kind == RECUR_MIXER_RWKV7) { /* its matrices are roles in L->rw (block_rwkv7.h) */
            for (int t = T_RW_LN0_W; t < T_N_LAYER_TENSORS; t++) {
                int64_t r, k;
                if (recur__rwkv7_is_matrix(t) && recur__rwkv7_shape(c, l, t, &r, &k))
                    fn(ctx, L->rw[t - T_RW_LN0_W], S->rw[t - T_RW_LN0_W], (int)r, (int)k);
            }
            continue;
        }
        fn(ctx, L->w_in, S->w_in, L->n_in, d);
        fn(ctx, L->wo, S->wo, d, HV);
        if (c->block[l].mlp) {
            fn(ctx, L->w_gate_up, S->w_gate_up, 2 * ff, d);
            fn(ctx, L->w_down, S->w_down, d, ff);
        }
        if (S->w_gk_up) fn(ctx, L->w_gk_up, S->w_gk_up, c->n_heads * c->head_k, c->block[l].gate_rank);
    }
    fn(ctx, m->lm_head, src->lm_head, c->vocab_size, d);
}

/* recur__quant_each_matrix's step of recur_model_quantize: quantize src's packed matrix into m's */
typedef struct {
    recur_wtype qt, st;
} quantize_ctx;

static void quantize_one(void *ctx, void *dst, const void *src, int N, int K)
{
    const quantize_ctx *q = ctx;
    recur__pack_quant(dst, q->qt, src, q->st, N, K);
}

int recur__quant_shell(const recur_model *src, const char *weights_dtype, recur_model **out, char *err,
                       size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!src || !out) return RECUR_EINVAL;
    recur_wtype qt;
    if (recur__parse_weights_dtype(weights_dtype, &qt))
        return recur__errf(err, errlen, "weights_dtype \"%.16s\": not a quantized type recurd implements (q8_0, q4_0)",
                           weights_dtype ? weights_dtype : ""), RECUR_EINVAL;
    if (recur__wtype_quant(src->wtype))
        return recur__errf(err, errlen, "the model is already quantized (%s)", src->info.weights_dtype), RECUR_EINVAL;
    recur_model *m;
    int rc = recur__model_alloc(&src->cfg, qt, &m);
    if (rc) return recur__errf(err, errlen, "%s", recur_strerror(rc)), rc;
    /* every tensor that is not a packed matrix (embed stays fp32 for the lookup), bytes as held
     * after recur__model_finish (conv taps transposed alike in both) */
    recur_weight_ref rs, rd;
    for (int l = -1; l < src->cfg.n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++) {
            if (!recur__weight((recur_model *)src, l, t, &rs) || !recur__weight(m, l, t, &rd)) continue;
            if ((!rs.is_matrix || (l < 0 && t == 0)) && rs.ptr && rd.ptr) memcpy(rd.ptr, rs.ptr, rs.n * sizeof(float));
        }
    m->info = src->info;
    m->sdtype = src->sdtype; /* info says it already */
    snprintf(m->info.prefill_dtype, sizeof m->info.prefill_dtype, "F32"); /* no bf16 panels of its own */
    m->info.prefill_bytes = 0;
    snprintf(m->info.weights_dtype, sizeof m->info.weights_dtype, "%s", recur__wtype_name(qt));
    snprintf(m->info.weights_origin, sizeof m->info.weights_origin, "quantized");
    m->info.weight_bytes = m->arena_floats * sizeof(float);
    /* other weights, other states: a snapshot of the source model must not load into this one */
    m->info.fingerprint = recur__fnv1a(src->info.fingerprint, m->info.weights_dtype, strlen(m->info.weights_dtype));
    *out = m;
    return RECUR_OK;
}

int recur_model_quantize(const recur_model *src, const char *weights_dtype, recur_model **out, char *err,
                         size_t errlen)
{
    recur_model *m;
    int rc = recur__quant_shell(src, weights_dtype, &m, err, errlen);
    if (rc) return rc;
    quantize_ctx q = {m->wtype, src->wtype};
    recur__quant_each_matrix(m, src, quantize_one, &q);
    *out = m;
    return RECUR_OK;
}
