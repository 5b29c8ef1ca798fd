/* packed_gemm.c — y = beta*y + x W^T on pre-packed weights (formula and layout: packed_gemm.h).
 *
 * Tiles: MR rows x NP panels of accumulators live in registers across the whole K loop, so every
 * element is one fmaf chain over k in order; a tile of another shape (fewer rows at the end of M,
 * one panel at the end of N, many panels for M = 1) runs the same chain per element, which is why
 * a row's result does not depend on M or on where the row sits. Panels are the outer loop: a
 * pair of panels (K x 32 floats) stays in L1 while every row tile of x passes over it, and W is
 * read once per call (from L3/DRAM when it is large). */
#include <math.h>
#include <string.h>
#include "packed_gemm.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#define INLINE static inline __attribute__((always_inline))

size_t recur__packed_floats(int N, int K)
{
    return (size_t)((N + RECUR_PANEL - 1) / RECUR_PANEL) * (size_t)K * RECUR_PANEL;
}

void recur__pack(float *Wp, const float *W, int N, int K)
{
    int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    for (int p = 0; p < np; p++)
        for (int k = 0; k < K; k++) {
            float *dst = Wp + ((size_t)p * K + k) * RECUR_PANEL;
            for (int j = 0; j < RECUR_PANEL; j++) {
                int n = p * RECUR_PANEL + j;
                dst[j] = n < N ? W[(size_t)n * K + k] : 0.0f;
            }
        }
}

/* ---------------------------------------------------------------- scalar reference */

void recur__packed_gemm_ref(int M, int N, int K, const float *x, int ldx, const float *Wp,
                            float beta, float *y, int ldy)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *w = Wp + (size_t)(n / RECUR_PANEL) * K * RECUR_PANEL + n % RECUR_PANEL;
            const float *xr = x + (size_t)m * ldx;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(xr[k], w[(size_t)k * RECUR_PANEL], acc);
            float *yo = y + (size_t)m * ldy + n;
            *yo = beta == 0.0f ? acc : fmaf(beta, *yo, acc);
        }
}

#if defined(__AVX512F__)
/* ---------------------------------------------------------------- AVX-512: one zmm per panel row */

#define MR_MAX 8 /* rows per tile: 8 x 2 panels = 16 accumulators of 32 zmm */
#define NP_ONE_ROW 8 /* panels in flight for M = 1: enough independent chains to stream W */

/* Rows [0, MR) of x against panels [0, NP) of Wp (Wp, y already offset to the tile); n_left =
 * N minus the tile's first column. MR and NP are constants after inlining: acc stays in zmm.
 * pf (or NULL): the next pair of panels, asked into L2 two lines per k while this tile runs
 * (the first row tile of a pair does it; a cold W otherwise stalls the next pair's first tile;
 * when one panel is left this runs past the end of W, which a prefetch may: it never faults;
 * +5 % on the default model's GEMM sequence at M = 64). */
INLINE void tile(const int MR, const int NP, int K, const float *x, int ldx, const float *Wp,
                 float beta, float *y, int ldy, int n_left, const float *pf)
{
    __m512 acc[MR_MAX][NP_ONE_ROW];
    const size_t ps = (size_t)K * RECUR_PANEL;
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[m][p] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        if (pf) {
            _mm_prefetch((const char *)(pf + (size_t)k * 2 * RECUR_PANEL), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + (size_t)k * 2 * RECUR_PANEL + RECUR_PANEL), _MM_HINT_T1);
        }
        __m512 w[NP_ONE_ROW];
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) w[p] = _mm512_load_ps(Wp + p * ps + (size_t)k * RECUR_PANEL);
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)m * ldx + k]);
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) acc[m][p] = _mm512_fmadd_ps(xb, w[p], acc[m][p]);
        }
    }
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) {
            int cols = n_left - p * RECUR_PANEL;
            if (cols <= 0) break;
            __mmask16 mk = cols >= RECUR_PANEL ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);
            float *yo = y + (size_t)m * ldy + p * RECUR_PANEL;
            __m512 r = acc[m][p];
            if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, yo), r);
            _mm512_mask_storeu_ps(yo, mk, r);
        }
}

