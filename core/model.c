/* model.c — the model object: tensor table (docs/MODEL.md "Tensors"), the weight arena, info,
 * fingerprint, packing, free. Loading is in model_load.c (and the model families it calls), the
 * forward pass in model_forward.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include "block_rwkv7.h"
#include "model_internal.h"
#include "packed_gemm.h"
#include "short_conv.h"

/* ---------------------------------------------------------------- tensor table */

static const char *const suffixes[T_N_LAYER_TENSORS] = {
    [T_ATTN_NORM] = "attn_norm.weight",
    [T_Q] = "mixer.q_proj.weight",
    [T_K] = "mixer.k_proj.weight",
    [T_V] = "mixer.v_proj.weight",
    [T_GK] = "mixer.gk_proj.weight",
    [T_B] = "mixer.b_proj.weight",
    [T_A] = "mixer.a_proj.weight",
    [T_A_LOG] = "mixer.A_log",
    [T_DT_BIAS] = "mixer.dt_bias",
    [T_G] = "mixer.g_proj.weight",
    [T_O_NORM] = "mixer.o_norm.weight",
    [T_O] = "mixer.o_proj.weight",
    [T_MLP_NORM] = "mlp_norm.weight",
    [T_GATE] = "mlp.gate_proj.weight",
    [T_UP] = "mlp.up_proj.weight",
    [T_DOWN] = "mlp.down_proj.weight",
    /* the native family has none of the roles below; names for messages and seeded models */
    [T_CONV_Q] = "mixer.q_conv1d.weight",
    [T_CONV_K] = "mixer.k_conv1d.weight",
    [T_CONV_V] = "mixer.v_conv1d.weight",
    [T_CONV_QB] = "mixer.q_conv1d.bias",
    [T_CONV_KB] = "mixer.k_conv1d.bias",
    [T_CONV_VB] = "mixer.v_conv1d.bias",
    [T_GK_DOWN] = "mixer.gk_proj.0.weight",
    [T_GK_UP] = "mixer.gk_proj.1.weight",
    [T_GK_BIAS] = "mixer.gk_proj.1.bias",
    [T_IN_PROJ] = "mixer.in_proj.weight",
    [T_IN_BIAS] = "mixer.in_proj.bias",
    [T_CONV] = "mixer.conv1d.weight",
    [T_CONV_BIAS] = "mixer.conv1d.bias",
    [T_D] = "mixer.D",
    [T_O_BIAS] = "mixer.out_proj.bias",
    /* RWKV-7: RWKV-LM's names (the .pth), for messages (family_rwkv7.c names FLA's) */
    [T_RW_LN0_W] = "ln0.weight", [T_RW_LN0_B] = "ln0.bias", [T_RW_LN1_W] = "ln1.weight",
    [T_RW_LN1_B] = "ln1.bias", [T_RW_X_R] = "att.x_r", [T_RW_X_W] = "att.x_w", [T_RW_X_K] = "att.x_k",
    [T_RW_X_V] = "att.x_v", [T_RW_X_A] = "att.x_a", [T_RW_X_G] = "att.x_g", [T_RW_K_K] = "att.k_k",
    [T_RW_K_A] = "att.k_a", [T_RW_R_K] = "att.r_k", [T_RW_WR] = "att.receptance.weight",
    [T_RW_WK] = "att.key.weight", [T_RW_WV] = "att.value.weight", [T_RW_WO] = "att.output.weight",
    [T_RW_W1] = "att.w1", [T_RW_W2] = "att.w2", [T_RW_W0] = "att.w0", [T_RW_V1] = "att.v1",
    [T_RW_V2] = "att.v2", [T_RW_V0] = "att.v0", [T_RW_A1] = "att.a1", [T_RW_A2] = "att.a2",
    [T_RW_A0] = "att.a0", [T_RW_G1] = "att.g1", [T_RW_G2] = "att.g2", [T_RW_GN_W] = "att.ln_x.weight",
    [T_RW_GN_B] = "att.ln_x.bias", [T_RW_LN2_W] = "ln2.weight", [T_RW_LN2_B] = "ln2.bias",
    [T_RW_FFN_X_K] = "ffn.x_k", [T_RW_FFN_KEY] = "ffn.key.weight", [T_RW_FFN_VALUE] = "ffn.value.weight",
};

