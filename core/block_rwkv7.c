/* block_rwkv7.c — the RWKV-7 block over a block of rows (block_rwkv7.h has the equations).
 *
 * Every projection (receptance, key, value, output, the LoRA downs and ups, the channel mix) is a
 * packed GEMM over the rows (packed_gemm.h), so a row's result does not depend on the other rows;
 * token shift, norms, gates and the state update are per-row code in a fixed order. A session
 * stepped in a batch therefore gets the bits it gets alone. The state update is the generalized
 * delta rule's per-head step (generalized_delta.h: one home for the recurrence) with g = wlog,
 * a = -kk, b = kk * a_gate, q = r, scale 1; it runs token by token (a prefill piece: its rows in
 * order). Nothing here allocates. */
#include <math.h>
#include <string.h>
#include "block_rwkv7.h"
#include "generalized_delta.h"
#include "model_math.h"
#include "packed_gemm.h"

#define RW(t) ((const float *)L->rw[(t) - T_RW_LN0_W])
#define DECAY_SCALE 0.60653065971263342f /* e^-0.5: wlog = -e^-0.5 sigmoid(.) in (-0.607, 0) */

/* scratch columns of a row (block_rwkv7.h: ld = 11 d + ranks) */
enum { S_MIX = 0, S_A = 6, S_G = 7, S_KK = 8, S_VFIRST = 9, S_VGATE = 10, S_LORA = 11 };
/* after gates_row: S_A holds the step's b = kk * a, S_KK its a = -kk */

int recur__rwkv7_shape(const recur_config *c, int l, int t, int64_t *r, int64_t *k)
{
    const recur_block *B = &c->block[l];
    const int64_t d = c->d_model, ff = c->d_ff;
    *k = 0;
    switch (t) {
    case T_RW_LN0_W: case T_RW_LN0_B: *r = d; return l == 0 && B->rw_ln0;
    case T_RW_LN1_W: case T_RW_LN1_B: case T_RW_LN2_W: case T_RW_LN2_B:
    case T_RW_X_R: case T_RW_X_W: case T_RW_X_K: case T_RW_X_V: case T_RW_X_A: case T_RW_X_G:
    case T_RW_K_K: case T_RW_K_A: case T_RW_W0: case T_RW_A0: case T_RW_GN_W: case T_RW_GN_B:
    case T_RW_FFN_X_K:
        *r = d; return 1;
    case T_RW_V0: *r = d; return l > 0;
    case T_RW_R_K: *r = c->n_heads; *k = c->head_k; return 1;
    case T_RW_WR: case T_RW_WK: case T_RW_WV: case T_RW_WO: *r = d; *k = d; return 1;
    case T_RW_W1: *r = B->rw_ranks[0]; *k = d; return 1;
    case T_RW_W2: *r = d; *k = B->rw_ranks[0]; return 1;
    case T_RW_A1: *r = B->rw_ranks[1]; *k = d; return 1;
    case T_RW_A2: *r = d; *k = B->rw_ranks[1]; return 1;
    case T_RW_V1: *r = B->rw_ranks[2]; *k = d; return l > 0;
    case T_RW_V2: *r = d; *k = B->rw_ranks[2]; return l > 0;
    case T_RW_G1: *r = B->rw_ranks[3]; *k = d; return 1;
    case T_RW_G2: *r = d; *k = B->rw_ranks[3]; return 1;
    case T_RW_FFN_KEY: *r = ff; *k = d; return 1;
    case T_RW_FFN_VALUE: *r = d; *k = ff; return 1;
    default: return 0;
    }
}

int recur__rwkv7_is_matrix(int t)
{
    switch (t) {
    case T_RW_WR: case T_RW_WK: case T_RW_WV: case T_RW_WO: case T_RW_W1: case T_RW_W2: case T_RW_A1:
    case T_RW_A2: case T_RW_V1: case T_RW_V2: case T_RW_G1: case T_RW_G2: case T_RW_FFN_KEY: case T_RW_FFN_VALUE:
        return 1;
    default:
        return 0;
    }
}

