/*
 * block_rwkv7.h — the RWKV-7 "Goose" block (docs/MODELS.md "RWKV-7") over a block of rows (not public).
 *
 * Layer l of kind RECUR_MIXER_RWKV7, d = d_model = H*N (H = n_heads, N = head_k = head_v), roles
 * T_RW_* (model_internal.h) in L->rw, per row (one token):
 *   x = LN_ln0(x)                                         layer 0 with block.rw_ln0 only
 *   xa = LN_ln1(x); dx = shift_att - xa; shift_att = xa   (the previous token's xa: session state)
 *   x_m = xa + dx * mix_m   for m in r, w, k, v, a, g
 *   r = W_r x_r ; k = W_k x_k ; v = W_v x_v
 *   wlog = -e^-0.5 sigmoid(W2 tanh(W1 x_w) + w0)          the per-key log decay (decay = e^wlog)
 *   v += (v_first - v) * sigmoid(V2 V1 x_v + v0)          layer 0: v_first = v (no V LoRA)
 *   a = sigmoid(A2 A1 x_a + a0) ;  g = G2 sigmoid(G1 x_g)
 *   kk = normalize_head(k * k_k) (x / max(|x|, 1e-12)) ;  k = k * (1 + (a - 1) * k_a)
 *   head h, S_h [N key][N value] (RWKV's S transposed: librecur's key-major layout):
 *     S = diag(e^wlog) S - (kk * a) (kk^T S) + k v^T ;  o = S^T r
 *   o = GroupNorm_head(o; eps rw_gn_eps) * ln_x.w + ln_x.b + (sum_j r_j k_j r_k_j) v   per head
 *   x += W_o (o * g)
 *   xf = LN_ln2(x); dx = shift_ffn - xf; shift_ffn = xf ;  x += W_value relu(W_key (xf + dx * ffn_x_k))^2
 * Layer state (L->state_off): S [H][N][N], then shift_att [d], then shift_ffn [d].
 */
#ifndef RECUR_BLOCK_RWKV7_H
#define RECUR_BLOCK_RWKV7_H

#include "model_internal.h"

/* Shape of RWKV-7 role t of layer l: [*r] or [*r][*k] (*k = 0: one-dimensional); 0 when the layer
 * has no such role. */
int recur__rwkv7_shape(const recur_config *c, int l, int t, int64_t *r, int64_t *k);
/* Role t feeds a packed GEMM (every 2-D role but r_k). */
int recur__rwkv7_is_matrix(int t);
/* Floats of scratch per row the block needs (the workspace's proj row): 11 d + the four ranks. */
int recur__rwkv7_scratch(const recur_config *c, int l);
/* Floats of one layer's state: H N N + 2 d. */
size_t recur__rwkv7_state_floats(const recur_config *c);

/* Workspace rows the block works in (the caller's; nothing is allocated here). */
typedef struct {
    float *h;       /* [R][d]   normed input */
    float *scr;     /* [R][ld]  scratch, ld = L->n_in; [9d, 10d) of each row carries v_first
                     *          from layer 0 to the later layers of the same forward pass */
    float *r, *k, *v, *wlog, *o; /* [R][d] */
    float *ff;      /* [R][d_ff] */
} recur__rwkv7_rows_ws;

/* x [R][d] += RWKV7Block_l(x) (both sub-blocks). prefill == 0: row r folds one token into
 * states[r]; prefill != 0: the rows are R consecutive tokens of states[0]. */
int recur__rwkv7_rows(const recur_model *m, const recur_layer *L, const recur__rwkv7_rows_ws *ws, float *x, int R,
                      recur_state *const *states, int prefill);

#endif /* RECUR_BLOCK_RWKV7_H */
