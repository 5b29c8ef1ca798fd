/* quant_gemm.c — y = beta*y + x W^T on Q8_0 / Q4_0 panels (formula and layout: quant.h).
 *
 * The rows of x are quantized once per call (Q8_0, into a stack buffer, or a heap one for a big
 * call, or in row chunks when that allocation fails: a row's result is the same either way).
 * Tiles as in packed_gemm.c: MR rows x NP panels of fp32 accumulators, blocks of 32 k in order;
 * inside a block each (row, output) gets its exact integer dot product, then one fused
 * multiply-add acc += (dw*dx) * isum. Codes are unsigned (Q8_0: q + 128, Q4_0: q), so
 *   isum = sum_k code*xq - off * sum_k xq,   off = 128 (Q8_0) or 8 (Q4_0)
 * and the accumulator of a block starts at -off * xsum (recur__quantize_rows_q8 gives xsum).
 *
 * x's rows are quantized by recur__quantize_q8_0's formula on every path: the AVX-512 and AVX2
 * versions below do it lane by lane (the same fp32 operations, unfused: bit-identical codes and
 * scales; a block with a non-finite value or an underflowing scale goes to the scalar function).
 * At batch 1 this runs once per GEMV and the weight stream waits for it: 0.84 us per 512 values
 * scalar, 0.26 us on AVX-512 (about 2 % of a Q8_0 decode step of the d512 model saved).
 *
 * Paths (isa.h): AVX-512 with VNNI (vpdpbusd: 4 code x activation products per lane), AVX-512
 * without it (each code byte widened to fp32 and multiplied-added into an fp32 block
 * accumulator: integer values below 2^24, so exact, the same isum), AVX2 (vpmaddubsw +
 * vpmaddwd: the same int32 isum, qtile256), and plain C. The x86 kernels
 * are left out of the fuzz build like packed_gemm.c's (RECUR_GEMM_PORTABLE_ONLY). */
#include <stdlib.h>
#include <string.h>
#include "isa.h"
#include "quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(RECUR_GEMM_PORTABLE_ONLY)
#define RECUR_X86 1
#include <immintrin.h>
#include "gemm_store.h"
#endif

#define INLINE static inline __attribute__((always_inline))
#define QB RECUR_QBLOCK
#define XSCRATCH 16384 /* bytes of quantized x on the stack */

/* The quantized rows of x a tile reads (row m: xq + m*nb*32, dx + m*nb, xsum + m*nb). */
typedef struct {
    const int8_t *xq;
    const float *dx;
    const int32_t *xsum;
    int nb;
} qrows;

static inline int code_offset(recur_wtype wt) { return wt == RECUR_WT_Q8_0 ? 128 : 8; }

/* ---------------------------------------------------------------- portable: plain C, unfused */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

/* Row m of xr against one panel (wp: its first block); writes min(n_left, 16) outputs. */
static void qrow_panel_c(recur_wtype wt, const qrows *xr, int m, const unsigned char *wp, float beta, float *y,
                         int n_left)
{
    const size_t bb = recur__qblock_panel_bytes(wt), codes = bb - 2 * RECUR_PANEL;
    const int off = code_offset(wt);
    float acc[RECUR_PANEL] = {0};
    for (int b = 0; b < xr->nb; b++) {
        const unsigned char *blk = wp + (size_t)b * bb;
        const int8_t *xq = xr->xq + ((size_t)m * xr->nb + b) * QB;
        int32_t isum[RECUR_PANEL];
        for (int j = 0; j < RECUR_PANEL; j++) isum[j] = -off * xr->xsum[(size_t)m * xr->nb + b];
        for (int g = 0; g < (wt == RECUR_WT_Q8_0 ? 8 : 4); g++)
            for (int j = 0; j < RECUR_PANEL; j++)
                for (int t = 0; t < 4; t++) {
                    const int c = blk[(g * RECUR_PANEL + j) * 4 + t];
                    if (wt == RECUR_WT_Q8_0) isum[j] += c * xq[4 * g + t];
                    else isum[j] += (c & 15) * xq[4 * g + t] + (c >> 4) * xq[16 + 4 * g + t];
                }
        const float dx = xr->dx[(size_t)m * xr->nb + b];
        for (int j = 0; j < RECUR_PANEL; j++) {
            uint16_t s;
            memcpy(&s, blk + codes + 2 * j, 2);
            acc[j] = acc[j] + recur__half_to_float(s, RECUR_WT_F16) * dx * (float)isum[j];
        }
    }
    const int cols = n_left < RECUR_PANEL ? n_left : RECUR_PANEL;
    for (int j = 0; j < cols; j++) y[j] = beta == 0.0f ? acc[j] : beta * y[j] + acc[j];
}