/* Width of a Mamba-2 layer's xBC (block_mamba2.h): d_ssm + 2 * groups * state_size. */
static int64_t mamba2_conv_dim(const recur_config *c, int l)
{
    return (int64_t)c->n_heads * c->head_v + 2 * (int64_t)c->block[l].ssm_groups * c->head_k;
}

/* Shape of a Mamba-2 layer's tensor role (block_mamba2.h); 0 when the layer has no such tensor. */
static int mamba2_shape(const recur_config *c, int l, recur_layer_tensor t, int64_t *r, int64_t *k)
{
    const recur_block *B = &c->block[l];
    const int64_t d = c->d_model, H = c->n_heads, HV = H * c->head_v, C = mamba2_conv_dim(c, l);
    switch (t) {
    case T_ATTN_NORM: *r = d; return 1;
    case T_IN_PROJ: *r = HV + C + H; *k = d; return 1;
    case T_IN_BIAS: *r = HV + C + H; return B->proj_bias;
    case T_CONV: *r = C; *k = B->conv_size; return 1;
    case T_CONV_BIAS: *r = C; return B->conv_bias;
    case T_A_LOG: case T_DT_BIAS: *r = H; return 1;
    case T_D: *r = B->D_per_channel ? HV : H; return 1;
    case T_O_NORM: *r = HV; return B->o_norm_weight;
    case T_O: *r = d; *k = HV; return 1;
    case T_O_BIAS: *r = d; return B->proj_bias;
    default: return 0;
    }
}

/* Shape of a tensor role of layer l; returns 0 when the layer has no such tensor. */
static int tensor_shape(const recur_config *c, int l, recur_layer_tensor t, int64_t shape[2], int *ndim)
{
    if (c->mixers[l] == RECUR_MIXER_MAMBA2 || c->mixers[l] == RECUR_MIXER_RWKV7) {
        int64_t r = 0, k = 0;
        if (!(c->mixers[l] == RECUR_MIXER_MAMBA2 ? mamba2_shape(c, l, t, &r, &k) : recur__rwkv7_shape(c, l, t, &r, &k)))
            return 0;
        shape[0] = r;
        shape[1] = k;
        *ndim = k ? 2 : 1;
        return 1;
    }
    const recur_mixer_kind kind = c->mixers[l];
    const recur_block *B = &c->block[l];
    int64_t d = c->d_model, H = c->n_heads, HK = H * c->head_k, HV = H * c->head_v, ff = c->d_ff;
    int64_t QK = (int64_t)B->qk_heads * c->head_k; /* q / k projection width */
    int gla = kind == RECUR_MIXER_GLA;
    int delta = kind == RECUR_MIXER_DELTANET || kind == RECUR_MIXER_GATED_DELTANET;
    int gdn = kind == RECUR_MIXER_GATED_DELTANET;
    int conv = B->conv_size > 0, W = B->conv_size;
    int64_t r = 0, k = 0; /* k == 0: one-dimensional */
    switch (t) {
    case T_ATTN_NORM: r = d; break;
    case T_MLP_NORM: if (!B->mlp) return 0; r = d; break;
    case T_Q: case T_K: r = QK; k = d; break;
    case T_V: r = HV; k = d; break;
    case T_G: if (!B->out_gate) return 0; r = HV; k = d; break;
    case T_GK: if (!gla || B->gate_rank) return 0; r = HK; k = d; break;
    case T_GK_DOWN: if (!gla || !B->gate_rank) return 0; r = B->gate_rank; k = d; break;
    case T_GK_UP: if (!gla || !B->gate_rank) return 0; r = HK; k = B->gate_rank; break;
    case T_GK_BIAS: if (!gla || !B->gate_rank) return 0; r = HK; break;
    case T_B: if (!delta || !B->beta_proj) return 0; r = H; k = d; break;
    case T_A: if (!gdn) return 0; r = H; k = d; break;
    case T_A_LOG: case T_DT_BIAS: if (!gdn) return 0; r = H; break;
    case T_O_NORM: if (!B->o_norm_weight) return 0; r = c->head_v; break;
    case T_O: r = d; k = HV; break;
    case T_GATE: case T_UP: if (!B->mlp) return 0; r = ff; k = d; break;
    case T_DOWN: if (!B->mlp) return 0; r = d; k = ff; break;
    case T_CONV_Q: case T_CONV_K: if (!conv) return 0; r = QK; k = W; break;
    case T_CONV_V: if (!conv) return 0; r = HV; k = W; break;
    case T_CONV_QB: case T_CONV_KB: if (!conv || !B->conv_bias) return 0; r = QK; break;
    case T_CONV_VB: if (!conv || !B->conv_bias) return 0; r = HV; break;
    default: return 0;
    }
    shape[0] = r;
    shape[1] = k;
    *ndim = k ? 2 : 1;
    return 1;
}

