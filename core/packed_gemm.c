/* packed_gemm.c — y = beta*y + x W^T on pre-packed weights (formula and layout: packed_gemm.h).
 *
 * Tiles: MR rows x NP panels of accumulators live in registers across the whole K loop, so every
 * element is one multiply-add chain over k in order; a tile of another shape (fewer rows at the
 * end of M, one panel at the end of N, many panels for M = 1) runs the same chain per element,
 * which is why a row's result does not depend on M or on where the row sits. Panels are the outer
 * loop: a pair of panels (K x 32 floats) stays in L1 while every row tile of x passes over it,
 * and W is read once per call (from L3/DRAM when it is large).
 *
 * Half weights (F16 / BF16 panels): the tile widens each loaded panel vector to fp32 (F16C
 * vcvtph2ps; BF16 a zero-extend and a 16-bit shift), exact, then runs the fp32 chain unchanged.
 * The widening is one instruction per panel vector and k, shared by the MR rows of the tile.
 *
 * Three kernels live in every build (isa.h picks one at the first call): AVX-512 and AVX2+FMA+F16C
 * compiled for their targets by function attributes (whatever -march the build has), and plain
 * C for the portable path (SSE2 intrinsics on x86-64, tile_sse2), compiled without contraction so
 * that it rounds the product and the sum separately on every build (the same bits from a
 * -march=x86-64 and a -march=native build). */
#include <math.h>
#include <string.h>
#include "isa.h"
#include "packed_gemm.h"
#include "quant.h"

/* RECUR_GEMM_PORTABLE_ONLY leaves the x86 kernels out (every ISA then runs the portable path):
 * the fuzz build sets it, because clang -O1 with sanitizers spends over 9 minutes expanding the
 * always-inline AVX-512/AVX2 tiles, and the fuzz targets exercise parsers, not GEMM. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(RECUR_GEMM_PORTABLE_ONLY)
#define RECUR_X86 1
#include <immintrin.h>
#include "gemm_store.h"
#endif

#define INLINE static inline __attribute__((always_inline))

uint16_t recur__float_to_half(float f, recur_wtype wt)
{
    uint32_t b;
    if (wt == RECUR_WT_F16) { /* F. Giesen's float_to_half_fast3_rtne (no _Float16 in every compiler) */
        const uint32_t f16max = (127u + 16u) << 23, denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
        memcpy(&b, &f, 4);
        uint32_t sign = b & 0x80000000u, u = b ^ sign;
        uint16_t o;
        if (u >= f16max) {
            o = u > 0x7f800000u ? 0x7e00 : 0x7c00; /* NaN, or inf / overflow */
        } else if (u < (113u << 23)) { /* result subnormal or zero: let an fp32 add round it */
            float uf, dm;
            memcpy(&uf, &u, 4);
            memcpy(&dm, &denorm_magic, 4);
            uf += dm;
            memcpy(&u, &uf, 4);
            o = (uint16_t)(u - denorm_magic);
        } else {
            uint32_t odd = (u >> 13) & 1u;
            u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
            o = (uint16_t)(u >> 13);
        }
        return (uint16_t)(o | (sign >> 16));
    }
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

size_t recur__packed_floats(int N, int K)
{
    return (size_t)((N + RECUR_PANEL - 1) / RECUR_PANEL) * (size_t)K * RECUR_PANEL;
}

size_t recur__packed_bytes(int N, int K, recur_wtype t)
{
    if (recur__wtype_quant(t))
        return (size_t)((N + RECUR_PANEL - 1) / RECUR_PANEL) * (size_t)((K + RECUR_QBLOCK - 1) / RECUR_QBLOCK) *
               recur__qblock_panel_bytes(t);
    return recur__packed_floats(N, K) * recur__wtype_size(t);
}

