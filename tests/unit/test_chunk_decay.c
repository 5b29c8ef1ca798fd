/* test_chunk_decay.c — recur__decay_rows / recur__decay_cols (core/chunk_decay.h) against
 * exp(b_t - b_s) taken directly in double.
 *
 * b is a cumulative sum of log gates <= 0 (mild, zero and strong ones, some below -87 where the
 * factors underflow to 0). Every entry in the masked triangle must be A * f * exp(b_t - b_s)
 * within (4e-7 + 1.2e-7 |b_t - b_s|) relative, plus 1e-30 absolute for underflow: the argument of
 * the exponential is rounded to float (relative error of e^x up to |x| 2^-24, as in every kernel),
 * and the two factors and their product add a few ulps. Every entry outside it must keep its
 * sentinel.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "chunk_decay.h"
#include "test_rng.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void) /* [0, 1) */
{
    return xorshift_unit(&rng);
}

static void gates_cumsum(double *b, int n, int regime)
{
    double acc = 0.0;
    for (int t = 0; t < n; t++) {
        double g = regime == 0 ? 0.0 : regime == 1 ? -0.1 * urand() : -6.0 * urand();
        if (regime == 2 && urand() < 0.05)
            g = -20.0 - 40.0 * urand();
        acc += g;
        b[t] = acc;
    }
}

static int close_to(float got, double want, double x)
{
    return fabs((double)got - want) <= (4e-7 + 1.2e-7 * fabs(x)) * fabs(want) + 1e-30;
}

Test(chunk_decay, rows_match_direct_exp)
{
    for (int trial = 0; trial < 400; trial++) {
        const int r1 = 1 + (int)(urand() * 150), r0 = (int)(urand() * r1);
        const int strict = trial & 1, use_f = (trial >> 1) & 1;
        const ptrdiff_t lda = r1 + (int)(urand() * 3);
        double *b = malloc(sizeof(double) * r1);
        float *A = malloc(sizeof(float) * (size_t)(r1 - r0) * lda), *A0 = malloc(sizeof(float) * (size_t)(r1 - r0) * lda);
        float *f = malloc(sizeof(float) * r1), *w = malloc(sizeof(float) * r1), *u = malloc(sizeof(float) * r1);
        cr_assert(b && A && A0 && f && w && u);
        gates_cumsum(b, r1, trial % 3);
        for (int t = 0; t < r1; t++)
            f[t] = (float)(0.25 + urand());
        for (ptrdiff_t i = 0; i < (ptrdiff_t)(r1 - r0) * lda; i++)
            A[i] = A0[i] = (float)(urand() * 2.0 - 1.0);
        const float alpha = 0.125f;
        recur__decay_rows(A, lda, r0, r1, strict, b, alpha, use_f ? f : NULL, w, u);
        for (int t = r0; t < r1; t++)
            for (ptrdiff_t s = 0; s < lda; s++) {
                const float got = A[(t - r0) * lda + s], was = A0[(t - r0) * lda + s];
                if (s <= t - strict) {
                    const double want = (double)was * alpha * (use_f ? f[t] : 1.0f) * exp(b[t] - b[s]);
                    cr_assert(close_to(got, want, b[t] - b[s]), "r0 %d r1 %d t %d s %ld: %g vs %g", r0, r1, t,
                              (long)s, got, want);
                } else {
                    cr_assert_eq(got, was, "t %d s %ld touched", t, (long)s);
                }
            }
        free(b), free(A), free(A0), free(f), free(w), free(u);
    }
}

Test(chunk_decay, cols_match_direct_exp)
{
    for (int trial = 0; trial < 300; trial++) {
        const int n = 1 + (int)(urand() * 150);
        const ptrdiff_t lda = n + (int)(urand() * 3);
        double *b = malloc(sizeof(double) * n);
        float *A = malloc(sizeof(float) * (size_t)n * lda), *A0 = malloc(sizeof(float) * (size_t)n * lda);
        float *w = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n);
        cr_assert(b && A && A0 && w && u);
        gates_cumsum(b, n, trial % 3);
        for (ptrdiff_t i = 0; i < (ptrdiff_t)n * lda; i++)
            A[i] = A0[i] = (float)(urand() * 2.0 - 1.0);
        recur__decay_cols(A, lda, n, b, w, u);
        for (int s = 0; s < n; s++)
            for (ptrdiff_t t = 0; t < lda; t++) {
                const float got = A[s * lda + t], was = A0[s * lda + t];
                if (t > s && t < n) {
                    const double want = (double)was * exp(b[t] - b[s]);
                    cr_assert(close_to(got, want, b[t] - b[s]), "n %d s %d t %ld: %g vs %g", n, s, (long)t, got, want);
                } else {
                    cr_assert_eq(got, was, "s %d t %ld touched", s, (long)t);
                }
            }
        free(b), free(A), free(A0), free(w), free(u);
    }
}