/* p + i elements of type wt */
static void *elem_at(void *p, size_t i, recur_wtype wt) { return (char *)p + i * recur__wtype_size(wt); }

/* The arena place of a layer tensor (for T_UP: the second half of w_gate_up; conv parts: their
 * channels of conv_w / conv_b). */
static void *layer_place(const recur_config *c, int l, recur_layer *L, recur_layer_tensor t, recur_wtype wt)
{
    if (t >= T_RW_LN0_W) return L->rw[t - T_RW_LN0_W];
    const size_t W = (size_t)c->block[l].conv_size;
    const size_t ck = (size_t)(L->off_k - L->conv_in), cv = (size_t)(L->off_v - L->conv_in);
    switch (t) {
    case T_ATTN_NORM: return L->attn_norm;
    case T_Q: return L->wq;
    case T_K: return L->wk;
    case T_V: return L->wv;
    case T_GK: case T_GK_DOWN: return L->wgk;
    case T_GK_UP: return L->w_gk_up;
    case T_GK_BIAS: return L->gk_bias;
    case T_B: return L->wb;
    case T_A: return L->wa;
    case T_A_LOG: return L->A_log;
    case T_DT_BIAS: return L->dt_bias;
    case T_G: return L->wg;
    case T_O_NORM: return L->o_norm;
    case T_O: return L->wo;
    case T_MLP_NORM: return L->mlp_norm;
    case T_GATE: return L->w_gate_up;
    case T_UP: return elem_at(L->w_gate_up, (size_t)c->d_ff * c->d_model, wt);
    case T_DOWN: return L->w_down;
    case T_CONV_Q: return L->conv_w;
    case T_CONV_K: return L->conv_w + ck * W;
    case T_CONV_V: return L->conv_w + cv * W;
    case T_CONV_QB: return L->conv_b;
    case T_CONV_KB: return L->conv_b + ck;
    case T_CONV_VB: return L->conv_b + cv;
    case T_IN_PROJ: return L->w_in;
    case T_IN_BIAS: return L->in_bias;
    case T_CONV: return L->conv_w;
    case T_CONV_BIAS: return L->conv_b;
    case T_D: return L->D;
    case T_O_BIAS: return L->out_bias;
    default: return NULL;
    }
}