const char *recur__wtype_name(recur_wtype t)
{
    static const char *const names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0"};
    return (unsigned)t < 5 ? names[t] : "?";
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

void recur__pack_half(uint16_t *Wp, const uint16_t *W, int N, int K)
{
    int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    for (int p = 0; p < np; p++)
        for (int k = 0; k < K; k++) {
            uint16_t *dst = Wp + ((size_t)p * K + k) * RECUR_PANEL;
            for (int j = 0; j < RECUR_PANEL; j++) {
                int n = p * RECUR_PANEL + j;
                dst[j] = n < N ? W[(size_t)n * K + k] : 0;
            }
        }
}

/* ---------------------------------------------------------------- scalar references */

/* Packed weight i (a panel offset) of type wt, as fp32. */
static inline float weight_at(const void *Wp, recur_wtype wt, size_t i)
{
    return wt == RECUR_WT_F32 ? ((const float *)Wp)[i] : recur__half_to_float(((const uint16_t *)Wp)[i], wt);
}

/* The vector paths' chain, literally: fmaf per term. */
static void ref_fused(int M, int N, int K, const float *x, int ldx, const void *Wp, recur_wtype wt, float beta,
                      float *y, int ldy)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            size_t w = (size_t)(n / RECUR_PANEL) * K * RECUR_PANEL + n % RECUR_PANEL;
            const float *xr = x + (size_t)m * ldx;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(xr[k], weight_at(Wp, wt, w + (size_t)k * RECUR_PANEL), acc);
            float *yo = y + (size_t)m * ldy + n;
            *yo = beta == 0.0f ? acc : fmaf(beta, *yo, acc);
        }
}

/* ---------------------------------------------------------------- portable: plain C, unfused */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

/* The portable path's chain, literally: acc = acc + x*w, product and sum rounded separately. */
static void ref_unfused(int M, int N, int K, const float *x, int ldx, const void *Wp, recur_wtype wt,
                        float beta, float *y, int ldy)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            size_t w = (size_t)(n / RECUR_PANEL) * K * RECUR_PANEL + n % RECUR_PANEL;
            const float *xr = x + (size_t)m * ldx;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = acc + xr[k] * weight_at(Wp, wt, w + (size_t)k * RECUR_PANEL);
            float *yo = y + (size_t)m * ldy + n;
            *yo = beta == 0.0f ? acc : beta * *yo + acc;
        }
}

#define MR_C 4       /* rows per portable tile */
#define NP_C_ONE_ROW 4 /* panels per portable tile for M = 1 */

/* recur__half_to_float without branches, so a panel row widens in vector lanes (tile_c: builds
 * without SSE2, and F16 on a thread with MXCSR.DAZ set; GCC vectorises the 16 halves of a panel
 * row only when no select is left as a branch, hence the masks): the exponent rebiased by a shift and an add, inf/NaN (exponent 31)
 * moved to 255, a subnormal F16 (exponent 0) renormalised by an exact fp32 subtraction of 2^-14.
 * Exact for every half (all 65,536 checked against recur__half_to_float by test_packed_gemm). */