int recur__rwkv7_scratch(const recur_config *c, int l)
{
    const int *rk = c->block[l].rw_ranks;
    return S_LORA * c->d_model + rk[0] + rk[1] + rk[2] + rk[3];
}

size_t recur__rwkv7_state_floats(const recur_config *c)
{
    return (size_t)c->n_heads * c->head_k * c->head_k + 2 * (size_t)c->d_model;
}

/* x_m = xa + (prev - xa) * mix_m for the n mixes starting at role t0, into out (stride d) */
static void shift_mix(const recur_layer *L, int t0, int n, int d, const float *xa, const float *prev, float *out)
{
    for (int m = 0; m < n; m++) {
        const float *mix = RW(t0 + m);
        float *y = out + (size_t)m * d;
        for (int i = 0; i < d; i++) y[i] = xa[i] + (prev[i] - xa[i]) * mix[i];
    }
}

/* Row r after the projections: decay, value residual, a, kk, k (block_rwkv7.h); then the step's
 * erase vectors in place: S_KK <- -kk, S_A <- kk * a. */
static void gates_row(const recur_model *m, const recur_layer *L, const recur__rwkv7_rows_ws *ws, int r, int first)
{
    const int d = m->cfg.d_model, H = m->cfg.n_heads, N = m->cfg.head_k;
    float *s = ws->scr + (size_t)r * L->n_in;
    float *wl = ws->wlog + (size_t)r * d, *v = ws->v + (size_t)r * d, *k = ws->k + (size_t)r * d;
    float *a = s + (size_t)S_A * d, *kk = s + (size_t)S_KK * d, *vfirst = s + (size_t)S_VFIRST * d;
    const float *w0 = RW(T_RW_W0), *a0 = RW(T_RW_A0), *k_k = RW(T_RW_K_K), *k_a = RW(T_RW_K_A);
    for (int i = 0; i < d; i++) wl[i] = -DECAY_SCALE * sigmoid(wl[i] + w0[i]);
    if (first) {
        memcpy(vfirst, v, (size_t)d * sizeof(float));
    } else {
        const float *vg = s + (size_t)S_VGATE * d, *v0 = RW(T_RW_V0);
        for (int i = 0; i < d; i++) v[i] += (vfirst[i] - v[i]) * sigmoid(vg[i] + v0[i]);
    }
    for (int i = 0; i < d; i++) a[i] = sigmoid(a[i] + a0[i]);
    for (int h = 0; h < H; h++) {
        float *kh = kk + (size_t)h * N;
        for (int i = 0; i < N; i++) kh[i] = k[(size_t)h * N + i] * k_k[(size_t)h * N + i];
        const float nrm = (float)sqrt(sumsq(kh, N));
        const float inv = 1.0f / fmaxf(nrm, 1e-12f);
        for (int i = 0; i < N; i++) kh[i] *= inv;
    }
    for (int i = 0; i < d; i++) k[i] *= 1.0f + (a[i] - 1.0f) * k_a[i];
    for (int i = 0; i < d; i++) {
        a[i] *= kk[i];
        kk[i] = -kk[i];
    }
}

/* Row r: o = GroupNorm(o) + bonus, times g, in place in ws->o. */
static void output_row(const recur_model *m, const recur_layer *L, const recur__rwkv7_rows_ws *ws, int r)
{
    const int d = m->cfg.d_model, H = m->cfg.n_heads, N = m->cfg.head_k;
    const float eps = (float)m->cfg.block[L - m->layers].rw_gn_eps;
    const float *g = ws->scr + (size_t)r * L->n_in + (size_t)S_G * d;
    const float *rr = ws->r + (size_t)r * d, *k = ws->k + (size_t)r * d, *v = ws->v + (size_t)r * d;
    const float *gw = RW(T_RW_GN_W), *gb = RW(T_RW_GN_B), *r_k = RW(T_RW_R_K);
    float *o = ws->o + (size_t)r * d;
    for (int h = 0; h < H; h++) {
        const size_t off = (size_t)h * N;
        layernorm(o + off, o + off, gw + off, gb + off, N, eps);
        float bonus = 0.0f;
        for (int i = 0; i < N; i++) bonus += rr[off + i] * k[off + i] * r_k[off + i];
        for (int i = 0; i < N; i++) o[off + i] += bonus * v[off + i];
    }
    for (int i = 0; i < d; i++) o[i] *= g[i];
}

