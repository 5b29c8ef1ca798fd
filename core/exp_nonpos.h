/*
 * exp_nonpos.h — e^x for x <= 0, the only exponent librecur's kernels take (gates, decays and
 * max-subtracted softmax scores are all non-positive). Private to core/ (recur__ prefix).
 *
 * Written so that loops over it vectorise (libm's expf does not): Cephes' expf, x = n ln2 + r with
 * |r| <= ln2/2, e^r by a polynomial, 2^n through the exponent bits. Max rel. error 8.3e-8 on
 * [-87, 0] (checked against exp() on every float there, 2026-11-29). Outside [-87, 0]:
 *   x < -87 (e^x < 1.7e-38, including -inf)  ->  0
 *   x > 0 (including +inf)                   ->  1 (the argument is clamped to 0; callers that
 *                                                may pass one select the result away, as the
 *                                                elu feature map does)
 *   NaN                                      ->  NaN (passed through)
 * Every clamp and select is done on the bits (for negative floats a larger unsigned integer is a
 * larger magnitude; +0 is 0) because a float compare-and-select blocks vectorisation under GCC's
 * default -ftrapping-math; nothing branches.
 */
#ifndef RECUR_EXP_NONPOS_H
#define RECUR_EXP_NONPOS_H

#include <stdint.h>
#include <string.h>

/* e^r for |r| <= ln2/2: Cephes' polynomial, the core of recur__exp_nonpos */
static inline float recur__exp_reduced(float r)
{
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}

static inline float recur__exp_nonpos(float x)
{
    const uint32_t lim = 0xc2ae0000u; /* the bits of -87.0f */
    uint32_t xi;
    memcpy(&xi, &x, sizeof xi);
    const uint32_t neg = 0u - (xi >> 31);                     /* all ones when the sign is set */
    const uint32_t nan = 0u - ((xi & 0x7fffffffu) > 0x7f800000u);
    const uint32_t under = 0u - (xi > lim);                    /* x < -87, -inf or a -NaN */
    uint32_t ci = xi > lim ? lim : xi;
    ci &= neg; /* x >= +0 (or a +NaN) -> +0 */
    memcpy(&x, &ci, sizeof x);
    const float n = (float)(int32_t)(x * 1.44269504088896341f - 0.5f); /* round(x / ln2) */
    float r = x - n * 0.693359375f; /* Cody-Waite: ln2 = 0.693359375 - 2.12194440e-4 */
    r = r + n * 2.12194440e-4f;
    const float p = recur__exp_reduced(r);
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 0] */
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    const float e = p * two_n;
    uint32_t ei;
    memcpy(&ei, &e, sizeof ei);
    ei = (ei & ~(under | nan)) | (xi & nan); /* x < -87 -> +0; NaN -> x */
    float out;
    memcpy(&out, &ei, sizeof out);
    return out;
}

/* Bits of -0.34375f: for x in [-0.34375, 0] (bits <= this, +0 included; a finite x <= 0 only)
 * recur__exp_nonpos takes n = 0 (x / ln2 - 0.5 > -1), so there it equals recur__exp_reduced(x)
 * to the bit: a loop whose arguments all lie there may skip the range reduction. */
#define RECUR_EXP_REDUCED_BITS 0xbeb00000u

/* silu(x) = x sigma(x) with sigma(x) = (x >= 0 ? 1 : e) / (1 + e), e = exp(-|x|) <= 1: only a
 * non-positive argument is exponentiated (recur__exp_nonpos, rel. error < 1e-7) and the select is
 * arithmetic, so loops over it vectorise (libm's expf does not). */
static inline float recur__silu(float x)
{
    uint32_t xi;
    memcpy(&xi, &x, sizeof xi);
    float neg = (float)(xi >> 31); /* 1 for x < 0 */
    uint32_t ai = xi & 0x7fffffffu;
    float ax;
    memcpy(&ax, &ai, sizeof ax);
    float e = recur__exp_nonpos(-ax);
    return x * (1.0f + neg * (e - 1.0f)) / (1.0f + e);
}

#endif /* RECUR_EXP_NONPOS_H */