static void qgemm_c(recur_wtype wt, int M, int N, const qrows *xr, const unsigned char *Wq, float beta, float *y,
                    int ldy)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    const size_t ps = (size_t)xr->nb * recur__qblock_panel_bytes(wt);
    for (int p = 0; p < np; p++)
        for (int m = 0; m < M; m++)
            qrow_panel_c(wt, xr, m, Wq + p * ps, beta, y + (size_t)m * ldy + p * RECUR_PANEL, N - p * RECUR_PANEL);
}
#pragma GCC pop_options

#ifdef RECUR_X86
/* ---------------------------------------------------------------- AVX-512 (quant_tile512.inc) */
#define QT_MR 4    /* rows per tile */
#define QT_NP1 4   /* panels per tile for M = 1 (AVX2; AVX-512: the tile for what QT_NP1_WIDE leaves) */
/* AVX-512, M = 1: panels per tile, each a stream of its own. With 4, Q8_0's kernel waited on
 * memory instead of overlapping it (the d512 decode's GEMV sequence streamed at 19.6 GB/s while a
 * loads-only pass over the same 4-panel pattern read 20.6 and over 8 panels 25.7 GB/s) */
#define QT_NP1_WIDE 8
/* AVX-512, M = 1: bytes ahead in each panel's stream that the kernel asks for, into L2
 * (prefetcht1, one line per panel per group of 64 code bytes). The d512 GEMV sequence, alternated
 * runs against F16 (load 2.1-3.6): Q8_0 8 panels 1.78x F16 without, 2.2-2.3x with 1088-1632 bytes
 * (544: 1.97x; prefetcht0 instead: 1.57-1.66x, the lines pushed out of L1 before their use);
 * Q4_0 3.3x with the former prefetcht0 of whole blocks 4 ahead, 4.9-5.2x with 576-2304 bytes */
#define QT_PF_BYTES 1152

#define QT_VNNI 1
#define QT_FN INLINE __attribute__((target(RECUR_TARGET_AVX512 ",avx512vnni")))
#define QT_ENTRY __attribute__((target(RECUR_TARGET_AVX512 ",avx512vnni")))
#define QT_NAME(x) x##_vnni
#include "quant_tile512.inc"
#undef QT_VNNI
#undef QT_FN
#undef QT_ENTRY
#undef QT_NAME

#define QT_VNNI 0
#define QT_FN INLINE __attribute__((target(RECUR_TARGET_AVX512)))
#define QT_ENTRY __attribute__((target(RECUR_TARGET_AVX512)))
#define QT_NAME(x) x##_fma
#include "quant_tile512.inc"
#undef QT_VNNI
#undef QT_FN
#undef QT_ENTRY
#undef QT_NAME

/* ---------------------------------------------------------------- AVX2: two ymm per panel row */
#define FN256 INLINE __attribute__((target(RECUR_TARGET_AVX2)))

/* Rows [0, MR) x panels [0, NP): integer block sums with vpmaddubsw (unsigned x signed bytes,
 * adjacent pairs summed to int16) then vpmaddwd by 1 (the two pairs of a lane to int32): the 4
 * products of a lane, as vpdpbusd. Q8_0: the code's signed value q = code ^ 0x80 goes in as |q|
 * (unsigned, at most 128) against x with q's sign (vpsignb), so a pair sum is at most
 * 2 * 128 * 127 < 2^15, exact; no -128 * xsum start. Q4_0: the nibbles (at most 15) against x
 * directly, low and high pair sums added in int16 (at most 4 * 15 * 127), the block starting at
 * -8 * xsum. isum is then the integer of quant.h, converted exactly, and the fp32 steps are the
 * other paths': the same bits. */