int recur__weight_meta(const recur_config *c, int layer, int t, recur_weight_ref *ref)
{
    int ndim = 1;
    int64_t shape[2] = {0, 0};
    if (layer < 0) {
        /* globals: t = 0 embed, 1 norm_f, 2 lm_head (untied only) */
        switch (t) {
        case 0: shape[0] = c->vocab_size; shape[1] = c->d_model; ndim = 2;
            snprintf(ref->name, sizeof ref->name, "embed.weight"); break;
        case 1: shape[0] = c->d_model;
            snprintf(ref->name, sizeof ref->name, "norm_f.weight"); break;
        case 2: if (c->tied_embeddings) return 0;
            shape[0] = c->vocab_size; shape[1] = c->d_model; ndim = 2;
            snprintf(ref->name, sizeof ref->name, "lm_head.weight"); break;
        case 3: if (!c->norm_bias) return 0;
            shape[0] = c->d_model;
            snprintf(ref->name, sizeof ref->name, "norm_f.bias"); break;
        default: return 0;
        }
    } else {
        if (!tensor_shape(c, layer, (recur_layer_tensor)t, shape, &ndim)) return 0;
        snprintf(ref->name, sizeof ref->name, "layers.%d.%s", layer, suffixes[t]);
    }
    ref->ptr = NULL;
    ref->half = NULL;
    ref->ndim = ndim;
    ref->shape[0] = shape[0];
    ref->shape[1] = ndim == 2 ? shape[1] : 0;
    ref->n = (size_t)shape[0] * (size_t)(ndim == 2 ? shape[1] : 1);
    ref->is_norm = (layer < 0 && t == 1) ||
                   (layer >= 0 && (t == T_ATTN_NORM || t == T_MLP_NORM || t == T_O_NORM));
    /* every 2-D layer tensor is (part of) a GEMM matrix; of the globals lm_head, and embed when
     * the LM head is its packed copy */
    ref->is_matrix = ndim == 2 && (layer >= 0 || t == 2 || c->tied_embeddings) &&
                     !(layer >= 0 && ((t >= T_CONV_Q && t <= T_CONV_V) || t == T_CONV)) && /* conv taps stay fp32 */
                     !(layer >= 0 && t >= T_RW_LN0_W && !recur__rwkv7_is_matrix(t)); /* and RWKV-7's r_k */
    return 1;
}

int recur__weight(recur_model *m, int layer, int t, recur_weight_ref *ref)
{
    const recur_config *c = &m->cfg;
    if (!recur__weight_meta(c, layer, t, ref)) return 0;
    int half = m->wtype != RECUR_WT_F32;
    void *place;
    if (layer < 0) {
        place = t == 0 ? (void *)m->embed : t == 1 ? (void *)m->norm_f : t == 3 ? (void *)m->norm_f_bias : m->lm_head;
        if (t == 0) { /* embed: fp32 for the lookup; a tied half model also stages it in lm_head */
            ref->ptr = m->embed;
            if (half && c->tied_embeddings) ref->half = m->lm_head;
            return 1;
        }
    } else {
        place = layer_place(c, layer, &m->layers[layer], (recur_layer_tensor)t, m->wtype);
    }
    if (half && ref->is_matrix) ref->half = place;
    else ref->ptr = place;
    return 1;
}

/* ---------------------------------------------------------------- arena */

/* A mapping of 2 MiB or more starts on a 2 MiB boundary and spans whole 2 MiB pages, so every
 * byte of it can be a transparent huge page: mmap places a mapping on any 4 KiB page, and one of
 * 4.0 MB starting 28 KiB past a boundary held one huge page, not two, and which of a workspace's
 * pages were huge changed from one process to the next (bench_model's /proc/PID/smaps). Map
 * span + 2 MiB, unmap the part before the first boundary and the part after span. */
#define BIG_PAGE ((size_t)2 << 20)
static size_t big_span(size_t bytes)
{
    if (bytes == 0) return 1;
    return bytes >= BIG_PAGE ? (bytes + BIG_PAGE - 1) / BIG_PAGE * BIG_PAGE : bytes;
}

