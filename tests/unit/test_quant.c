/* test_quant.c — the Q8_0 / Q4_0 GEMM of core/quant_gemm.c on the path RECUR_ISA selects
 * (tests/test_isa.sh runs this binary on every path the CPU has, avx512-novnni included).
 *
 * References:
 *  - float64 dequantize-then-multiply: x's rows quantized to Q8_0 (recur__quantize_q8_0, whose
 *    codes tests/python/test_quant.py checks bit for bit against a numpy reimplementation of
 *    llama.cpp's definition), W's codes and scales read back from the panels, both dequantized
 *    exactly and multiplied in double. Tolerance (u = 2^-24; one fused multiply-add per block of
 *    32 on the AVX paths, a rounded product and a rounded sum on the portable one):
 *      |y - y64| <= 1.01 (2 nb + 2) u (sum_k |xq dx wq dw| + |beta y0|),  nb = ceil(K / 32)
 *  - the scalar formula of quant.h (recur__quant_gemm_ref), bit for bit (memcmp), which also
 *    shows a row's output does not depend on M, its position or the other rows (the reference
 *    computes each output alone).
 *  - the panels hold each weight within half a step of its block's scale: |w - wq dw| <= dw/2
 *    (+ the fp16 rounding of d) for Q8_0, <= dw (the 4-bit grid's edge) for Q4_0. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "packed_gemm.h"
#include "quant.h"
#include "test_rng.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { return (float)(xorshift_unit(&rng) * 2.0 - 1.0); }

typedef struct {
    int N, K;
    recur_wtype wt;
    float *W;   /* [N][K] row-major */
    float *Wp;  /* fp32 panels (recur__pack) */
    void *Wq;   /* quantized panels */
} qmat;

static qmat qmat_new(int N, int K, recur_wtype wt)
{
    qmat a = {N, K, wt, malloc(sizeof(float) * (size_t)N * K), NULL, NULL};
    a.Wp = aligned_alloc(64, (recur__packed_floats(N, K) * sizeof(float) + 63) / 64 * 64);
    a.Wq = aligned_alloc(64, (recur__packed_bytes(N, K, wt) + 63) / 64 * 64);
    cr_assert(a.W && a.Wp && a.Wq);
    for (size_t i = 0; i < (size_t)N * K; i++) {
        a.W[i] = frand() * (i % 97 == 0 ? 8.0f : 1.0f); /* a few outliers set their block's scale */
        if (i % 211 == 5) a.W[i] = 0.0f;
    }
    recur__pack(a.Wp, a.W, N, K);
    recur__pack_quant(a.Wq, wt, a.Wp, RECUR_WT_F32, N, K);
    return a;
}

static void qmat_free(qmat *a)
{
    free(a->W);
    free(a->Wp);
    free(a->Wq);
}

static void check_vs_f64(const qmat *a, int M, const float *x, int ldx, const float *y0, float beta, const float *y,
                         int ldy)
{
    const double u = 0x1.0p-24;
    const int nb = (a->K + RECUR_QBLOCK - 1) / RECUR_QBLOCK;
    for (int m = 0; m < M; m++) {
        double xd[4096];
        cr_assert_leq(a->K, 4096);
        for (int b = 0; b < nb; b++) {
            int8_t q[RECUR_QBLOCK];
            int k0 = b * RECUR_QBLOCK, kn = a->K - k0 < RECUR_QBLOCK ? a->K - k0 : RECUR_QBLOCK;
            double d = recur__half_to_float(recur__quantize_q8_0(x + (size_t)m * ldx + k0, kn, q), RECUR_WT_F16);
            for (int i = 0; i < kn; i++) xd[k0 + i] = q[i] * d;
        }
        for (int n = 0; n < a->N; n++) {
            double s = 0, mag = 0;
            for (int k = 0; k < a->K; k++) {
                double t = xd[k] * recur__quant_weight(a->Wq, a->wt, a->N, a->K, n, k);
                s += t;
                mag += fabs(t);
            }
            double yb = beta == 0.0f ? 0.0 : (double)beta * y0[(size_t)m * ldy + n];
            s += yb;
            mag += fabs(yb);
            double err = fabs((double)y[(size_t)m * ldy + n] - s), bound = 1.01 * (2 * nb + 2) * u * mag;
            cr_assert_leq(err, bound, "%s M %d N %d K %d beta %g: y[%d][%d] = %.9g, f64 %.9g, err %g > bound %g",
                          recur__wtype_name(a->wt), M, a->N, a->K, beta, m, n, y[(size_t)m * ldy + n], s, err, bound);
        }
    }
}

