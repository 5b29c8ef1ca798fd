/*
 * block_mamba2.h — the Mamba-2 block (docs/MODELS.md "Mamba-2") over a block of rows (not public).
 *
 * Layer l of kind RECUR_MIXER_MAMBA2, with H = n_heads, P = head_v (head_dim), N = head_k
 * (state_size), G = block.ssm_groups, W = block.conv_size, d_ssm = H*P, conv_dim = d_ssm + 2GN:
 *   u = RMSNorm_eps(x)                                       (attn_norm: the block's norm)
 *   z | xBC | dt = in_proj u (+ in_bias)                     widths d_ssm, conv_dim, H   (w_in)
 *   xBC = silu(causal depthwise conv_W(xBC) + conv_b)        the last W-1 inputs are session state
 *   x | B | C = xBC                                          widths d_ssm, G*N, G*N
 *   dt = min(max(softplus(dt + dt_bias), dt_min), dt_max) ;  A = -exp(A_log)
 *   head h, group g = h / (H/G):   S_h = exp(dt_h A_h) S_h + B_g (dt_h x_h)^T      S_h [N][P]
 *                                   y_h = S_h^T C_g + D_h x_h
 *     -- librecur's scalar-gated GLA with scale 1: q = C_g, k = B_g, v = dt_h x_h, g = dt_h A_h
 *   y = RMSNorm_eps per group of d_ssm/G (y * silu(z)) * o_norm   (norm_before_gate:
 *       RMSNorm(y) * o_norm * silu(z); without o_norm weight (FLA's rmsnorm false): y * silu(z))
 *   x += out_proj y (+ out_bias)                             (wo)
 * No MLP sub-block. Layer state: S [H][N][P] (GLA's key-major [H][K][V]; upstream keeps
 * [H][P][N]), then the conv window [W-1][conv_dim] (short_conv.h).
 */
#ifndef RECUR_BLOCK_MAMBA2_H
#define RECUR_BLOCK_MAMBA2_H

#include "model_internal.h"

/* Workspace rows the block works in (the caller's workspace; nothing is allocated here). */
typedef struct {
    float *h;        /* [R][d] */
    float *proj;     /* [R][n_in] */
    float *q, *k;    /* [R][H][N]  C, B of each head's group */
    float *v;        /* [R][H][P]  dt x */
    float *g;        /* [R][H]     dt A */
    float *o;        /* [R][H][P]  the core's output, then y */
    float *conv_tmp; /* [W * conv_dim] */
} recur__mamba2_rows_ws;

/* x [R][d] += Mamba2Block_l(x). prefill == 0: row r folds one token into states[r]; prefill != 0:
 * the rows are R consecutive tokens of states[0] (chunkwise GLA, chunk `chunk`). Returns 0 or the
 * GLA kernel's error (out of memory; the caller rolls the state back). */
int recur__mamba2_rows(const recur_model *m, const recur_layer *L, const recur__mamba2_rows_ws *ws,
                       float *x, int R, recur_state *const *states, int prefill, int64_t chunk);

#endif /* RECUR_BLOCK_MAMBA2_H */
