/*
 * exp_nonpos.h — e^x for x <= 0, the only exponent librecur's kernels take (gates, decays and
 * max-subtracted softmax scores are all non-positive). Private to core/ (recur__ prefix).
 *
 * Written so that loops over it vectorise (libm's expf does not): Cephes' expf, x = n ln2 + r with
 * |r| <= ln2/2, e^r by a polynomial, 2^n through the exponent bits. Max rel. error 8.3e-8 on
 * [-87, 0] (checked against exp() on every float there, 2026-11-29). Below -87 (e^x < 2e-38,
 * including -inf) the argument is clamped to -87, so the result is 1.6e-38 instead of a denormal
 * or 0: nothing it multiplies notices. The clamp is done on the bits (for negative floats a larger
 * unsigned integer is a larger magnitude; +0 is 0) because a float compare-and-select blocks
 * vectorisation under GCC's default -ftrapping-math. x > 0 is outside the contract.
 */
#ifndef RECUR_EXP_NONPOS_H
#define RECUR_EXP_NONPOS_H

#include <stdint.h>
#include <string.h>

static inline float recur__exp_nonpos(float x)
{
    const uint32_t lim = 0xc2ae0000u; /* the bits of -87.0f */
    uint32_t xi;
    memcpy(&xi, &x, sizeof xi);
    xi = xi > lim ? lim : xi;
    memcpy(&x, &xi, sizeof x);
    const float n = (float)(int32_t)(x * 1.44269504088896341f - 0.5f); /* round(x / ln2) */
    float r = x - n * 0.693359375f; /* Cody-Waite: ln2 = 0.693359375 - 2.12194440e-4 */
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 0] */
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

#endif /* RECUR_EXP_NONPOS_H */