void recur__packed_gemm(int M, int N, int K, const float *x, int ldx, const float *Wp, float beta,
                        float *y, int ldy)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    const size_t ps = (size_t)K * RECUR_PANEL;
    if (M == 1) {
        int p = 0;
        for (; p + NP_ONE_ROW <= np; p += NP_ONE_ROW)
            tile(1, NP_ONE_ROW, K, x, ldx, Wp + p * ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL, NULL);
        for (; p + 2 <= np; p += 2)
            tile(1, 2, K, x, ldx, Wp + p * ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL, NULL);
        if (p < np) tile(1, 1, K, x, ldx, Wp + p * ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL, NULL);
        return;
    }
    for (int p = 0; p < np; p += 2) {
        const float *wp = Wp + p * ps;
        float *yp = y + p * RECUR_PANEL;
        int n_left = N - p * RECUR_PANEL;
        int two = np - p >= 2;
        for (int m = 0; m < M; m += MR_MAX) {
            const float *xm = x + (size_t)m * ldx;
            float *ym = yp + (size_t)m * ldy;
            int mr = M - m < MR_MAX ? M - m : MR_MAX;
            const float *pf = m == 0 && p + 2 < np ? wp + 2 * ps : NULL;
#define T(R) do { if (two) tile(R, 2, K, xm, ldx, wp, beta, ym, ldy, n_left, pf); \
                  else tile(R, 1, K, xm, ldx, wp, beta, ym, ldy, n_left, pf); } while (0)
            switch (mr) {
            case 8: T(8); break;
            case 7: T(7); break;
            case 6: T(6); break;
            case 5: T(5); break;
            case 4: T(4); break;
            case 3: T(3); break;
            case 2: T(2); break;
            default: T(1); break;
            }
#undef T
        }
    }
}

#elif defined(__AVX2__) && defined(__FMA__)
/* ---------------------------------------------------------------- AVX2+FMA: two ymm per panel row */

#define MR_MAX 4
#define NP_ONE_ROW 4

INLINE void tile(const int MR, const int NP, int K, const float *x, int ldx, const float *Wp,
                 float beta, float *y, int ldy, int n_left)
{
    __m256 acc[MR_MAX][2 * NP_ONE_ROW];
    const size_t ps = (size_t)K * RECUR_PANEL;
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int h = 0; h < 2 * NP; h++) acc[m][h] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m256 w[2 * NP_ONE_ROW];
#pragma GCC unroll 8
        for (int h = 0; h < 2 * NP; h++)
            w[h] = _mm256_load_ps(Wp + (h / 2) * ps + (size_t)k * RECUR_PANEL + (h % 2) * 8);
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
            __m256 xb = _mm256_set1_ps(x[(size_t)m * ldx + k]);
#pragma GCC unroll 8
            for (int h = 0; h < 2 * NP; h++) acc[m][h] = _mm256_fmadd_ps(xb, w[h], acc[m][h]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int p = 0; p < NP; p++) {
            int cols = n_left - p * RECUR_PANEL;
            if (cols <= 0) break;
            if (cols > RECUR_PANEL) cols = RECUR_PANEL;
            float a[RECUR_PANEL];
            _mm256_storeu_ps(a, acc[m][2 * p]);
            _mm256_storeu_ps(a + 8, acc[m][2 * p + 1]);
            float *yo = y + (size_t)m * ldy + p * RECUR_PANEL;
            for (int j = 0; j < cols; j++) yo[j] = beta == 0.0f ? a[j] : fmaf(beta, yo[j], a[j]);
        }
}

void recur__packed_gemm(int M, int N, int K, const float *x, int ldx, const float *Wp, float beta,
                        float *y, int ldy)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    const size_t ps = (size_t)K * RECUR_PANEL;
    if (M == 1) {
        int p = 0;
        for (; p + NP_ONE_ROW <= np; p += NP_ONE_ROW)
            tile(1, NP_ONE_ROW, K, x, ldx, Wp + p * ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL);
        for (; p < np; p++)
            tile(1, 1, K, x, ldx, Wp + p * ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL);
        return;
    }
    for (int p = 0; p < np; p++)
        for (int m = 0; m < M; m += MR_MAX) {
            const float *xm = x + (size_t)m * ldx;
            float *ym = y + (size_t)m * ldy + p * RECUR_PANEL;
            switch (M - m < MR_MAX ? M - m : MR_MAX) {
            case 4: tile(4, 1, K, xm, ldx, Wp + p * ps, beta, ym, ldy, N - p * RECUR_PANEL); break;
            case 3: tile(3, 1, K, xm, ldx, Wp + p * ps, beta, ym, ldy, N - p * RECUR_PANEL); break;
            case 2: tile(2, 1, K, xm, ldx, Wp + p * ps, beta, ym, ldy, N - p * RECUR_PANEL); break;
            default: tile(1, 1, K, xm, ldx, Wp + p * ps, beta, ym, ldy, N - p * RECUR_PANEL); break;
            }
        }
}

#else
/* ---------------------------------------------------------------- no SIMD: the reference */

void recur__packed_gemm(int M, int N, int K, const float *x, int ldx, const float *Wp, float beta,
                        float *y, int ldy)
{
    recur__packed_gemm_ref(M, N, K, x, ldx, Wp, beta, y, ldy);
}
#endif