int recur__rwkv7_rows(const recur_model *m, const recur_layer *L, const recur__rwkv7_rows_ws *ws, float *x, int R,
                      recur_state *const *states, int prefill)
{
    const recur_config *c = &m->cfg;
    const int l = (int)(L - m->layers), d = c->d_model, H = c->n_heads, N = c->head_k, ff = c->d_ff;
    const int ld = L->n_in;
    const recur_block *B = &c->block[l];
    const int *rk = B->rw_ranks;
    const float eps = (float)B->eps;
    const size_t S_floats = (size_t)H * N * N;
    float *mix = ws->scr + (size_t)S_MIX * d;
    float *lw = ws->scr + (size_t)S_LORA * d, *la = lw + rk[0], *lv = la + rk[1], *lg = lv + rk[2];

    // layer 0: x = LN0(x)
    if (L->rw[T_RW_LN0_W - T_RW_LN0_W])
        for (int r = 0; r < R; r++)
            layernorm(x + (size_t)r * d, x + (size_t)r * d, RW(T_RW_LN0_W), RW(T_RW_LN0_B), d, eps);

    // xa = LN1(x) ; the six token-shift mixes with the previous token's xa
    for (int r = 0; r < R; r++) {
        float *xa = ws->h + (size_t)r * d;
        layernorm(xa, x + (size_t)r * d, RW(T_RW_LN1_W), RW(T_RW_LN1_B), d, eps);
        const float *prev = prefill ? (r ? xa - d : recur__lstate(states[0], L) + S_floats)
                                    : recur__lstate(states[r], L) + S_floats;
        shift_mix(L, T_RW_X_R, 6, d, xa, prev, mix + (size_t)r * ld);
    }
    for (int r = 0; r < (prefill ? 1 : R); r++) /* the new shift: this row's (prefill: the last row's) xa */
        memcpy(recur__lstate(states[r], L) + S_floats, ws->h + (size_t)(prefill ? R - 1 : r) * d,
               (size_t)d * sizeof(float));

    // r, k, v ; the LoRA downs and ups
    recur__model_gemm(m, prefill, R, d, d, mix + 0 * (size_t)d, ld, L->rw[T_RW_WR - T_RW_LN0_W], 0.0f, ws->r, d);
    recur__model_gemm(m, prefill, R, d, d, mix + 2 * (size_t)d, ld, L->rw[T_RW_WK - T_RW_LN0_W], 0.0f, ws->k, d);
    recur__model_gemm(m, prefill, R, d, d, mix + 3 * (size_t)d, ld, L->rw[T_RW_WV - T_RW_LN0_W], 0.0f, ws->v, d);
    recur__model_gemm(m, prefill, R, rk[0], d, mix + 1 * (size_t)d, ld, L->rw[T_RW_W1 - T_RW_LN0_W], 0.0f, lw, ld);
    recur__model_gemm(m, prefill, R, rk[1], d, mix + 4 * (size_t)d, ld, L->rw[T_RW_A1 - T_RW_LN0_W], 0.0f, la, ld);
    if (l > 0)
        recur__model_gemm(m, prefill, R, rk[2], d, mix + 3 * (size_t)d, ld, L->rw[T_RW_V1 - T_RW_LN0_W], 0.0f, lv, ld);
    recur__model_gemm(m, prefill, R, rk[3], d, mix + 5 * (size_t)d, ld, L->rw[T_RW_G1 - T_RW_LN0_W], 0.0f, lg, ld);
    for (int r = 0; r < R; r++) {
        float *row = ws->scr + (size_t)r * ld + (size_t)S_LORA * d;
        for (int i = 0; i < rk[0]; i++) row[i] = tanhf(row[i]);
        float *g1 = row + rk[0] + rk[1] + rk[2];
        for (int i = 0; i < rk[3]; i++) g1[i] = sigmoid(g1[i]);
    }
    recur__model_gemm(m, prefill, R, d, rk[0], lw, ld, L->rw[T_RW_W2 - T_RW_LN0_W], 0.0f, ws->wlog, d);
    recur__model_gemm(m, prefill, R, d, rk[1], la, ld, L->rw[T_RW_A2 - T_RW_LN0_W], 0.0f, ws->scr + (size_t)S_A * d, ld);
    if (l > 0)
        recur__model_gemm(m, prefill, R, d, rk[2], lv, ld, L->rw[T_RW_V2 - T_RW_LN0_W], 0.0f,
                             ws->scr + (size_t)S_VGATE * d, ld);
    recur__model_gemm(m, prefill, R, d, rk[3], lg, ld, L->rw[T_RW_G2 - T_RW_LN0_W], 0.0f, ws->scr + (size_t)S_G * d, ld);
    for (int r = 0; r < R; r++) gates_row(m, L, ws, r, l == 0);

    // the state update, token by token: prefill rows in order through states[0], decode row r
    // through states[r]:  S = Diag(e^wlog) S - (kk a)(kk^T S) + k v^T ;  o = S^T r   per head
    for (int r = 0; r < R; r++) {
        float *S = recur__lstate(states[prefill ? 0 : r], L);
        const float *s = ws->scr + (size_t)r * ld;
        for (int h = 0; h < H; h++) {
            const size_t off = (size_t)r * d + (size_t)h * N, hn = (size_t)h * N;
            recur__gdr_step(S + hn * N, ws->r + off, ws->k + off, ws->v + off, ws->wlog + off,
                            s + (size_t)S_KK * d + hn, s + (size_t)S_A * d + hn, 1.0f, N, N, ws->o + off);
        }
    }

    // o = (GroupNorm(o) + bonus) * g ; x += W_o o
    for (int r = 0; r < R; r++) output_row(m, L, ws, r);
    recur__model_gemm(m, prefill, R, d, d, ws->o, d, L->rw[T_RW_WO - T_RW_LN0_W], 1.0f, x, d);

    // channel mix: xf = LN2(x) ; k = xf + (prev - xf) * x_k ; x += W_value relu(W_key k)^2
    for (int r = 0; r < R; r++) {
        float *xf = ws->h + (size_t)r * d;
        layernorm(xf, x + (size_t)r * d, RW(T_RW_LN2_W), RW(T_RW_LN2_B), d, eps);
        const float *prev = prefill ? (r ? xf - d : recur__lstate(states[0], L) + S_floats + d)
                                    : recur__lstate(states[r], L) + S_floats + d;
        shift_mix(L, T_RW_FFN_X_K, 1, d, xf, prev, mix + (size_t)r * ld);
    }
    for (int r = 0; r < (prefill ? 1 : R); r++)
        memcpy(recur__lstate(states[r], L) + S_floats + d, ws->h + (size_t)(prefill ? R - 1 : r) * d,
               (size_t)d * sizeof(float));
    recur__model_gemm(m, prefill, R, ff, d, mix, ld, L->rw[T_RW_FFN_KEY - T_RW_LN0_W], 0.0f, ws->ff, ff);
    for (size_t i = 0; i < (size_t)R * ff; i++) {
        const float y = fmaxf(ws->ff[i], 0.0f);
        ws->ff[i] = y * y;
    }
    recur__model_gemm(m, prefill, R, d, ff, ws->ff, ff, L->rw[T_RW_FFN_VALUE - T_RW_LN0_W], 1.0f, x, d);
    return RECUR_OK;
}
