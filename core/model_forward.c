/* model_forward.c — the forward pass of docs/MODEL.md over a block of rows, and the workspace.
 *
 * One code path serves both callers:
 *   - batched decode: row r is session states[r] folding tokens[r] (one token each);
 *   - prefill: rows are consecutive tokens of one session (a piece of at most ws->rows tokens).
 * Projections, MLP and LM head go through the packed GEMM over the rows (packed_gemm.h). The mixer
 * core is the mixer's own entry point (mixer_rows): its recurrent form, session by session, for
 * decode (the per-head step in registers, mixer.h), its chunkwise form (chunk 64) for prefill.
 * Decode computes every per-row step (norms, activations, gates, the state update) with
 * the same code on each row whatever the batch, so a session's logits and state after a batched
 * step are bit-identical to recur_model_step's (tests/unit/test_batch_identity.c).
 * Nothing here allocates: every buffer is in the workspace. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exp_nonpos.h"
#include "mixer.h"
#include "block_mamba2.h"
#include "block_rwkv7.h"
#include "model_internal.h"
#include "model_math.h"
#include "packed_gemm.h"
#include "short_conv.h"
#include "state_dtype.h"

#define PREFILL_PIECE 256 /* tokens per prefill piece (a multiple of the chunk) */
#define PREFILL_CHUNK 64
#define WS_MAX_BATCH 4096 /* sessions per batched step, at most */

struct recur_workspace {
    const recur_model *m;
    int max_batch;
    int rows;       /* R = max(max_batch, PREFILL_PIECE) */
    float *x;       /* [R][d]      residual stream */
    float *h;       /* [R][d]      normed input of a sub-block */
    float *proj;    /* [R][max_in] mixer input projections: q | k | v | g | gk | b | a */
    float *q, *k;   /* [R][H][K] */
    float *v;       /* [R][H][V] */
    float *gk;      /* [R][H][K]   gla gates (log space) */
    float *gs;      /* [R][H]      gated DeltaNet gates (log space) */
    float *beta;    /* [R][H] */
    float *o;       /* [R][H][V]   mixer core output */
    float *ff;      /* [R][2*d_ff] gate | up, then silu(gate)*up in the first half */
    float *scores;  /* [RECUR__SOFTMAX_QBLOCK][max_context] softmax layers only (prefill) */
    float *backup;  /* [rec_floats] a session's recurrent state before a prefill (rollback) */
    float *conv_tmp;/* [max_conv]  short convolution scratch (short_conv.h) */
    float *lwork;   /* [max_batch][max_layer_floats] half states: a layer's state widened to fp32 */
    recur_state_dtype sdtype; /* the model's state dtype when the workspace was made */
    void *block;    /* every buffer above (recur__big_alloc) */
    size_t block_bytes;
};

/* ---------------------------------------------------------------- workspace */

int recur_workspace_create(const recur_model *m, int max_batch, recur_workspace **out)
{
    if (!m || !out) return RECUR_EINVAL;
    if (max_batch < 1 || max_batch > WS_MAX_BATCH) return RECUR_ESHAPE;
    const recur_config *c = &m->cfg;
    size_t R = (size_t)(max_batch > PREFILL_PIECE ? max_batch : PREFILL_PIECE);
    size_t d = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_k, V = (size_t)c->head_v;
    size_t sizes[] = {
        R * d, R * d, R * (size_t)m->max_in, R * H * K, R * H * K, R * H * V, R * H * K, R * H, R * H,
        R * H * V, R * 2 * (size_t)c->d_ff,
        m->n_softmax ? (size_t)RECUR__SOFTMAX_QBLOCK * (size_t)c->max_context : 0,
        m->rec_floats, (size_t)m->max_conv,
        m->sdtype != RECUR_STATE_F32 ? (size_t)max_batch * m->max_layer_floats : 0,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += (sizes[i] + 15) / 16 * 16;
    recur_workspace *ws = calloc(1, sizeof *ws);
    float *b = recur__big_alloc(total * sizeof(float));
    if (!ws || !b) { free(ws); recur__big_free(b, total * sizeof(float)); return RECUR_ENOMEM; }
    memset(b, 0, total * sizeof(float)); /* touch once, here, never on the hot path */
    float **slots[] = {&ws->x, &ws->h, &ws->proj, &ws->q, &ws->k, &ws->v, &ws->gk, &ws->gs,
                       &ws->beta, &ws->o, &ws->ff, &ws->scores, &ws->backup, &ws->conv_tmp, &ws->lwork};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = b + off;
        off += (sizes[i] + 15) / 16 * 16;
    }
    ws->block = b;
    ws->block_bytes = total * sizeof(float);
    ws->m = m;
    ws->max_batch = max_batch;
    ws->rows = (int)R;
    ws->sdtype = m->sdtype;
    *out = ws;
    return RECUR_OK;
}

