/* gemm_store.h — writing one tile row's 16 outputs of a panel (packed_gemm.c, quant_gemm.c):
 *   y[j] = (beta == 0) ? acc[j] : fmaf(beta, y[j], acc[j])   j < cols (<= 16; y never read at beta 0)
 * Included by the x86 kernel sections only (immintrin.h and isa.h before it). */
#ifndef RECUR_GEMM_STORE_H
#define RECUR_GEMM_STORE_H

/* AVX-512: the 16 outputs in one zmm, a masked load and store */
static inline __attribute__((always_inline, target(RECUR_TARGET_AVX512))) void
recur__store_panel512(float *y, __m512 acc, int cols, float beta)
{
    const __mmask16 mk = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);
    if (beta != 0.0f) acc = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mk, y), acc);
    _mm512_mask_storeu_ps(y, mk, acc);
}

/* AVX2: the 16 outputs in two ymm (lo: 0..7, hi: 8..15) */
static inline __attribute__((always_inline, target(RECUR_TARGET_AVX2))) void
recur__store_panel256(float *y, __m256 lo, __m256 hi, int cols, float beta)
{
    float a[16];
    _mm256_storeu_ps(a, lo);
    _mm256_storeu_ps(a + 8, hi);
    if (cols > 16) cols = 16;
    for (int j = 0; j < cols; j++) y[j] = beta == 0.0f ? a[j] : __builtin_fmaf(beta, y[j], a[j]);
}

#endif /* RECUR_GEMM_STORE_H */
