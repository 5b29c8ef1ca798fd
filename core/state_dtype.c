/* state_dtype.c — fp32 <-> the stored halves of a session state (state_dtype.h: the rule).
 *
 * bf16 narrow (ties to even on the bits): h = (b + 0x7fff + ((b >> 16) & 1)) >> 16, NaN kept as
 * (b >> 16) | 0x40 (the carry would otherwise turn a NaN with a full payload into a zero).
 * f16 narrow: the normal range rounds the same way on the exponent-rebased bits (a carry into
 * the exponent is the right answer, up to +-inf past 65504); below 2^-14 the 24-bit significand
 * is shifted to units of 2^-24 with ties to even; F16C's vcvtps2ph gives exactly these bits. */
#include <string.h>
#include "state_dtype.h"
#if defined(__x86_64__) || defined(__i386__)
#define RECUR_X86 1
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------- portable */

static inline uint16_t bf16_narrow(uint32_t b)
{
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

static inline uint16_t f16_narrow(uint32_t b)
{
    uint32_t sign = (b >> 16) & 0x8000u, u = b & 0x7fffffffu, o;
    if (u > 0x7f800000u) o = 0x7e00u | ((u >> 13) & 0x3ffu);               /* NaN, quiet */
    else if (u >= 0x47800000u) o = 0x7c00u;                                /* >= 2^16, inf */
    else if (u >= 0x38800000u) {                                           /* >= 2^-14: normal */
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u);
        o = u >> 13;                                                       /* may carry to inf */
    } else if (u < 0x33000000u) o = 0;                                     /* < 2^-25: zero */
    else {                                                                 /* subnormal half */
        uint32_t e = u >> 23, mant = (u & 0x7fffffu) | 0x800000u, sh = 126u - e; /* 14 .. 24 */
        uint32_t q = mant >> sh, rem = mant & ((1u << sh) - 1u), half = 1u << (sh - 1u);
        o = q + (rem > half || (rem == half && (q & 1u)));
    }
    return (uint16_t)(sign | o);
}

static inline uint32_t f16_widen(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 31) return sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0); /* inf, quiet NaN */
    if (exp) return sign | ((exp + 127u - 15u) << 23) | (man << 13);
    if (!man) return sign;
    uint32_t e = 127u - 15u + 1u; /* subnormal: renormalise */
    while (!(man & 0x400u)) { man <<= 1; e--; }
    return sign | (e << 23) | ((man & 0x3ffu) << 13);
}

static void narrow_portable(uint16_t *dst, const float *src, size_t i, size_t n, recur_state_dtype t)
{
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, &src[i], 4);
        dst[i] = t == RECUR_STATE_BF16 ? bf16_narrow(b) : f16_narrow(b);
    }
}

static void widen_portable(float *dst, const uint16_t *src, size_t i, size_t n, recur_state_dtype t)
{
    for (; i < n; i++) {
        uint32_t b = t == RECUR_STATE_BF16 ? (uint32_t)src[i] << 16 : f16_widen(src[i]);
        memcpy(&dst[i], &b, 4);
    }
}

#ifdef RECUR_X86
/* ---------------------------------------------------------------- AVX-512 */

__attribute__((target(RECUR_TARGET_AVX512))) static void narrow_avx512(uint16_t *dst, const float *src, size_t n,
                                                                      recur_state_dtype t)
{
    size_t i = 0;
    if (t == RECUR_STATE_BF16) {
        const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                      absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                      qbit = _mm512_set1_epi32(0x40);
        for (; i + 16 <= n; i += 16) {
            __m512i b = _mm512_loadu_si512(src + i);
            __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, absm), inf);
            __m512i hi = _mm512_srli_epi32(b, 16);
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, bias), _mm512_and_si512(hi, one)), 16);
            r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, qbit));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
        }
    } else {
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(dst + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    narrow_portable(dst, src, i, n, t);
}

__attribute__((target(RECUR_TARGET_AVX512))) static void widen_avx512(float *dst, const uint16_t *src, size_t n,
                                                                     recur_state_dtype t)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        if (t == RECUR_STATE_BF16)
            _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        else
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    }
    widen_portable(dst, src, i, n, t);
}

/* ---------------------------------------------------------------- AVX2 */

__attribute__((target(RECUR_TARGET_AVX2))) static __m256i bf16_narrow8(__m256i b)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, absm), inf); /* both sides non-negative */
    __m256i hi = _mm256_srli_epi32(b, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)),
                                                   _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

__attribute__((target(RECUR_TARGET_AVX2))) static void narrow_avx2(uint16_t *dst, const float *src, size_t n,
                                                                  recur_state_dtype t)
{
    size_t i = 0;
    if (t == RECUR_STATE_BF16) {
        for (; i + 16 <= n; i += 16) {
            __m256i a = bf16_narrow8(_mm256_loadu_si256((const __m256i *)(src + i)));
            __m256i b = bf16_narrow8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
            /* values <= 0xffff: the unsigned-saturating pack keeps them; it interleaves lanes */
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8));
        }
    } else {
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
    narrow_portable(dst, src, i, n, t);
}

__attribute__((target(RECUR_TARGET_AVX2))) static void widen_avx2(float *dst, const uint16_t *src, size_t n,
                                                                 recur_state_dtype t)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        if (t == RECUR_STATE_BF16)
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        else
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    widen_portable(dst, src, i, n, t);
}

#endif /* RECUR_X86 */

/* ---------------------------------------------------------------- dispatch */

void recur__state_narrow_isa(uint16_t *dst, const float *src, size_t n, recur_state_dtype t, recur_isa isa)
{
#ifdef RECUR_X86
    if (isa == RECUR_ISA_AVX512) { narrow_avx512(dst, src, n, t); return; }
    if (isa == RECUR_ISA_AVX2) { narrow_avx2(dst, src, n, t); return; }
#endif
    (void)isa;
    narrow_portable(dst, src, 0, n, t);
}

void recur__state_widen_isa(float *dst, const uint16_t *src, size_t n, recur_state_dtype t, recur_isa isa)
{
#ifdef RECUR_X86
    if (isa == RECUR_ISA_AVX512) { widen_avx512(dst, src, n, t); return; }
    if (isa == RECUR_ISA_AVX2) { widen_avx2(dst, src, n, t); return; }
#endif
    (void)isa;
    widen_portable(dst, src, 0, n, t);
}

void recur__state_narrow(uint16_t *dst, const float *src, size_t n, recur_state_dtype t)
{
    recur__state_narrow_isa(dst, src, n, t, recur__isa());
}

void recur__state_widen(float *dst, const uint16_t *src, size_t n, recur_state_dtype t)
{
    recur__state_widen_isa(dst, src, n, t, recur__isa());
}
