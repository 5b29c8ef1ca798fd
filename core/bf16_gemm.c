/* bf16_gemm.c — y = beta*y + x W^T on bf16 panels with fp32 accumulation (formula, rounding and
 * layout: bf16_gemm.h).
 *
 * The rows of x are rounded to bf16 pairs once per call (vcvtne2ps2bf16, into a stack buffer, a
 * heap one for a big call, or row chunks when that allocation fails: a row's result is the same
 * either way). Tiles as packed_gemm.c's AVX-512 path: up to 14 rows x 2 panels of zmm
 * accumulators live across the whole K loop; per k pair one 64-byte line per panel and one
 * broadcast 32-bit pair per row feed vdpbf16ps (32 multiply-adds per instruction, twice an fp32
 * FMA's). The x86 kernel is left out of the fuzz build like packed_gemm.c's
 * (RECUR_GEMM_PORTABLE_ONLY): the scalar formula runs there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bf16_gemm.h"
#include "isa.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(RECUR_GEMM_PORTABLE_ONLY)
#define RECUR_X86 1
#include <immintrin.h>
#include "gemm_store.h"
#endif

#define XSCRATCH 16384 /* bytes of rounded x on the stack */

size_t recur__bf16_packed_bytes(int N, int K)
{
    return (size_t)((N + RECUR_PANEL - 1) / RECUR_PANEL) * (size_t)((K + 1) / 2) * RECUR_PANEL * sizeof(uint32_t);
}

static inline float bf16_to_float(uint16_t h) { return recur__half_to_float(h, RECUR_WT_BF16); }

void recur__pack_bf16(uint32_t *Wb, const void *Wp, recur_wtype src_wt, int N, int K)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL, K2 = (K + 1) / 2;
    for (int p = 0; p < np; p++)
        for (int i = 0; i < K2; i++)
            for (int j = 0; j < RECUR_PANEL; j++) {
                uint16_t h[2] = {0, 0};
                for (int t = 0; t < 2 && 2 * i + t < K; t++) {
                    const size_t s = ((size_t)p * K + 2 * i + t) * RECUR_PANEL + j; /* packed_gemm.h's layout */
                    const float w = src_wt == RECUR_WT_F32 ? ((const float *)Wp)[s]
                                                           : recur__half_to_float(((const uint16_t *)Wp)[s], src_wt);
                    h[t] = recur__bf16_round(w);
                }
                Wb[((size_t)p * K2 + i) * RECUR_PANEL + j] = (uint32_t)h[0] | (uint32_t)h[1] << 16;
            }
}

float recur__bf16_weight(const uint32_t *Wb, int K, int n, int k)
{
    const uint32_t v = Wb[((size_t)(n / RECUR_PANEL) * ((K + 1) / 2) + k / 2) * RECUR_PANEL + n % RECUR_PANEL];
    return bf16_to_float((uint16_t)(k % 2 ? v >> 16 : v));
}

/* ---------------------------------------------------------------- scalar reference */

/* a subnormal fp32 result flushed to a zero of its sign (vdpbf16ps's FTZ) */
static inline float ftz(float v) { return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }

void recur__bf16_gemm_ref(int M, int N, int K, const float *x, int ldx, const uint32_t *Wb, float beta, float *y,
                          int ldy)
{
    const int K2 = (K + 1) / 2;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)m * ldx;
            float acc = 0.0f;
            for (int i = 0; i < K2; i++) {
                const int k0 = 2 * i, k1 = 2 * i + 1;
                const float x0 = bf16_to_float(recur__bf16_round(xr[k0]));
                const float x1 = k1 < K ? bf16_to_float(recur__bf16_round(xr[k1])) : 0.0f;
                /* the product of two bf16 values is exact in fp32: one rounding per term, as fmaf */
                acc = ftz(fmaf(x1, recur__bf16_weight(Wb, K, n, k1), acc));
                acc = ftz(fmaf(x0, recur__bf16_weight(Wb, K, n, k0), acc));
            }
            float *yo = y + (size_t)m * ldy + n;
            *yo = beta == 0.0f ? acc : fmaf(beta, *yo, acc);
        }
}

#ifdef RECUR_X86
/* ---------------------------------------------------------------- AVX-512 BF16 */
#define TARGET_BF16 RECUR_TARGET_AVX512 ",avx512bf16"
#define FNBF static inline __attribute__((always_inline, target(TARGET_BF16)))
#define MRB 14 /* rows per tile: 14 x 2 panels = 28 accumulators of 32 zmm */

/* rows [0, M) of x -> xb [M][K2] bf16 pairs (vcvtne2ps2bf16 on 32 floats at a time; the masked
 * tail loads zeros past K) */
FNBF void round_rows(int M, int K, const float *x, int ldx, uint32_t *xb)
{
    const int K2 = (K + 1) / 2;
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * ldx;
        uint32_t *o = xb + (size_t)m * K2;
        for (int k = 0; k < K; k += 32) {
            const int left = K - k;
            const __mmask16 lo = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1u);
            const __mmask16 hi = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1u);
            const __m512 a = _mm512_maskz_loadu_ps(lo, xr + k), b = _mm512_maskz_loadu_ps(hi, xr + k + 16);
            const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* low 16 halves: a */
            const int pairs = (left < 32 ? left + 1 : 32) / 2;
            _mm512_mask_storeu_epi32(o + k / 2, pairs >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << pairs) - 1u), v);
        }
    }
}