INLINE float widen_half(uint16_t h, const int WT)
{
    uint32_t b;
    if (WT == RECUR_WT_BF16) {
        b = (uint32_t)h << 16;
    } else {
        const uint32_t em = (uint32_t)(h & 0x7fff) << 13, e = em & 0x0f800000u;
        const uint32_t is_inf = 0u - (uint32_t)(e == 0x0f800000u), is_sub = 0u - (uint32_t)(e == 0);
        const uint32_t o = em + ((uint32_t)(127 - 15) << 23) + (is_inf & (uint32_t)(128 - 16) << 23)
                           + (is_sub & 1u << 23);
        float fo, magic;
        const uint32_t mb = 113u << 23;
        memcpy(&fo, &o, 4);
        memcpy(&magic, &mb, 4);
        const float fsub = fo - magic;
        uint32_t bsub;
        memcpy(&bsub, &fsub, 4);
        b = (bsub & is_sub) | (o & ~is_sub);
        b |= (uint32_t)(h & 0x8000) << 16;
    }
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Rows [0, MR) x panels [0, NP) (Wp, y offset to the tile); MR, NP, WT constants after inlining,
 * so the j loops are fixed-length and vectorise (SSE2 at -march=x86-64). */
INLINE void tile_c(const int WT, const int MR, const int NP, int K, const float *x, int ldx, const void *Wp,
                   float beta, float *y, int ldy, int n_left)
{
    float acc[MR_C][NP_C_ONE_ROW * RECUR_PANEL];
    const size_t ps = (size_t)K * RECUR_PANEL;
    for (int m = 0; m < MR; m++)
        for (int j = 0; j < NP * RECUR_PANEL; j++) acc[m][j] = 0.0f;
    for (int k = 0; k < K; k++) {
        float w[NP_C_ONE_ROW * RECUR_PANEL];
        for (int p = 0; p < NP; p++) {
            size_t i = p * ps + (size_t)k * RECUR_PANEL;
            if (WT == RECUR_WT_F32) memcpy(w + p * RECUR_PANEL, (const float *)Wp + i, sizeof(float) * RECUR_PANEL);
            else
                for (int j = 0; j < RECUR_PANEL; j++)
                    w[p * RECUR_PANEL + j] = widen_half(((const uint16_t *)Wp)[i + j], WT);
        }
        for (int m = 0; m < MR; m++) {
            const float xv = x[(size_t)m * ldx + k];
            for (int j = 0; j < NP * RECUR_PANEL; j++) acc[m][j] = acc[m][j] + xv * w[j];
        }
    }
    for (int m = 0; m < MR; m++) {
        int cols = n_left < NP * RECUR_PANEL ? n_left : NP * RECUR_PANEL;
        float *yo = y + (size_t)m * ldy;
        for (int j = 0; j < cols; j++) yo[j] = beta == 0.0f ? acc[m][j] : beta * yo[j] + acc[m][j];
    }
}

/* Wp + i elements of type WT */
#define WOFF(WT, Wp, i) ((const void *)((const char *)(Wp) + (size_t)(i) * ((WT) == RECUR_WT_F32 ? 4 : 2)))

/* The driver of the 4-row, 1-panel tiles (portable and AVX2 paths): M = 1 runs NP_ONE panels per
 * tile, otherwise panels outer and row tiles of up to 4 inner. TILE: the path's tile function. */
#define GEMM_MR4(TILE, NP_ONE)                                                                         \
    do {                                                                                               \
        const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;                                            \
        const size_t ps = (size_t)K * RECUR_PANEL;                                                     \
        if (M == 1) {                                                                                  \
            int p = 0;                                                                                 \
            for (; p + NP_ONE <= np; p += NP_ONE)                                                      \
                TILE(WT, 1, NP_ONE, K, x, ldx, WOFF(WT, Wp, p * ps), beta, y + p * RECUR_PANEL, ldy,   \
                     N - p * RECUR_PANEL);                                                             \
            for (; p < np; p++)                                                                        \
                TILE(WT, 1, 1, K, x, ldx, WOFF(WT, Wp, p * ps), beta, y + p * RECUR_PANEL, ldy,        \
                     N - p * RECUR_PANEL);                                                             \
            break;                                                                                     \
        }                                                                                              \
        for (int p = 0; p < np; p++)                                                                   \
            for (int m = 0; m < M; m += 4) {                                                           \
                const float *xm = x + (size_t)m * ldx;                                                 \
                float *ym = y + (size_t)m * ldy + p * RECUR_PANEL;                                     \
                const void *wp = WOFF(WT, Wp, p * ps);                                                 \
                const int nl = N - p * RECUR_PANEL;                                                    \
                switch (M - m < 4 ? M - m : 4) {                                                       \
                case 4: TILE(WT, 4, 1, K, xm, ldx, wp, beta, ym, ldy, nl); break;                      \
                case 3: TILE(WT, 3, 1, K, xm, ldx, wp, beta, ym, ldy, nl); break;                      \
                case 2: TILE(WT, 2, 1, K, xm, ldx, wp, beta, ym, ldy, nl); break;                      \
                default: TILE(WT, 1, 1, K, xm, ldx, wp, beta, ym, ldy, nl); break;                     \
                }                                                                                      \
            }                                                                                          \
    } while (0)

#ifdef __SSE2__
/* The portable tile in SSE2 intrinsics (every x86-64 has SSE2), run wherever __SSE2__ is
 * defined: the same chain per element as tile_c (acc + x*w, product and sum rounded separately,
 * k in order), so the same bits. Why not leave it to the vectoriser: tile_c kept its accumulators
 * and the widened panel row in memory (a load and a store per vector and k), spent ~26
 * instructions per 4 F16 weights on widen_half's selects, and compiled them differently under
 * SSE2 and SSE4.1 (pmovzxwd, pblendvb), so the portable binary (-march=x86-64) and its reference
 * (-march=x86-64-v2) ran different loops. Here both run these instructions, accumulators in
 * registers, 8 vector operations per 4 F16 weights (default model, portable path, tokens per CPU
 * second: decode B = 1 ~1,050 -> ~1,900, B = 64 ~1,300 -> ~3,700). M = 1 runs one panel per
 * tile: 4 accumulators leave the registers to the widening (2 and 4 panels were no faster). */
#include <emmintrin.h>

/* 4 halves as fp32; hs holds each in the upper 16 bits of its 32-bit lane (h << 16). F16 (F.
 * Giesen's half_to_float_SSE2): exponent and mantissa moved into fp32 position ((h & 0x7fff) << 13)
 * read as an fp32 whose exponent is 112 too small, times 2^112, exact: a normal half gives a
 * normal fp32 and a subnormal one a subnormal fp32, both scaled by a power of two into the normal
 * range — the subnormal operand needs MXCSR.DAZ clear (gemm_portable checks); inf/NaN (exponent
 * 31, 143 after the product) get exponent 255 by an or, keeping the payload; then the sign. */
INLINE __m128 widen4_sse2(__m128i hs, const int WT)
{
    if (WT == RECUR_WT_BF16) return _mm_castsi128_ps(hs);
    const __m128i em = _mm_and_si128(_mm_srli_epi32(hs, 3), _mm_set1_epi32(0x0fffe000));
    const __m128 scaled = _mm_mul_ps(_mm_castsi128_ps(em), _mm_castsi128_ps(_mm_set1_epi32((127 + 112) << 23)));
    const __m128i infnan = _mm_and_si128(_mm_cmpgt_epi32(em, _mm_set1_epi32(0x0f7fffff)), _mm_set1_epi32(0x7f800000));
    const __m128i sign = _mm_and_si128(hs, _mm_set1_epi32((int)0x80000000u));
    return _mm_or_ps(scaled, _mm_castsi128_ps(_mm_or_si128(infnan, sign)));
}

/* The 16 weights of a panel row (element offset i) as 4 vectors of fp32 */
INLINE void load_w_sse2(const int WT, const void *Wp, size_t i, __m128 w[4])
{
    if (WT == RECUR_WT_F32) {
        for (int v = 0; v < 4; v++) w[v] = _mm_load_ps((const float *)Wp + i + 4 * v);
        return;
    }
    const __m128i zero = _mm_setzero_si128();
    for (int v = 0; v < 2; v++) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)Wp + i + 8 * v));
        w[2 * v] = widen4_sse2(_mm_unpacklo_epi16(zero, h), WT);
        w[2 * v + 1] = widen4_sse2(_mm_unpackhi_epi16(zero, h), WT);
    }
}