FN256 void qtile256(const int WT, const int MR, const int NP, const qrows *xr, int m0, const unsigned char *wp,
                    size_t ps, float beta, float *y, int ldy, int n_left)
{
    const size_t bb = recur__qblock_panel_bytes(WT), codes = bb - 2 * RECUR_PANEL;
    __m256 acc[QT_MR][2 * QT_NP1];
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int h = 0; h < 2 * NP; h++) acc[m][h] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1), lo4 = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x80);
    for (int b = 0; b < xr->nb; b++) {
        __m256i is[QT_MR][2 * QT_NP1];
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
            const __m256i init = _mm256_set1_epi32(WT == RECUR_WT_Q8_0 ? 0 : -8 * xr->xsum[(size_t)(m0 + m) * xr->nb + b]);
#pragma GCC unroll 8
            for (int h = 0; h < 2 * NP; h++) is[m][h] = init;
        }
        for (int g = 0; g < (WT == RECUR_WT_Q8_0 ? 8 : 4); g++) {
            __m256i wa[2 * QT_NP1], wb[2 * QT_NP1]; /* Q8_0: |q|, q; Q4_0: low, high nibbles */
#pragma GCC unroll 8
            for (int h = 0; h < 2 * NP; h++) {
                const __m256i w =
                    _mm256_loadu_si256((const __m256i *)(wp + (h / 2) * ps + (size_t)b * bb + (size_t)g * 64 + (h % 2) * 32));
                if (WT == RECUR_WT_Q8_0) {
                    wb[h] = _mm256_xor_si256(w, flip);
                    wa[h] = _mm256_abs_epi8(wb[h]);
                } else {
                    wa[h] = _mm256_and_si256(w, lo4);
                    wb[h] = _mm256_and_si256(_mm256_srli_epi16(w, 4), lo4);
                }
            }
#pragma GCC unroll 8
            for (int m = 0; m < MR; m++) {
                const int8_t *xq = xr->xq + ((size_t)(m0 + m) * xr->nb + b) * QB;
                int32_t xl, xh;
                memcpy(&xl, xq + 4 * g, 4);
                const __m256i bl = _mm256_set1_epi32(xl);
                if (WT == RECUR_WT_Q8_0) {
#pragma GCC unroll 8
                    for (int h = 0; h < 2 * NP; h++)
                        is[m][h] = _mm256_add_epi32(
                            is[m][h], _mm256_madd_epi16(_mm256_maddubs_epi16(wa[h], _mm256_sign_epi8(bl, wb[h])), ones));
                } else {
                    memcpy(&xh, xq + 16 + 4 * g, 4);
                    const __m256i bh = _mm256_set1_epi32(xh);
#pragma GCC unroll 8
                    for (int h = 0; h < 2 * NP; h++)
                        is[m][h] = _mm256_add_epi32(
                            is[m][h], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(wa[h], bl),
                                                                         _mm256_maddubs_epi16(wb[h], bh)), ones));
                }
            }
        }
#pragma GCC unroll 8
        for (int h = 0; h < 2 * NP; h++) {
            const __m256 sw = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(wp + (h / 2) * ps + (size_t)b * bb + codes + (h % 2) * 16)));
#pragma GCC unroll 8
            for (int m = 0; m < MR; m++) {
                const __m256 dd = _mm256_mul_ps(sw, _mm256_set1_ps(xr->dx[(size_t)(m0 + m) * xr->nb + b]));
                acc[m][h] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(is[m][h]), acc[m][h]);
            }
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
        for (int p = 0; p < NP && n_left - p * RECUR_PANEL > 0; p++)
            recur__store_panel256(y + (size_t)m * ldy + p * RECUR_PANEL, acc[m][2 * p], acc[m][2 * p + 1],
                                  n_left - p * RECUR_PANEL, beta);
}

FN256 void qgemm256(const int WT, int M, int N, const qrows *xr, const unsigned char *Wq, float beta, float *y,
                    int ldy)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL;
    const size_t ps = (size_t)xr->nb * recur__qblock_panel_bytes(WT);
    if (M == 1) {
        int p = 0;
        for (; p + QT_NP1 <= np; p += QT_NP1)
            qtile256(WT, 1, QT_NP1, xr, 0, Wq + p * ps, ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL);
        for (; p < np; p++)
            qtile256(WT, 1, 1, xr, 0, Wq + p * ps, ps, beta, y + p * RECUR_PANEL, ldy, N - p * RECUR_PANEL);
        return;
    }
    for (int p = 0; p < np; p++) {
        int m = 0;
        for (; m + QT_MR <= M; m += QT_MR)
            qtile256(WT, QT_MR, 1, xr, m, Wq + p * ps, ps, beta, y + (size_t)m * ldy + p * RECUR_PANEL, ldy,
                     N - p * RECUR_PANEL);
        for (; m < M; m++)
            qtile256(WT, 1, 1, xr, m, Wq + p * ps, ps, beta, y + (size_t)m * ldy + p * RECUR_PANEL, ldy,
                     N - p * RECUR_PANEL);
    }
}