void recur_workspace_free(recur_workspace *ws)
{
    if (!ws) return;
    recur__big_free(ws->block, ws->block_bytes);
    free(ws);
}

/* ---------------------------------------------------------------- small math */

#define silu_v recur__silu /* exp_nonpos.h */

/* C[R][N] = beta * C + A[R][Kd] W[N][Kd]^T   (nn.Linear on R rows), W packed at load, elements
 * of the model's wtype (fp32, or the weights file's F16 / BF16 widened in the kernel). One kernel
 * for every row count: a row's result is the same bits whether it is stepped alone, in a batch
 * at any position, or in a prefill piece (packed_gemm.h); and with W pre-packed it is faster than
 * sgemv at one row and than sgemm (which repacks W per call) at 8 to 256 rows. Prefill rows of a
 * model with the bf16 prefill go through W's bf16 panels instead (recur__model_gemm). */
static void linear_rows(const recur_model *m, int prefill, int R, int N, int Kd, const float *A, int lda,
                        const void *Wp, float beta, float *C, int ldc)
{
    recur__model_gemm(m, prefill, R, N, Kd, A, lda, Wp, beta, C, ldc);
}

/* ---------------------------------------------------------------- mixer core */

/* o = core(q, k, v, gates; state) for T consecutive tokens of session s, read from workspace rows
 * [r, r + T): the mixer's own entry point (one home per recurrence: its per-head decode step is
 * its recurrent form, mixer.h), in `form` — recurrent for decode (T = 1), chunkwise (chunk
 * PREFILL_CHUNK) for prefill. Softmax layers append the T rows to the KV cache first. The gates
 * were kept finite and in range by preprocess_rows, so no kernel rejects them. */
static int mixer_rows(const recur_model *m, const recur_layer *L, recur_workspace *ws, recur_state *s,
                      int r, int T, recur_form form)
{
    const recur_config *c = &m->cfg;
    const int H = c->n_heads, K = c->head_k, V = c->head_v;
    const size_t HK = (size_t)H * K, HV = (size_t)H * V;
    const recur_dims dims = {.T = T, .H = H, .K = K, .V = V};
    const float *q = ws->q + r * HK, *k = ws->k + r * HK, *v = ws->v + r * HV;
    const float *beta = ws->beta + (size_t)r * H;
    float *o = ws->o + r * HV;
    /* a softmax layer has no recurrent state (of a half state: neither work nor rec to point into) */
    float *S = L->kind == RECUR_MIXER_SOFTMAX ? NULL : recur__lstate(s, L);
    switch (L->kind) {
    case RECUR_MIXER_LINEAR:
        return recur_linear_attention(&dims, q, k, v, 1, RECUR_FMAP_ELU1, 0.0f, form, PREFILL_CHUNK,
                                      S, S + HK * V, o);
    case RECUR_MIXER_RETENTION:
        return recur_retention(&dims, q, k, v, NULL, 0.0f, form, PREFILL_CHUNK, S, o);
    case RECUR_MIXER_GLA:
        return recur_gla(&dims, q, k, v, ws->gk + r * HK, 1, 0.0f, form, PREFILL_CHUNK, S, o);
    case RECUR_MIXER_DELTANET:
        return recur_delta_rule(&dims, q, k, v, beta, NULL, 0.0f, form, PREFILL_CHUNK, S, o);
    case RECUR_MIXER_GATED_DELTANET:
        return recur_delta_rule(&dims, q, k, v, beta, ws->gs + (size_t)r * H, 0.0f, form,
                                PREFILL_CHUNK, S, o);
    case RECUR_MIXER_MAMBA2: /* not mixers of this block: block_mamba2.c, block_rwkv7.c run the layer */
    case RECUR_MIXER_RWKV7:
        return RECUR_EINVAL;
    case RECUR_MIXER_SOFTMAX: {
        const int l = (int)(L - m->layers);
        const int64_t pos0 = (int64_t)s->tokens_seen; /* + T <= max_context: checked */
        float *kc = s->kcache[l], *vc = s->vcache[l], scale;
        recur__resolve_scale(0.0f, K, &scale);
        memcpy(kc + (size_t)pos0 * HK, k, (size_t)T * HK * sizeof(float));
        memcpy(vc + (size_t)pos0 * HV, v, (size_t)T * HV * sizeof(float));
        if (T == 1)
            recur__softmax_step(H, K, V, q, scale, kc, vc, pos0, o);
        else
            recur__softmax_rows(H, K, V, q, scale, kc, vc, pos0, T, ws->scores, o);
        return RECUR_OK;
    }
    }
    return RECUR_EINVAL;
}