/* tile_c's contract, in registers: MR rows x NP panels, MR * NP * 4 accumulators */
INLINE void tile_sse2(const int WT, const int MR, const int NP, int K, const float *x, int ldx, const void *Wp,
                      float beta, float *y, int ldy, int n_left)
{
    __m128 acc[MR_C][NP_C_ONE_ROW * 4];
    const size_t ps = (size_t)K * RECUR_PANEL;
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 16
        for (int j = 0; j < NP * 4; j++) acc[m][j] = _mm_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m128 w[NP_C_ONE_ROW * 4];
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) load_w_sse2(WT, Wp, p * ps + (size_t)k * RECUR_PANEL, w + 4 * p);
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            const __m128 xv = _mm_set1_ps(x[(size_t)m * ldx + k]);
#pragma GCC unroll 16
            for (int j = 0; j < NP * 4; j++) acc[m][j] = _mm_add_ps(acc[m][j], _mm_mul_ps(xv, w[j]));
        }
    }
    for (int m = 0; m < MR; m++) {
        float out[NP_C_ONE_ROW * RECUR_PANEL];
#pragma GCC unroll 16
        for (int j = 0; j < NP * 4; j++) _mm_storeu_ps(out + 4 * j, acc[m][j]);
        int cols = n_left < NP * RECUR_PANEL ? n_left : NP * RECUR_PANEL;
        float *yo = y + (size_t)m * ldy;
        for (int j = 0; j < cols; j++) yo[j] = beta == 0.0f ? out[j] : beta * yo[j] + out[j];
    }
}
#define NP_SSE2_ONE_ROW 1
#define MXCSR_DAZ 0x0040 /* denormals-are-zero */
#endif