/* Rows [0, MR) of xb against panels [0, NP) of Wb (offset to the tile; panel stride ps lanes);
 * n_left = N minus the tile's first column; pf (or NULL): the next pair of panels, asked into L2
 * one line per k pair while this tile runs (as packed_gemm.c's tile512). */
FNBF void tile_bf16(const int MR, const int NP, int K2, const uint32_t *xb, const uint32_t *Wb, size_t ps,
                    float beta, float *y, int ldy, int n_left, const uint32_t *pf)
{
    __m512 acc[MRB][2];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) acc[m][p] = _mm512_setzero_ps();
    for (int i = 0; i < K2; i++) {
        if (pf) {
            _mm_prefetch((const char *)(pf + (size_t)i * RECUR_PANEL), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + ps + (size_t)i * RECUR_PANEL), _MM_HINT_T1);
        }
        __m512bh w[2];
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) w[p] = (__m512bh)_mm512_load_si512(Wb + p * ps + (size_t)i * RECUR_PANEL);
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xb[(size_t)m * K2 + i]);
#pragma GCC unroll 2
            for (int p = 0; p < NP; p++) acc[m][p] = _mm512_dpbf16_ps(acc[m][p], xv, w[p]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const int cols = n_left - p * RECUR_PANEL;
            if (cols <= 0) break;
            recur__store_panel512(y + (size_t)m * ldy + p * RECUR_PANEL, acc[m][p], cols, beta);
        }
}

/* panel pairs outer (a pair stays in L1/L2 while every row tile passes over it), row tiles inner */
static __attribute__((target(TARGET_BF16))) void gemm_bf16(int M, int N, int K2, const uint32_t *xb,
                                                           const uint32_t *Wb, float beta, float *y, int ldy)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    const size_t ps = (size_t)K2 * RECUR_PANEL;
    for (int p = 0; p < np; p += 2) {
        const uint32_t *wp = Wb + p * ps;
        const int two = np - p >= 2, n_left = N - p * RECUR_PANEL;
        for (int m = 0; m < M; m += MRB) {
            const uint32_t *xm = xb + (size_t)m * K2;
            float *ym = y + (size_t)m * ldy + p * RECUR_PANEL;
            const uint32_t *pf = m == 0 && p + 2 < np ? wp + 2 * ps : NULL;
#define T(R) do { if (two) tile_bf16(R, 2, K2, xm, wp, ps, beta, ym, ldy, n_left, pf); \
                  else tile_bf16(R, 1, K2, xm, wp, ps, beta, ym, ldy, n_left, pf); } while (0)
            switch (M - m < MRB ? M - m : MRB) {
            case 14: T(14); break;
            case 13: T(13); break;
            case 12: T(12); break;
            case 11: T(11); break;
            case 10: T(10); break;
            case 9: T(9); break;
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

static __attribute__((target(TARGET_BF16))) void round_rows_entry(int M, int K, const float *x, int ldx,
                                                                  uint32_t *xb)
{
    round_rows(M, K, x, ldx, xb);
}
#endif /* RECUR_X86 */

int recur__bf16_round_hw(const float *x, int n, uint16_t *out)
{
#ifdef RECUR_X86
    if (!recur__isa_bf16() || n <= 0) return 0;
    uint32_t *tmp = malloc(sizeof(uint32_t) * (size_t)((n + 1) / 2));
    if (!tmp) return 0;
    round_rows_entry(1, n, x, n, tmp);
    memcpy(out, tmp, sizeof(uint16_t) * (size_t)n);
    free(tmp);
    return 1;
#else
    (void)x, (void)n, (void)out;
    return 0;
#endif
}

void recur__bf16_gemm(int M, int N, int K, const float *x, int ldx, const uint32_t *Wb, float beta, float *y,
                      int ldy)
{
    if (M <= 0) return;
#ifdef RECUR_X86
    if (recur__isa_bf16()) {
        const int K2 = (K + 1) / 2;
        const size_t row_bytes = (size_t)K2 * sizeof(uint32_t);
        _Alignas(64) uint32_t stack[XSCRATCH / sizeof(uint32_t)];
        uint32_t *buf = stack, *heap = NULL;
        int chunk = (int)(XSCRATCH / row_bytes);
        if (chunk < M) {
            heap = malloc(row_bytes * (size_t)M);
            if (heap) { buf = heap; chunk = M; }
            else if (chunk < 1) abort(); /* K > 8k: out of memory (docs/DESIGN.md §7) */
        }
        for (int m0 = 0; m0 < M; m0 += chunk) {
            const int rows = M - m0 < chunk ? M - m0 : chunk;
            round_rows_entry(rows, K, x + (size_t)m0 * ldx, ldx, buf);
            gemm_bf16(rows, N, K2, buf, Wb, beta, y + (size_t)m0 * ldy, ldy);
        }
        free(heap);
        return;
    }
#endif
    recur__bf16_gemm_ref(M, N, K, x, ldx, Wb, beta, y, ldy);
}