/* ---------------------------------------------------------------- the block stack */

/* x <- act(x) over n values */
static void activate(float *x, size_t n, recur_act act)
{
    switch (act) {
    case RECUR_ACT_NONE: break;
    case RECUR_ACT_SILU: for (size_t i = 0; i < n; i++) x[i] = silu_v(x[i]); break;
    case RECUR_ACT_RELU: for (size_t i = 0; i < n; i++) x[i] = fmaxf(x[i], 0.0f); break;
    case RECUR_ACT_ELU1: for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] + 1.0f : expf(x[i]); break;
    }
}

/* q or k of one row: the projection's qk_heads heads -> act, L2norm per head -> the mixer's H heads
 * (head h reads head h / (H / qk_heads); expanded in place from the top so no source is
 * overwritten before it is read). */
static void qk_rows(const recur_block *B, float *dst, const float *src, int H, int K)
{
    const size_t QK = (size_t)B->qk_heads * K;
    memcpy(dst, src, QK * sizeof(float));
    activate(dst, QK, B->qk_act);
    if (B->qk_l2)
        for (int hd = 0; hd < B->qk_heads; hd++) l2norm(dst + (size_t)hd * K, K);
    const int G = H / B->qk_heads;
    if (G > 1)
        for (int hd = H - 1; hd > 0; hd--)
            memcpy(dst + (size_t)hd * K, dst + (size_t)(hd / G) * K, (size_t)K * sizeof(float));
}

/* Split the projected rows into the core's inputs (docs/MODEL.md "Blocks"). */
static void preprocess_rows(const recur_model *m, const recur_layer *L, recur_workspace *ws, int R, int prefill)
{
    const recur_block *B = &m->cfg.block[L - m->layers];
    const int H = m->cfg.n_heads, K = m->cfg.head_k, V = m->cfg.head_v;
    const size_t HK = (size_t)H * K, HV = (size_t)H * V;
    if (L->w_gk_up) /* low-rank GLA gate: gk = W_up (W_down h) + bias, W_down h in the projection */
        linear_rows(m, prefill, R, (int)HK, B->gate_rank, ws->proj + L->off_gk, L->n_in, L->w_gk_up, 0.0f, ws->gk, (int)HK);
    for (int r = 0; r < R; r++) {
        const float *p = ws->proj + (size_t)r * L->n_in;
        float *v = ws->v + r * HV;
        qk_rows(B, ws->q + r * HK, p, H, K);
        qk_rows(B, ws->k + r * HK, p + L->off_k, H, K);
        memcpy(v, p + L->off_v, HV * sizeof(float));
        activate(v, HV, B->v_act);
        switch (L->kind) {
        case RECUR_MIXER_GLA: {
            /* g = max(logsigmoid(gk) / gate_norm, gate_clamp), logsigmoid(x) = -softplus(-x); the
             * clamp (-1e30 when none is configured) keeps it finite like the gated DeltaNet gate
             * below (fmaxf also maps NaN to the bound) */
            float *g = ws->gk + r * HK;
            if (L->w_gk_up)
                for (size_t i = 0; i < HK; i++) g[i] = fmaxf(-softplus(-(g[i] + L->gk_bias[i])) / B->gate_norm, B->gate_clamp);
            else
                for (size_t i = 0; i < HK; i++) g[i] = fmaxf(-softplus(-p[L->off_gk + i]) / B->gate_norm, B->gate_clamp);
            break;
        }
        case RECUR_MIXER_GATED_DELTANET:
            /* g = -exp(A_log) * softplus(a_proj h + dt_bias); an overflow to -inf (or NaN from
             * overflowing activations) is kept finite, exp(g) is 0 either way: the chunkwise kernel
             * never sees a non-finite gate, so prefill fails on numerics no more than a step does */
            for (int hd = 0; hd < H; hd++)
                ws->gs[(size_t)r * H + hd] =
                    fmaxf(-expf(L->A_log[hd]) * softplus(p[L->off_a + hd] + L->dt_bias[hd]), -1e30f);
            /* fall through */
        case RECUR_MIXER_DELTANET:
            /* beta = beta_scale * sigmoid(b_proj h) (or beta_scale without b_proj), kept inside
             * (0, beta_scale] */
            for (int hd = 0; hd < H; hd++)
                ws->beta[(size_t)r * H + hd] =
                    L->off_b >= 0 ? fmaxf(B->beta_scale * sigmoid(p[L->off_b + hd]), FLT_MIN) : B->beta_scale;
            break;
        default:
            break;
        }
    }
}