static __attribute__((target(RECUR_TARGET_AVX2))) void
qgemm_avx2(recur_wtype wt, int M, int N, const qrows *xr, const unsigned char *Wq, float beta, float *y, int ldy)
{
    if (wt == RECUR_WT_Q8_0) qgemm256(RECUR_WT_Q8_0, M, N, xr, Wq, beta, y, ldy);
    else qgemm256(RECUR_WT_Q4_0, M, N, xr, Wq, beta, y, ldy);
}
#endif /* RECUR_X86 */

/* ---------------------------------------------------------------- Q8_0 of x's rows */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

/* One block of a vector path: v its 32 values (a short last block zero-padded) -> codes q, the
 * fp32 value of the fp16 scale, the codes' sum; 0 (nothing written) when the block must take the
 * scalar function instead (a NaN or inf in it, or 1/d overflowing: its clamped rounding). */
typedef int (*quant_block_fn)(const float *v, int8_t *q, float *dx, int32_t *xsum);

#ifdef RECUR_X86
/* d = amax / 127 and id = 1 / d as recur__quantize_q8_0; 0 when the block is the scalar's */
static inline int block_scale(float amax, int nan, float *d, float *id)
{
    if (nan || amax > 3.4028234e38f) return 0;
    *d = amax / 127.0f;
    *id = *d != 0.0f ? 1.0f / *d : 0.0f;
    return *id <= 3.4028234e38f;
}

/* fp32 value of fp16(d) (F16C, round to nearest even: recur__float_to_half's rounding) */
#define HALF_ROUND(d) _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(d), _MM_FROUND_TO_NEAREST_INT)))

static __attribute__((target(RECUR_TARGET_AVX512))) int quant_block512(const float *v, int8_t *q, float *dx,
                                                                     int32_t *xsum)
{
    const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
    const int nan = _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
    float d, id;
    if (!block_scale(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))), nan, &d, &id))
        return 0;
    const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i c[2];
    for (int h = 0; h < 2; h++) { /* roundf(t) = trunc(t) + (frac >= 0.5) - (frac <= -0.5) */
        const __m512 t = _mm512_mul_ps(h ? v1 : v0, vid);
        const __m512i tr = _mm512_cvttps_epi32(t);
        const __m512 f = _mm512_sub_ps(t, _mm512_cvtepi32_ps(tr));
        c[h] = _mm512_mask_add_epi32(tr, _mm512_cmp_ps_mask(f, half, _CMP_GE_OQ), tr, one);
        c[h] = _mm512_mask_sub_epi32(c[h], _mm512_cmp_ps_mask(f, mhalf, _CMP_LE_OQ), c[h], one);
        _mm_storeu_si128((__m128i *)(q + 16 * h), _mm512_cvtepi32_epi8(c[h]));
    }
    *xsum = _mm512_reduce_add_epi32(_mm512_add_epi32(c[0], c[1]));
    *dx = HALF_ROUND(d);
    return 1;
}

static __attribute__((target(RECUR_TARGET_AVX2))) int quant_block256(const float *v, int8_t *q, float *dx,
                                                                   int32_t *xsum)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 x[4], a = _mm256_setzero_ps(), un = _mm256_setzero_ps();
    for (int h = 0; h < 4; h++) {
        x[h] = _mm256_loadu_ps(v + 8 * h);
        a = _mm256_max_ps(a, _mm256_and_ps(x[h], absmask));
        un = _mm256_or_ps(un, _mm256_cmp_ps(x[h], x[h], _CMP_UNORD_Q));
    }
    __m128 a4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    a4 = _mm_max_ps(a4, _mm_movehl_ps(a4, a4));
    a4 = _mm_max_ss(a4, _mm_shuffle_ps(a4, a4, 1));
    float d, id;
    if (!block_scale(_mm_cvtss_f32(a4), _mm256_movemask_ps(un), &d, &id)) return 0;
    const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), mhalf = _mm256_set1_ps(-0.5f);
    __m256i c[4], s = _mm256_setzero_si256();
    for (int h = 0; h < 4; h++) { /* as quant_block512; a compare mask is -1: subtract it */
        const __m256 t = _mm256_mul_ps(x[h], vid);
        const __m256i tr = _mm256_cvttps_epi32(t);
        const __m256 f = _mm256_sub_ps(t, _mm256_cvtepi32_ps(tr));
        c[h] = _mm256_sub_epi32(tr, _mm256_castps_si256(_mm256_cmp_ps(f, half, _CMP_GE_OQ)));
        c[h] = _mm256_add_epi32(c[h], _mm256_castps_si256(_mm256_cmp_ps(f, mhalf, _CMP_LE_OQ)));
        s = _mm256_add_epi32(s, c[h]);
    }
    /* int32 -> int8 (|q| <= 127: the saturating packs are exact); packs interleave the 128-bit
     * lanes, the permute puts each group of 4 codes back in order */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    *xsum = _mm_cvtsi128_si32(s4);
    *dx = HALF_ROUND(d);
    return 1;
}
#endif /* RECUR_X86 */
#pragma GCC pop_options