INLINE void gemm_c(const int WT, int M, int N, int K, const float *x, int ldx, const void *Wp, float beta,
                   float *y, int ldy)
{
#ifdef __SSE2__
    /* widen4_sse2's product reads a subnormal F16 as a subnormal fp32: with DAZ set (never by
     * librecur; a host thread may) it would be 0, so F16 then takes tile_c's exact widening */
    if (WT != RECUR_WT_F16 || !(_mm_getcsr() & MXCSR_DAZ)) {
        GEMM_MR4(tile_sse2, NP_SSE2_ONE_ROW);
        return;
    }
#endif
    GEMM_MR4(tile_c, NP_C_ONE_ROW);
}

static void gemm_portable(int M, int N, int K, const float *x, int ldx, const void *Wp, recur_wtype wt,
                          float beta, float *y, int ldy)
{
    switch (wt) { /* one instance of the kernel per element type */
    case RECUR_WT_F16: gemm_c(RECUR_WT_F16, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    case RECUR_WT_BF16: gemm_c(RECUR_WT_BF16, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    default: gemm_c(RECUR_WT_F32, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    }
}
#pragma GCC pop_options

void recur__packed_gemm_ref_t(int M, int N, int K, const float *x, int ldx, const void *Wp,
                              recur_wtype wt, float beta, float *y, int ldy)
{
    if (recur__wtype_quant(wt)) { recur__quant_gemm_ref(M, N, K, x, ldx, Wp, wt, beta, y, ldy); return; }
    if (recur__isa() == RECUR_ISA_PORTABLE) ref_unfused(M, N, K, x, ldx, Wp, wt, beta, y, ldy);
    else ref_fused(M, N, K, x, ldx, Wp, wt, beta, y, ldy);
}

void recur__packed_gemm_ref(int M, int N, int K, const float *x, int ldx, const float *Wp,
                            float beta, float *y, int ldy)
{
    recur__packed_gemm_ref_t(M, N, K, x, ldx, Wp, RECUR_WT_F32, beta, y, ldy);
}

#ifdef RECUR_X86
#define FN512 INLINE __attribute__((target(RECUR_TARGET_AVX512)))
/* ---------------------------------------------------------------- AVX-512: one zmm per panel row */

#ifndef MR512
#define MR512 8 /* rows per tile: 8 x 2 panels = 16 accumulators of 32 zmm */
#endif
#ifndef MR_HALF
#define MR_HALF 14 /* half weights: 14 x 2 = 28 accumulators, one widening per 14 FMAs */
#endif
#define MR_TILE (MR_HALF > MR512 ? MR_HALF : MR512)
#define NP512_ONE_ROW 8 /* panels in flight for M = 1: enough independent chains to stream W */

/* The 16 weights of panel row i (element offset) as fp32; WT a constant after inlining. */
FN512 __m512 load_w512(const int WT, const void *Wp, size_t i)
{
    if (WT == RECUR_WT_F32) return _mm512_load_ps((const float *)Wp + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)Wp + i));
    if (WT == RECUR_WT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows [0, MR) of x against panels [0, NP) of Wp (Wp, y already offset to the tile); n_left =
 * N minus the tile's first column. MR, NP and WT are constants after inlining: acc stays in zmm.
 * pf (or NULL): the next pair of panels, asked into L2 one line per 64 bytes of it per k while
 * this tile runs (the first row tile of a pair does it; a cold W otherwise stalls the next pair's
 * first tile; when one panel is left this runs past the end of W, which a prefetch may: it never
 * faults; +5 % on the default model's GEMM sequence at M = 64). */
FN512 void tile512(const int WT, const int MR, const int NP, int K, const float *x, int ldx, const void *Wp,
                 float beta, float *y, int ldy, int n_left, const void *pf)
{
    __m512 acc[MR_TILE][NP512_ONE_ROW];
    /* beta waits in memory: the 14 x 2 tile needs all 32 zmm across the K loop (28 accumulators,
     * 2 weights, 1 broadcast); left to the register allocator, GCC's generic tuning (the portable
     * build's) kept beta and 0.0f in zmm and spilled an accumulator, a store-to-load round trip
     * per k (-7 % on the d512 prefill) */
    volatile float beta_later = beta;
    const size_t ps = (size_t)K * RECUR_PANEL;
    const size_t pair_bytes_k = 2 * RECUR_PANEL * (WT == RECUR_WT_F32 ? 4 : 2); /* 128 or 64 */
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[m][p] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        if (pf) {
            const char *pk = (const char *)pf + (size_t)k * pair_bytes_k;
            _mm_prefetch(pk, _MM_HINT_T1);
            if (pair_bytes_k > 64) _mm_prefetch(pk + 64, _MM_HINT_T1);
        }
        __m512 w[NP512_ONE_ROW];
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) w[p] = load_w512(WT, Wp, p * ps + (size_t)k * RECUR_PANEL);
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)m * ldx + k]);
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) acc[m][p] = _mm512_fmadd_ps(xb, w[p], acc[m][p]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) {
            int cols = n_left - p * RECUR_PANEL;
            if (cols <= 0) break;
            recur__store_panel512(y + (size_t)m * ldy + p * RECUR_PANEL, acc[m][p], cols, beta_later);
        }
}


