/*
 * chunk_decay.c — the causal decay mask D[t][s] = exp(b_t - b_s) of the scalar-gated chunkwise
 * kernels, applied in place with blocks of CD_B columns (chunk_decay.h explains the split).
 */
#include "chunk_decay.h"
#include "exp_nonpos.h"

#define CD_B 16 /* column block: one 16-float vector */

/* exp(x) for x <= 0 given in double (a difference of cumulative gates, exact to ~1e-9) */
static inline float ex(double x)
{
    return recur__exp_nonpos((float)x);
}

/* Past the block [J0, J1) the mask factorises through r = J1 - 1: exp(b_t - b_s) = u[t] w[s] with
 * w[s] = exp(b_r - b_s) (s in the block) and u[t] = exp(b_t - b_r) (t in [t0, t1)). */
static inline void block_factors(const double *b, int J0, int J1, int t0, int t1, float *w, float *u)
{
    const double br = b[J1 - 1];
    for (int s = J0; s < J1; s++)
        w[s] = ex(br - b[s]);
    for (int t = t0; t < t1; t++)
        u[t] = ex(b[t] - br);
}

void recur__decay_rows(float *A, ptrdiff_t lda, int r0, int r1, int strict, const double *b,
                       float alpha, const float *f, float *w, float *u)
{
    for (int J0 = 0; J0 < r1; J0 += CD_B) {
        const int J1 = J0 + CD_B < r1 ? J0 + CD_B : r1;
        /* rows inside the block: one exponential per entry, s <= t - strict */
        for (int t = J0 > r0 ? J0 : r0; t < J1; t++) {
            float *restrict At = A + (ptrdiff_t)(t - r0) * lda;
            const float at = f ? alpha * f[t] : alpha;
            const double bt = b[t];
            for (int s = J0; s <= t - strict; s++)
                At[s] *= at * ex(bt - b[s]);
        }
        /* rows past the block: D[t][s] = u[t] w[s], r = J1 - 1 */
        const int t0 = J1 > r0 ? J1 : r0;
        if (t0 >= r1)
            continue;
        block_factors(b, J0, J1, t0, r1, w, u);
        for (int t = t0; t < r1; t++) {
            float *restrict At = A + (ptrdiff_t)(t - r0) * lda;
            const float ut = (f ? alpha * f[t] : alpha) * u[t];
            for (int s = J0; s < J1; s++)
                At[s] *= ut * w[s];
        }
    }
}

void recur__decay_cols(float *A, ptrdiff_t lda, int n, const double *b, float *w, float *u)
{
    for (int J0 = 0; J0 < n; J0 += CD_B) {
        const int J1 = J0 + CD_B < n ? J0 + CD_B : n;
        for (int s = J0; s < J1; s++) { /* inside the block */
            float *restrict As = A + (ptrdiff_t)s * lda;
            const double bs = b[s];
            for (int t = s + 1; t < J1; t++)
                As[t] *= ex(b[t] - bs);
        }
        if (J1 >= n)
            continue;
        block_factors(b, J0, J1, J1, n, w, u);
        for (int s = J0; s < J1; s++) {
            float *restrict As = A + (ptrdiff_t)s * lda;
            const float ws = w[s];
            for (int t = J1; t < n; t++)
                As[t] *= ws * u[t];
        }
    }
}