/* The short convolution over the rows' convolved columns: decode, row r with its session's conv
 * state; prefill, the rows in order with the one session's. */
static void conv_rows(const recur_model *m, const recur_layer *L, recur_workspace *ws, recur_state *const *states,
                      int R, int prefill)
{
    const recur_block *B = &m->cfg.block[L - m->layers];
    for (int r = 0; r < (prefill ? 1 : R); r++) {
        float *st = recur__lstate(states[r], L) + L->conv_state_off;
        recur__short_conv_rows(prefill ? R : 1, L->conv_ch, B->conv_size, ws->proj + (size_t)r * L->n_in + L->conv_in,
                               (size_t)L->n_in, L->conv_w, L->conv_b, 0, st, ws->conv_tmp);
    }
}

/* Layer l over the R rows (forward_rows): its mixer or block, its MLP; the rows' state of layer
 * l through recur__lstate. */
static int layer_rows(const recur_model *m, recur_workspace *ws, recur_state *const *states, int R, int prefill,
                      int l)
{
    const recur_config *c = &m->cfg;
    const int d = c->d_model, H = c->n_heads, V = c->head_v, ff = c->d_ff;
    const size_t HV = (size_t)H * V;
    const recur_layer *L = &m->layers[l];
    const recur_block *B = &c->block[l];
    const float eps = (float)B->eps;
    if (L->kind == RECUR_MIXER_MAMBA2) { /* its own block (block_mamba2.h), no MLP */
        const recur__mamba2_rows_ws mws = {.h = ws->h, .proj = ws->proj, .q = ws->q, .k = ws->k, .v = ws->v,
                                           .g = ws->gs, .o = ws->o, .conv_tmp = ws->conv_tmp};
        return recur__mamba2_rows(m, L, &mws, ws->x, R, states, prefill, PREFILL_CHUNK);
    }
    if (L->kind == RECUR_MIXER_RWKV7) { /* its own block (block_rwkv7.h), channel mix included */
        const recur__rwkv7_rows_ws rws = {.h = ws->h, .scr = ws->proj, .r = ws->q, .k = ws->k, .v = ws->v,
                                          .wlog = ws->gk, .o = ws->o, .ff = ws->ff};
        return recur__rwkv7_rows(m, L, &rws, ws->x, R, states, prefill);
    }
    // h = RMSNorm_attn(x) ; proj = [q|k|v|g|gk|b|a] = W_in h
    for (int r = 0; r < R; r++)
        rmsnorm(ws->h + (size_t)r * d, ws->x + (size_t)r * d, L->attn_norm, d, eps);
    linear_rows(m, prefill, R, L->n_in, d, ws->h, d, L->w_in, 0.0f, ws->proj, L->n_in);
    // q|k|v = shortconv(q|k|v) ; then activations, norms, gates
    if (L->conv_ch) conv_rows(m, L, ws, states, R, prefill);
    preprocess_rows(m, L, ws, R, prefill);

    // o = core(q, k, v, gates; state)
    for (int r = 0; r < (prefill ? 1 : R); r++) {
        int rc = prefill ? mixer_rows(m, L, ws, states[0], 0, R, RECUR_FORM_CHUNKWISE)
                         : mixer_rows(m, L, ws, states[r], r, 1, RECUR_FORM_RECURRENT);
        if (rc) return rc;
    }

    // o_i = RMSNorm_o(o_i) per head ; o = o * silu(g_proj h) ; x += o_proj o
    for (int r = 0; r < R; r++) {
        float *o = ws->o + r * HV;
        for (int hd = 0; hd < H; hd++) rmsnorm(o + (size_t)hd * V, o + (size_t)hd * V, L->o_norm, V, eps);
        if (L->off_g >= 0) {
            const float *g = ws->proj + (size_t)r * L->n_in + L->off_g;
            for (size_t i = 0; i < HV; i++) o[i] *= silu_v(g[i]);
        }
    }
    linear_rows(m, prefill, R, d, (int)HV, ws->o, (int)HV, L->wo, 1.0f, ws->x, d);
    if (!B->mlp) return RECUR_OK;

    // h = RMSNorm_mlp(x) ; x += down( silu(gate h) * (up h) )
    for (int r = 0; r < R; r++)
        rmsnorm(ws->h + (size_t)r * d, ws->x + (size_t)r * d, L->mlp_norm, d, eps);
    linear_rows(m, prefill, R, 2 * ff, d, ws->h, d, L->w_gate_up, 0.0f, ws->ff, 2 * ff);
    for (int r = 0; r < R; r++) {
        float *f = ws->ff + (size_t)r * 2 * ff;
        for (int j = 0; j < ff; j++) f[j] = silu_v(f[j]) * f[ff + j];
    }
    linear_rows(m, prefill, R, d, ff, ws->ff, 2 * ff, L->w_down, 1.0f, ws->x, d);
    return RECUR_OK;
}

