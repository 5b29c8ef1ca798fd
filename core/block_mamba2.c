/* block_mamba2.c — the Mamba-2 block over a block of rows (block_mamba2.h has the equations).
 *
 * in_proj and out_proj are packed GEMMs over the rows (packed_gemm.h), so a row's result does not
 * depend on the other rows; the conv (short_conv.h), the splits, the gates and the gated norm are
 * per-row code; the SSD core is librecur's scalar-gated GLA (recur_gla, scale 1): its recurrent
 * form per session for decode, its chunkwise form for a prefill piece. A session stepped in a
 * batch therefore gets the bits it gets alone. Nothing here allocates (the GLA chunkwise form
 * may: its error is returned). */
#include <math.h>
#include <string.h>
#include "block_mamba2.h"
#include "exp_nonpos.h"
#include "model_math.h"
#include "packed_gemm.h"
#include "short_conv.h"

/* From row r's projection (xBC already convolved in place) the GLA inputs: q = C and k = B of
 * the head's group, v = dt x, g = dt A. */
static void ssd_inputs(const recur_model *m, const recur_layer *L, const recur__mamba2_rows_ws *ws, int r)
{
    const recur_block *Bk = &m->cfg.block[L - m->layers];
    const int H = m->cfg.n_heads, N = m->cfg.head_k, P = m->cfg.head_v;
    const int heads_per_group = H / Bk->ssm_groups;
    const size_t HN = (size_t)H * N, HP = (size_t)H * P;
    const float *p = ws->proj + (size_t)r * L->n_in;
    const float *x = p + L->conv_in, *B = x + HP, *C = B + (size_t)Bk->ssm_groups * N;
    const float *dt_raw = p + L->conv_in + L->conv_ch;
    float *q = ws->q + r * HN, *k = ws->k + r * HN, *v = ws->v + r * HP, *g = ws->g + (size_t)r * H;
    for (int h = 0; h < H; h++) {
        const int grp = h / heads_per_group;
        memcpy(q + (size_t)h * N, C + (size_t)grp * N, (size_t)N * sizeof(float));
        memcpy(k + (size_t)h * N, B + (size_t)grp * N, (size_t)N * sizeof(float));
        // dt = softplus(dt + dt_bias), clamped to the time-step limits
        const float dt = fminf(fmaxf(softplus(dt_raw[h] + L->dt_bias[h]), Bk->dt_min), Bk->dt_max);
        for (int i = 0; i < P; i++) v[(size_t)h * P + i] = dt * x[(size_t)h * P + i];
        // g = dt A, A = -exp(A_log); an overflow to -inf (or NaN) kept finite: exp(g) is 0 anyway
        g[h] = fmaxf(-expf(L->A_log[h]) * dt, -1e30f);
    }
}

/* Row r: y = o + D x, then the grouped gated RMSNorm with z, in place in ws->o. */
static void gated_output(const recur_model *m, const recur_layer *L, const recur__mamba2_rows_ws *ws, int r)
{
    const recur_block *Bk = &m->cfg.block[L - m->layers];
    const int P = m->cfg.head_v, d_ssm = m->cfg.n_heads * P, gsz = d_ssm / Bk->ssm_groups;
    const float eps = (float)Bk->eps;
    const float *p = ws->proj + (size_t)r * L->n_in;
    const float *z = p, *x = p + L->conv_in;
    float *y = ws->o + (size_t)r * d_ssm;
    for (int i = 0; i < d_ssm; i++) y[i] = fmaf(L->D[Bk->D_per_channel ? i : i / P], x[i], y[i]);
    if (!Bk->o_norm_weight) {
        for (int i = 0; i < d_ssm; i++) y[i] *= recur__silu(z[i]);
    } else if (!Bk->norm_before_gate) {
        // y = RMSNorm_group(y * silu(z)) * w
        for (int i = 0; i < d_ssm; i++) y[i] *= recur__silu(z[i]);
        for (int gi = 0; gi < Bk->ssm_groups; gi++)
            rmsnorm(y + (size_t)gi * gsz, y + (size_t)gi * gsz, L->o_norm + (size_t)gi * gsz, gsz, eps);
    } else {
        // y = RMSNorm_group(y) * w * silu(z)
        for (int gi = 0; gi < Bk->ssm_groups; gi++)
            rmsnorm(y + (size_t)gi * gsz, y + (size_t)gi * gsz, L->o_norm + (size_t)gi * gsz, gsz, eps);
        for (int i = 0; i < d_ssm; i++) y[i] *= recur__silu(z[i]);
    }
}

int recur__mamba2_rows(const recur_model *m, const recur_layer *L, const recur__mamba2_rows_ws *ws,
                       float *x, int R, recur_state *const *states, int prefill, int64_t chunk)
{
    const recur_block *Bk = &m->cfg.block[L - m->layers];
    const int d = m->cfg.d_model, n_in = L->n_in, H = m->cfg.n_heads, N = m->cfg.head_k,
              P = m->cfg.head_v, d_ssm = H * P;
    const size_t HN = (size_t)H * N, HP = (size_t)H * P;
    const float eps = (float)Bk->eps;

    // u = RMSNorm(x) ; proj = [z | xBC | dt] = in_proj u (+ bias)
    for (int r = 0; r < R; r++) rmsnorm(ws->h + (size_t)r * d, x + (size_t)r * d, L->attn_norm, d, eps);
    recur__model_gemm(m, prefill, R, n_in, d, ws->h, d, L->w_in, 0.0f, ws->proj, n_in);
    if (L->in_bias)
        for (int r = 0; r < R; r++)
            for (int i = 0; i < n_in; i++) ws->proj[(size_t)r * n_in + i] += L->in_bias[i];

    // xBC = silu(conv(xBC) + conv_b), in place, with each session's window
    for (int r = 0; r < (prefill ? 1 : R); r++) {
        float *S = recur__lstate(states[r], L);
        recur__short_conv_rows(prefill ? R : 1, L->conv_ch, Bk->conv_size, ws->proj + (size_t)r * n_in + L->conv_in,
                               (size_t)n_in, L->conv_w, L->conv_b, 1, S + L->conv_state_off, ws->conv_tmp);
    }
    for (int r = 0; r < R; r++) ssd_inputs(m, L, ws, r);

    // o = SSD(q = C, k = B, v = dt x, g = dt A; S): GLA with one gate per head, scale 1
    for (int r = 0; r < (prefill ? 1 : R); r++) {
        const recur_dims dims = {.T = prefill ? R : 1, .H = H, .K = N, .V = P};
        int rc = recur_gla(&dims, ws->q + r * HN, ws->k + r * HN, ws->v + r * HP, ws->g + (size_t)r * H, 0,
                           1.0f, prefill ? RECUR_FORM_CHUNKWISE : RECUR_FORM_RECURRENT, chunk,
                           recur__lstate(states[r], L), ws->o + r * HP);
        if (rc) return rc;
    }

    // y = gated norm(o + D x, z) ; x += out_proj y (+ bias)
    for (int r = 0; r < R; r++) gated_output(m, L, ws, r);
    recur__model_gemm(m, prefill, R, d, d_ssm, ws->o, d_ssm, L->wo, 1.0f, x, d);
    if (L->out_bias)
        for (int r = 0; r < R; r++)
            for (int i = 0; i < d; i++) x[(size_t)r * d + i] += L->out_bias[i];
    return RECUR_OK;
}
