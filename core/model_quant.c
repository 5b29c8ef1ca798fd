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

/* Each packed matrix of src, quantized into m (both allocated for the same config). */
static void quantize_matrices(recur_model *m, const recur_model *src)
{
    const recur_config *c = &m->cfg;
    const int d = c->d_model, HV = c->n_heads * c->head_v, ff = c->d_ff;
    const recur_wtype qt = m->wtype, st = src->wtype;
    for (int l = 0; l < c->n_layers; l++) {
        recur_layer *L = &m->layers[l];
        const recur_layer *S = &src->layers[l];
        if (L->kind == RECUR_MIXER_RWKV7) { /* its matrices are roles in L->rw (block_rwkv7.h) */
            for (int t = T_RW_LN0_W; t < T_N_LAYER_TENSORS; t++) {
                int64_t r, k;
                if (recur__rwkv7_is_matrix(t) && recur__rwkv7_shape(c, l, t, &r, &k))
                    recur__pack_quant(L->rw[t - T_RW_LN0_W], qt, S->rw[t - T_RW_LN0_W], st, (int)r, (int)k);
            }
            continue;
        }
        recur__pack_quant(L->w_in, qt, S->w_in, st, L->n_in, d);
        recur__pack_quant(L->wo, qt, S->wo, st, d, HV);
        if (c->block[l].mlp) {
            recur__pack_quant(L->w_gate_up, qt, S->w_gate_up, st, 2 * ff, d);
            recur__pack_quant(L->w_down, qt, S->w_down, st, d, ff);
        }
        if (S->w_gk_up) recur__pack_quant(L->w_gk_up, qt, S->w_gk_up, st, c->n_heads * c->head_k, c->block[l].gate_rank);
    }
    recur__pack_quant(m->lm_head, qt, src->lm_head, st, c->vocab_size, d);
}

int recur_model_quantize(const recur_model *src, const char *weights_dtype, recur_model **out, char *err,
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
    quantize_matrices(m, src);
    m->info = src->info;
    m->sdtype = src->sdtype; /* info says it already */
    snprintf(m->info.weights_dtype, sizeof m->info.weights_dtype, "%s", recur__wtype_name(qt));
    m->info.weight_bytes = m->arena_floats * sizeof(float);
    /* other weights, other states: a snapshot of the source model must not load into this one */
    m->info.fingerprint = recur__fnv1a(src->info.fingerprint, m->info.weights_dtype, strlen(m->info.weights_dtype));
    *out = m;
    return RECUR_OK;
}