/*
 * Run R rows through the model. mode_prefill == 0: row r belongs to states[r] (decode);
 * otherwise every row belongs to states[0], at positions tokens_seen + r. Everything has been
 * validated by the caller. logits [R - first_logit][vocab] for rows first_logit.., or NULL.
 */
static int forward_rows(const recur_model *m, recur_workspace *ws, recur_state *const *states,
                        const int32_t *tokens, int R, int prefill, int first_logit, float *logits)
{
    const recur_config *c = &m->cfg;
    const int d = c->d_model;
    const int ns = prefill ? 1 : R; /* sessions in the rows */
    const int half = m->sdtype != RECUR_STATE_F32;

    // x = embed[token]
    for (int r = 0; r < R; r++)
        memcpy(ws->x + (size_t)r * d, m->embed + (size_t)tokens[r] * d, (size_t)d * sizeof(float));

    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        const int widen = half && L->state_floats;
        // half states: S_l -> fp32 in the workspace, the layer computes as for an fp32 state,
        // then S_l <- round(S_l) once (state_dtype.h); each session on its own, so a batched step
        // stays bit-identical to single steps
        for (int r = 0; widen && r < ns; r++) {
            states[r]->work = ws->lwork + (size_t)r * m->max_layer_floats;
            recur__state_widen(states[r]->work, states[r]->hrec + L->state_off, L->state_floats, m->sdtype);
        }
        int rc = layer_rows(m, ws, states, R, prefill, l);
        for (int r = 0; widen && r < ns; r++) {
            if (!rc) recur__state_narrow(states[r]->hrec + L->state_off, states[r]->work, L->state_floats, m->sdtype);
            states[r]->work = NULL;
        }
        if (rc) return rc;
    }

    if (logits && first_logit < R) {
        // logits = lm_head RMSNorm_f(x)   (a LayerNorm with bias: rwkv7), rows first_logit..R-1,
        // on the model's own path for prefill too (model_prefill.c)
        // (a row's result does not depend on the others: the same bits as over every row)
        const int NL = R - first_logit;
        const float *x0 = ws->x + (size_t)first_logit * d;
        for (int r = 0; r < NL; r++) {
            if (m->norm_f_bias)
                layernorm(ws->h + (size_t)r * d, x0 + (size_t)r * d, m->norm_f, m->norm_f_bias, d, (float)c->norm_eps);
            else
                rmsnorm(ws->h + (size_t)r * d, x0 + (size_t)r * d, m->norm_f, d, (float)c->norm_eps);
        }
        linear_rows(m, 0, NL, c->vocab_size, d, ws->h, d, m->lm_head, 0.0f, logits, c->vocab_size);
    }
    return RECUR_OK;
}