static void run_case(int M, int N, int K, float beta, recur_wtype wt)
{
    qmat a = qmat_new(N, K, wt);
    int ldx = K + 3, ldy = N + 5;
    float *x = malloc(sizeof(float) * ((size_t)M * ldx + 1));
    float *y0 = malloc(sizeof(float) * (size_t)M * ldy), *y1 = malloc(sizeof(float) * (size_t)M * ldy);
    float *y2 = malloc(sizeof(float) * (size_t)M * ldy);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = frand() * (i % 13 == 0 ? 4.0f : 1.0f);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y0[i] = frand();
    memcpy(y1, y0, sizeof(float) * (size_t)M * ldy);
    memcpy(y2, y0, sizeof(float) * (size_t)M * ldy);
    recur__packed_gemm_t(M, N, K, x, ldx, a.Wq, wt, beta, y1, ldy);
    recur__packed_gemm_ref_t(M, N, K, x, ldx, a.Wq, wt, beta, y2, ldy);
    for (int m = 0; m < M; m++) {
        cr_assert_eq(memcmp(y1 + (size_t)m * ldy, y2 + (size_t)m * ldy, sizeof(float) * N), 0,
                     "%s M %d N %d K %d beta %g: row %d differs from the scalar formula", recur__wtype_name(wt), M, N,
                     K, beta, m);
        for (int j = N; j < ldy; j++) /* pad columns untouched */
            cr_assert_eq(memcmp(&y1[(size_t)m * ldy + j], &y0[(size_t)m * ldy + j], 4), 0);
    }
    check_vs_f64(&a, M, x, ldx, y0, beta, y1, ldy);
    free(x); free(y0); free(y1); free(y2);
    qmat_free(&a);
}

static void shapes(recur_wtype wt)
{
    static const int Ms[] = {1, 2, 3, 4, 5, 8, 9, 17, 64, 67};
    static const int Ns[] = {1, 16, 17, 33, 64, 100};
    static const int Ks[] = {1, 31, 32, 33, 96, 192, 515};
    static const float betas[] = {0.0f, 1.0f, 0.5f};
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                run_case(Ms[i], Ns[j], Ks[k], betas[(i + j + k) % 3], wt);
}

Test(quant, q8_0_gemm_every_shape, .timeout = 120) { shapes(RECUR_WT_Q8_0); }
Test(quant, q4_0_gemm_every_shape, .timeout = 120) { shapes(RECUR_WT_Q4_0); }

/* wide matrices: one row (decode) takes 8 panels per tile on the AVX-512 path, then 4, then 1
 * (N = 128: 8; 200: 8 + 4 + 1; 400: 3 x 8 + 1), each stream prefetched ahead (past W's end near
 * the last blocks); a few rows take the batched tiles */
static void wide(recur_wtype wt)
{
    static const int Ms[] = {1, 2, 5};
    static const int Ns[] = {128, 200, 400};
    static const int Ks[] = {32, 96, 515};
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                run_case(Ms[i], Ns[j], Ks[k], (i + j + k) % 2 ? 0.5f : 0.0f, wt);
}

Test(quant, q8_0_gemm_wide, .timeout = 120) { wide(RECUR_WT_Q8_0); }
Test(quant, q4_0_gemm_wide, .timeout = 120) { wide(RECUR_WT_Q4_0); }

/* the panels hold every weight on its block's grid, within the rounding of the format */
static void grid(recur_wtype wt)
{
    qmat a = qmat_new(37, 100, wt);
    for (int n = 0; n < a.N; n++)
        for (int b = 0; b * RECUR_QBLOCK < a.K; b++) {
            float amax = 0.0f;
            int k0 = b * RECUR_QBLOCK, kn = a.K - k0 < RECUR_QBLOCK ? a.K - k0 : RECUR_QBLOCK;
            for (int i = 0; i < kn; i++) amax = fmaxf(amax, fabsf(a.W[(size_t)n * a.K + k0 + i]));
            /* step: amax/127 (Q8_0) or amax/8 (Q4_0); fp16 rounding of d adds 2^-11 relative */
            double step = wt == RECUR_WT_Q8_0 ? amax / 127.0 : amax / 8.0;
            double tol = (wt == RECUR_WT_Q8_0 ? 0.5 : 1.0) * step * (1 + 1e-6) + amax * 0x1.0p-10;
            for (int i = 0; i < kn; i++) {
                double w = a.W[(size_t)n * a.K + k0 + i], wq = recur__quant_weight(a.Wq, wt, a.N, a.K, n, k0 + i);
                cr_assert_leq(fabs(w - wq), tol, "%s W[%d][%d] = %g held as %g (step %g)", recur__wtype_name(wt), n,
                              k0 + i, w, wq, step);
            }
        }
    qmat_free(&a);
}

