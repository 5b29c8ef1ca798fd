/*
 * chunk_decay.h — the causal decay mask of the scalar-gated chunkwise kernels (private to core/).
 *
 *   D[t][s] = exp(b_t - b_s)    s <= t,   b non-increasing (a cumulative sum of log gates <= 0)
 *
 * Only non-positive arguments are exponentiated. Columns are cut into blocks J = [J0, J0 + 16);
 * for s in J and t past J, with r = J0 + 15 (s <= r < t):
 *   D[t][s] = exp(b_t - b_r) * exp(b_r - b_s)            (both factors <= 1)
 * so a row of a block is one scalar times a 16-vector; only the diagonal blocks take one
 * exponential per entry. About n (n / 16 + 9) exponentials instead of n^2 / 2 (n = 64: 3x fewer).
 * w [n] and u [n] are scratch.
 */
#ifndef RECUR_CHUNK_DECAY_H
#define RECUR_CHUNK_DECAY_H

#include <stddef.h>

/* Rows t in [r0, r1), row t at A + (t - r0) lda:
 *   A[t][s] *= alpha * (f ? f[t] : 1) * D[t][s]     for 0 <= s <= t - strict  (strict 0 or 1)
 * b [r1]; entries right of that are not touched. */
void recur__decay_rows(float *A, ptrdiff_t lda, int r0, int r1, int strict, const double *b,
                       float alpha, const float *f, float *w, float *u);

/* The transpose, rows s in [0, n), row s at A + s lda:
 *   A[s][t] *= D[t][s]                               for s < t < n
 * b [n]; the diagonal and everything left of it are not touched. */
void recur__decay_cols(float *A, ptrdiff_t lda, int n, const double *b, float *w, float *u);

#endif /* RECUR_CHUNK_DECAY_H */