void *recur__big_alloc(size_t bytes)
{
    const size_t span = big_span(bytes);
    if (span < BIG_PAGE) {
        void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    if (span > SIZE_MAX - BIG_PAGE) return NULL;
    char *raw = mmap(NULL, span + BIG_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)raw + BIG_PAGE - 1) & ~(uintptr_t)(BIG_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    munmap(p + span, (size_t)(raw + BIG_PAGE - p)); /* p - raw < 2 MiB: never empty */
#ifdef MADV_HUGEPAGE
    madvise(p, span, MADV_HUGEPAGE); /* advisory: failure is fine */
#endif
    return p;
}

void recur__big_free(void *p, size_t bytes)
{
    if (p) munmap(p, big_span(bytes));
}

#define ALIGN_FLOATS 16 /* 64-byte alignment for every tensor group */
#define ARENA_MAX_FLOATS ((size_t)1 << 31) /* 8 GiB of weights */
#define CANON_MAX 16384 /* recur__config_canonical's text: 64 layers of mixer names and block descriptions fit */
static size_t round_up(size_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

int recur__model_alloc(const recur_config *c, recur_wtype wt, recur_model **out)
{
    size_t d = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_k, V = (size_t)c->head_v;
    size_t HK = H * K, HV = H * V, ff = (size_t)c->d_ff, vocab = (size_t)c->vocab_size;

    /* first pass counts, second pass assigns */
    recur_model *m = calloc(1, sizeof *m);
    if (!m) return RECUR_ENOMEM;
    m->cfg = *c;
    m->wtype = wt;
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        float *base = m->arena;
#define TAKE(ptr, n) do { if (pass) (ptr) = base + off; off = round_up(off + (size_t)(n)); } while (0)
#define TAKE_MATRIX(ptr, N, K) TAKE(ptr, (recur__packed_bytes((int)(N), (int)(K), wt) + 3) / 4)
        TAKE(m->embed, vocab * d);
        TAKE(m->norm_f, d);
        if (c->norm_bias) TAKE(m->norm_f_bias, d);
        TAKE_MATRIX(m->lm_head, vocab, d); /* tied: filled from embed when packed */
        for (int l = 0; l < c->n_layers; l++) {
            recur_layer *L = &m->layers[l];
            const recur_block *B = &c->block[l];
            recur_mixer_kind kind = c->mixers[l];
            int gla = kind == RECUR_MIXER_GLA;
            int delta = kind == RECUR_MIXER_DELTANET || kind == RECUR_MIXER_GATED_DELTANET;
            int gdn = kind == RECUR_MIXER_GATED_DELTANET;
            if (kind == RECUR_MIXER_MAMBA2) { /* block_mamba2.h: in_proj = z | xBC | dt, no MLP */
                const size_t C = (size_t)mamba2_conv_dim(c, l), n_in = HV + C + H;
                if (pass) {
                    L->kind = kind;
                    L->n_in = (int)n_in;
                    L->off_k = L->off_v = L->off_g = L->off_gk = L->off_b = L->off_a = -1;
                    L->conv_in = (int)HV;
                    L->conv_ch = (int)C;
                }
                TAKE(L->attn_norm, d);
                TAKE_MATRIX(L->w_in, n_in, d);
                if (B->proj_bias) TAKE(L->in_bias, n_in);
                TAKE(L->conv_w, C * (size_t)B->conv_size);
                if (B->conv_bias) TAKE(L->conv_b, C);
                TAKE(L->A_log, H);
                TAKE(L->dt_bias, H);
                TAKE(L->D, B->D_per_channel ? HV : H);
                TAKE(L->o_norm, HV);
                TAKE_MATRIX(L->wo, d, HV);
                if (B->proj_bias) TAKE(L->out_bias, d);
                continue;
            }
            if (kind == RECUR_MIXER_RWKV7) { /* block_rwkv7.h: every role in L->rw; n_in: its scratch row */
                if (pass) {
                    L->kind = kind;
                    L->n_in = recur__rwkv7_scratch(c, l);
                    L->off_k = L->off_v = L->off_g = L->off_gk = L->off_b = L->off_a = -1;
                }
                for (int t = T_RW_LN0_W; t < T_N_LAYER_TENSORS; t++) {
                    int64_t r, k;
                    float *p = NULL;
                    if (!recur__rwkv7_shape(c, l, t, &r, &k)) continue;
                    if (recur__rwkv7_is_matrix(t)) TAKE_MATRIX(p, r, k);
                    else TAKE(p, (size_t)r * (size_t)(k ? k : 1));
                    if (pass) L->rw[t - T_RW_LN0_W] = p;
                }
                continue;
            }
            size_t QK = (size_t)B->qk_heads * K, gk = gla ? (B->gate_rank ? (size_t)B->gate_rank : HK) : 0;
            /* q | k | v | g | gk | b | a */
            size_t o_g = 2 * QK + HV, o_gk = o_g + (B->out_gate ? HV : 0), o_b = o_gk + gk;
            size_t o_a = o_b + (delta && B->beta_proj ? H : 0), n_in = o_a + (gdn ? H : 0);
            if (pass) {
                L->kind = kind;
                L->n_in = (int)n_in;
                L->off_k = (int)QK;
                L->off_v = (int)(2 * QK);
                L->off_g = B->out_gate ? (int)o_g : -1;
                L->off_gk = gla ? (int)o_gk : -1;
                L->off_b = delta && B->beta_proj ? (int)o_b : -1;
                L->off_a = gdn ? (int)o_a : -1;
                L->conv_in = 0;
                L->conv_ch = B->conv_size ? (int)(2 * QK + HV) : 0;
            }
            TAKE(L->attn_norm, d);
            TAKE_MATRIX(L->w_in, n_in, d);
            if (pass) {
                L->wq = L->w_in;
                L->wk = elem_at(L->w_in, QK * d, wt);
                L->wv = elem_at(L->w_in, 2 * QK * d, wt);
                L->wg = B->out_gate ? elem_at(L->w_in, o_g * d, wt) : NULL;
                L->wgk = gla ? elem_at(L->w_in, o_gk * d, wt) : NULL;
                L->wb = L->off_b >= 0 ? elem_at(L->w_in, o_b * d, wt) : NULL;
                L->wa = gdn ? elem_at(L->w_in, o_a * d, wt) : NULL;
            }
            if (gla && B->gate_rank) { TAKE_MATRIX(L->w_gk_up, HK, B->gate_rank); TAKE(L->gk_bias, HK); }
            if (B->conv_size) {
                TAKE(L->conv_w, (2 * QK + HV) * (size_t)B->conv_size);
                if (B->conv_bias) TAKE(L->conv_b, 2 * QK + HV);
            }
            if (gdn) { TAKE(L->A_log, H); TAKE(L->dt_bias, H); }
            TAKE(L->o_norm, V); /* ones when the block has no o_norm weight (set below) */
            TAKE_MATRIX(L->wo, d, HV);
            if (B->mlp) {
                TAKE(L->mlp_norm, d);
                TAKE_MATRIX(L->w_gate_up, 2 * ff, d);
                TAKE_MATRIX(L->w_down, d, ff);
            }
        }
#undef TAKE_MATRIX
#undef TAKE
        if (!pass) {
            if (off > ARENA_MAX_FLOATS) { free(m); return RECUR_ESHAPE; }
            m->arena_floats = off;
            m->arena = recur__big_alloc(off * sizeof(float));
            if (!m->arena) { free(m); return RECUR_ENOMEM; }
        }
    }
    for (int l = 0; l < c->n_layers; l++)
        if (!c->block[l].o_norm_weight && m->layers[l].o_norm)
            for (size_t i = 0; i < V; i++) m->layers[l].o_norm[i] = 1.0f;

    /* state layout: recurrent layers share one block, softmax layers get their own KV caches */
    size_t rec = 0;
    m->max_in = 0;
    for (int l = 0; l < c->n_layers; l++) {
        recur_layer *L = &m->layers[l];
        if (L->n_in > m->max_in) m->max_in = L->n_in;
        L->state_off = rec;
        if (L->kind == RECUR_MIXER_SOFTMAX) { L->state_floats = 0; m->n_softmax++; continue; }
        /* the core's S [H][K][V] (linear: then z [H][K]), then the conv state [W-1][C] */
        L->conv_state_off = HK * V + (L->kind == RECUR_MIXER_LINEAR ? HK : 0);
        size_t W = (size_t)c->block[l].conv_size;
        L->state_floats = L->conv_state_off + (W ? (W - 1) * (size_t)L->conv_ch : 0);
        if (L->kind == RECUR_MIXER_RWKV7) L->state_floats = recur__rwkv7_state_floats(c); /* S, two shifts */
        if (W && (int)(W * (size_t)L->conv_ch) > m->max_conv) m->max_conv = (int)(W * (size_t)L->conv_ch);
        rec += L->state_floats;
        if (L->state_floats > m->max_layer_floats) m->max_layer_floats = L->state_floats;
    }
    m->rec_floats = rec;
    *out = m;
    return RECUR_OK;
}

/* W [N][K] row-major at w, elements of type wt (its region holds recur__packed_floats(N, K) of
 * them) -> packed in place; tmp holds at least N*K elements. */
static void pack_in_place(void *w, int N, int K, recur_wtype wt, void *tmp)
{
    memcpy(tmp, w, (size_t)N * K * recur__wtype_size(wt));
    if (wt == RECUR_WT_F32) recur__pack(w, tmp, N, K);
    else recur__pack_half(w, tmp, N, K);
}

/* Every GEMM matrix into the packed layout of packed_gemm.h (the forward pass reads only that). */
static int pack_weights(recur_model *m)
{
    const recur_config *c = &m->cfg;
    int d = c->d_model, HV = c->n_heads * c->head_v, ff = c->d_ff;
    size_t most = (size_t)c->vocab_size * d;
    for (int l = 0; l < c->n_layers; l++) {
        size_t n[] = {(size_t)m->layers[l].n_in * d, (size_t)d * HV, (size_t)2 * ff * d, (size_t)d * ff,
                      (size_t)m->max_conv, (size_t)c->n_heads * c->head_k * c->block[l].gate_rank};
        for (int i = 0; i < 6; i++) if (n[i] > most) most = n[i];
    }
    const recur_wtype wt = m->wtype;
    void *tmp = malloc(most * sizeof(float));
    if (!tmp) return RECUR_ENOMEM;
    for (int l = 0; l < c->n_layers; l++) {
        recur_layer *L = &m->layers[l];
        const recur_block *B = &c->block[l];
        if (L->kind == RECUR_MIXER_RWKV7) {
            for (int t = T_RW_LN0_W; t < T_N_LAYER_TENSORS; t++) {
                int64_t r, k;
                if (recur__rwkv7_is_matrix(t) && recur__rwkv7_shape(c, l, t, &r, &k))
                    pack_in_place(L->rw[t - T_RW_LN0_W], (int)r, (int)k, wt, tmp);
            }
            continue;
        }
        pack_in_place(L->w_in, L->n_in, d, wt, tmp);
        pack_in_place(L->wo, d, HV, wt, tmp);
        if (B->mlp) {
            pack_in_place(L->w_gate_up, 2 * ff, d, wt, tmp);
            pack_in_place(L->w_down, d, ff, wt, tmp);
        }
        if (L->w_gk_up) pack_in_place(L->w_gk_up, c->n_heads * c->head_k, B->gate_rank, wt, tmp);
        if (L->conv_w) recur__short_conv_transpose(L->conv_w, L->conv_ch, B->conv_size, tmp);
    }
    /* tied fp32: packed from embed; tied half: embed's halves were staged in lm_head */
    if (c->tied_embeddings && wt == RECUR_WT_F32) recur__pack(m->lm_head, m->embed, c->vocab_size, d);
    else pack_in_place(m->lm_head, c->vocab_size, d, wt, tmp);
    free(tmp);
    return RECUR_OK;
}

/* info's state_bytes and state_dtype for m's state dtype (softmax KV rows are fp32 whatever it is) */
static void set_state_info(recur_model *m)
{
    const recur_config *c = &m->cfg;
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    m->info.state_bytes = recur__rec_bytes(m) + (size_t)m->n_softmax * (size_t)c->max_context * (HK + HV) * sizeof(float);
    snprintf(m->info.state_dtype, sizeof m->info.state_dtype, "%s", recur_state_dtype_name(m->sdtype));
}

const char *recur_state_dtype_name(recur_state_dtype t)
{
    return t == RECUR_STATE_BF16 ? "BF16" : t == RECUR_STATE_F16 ? "F16" : "F32";
}

int recur_state_dtype_parse(const char *name, recur_state_dtype *out)
{
    if (!name || !out) return RECUR_EINVAL;
    if (!strcasecmp(name, "f32")) *out = RECUR_STATE_F32;
    else if (!strcasecmp(name, "bf16")) *out = RECUR_STATE_BF16;
    else if (!strcasecmp(name, "f16")) *out = RECUR_STATE_F16;
    else return RECUR_EINVAL;
    return RECUR_OK;
}

int recur_model_set_state_dtype(recur_model *m, recur_state_dtype t)
{
    if (!m || (t != RECUR_STATE_F32 && t != RECUR_STATE_BF16 && t != RECUR_STATE_F16)) return RECUR_EINVAL;
    m->sdtype = t;
    set_state_info(m);
    return RECUR_OK;
}

recur_state_dtype recur_model_state_dtype(const recur_model *m)
{
    return m ? m->sdtype : RECUR_STATE_F32;
}

int recur__model_finish(recur_model *m)
{
    const recur_config *c = &m->cfg;
    recur_model_info *info = &m->info;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", c->name);
    info->vocab_size = c->vocab_size;
    info->d_model = c->d_model;
    info->n_layers = c->n_layers;
    info->n_heads = c->n_heads;
    info->head_k = c->head_k;
    info->head_v = c->head_v;
    info->d_ff = c->d_ff;
    info->tied_embeddings = c->tied_embeddings;
    info->max_context = c->max_context;
    info->softmax_layers = m->n_softmax;
    for (int l = 0; l < c->n_layers; l++) info->mixers[l] = c->mixers[l];

    /* fingerprint: FNV-1a 64 over the canonical config text, then every tensor's fp32 data in
     * table order (embed, norm_f, lm_head if untied, then each layer's tensors); a tensor held
     * in halves is hashed as its exact fp32 widening, so the fingerprint does not depend on
     * how the weights are held */
    char canon[CANON_MAX];
    int n = recur__config_canonical(c, canon, sizeof canon);
    uint64_t h = recur__fnv1a(RECUR_FNV_OFFSET, canon, n > 0 ? (size_t)n : 0);
    int64_t params = 0;
    recur_weight_ref ref;
    for (int l = -1; l < c->n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++)
            if (recur__weight(m, l, t, &ref)) {
                if (ref.ptr) h = recur__fnv1a(h, ref.ptr, ref.n * sizeof(float));
                else
                    for (size_t i = 0; i < ref.n; i++) {
                        float f = recur__half_to_float(ref.half[i], m->wtype);
                        h = recur__fnv1a(h, &f, sizeof f);
                    }
                params += (int64_t)ref.n;
            }
    info->fingerprint = h;
    info->n_params = params;

    set_state_info(m);
    info->weight_bytes = m->arena_floats * sizeof(float);
    snprintf(info->weights_dtype, sizeof info->weights_dtype, "%s",
             m->wtype == RECUR_WT_F16 ? "F16" : m->wtype == RECUR_WT_BF16 ? "BF16" : "F32");
    snprintf(info->weights_origin, sizeof info->weights_origin, "file"); /* seeded: model_init.c */
    snprintf(info->prefill_dtype, sizeof info->prefill_dtype, "F32");
    return pack_weights(m);
}

/* ---------------------------------------------------------------- public: free / info */

void recur_model_free(recur_model *m)
{
    if (!m) return;
    recur__prefill_panels_free(m);
    recur__big_free(m->arena, m->arena_floats * sizeof(float));
    free(m);
}

const recur_model_info *recur_model_get_info(const recur_model *m)
{
    return m ? &m->info : NULL;
}