Test(quant, q8_0_weights_on_grid) { grid(RECUR_WT_Q8_0); }
Test(quant, q4_0_weights_on_grid) { grid(RECUR_WT_Q4_0); }

/* a non-finite activation gives NaN outputs (the block's scale is NaN), not a crash or a finite lie */
Test(quant, nonfinite_x_propagates)
{
    qmat a = qmat_new(16, 64, RECUR_WT_Q8_0);
    float x[64], y[16];
    for (int k = 0; k < 64; k++) x[k] = frand();
    x[40] = INFINITY;
    recur__packed_gemm_t(1, 16, 64, x, 64, a.Wq, RECUR_WT_Q8_0, 0.0f, y, 16);
    for (int n = 0; n < 16; n++) cr_assert(isnan(y[n]), "y[%d] = %g", n, y[n]);
    qmat_free(&a);
}

/* x's rows as the GEMM quantizes them (the AVX-512 / AVX2 versions on those paths) against
 * recur__quantize_q8_0 block by block, bit for bit: random blocks, exact ties (t = k + 0.5 after
 * the scale), zero and tiny blocks (an underflowing scale: the scalar fallback), NaN / inf, a
 * scale whose fp16 is subnormal or overflows, and a short last block */
Test(quant, rows_q8_match_the_block_formula)
{
    enum { M = 3, K = 32 * 12 + 7, NB = 13 };
    static float x[M][K + 1];
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) x[m][k] = frand() * (k % 29 == 0 ? 16.0f : 1.0f);
    for (int k = 0; k < 32; k++) x[0][k] = (float)(k - 16) + 0.5f; /* amax 16: id 127/16, many ties */
    for (int k = 32; k < 64; k++) x[0][k] = (float)((k * 37) % 255 - 127); /* amax 127: id 1, exact */
    for (int k = 64; k < 96; k++) x[0][k] = 0.0f;
    for (int k = 96; k < 128; k++) x[0][k] = frand() * 1e-38f;  /* d underflows */
    for (int k = 128; k < 160; k++) x[0][k] = frand() * 1e-5f;  /* fp16(d) subnormal */
    for (int k = 160; k < 192; k++) x[0][k] = frand() * 3e38f;  /* fp16(d) overflows */
    for (int k = 192; k < 224; k++) x[0][k] = (k % 3 ? 1.0f : -1.0f) * (float)(k % 7) * 0.25f - 0.0f;
    x[1][40] = NAN;
    x[1][100] = INFINITY;
    x[2][K - 1] = -INFINITY;
    x[2][200] = -0.0f;
    int8_t q[M * NB * 32], qr[32];
    float dx[M * NB];
    int32_t xs[M * NB];
    recur__quantize_rows_q8(M, K, &x[0][0], K + 1, q, dx, xs);
    for (int m = 0; m < M; m++)
        for (int b = 0; b < NB; b++) {
            const int k0 = 32 * b, kn = K - k0 < 32 ? K - k0 : 32;
            const float d = recur__half_to_float(recur__quantize_q8_0(&x[m][k0], kn, qr), RECUR_WT_F16);
            int32_t s = 0;
            for (int i = 0; i < 32; i++) s += qr[i];
            cr_assert_eq(memcmp(q + (m * NB + b) * 32, qr, 32), 0, "row %d block %d: codes differ", m, b);
            cr_assert(memcmp(&dx[m * NB + b], &d, 4) == 0 || (isnan(d) && isnan(dx[m * NB + b])),
                      "row %d block %d: scale %a, block formula %a", m, b, dx[m * NB + b], d);
            cr_assert_eq(xs[m * NB + b], s, "row %d block %d: xsum", m, b);
        }
}
