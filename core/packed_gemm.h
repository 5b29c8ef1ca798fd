/*
 * packed_gemm.h — y = beta*y + x W^T on a weight matrix packed once (model load), used for every
 * projection, MLP and LM-head GEMM of the model. Private to librecur.
 *
 * Why not sgemm: cblas_sgemm repacks all of W on every call (about a third of its time at
 * M = 64), and its result for a row depends on M (sgemv for one row, different blocking for
 * many), so a session's logits would depend on the batch it was stepped in. Here every output
 * element is computed by the same operations whatever M, the row's position or the tile shape:
 *
 *   acc = 0;  for k = 0 .. K-1 in order:  acc = fmaf(x[m][k], W[n][k], acc)
 *   y[m][n] = (beta == 0) ? acc : fmaf(beta, y[m][n], acc)
 *
 * (one sequential fused chain per element; vector lanes are independent elements). The AVX-512,
 * AVX2 and scalar paths all compute exactly this, so they agree bit for bit with each other and
 * with recur__packed_gemm_ref.
 *
 * Packed layout of W [N][K] (nn.Linear, row-major): column panels of RECUR_PANEL outputs,
 *   Wp[p][k][j] = W[p*RECUR_PANEL + j][k]     p < ceil(N/RECUR_PANEL), k < K, j < RECUR_PANEL
 * k-major inside a panel (one 64-byte line per k), panels back to back, rows n >= N zero.
 */
#ifndef RECUR_PACKED_GEMM_H
#define RECUR_PACKED_GEMM_H

#include <stddef.h>

#define RECUR_PANEL 16

/* Floats of the packed form of a [N][K] matrix: ceil(N/RECUR_PANEL) * K * RECUR_PANEL. */
size_t recur__packed_floats(int N, int K);

/* Pack W [N][K] (row stride K) into Wp [recur__packed_floats(N, K)] (caller-owned, 64-byte
 * aligned for the vector paths). */
void recur__pack(float *Wp, const float *W, int N, int K);

/* y[M][N] (row stride ldy) = beta*y + x[M][K] (row stride ldx) W^T, W packed by recur__pack.
 * beta == 0 never reads y (it may hold anything). M >= 0, N >= 1, K >= 1. x and y must not
 * overlap. Fastest available path (AVX-512, AVX2+FMA, scalar). */
void recur__packed_gemm(int M, int N, int K, const float *x, int ldx, const float *Wp, float beta,
                        float *y, int ldy);

/* The same function in plain scalar C (the formula above, literally): the reference the vector
 * paths must equal bit for bit (tests). */
void recur__packed_gemm_ref(int M, int N, int K, const float *x, int ldx, const float *Wp,
                            float beta, float *y, int ldy);

#endif /* RECUR_PACKED_GEMM_H */