void recur__quantize_rows_q8(int M, int K, const float *x, int ldx, int8_t *xq, float *dx, int32_t *xsum)
{
    quant_block_fn vec = NULL;
#ifdef RECUR_X86
    if (recur__isa() == RECUR_ISA_AVX512) vec = quant_block512;
    else if (recur__isa() == RECUR_ISA_AVX2) vec = quant_block256;
#endif
    const int nb = (K + QB - 1) / QB;
    float pad[QB];
    for (int m = 0; m < M; m++)
        for (int b = 0; b < nb; b++) {
            const int k0 = b * QB, kn = K - k0 < QB ? K - k0 : QB;
            const size_t r = (size_t)m * nb + b;
            const float *src = x + (size_t)m * ldx + k0, *v = src;
            if (vec && kn < QB) { /* the scalar function's zero padding */
                memset(pad, 0, sizeof pad);
                memcpy(pad, src, sizeof(float) * (size_t)kn);
                v = pad;
            }
            if (vec && vec(v, xq + r * QB, dx + r, xsum + r)) continue;
            const uint16_t d = recur__quantize_q8_0(src, kn, xq + r * QB);
            int32_t s = 0;
            for (int i = 0; i < QB; i++) s += xq[r * QB + i];
            dx[r] = recur__half_to_float(d, RECUR_WT_F16);
            xsum[r] = s;
        }
}

static void run(recur_wtype wt, int M, int N, const qrows *xr, const unsigned char *Wq, float beta, float *y, int ldy)
{
    switch (recur__isa()) {
#ifdef RECUR_X86
    case RECUR_ISA_AVX512:
        if (recur__isa_vnni()) qgemm512_vnni(wt, M, N, xr, Wq, beta, y, ldy);
        else qgemm512_fma(wt, M, N, xr, Wq, beta, y, ldy);
        break;
    case RECUR_ISA_AVX2: qgemm_avx2(wt, M, N, xr, Wq, beta, y, ldy); break;
#endif
    default: qgemm_c(wt, M, N, xr, Wq, beta, y, ldy); break;
    }
}

void recur__quant_gemm(int M, int N, int K, const float *x, int ldx, const void *Wq, recur_wtype wt, float beta,
                       float *y, int ldy)
{
    if (M <= 0) return;
    const int nb = (K + QB - 1) / QB;
    const size_t row_bytes = (size_t)nb * (QB + sizeof(float) + sizeof(int32_t));
    _Alignas(64) unsigned char stack[XSCRATCH];
    unsigned char *buf = stack, *heap = NULL;
    int chunk = (int)(XSCRATCH / row_bytes);
    if (chunk < M) {
        heap = malloc(row_bytes * (size_t)M);
        if (heap) { buf = heap; chunk = M; }
        else if (chunk < 1) abort(); /* K > 100k: out of memory (docs/DESIGN.md §7) */
    }
    for (int m0 = 0; m0 < M; m0 += chunk) {
        const int rows = M - m0 < chunk ? M - m0 : chunk;
        qrows xr;
        int8_t *xq = (int8_t *)buf;
        float *dx = (float *)(buf + (size_t)rows * nb * QB);
        int32_t *xs = (int32_t *)(dx + (size_t)rows * nb);
        recur__quantize_rows_q8(rows, K, x + (size_t)m0 * ldx, ldx, xq, dx, xs);
        xr.xq = xq;
        xr.dx = dx;
        xr.xsum = xs;
        xr.nb = nb;
        run(wt, rows, N, &xr, Wq, beta, y + (size_t)m0 * ldy, ldy);
    }
    free(heap);
}