/* ---------------------------------------------------------------- public entry points */

static int check_common(const recur_model *m, const recur_workspace *ws, const recur_state *s)
{
    if (!m || !ws || !s) return RECUR_EINVAL;
    if (ws->m != m || s->m != m || s->dtype != m->sdtype || ws->sdtype != m->sdtype) return RECUR_EMISMATCH;
    return RECUR_OK;
}

int recur_model_step_batch(const recur_model *m, recur_workspace *ws, recur_state *const *states,
                           const int32_t *tokens, int B, float *logits)
{
    if (!m || !ws || !states || !tokens || !logits) return RECUR_EINVAL;
    if (B < 1 || B > ws->max_batch) return RECUR_ESHAPE;
    /* validate everything before any state moves */
    for (int b = 0; b < B; b++) {
        int rc = check_common(m, ws, states[b]);
        if (rc) return rc;
        if (tokens[b] < 0 || tokens[b] >= m->cfg.vocab_size) return RECUR_ETOKEN;
        if (m->n_softmax && states[b]->tokens_seen >= (uint64_t)m->cfg.max_context) return RECUR_ECONTEXT;
        for (int a = 0; a < b; a++)
            if (states[a] == states[b]) return RECUR_EINVAL;
    }
    int rc = forward_rows(m, ws, states, tokens, B, 0, 0, logits);
    if (rc) return rc;
    for (int b = 0; b < B; b++) states[b]->tokens_seen++;
    return RECUR_OK;
}

int recur_model_step(const recur_model *m, recur_workspace *ws, recur_state *s, int32_t token,
                     float *logits)
{
    return recur_model_step_batch(m, ws, &s, &token, 1, logits);
}

int recur_model_prefill(const recur_model *m, recur_workspace *ws, recur_state *s,
                        const int32_t *tokens, int64_t n, float *logits)
{
    return recur_model_prefill_tail(m, ws, s, tokens, n, logits ? n : 0, logits);
}

int recur_model_prefill_tail(const recur_model *m, recur_workspace *ws, recur_state *s,
                             const int32_t *tokens, int64_t n, int64_t n_tail, float *logits)
{
    int rc = check_common(m, ws, s);
    if (rc) return rc;
    if (n < 0 || (n > 0 && !tokens) || n_tail < 0 || n_tail > n || (n_tail && !logits))
        return RECUR_EINVAL;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size) return RECUR_ETOKEN;
    if (m->n_softmax && s->tokens_seen + (uint64_t)n > (uint64_t)m->cfg.max_context) return RECUR_ECONTEXT;
    /* a kernel can still fail (out of memory): then the state is rolled back to where it was
     * (KV rows past the old tokens_seen are dead by definition) */
    uint64_t seen0 = s->tokens_seen;
    if (n > 0) memcpy(ws->backup, recur__state_rec(s), recur__state_rec_bytes(s));
    int piece_max = PREFILL_PIECE;
    for (int64_t off = 0; off < n; off += piece_max) {
        int T = (int)(n - off < piece_max ? n - off : piece_max);
        /* this piece's rows at or past n - n_tail get logits, at row (off + r) - (n - n_tail) */
        int64_t first = n - n_tail - off; /* the piece's first row with logits */
        if (first < 0) first = 0;
        float *out = first < T ? logits + (size_t)(off + first - (n - n_tail)) * m->cfg.vocab_size : NULL;
        rc = forward_rows(m, ws, &s, tokens + off, T, 1, (int)(first < T ? first : T), out);
        if (rc) {
            memcpy(recur__state_rec(s), ws->backup, recur__state_rec_bytes(s));
            s->tokens_seen = seen0;
            return rc;
        }
        s->tokens_seen += (uint64_t)T;
    }
    return RECUR_OK;
}