/* The M = 1 tile of NP512_ONE_ROW panels (batch-1 decode), a function of its own: inlined into
 * gemm512's panel loop, that loop's values stay live across the K loop beside the 8 panel
 * offsets, and GCC's generic tuning (the portable build's) then reloads one offset from the
 * stack every k (-mtune=znver3 parks it in a zmm); alone, the K loop has the registers it needs.
 * Same operations in the same order: results bit-identical either way. */
static __attribute__((noinline, target(RECUR_TARGET_AVX512))) void
tile512_one_row(recur_wtype wt, int K, const float *x, const void *Wp, float beta, float *y, int n_left)
{
    switch (wt) {
    case RECUR_WT_F16: tile512(RECUR_WT_F16, 1, NP512_ONE_ROW, K, x, 0, Wp, beta, y, 0, n_left, NULL); break;
    case RECUR_WT_BF16: tile512(RECUR_WT_BF16, 1, NP512_ONE_ROW, K, x, 0, Wp, beta, y, 0, n_left, NULL); break;
    default: tile512(RECUR_WT_F32, 1, NP512_ONE_ROW, K, x, 0, Wp, beta, y, 0, n_left, NULL); break;
    }
}

FN512 void gemm512(const int WT, int M, int N, int K, const float *x, int ldx, const void *Wp, float beta,
                 float *y, int ldy)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    const size_t ps = (size_t)K * RECUR_PANEL;
    if (M == 1) {
        int p = 0;
        for (; p + NP512_ONE_ROW <= np; p += NP512_ONE_ROW)
            tile512_one_row((recur_wtype)WT, K, x, WOFF(WT, Wp, p * ps), beta, y + p * RECUR_PANEL,
                            N - p * RECUR_PANEL);
        for (; p + 2 <= np; p += 2)
            tile512(WT, 1, 2, K, x, ldx, WOFF(WT, Wp, p * ps), beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL, NULL);
        if (p < np) tile512(WT, 1, 1, K, x, ldx, WOFF(WT, Wp, p * ps), beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL, NULL);
        return;
    }
    for (int p = 0; p < np; p += 2) {
        const void *wp = WOFF(WT, Wp, p * ps);
        float *yp = y + p * RECUR_PANEL;
        int n_left = N - p * RECUR_PANEL;
        int two = np - p >= 2;
        const int mr_max = WT == RECUR_WT_F32 ? MR512 : MR_HALF; /* see MR_HALF */
        for (int m = 0; m < M; m += mr_max) {
            const float *xm = x + (size_t)m * ldx;
            float *ym = yp + (size_t)m * ldy;
            int mr = M - m < mr_max ? M - m : mr_max;
            const void *pf = m == 0 && p + 2 < np ? WOFF(WT, wp, 2 * ps) : NULL;
#define T(R) do { if (two) tile512(WT, R, 2, K, xm, ldx, wp, beta, ym, ldy, n_left, pf); \
                  else tile512(WT, R, 1, K, xm, ldx, wp, beta, ym, ldy, n_left, pf); } while (0)
            switch (mr) {
#if MR_TILE >= 14
            case 14: T(14); break;
            case 13: T(13); break;
#endif
#if MR_TILE >= 12
            case 12: T(12); break;
            case 11: T(11); break;
            case 10: T(10); break;
            case 9: T(9); break;
#endif
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

static __attribute__((target(RECUR_TARGET_AVX512))) void
gemm_avx512(int M, int N, int K, const float *x, int ldx, const void *Wp, recur_wtype wt, float beta, float *y, int ldy)
{
    switch (wt) { /* one instance of the kernel per element type */
    case RECUR_WT_F16: gemm512(RECUR_WT_F16, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    case RECUR_WT_BF16: gemm512(RECUR_WT_BF16, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    default: gemm512(RECUR_WT_F32, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    }
}

#define FN256 INLINE __attribute__((target(RECUR_TARGET_AVX2)))
/* ---------------------------------------------------------------- AVX2+FMA: two ymm per panel row */

#define MR256 4
#define NP256_ONE_ROW 4

/* The 8 weights at element offset i as fp32; WT a constant after inlining. */
FN256 __m256 load_w256(const int WT, const void *Wp, size_t i)
{
    if (WT == RECUR_WT_F32) return _mm256_load_ps((const float *)Wp + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)Wp + i));
    if (WT == RECUR_WT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

FN256 void tile256(const int WT, const int MR, const int NP, int K, const float *x, int ldx, const void *Wp,
                 float beta, float *y, int ldy, int n_left)
{
    __m256 acc[MR256][2 * NP256_ONE_ROW];
    const size_t ps = (size_t)K * RECUR_PANEL;
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int h = 0; h < 2 * NP; h++) acc[m][h] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m256 w[2 * NP256_ONE_ROW];
#pragma GCC unroll 8
        for (int h = 0; h < 2 * NP; h++)
            w[h] = load_w256(WT, Wp, (h / 2) * ps + (size_t)k * RECUR_PANEL + (h % 2) * 8);
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
            __m256 xb = _mm256_set1_ps(x[(size_t)m * ldx + k]);
#pragma GCC unroll 8
            for (int h = 0; h < 2 * NP; h++) acc[m][h] = _mm256_fmadd_ps(xb, w[h], acc[m][h]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int p = 0; p < NP && n_left - p * RECUR_PANEL > 0; p++)
            recur__store_panel256(y + (size_t)m * ldy + p * RECUR_PANEL, acc[m][2 * p], acc[m][2 * p + 1],
                                  n_left - p * RECUR_PANEL, beta);
}


FN256 void gemm256(const int WT, int M, int N, int K, const float *x, int ldx, const void *Wp, float beta,
                 float *y, int ldy)
{
    GEMM_MR4(tile256, NP256_ONE_ROW);
}

static __attribute__((target(RECUR_TARGET_AVX2))) void
gemm_avx2(int M, int N, int K, const float *x, int ldx, const void *Wp, recur_wtype wt, float beta, float *y, int ldy)
{
    switch (wt) {
    case RECUR_WT_F16: gemm256(RECUR_WT_F16, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    case RECUR_WT_BF16: gemm256(RECUR_WT_BF16, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    default: gemm256(RECUR_WT_F32, M, N, K, x, ldx, Wp, beta, y, ldy); break;
    }
}
#endif /* RECUR_X86 */

void recur__packed_gemm_t(int M, int N, int K, const float *x, int ldx, const void *Wp,
                          recur_wtype wt, float beta, float *y, int ldy)
{
    if (recur__wtype_quant(wt)) { recur__quant_gemm(M, N, K, x, ldx, Wp, wt, beta, y, ldy); return; }
    switch (recur__isa()) {
#ifdef RECUR_X86
    case RECUR_ISA_AVX512: gemm_avx512(M, N, K, x, ldx, Wp, wt, beta, y, ldy); break;
    case RECUR_ISA_AVX2: gemm_avx2(M, N, K, x, ldx, Wp, wt, beta, y, ldy); break;
#endif
    default: gemm_portable(M, N, K, x, ldx, Wp, wt, beta, y, ldy); break;
    }
}

void recur__packed_gemm(int M, int N, int K, const float *x, int ldx, const float *Wp, float beta,
                        float *y, int ldy)
{
    recur__packed_gemm_t(M, N, K, x, ldx, Wp, RECUR_WT_F32, beta, y, ldy);
}
