/* test_state_dtype.c — the state dtype conversions of core/state_dtype.h.
 *
 * Every ISA path this CPU has (AVX-512, AVX2, portable) gives the same bits: widening every one
 * of the 65536 halves, narrowing 2^32 / 509 spread fp32 bit patterns, every tie (the midpoint of
 * two neighbouring halves) and its neighbours, the specials, and every length 0..67 (the vector
 * tails). The portable result is checked against the rule itself: the nearest half, ties to the
 * even one, +-inf past the largest half by half an ulp or more, NaN kept (sign, quiet); a half
 * widened and narrowed again is itself. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "state_dtype.h"

static const recur_state_dtype TYPES[] = {RECUR_STATE_BF16, RECUR_STATE_F16};

static int n_paths(recur_isa *paths)
{
    int n = 0;
    paths[n++] = RECUR_ISA_PORTABLE;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) paths[n++] = RECUR_ISA_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        paths[n++] = RECUR_ISA_AVX512;
    return n;
}

static float bits_f(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t f_bits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

static float widen1(uint16_t h, recur_state_dtype t)
{
    float f;
    recur__state_widen_isa(&f, &h, 1, t, RECUR_ISA_PORTABLE);
    return f;
}

/* narrow x on every path: all equal; returns the portable one */
static void narrow_all(const float *x, uint16_t *out, size_t n, recur_state_dtype t)
{
    recur_isa paths[3];
    int np = n_paths(paths);
    uint16_t *o = malloc(n * 2 + 2);
    recur__state_narrow_isa(out, x, n, t, RECUR_ISA_PORTABLE);
    for (int p = 1; p < np; p++) {
        recur__state_narrow_isa(o, x, n, t, paths[p]);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(o[i], out[i], "%s narrow path %d of %08x: %04x vs portable %04x",
                         t == RECUR_STATE_BF16 ? "bf16" : "f16", (int)paths[p], f_bits(x[i]), o[i], out[i]);
    }
    free(o);
}

/* the rule, from the definition: nearest, ties to even, overflow to inf, NaN stays NaN */
static void check_rule(float x, uint16_t h, recur_state_dtype t)
{
    const uint16_t inf = t == RECUR_STATE_BF16 ? 0x7f80 : 0x7c00, sign = (f_bits(x) >> 31) ? 0x8000 : 0;
    if (isnan(x)) {
        cr_assert(isnan(widen1(h, t)) && (h & 0x8000) == sign, "NaN %08x -> %04x", f_bits(x), h);
        return;
    }
    float w = widen1(h, t);
    cr_assert((h & 0x8000) == sign || w == 0.0f, "sign of %08x -> %04x", f_bits(x), h);
    double ax = fabs((double)x), aw = fabs((double)w);
    if ((h & 0x7fff) == inf) { /* overflow: x is at least the largest half + half its ulp */
        float maxh = widen1((uint16_t)(inf - 1), t), below = widen1((uint16_t)(inf - 2), t);
        cr_assert(ax >= (double)maxh + ((double)maxh - below) / 2, "overflow of %08x", f_bits(x));
        return;
    }
    /* neighbours of |h| in magnitude */
    uint16_t m = h & 0x7fff;
    double up = fabs((double)widen1((uint16_t)(m + 1), t)), dn = m ? fabs((double)widen1((uint16_t)(m - 1), t)) : 0;
    if ((uint16_t)(m + 1) == inf) up = aw + (aw - dn); /* the rounding boundary above the largest half */
    double e = fabs(ax - aw);
    cr_assert(e <= fabs(ax - up) && e <= fabs(ax - dn) + (m == 0 ? 1e300 : 0),
              "%08x -> %04x is not nearest", f_bits(x), h);
    if (e == fabs(ax - up) || (m && e == fabs(ax - dn)))
        cr_assert((m & 1) == 0, "tie %08x -> %04x is not even", f_bits(x), h);
}

Test(state_dtype, widen_every_half_on_every_path_and_round_trip)
{
    recur_isa paths[3];
    int np = n_paths(paths);
    uint16_t *h = malloc(65536 * 2), *back = malloc(65536 * 2);
    float *w = malloc(65536 * 4), *w2 = malloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (size_t k = 0; k < 2; k++) {
        recur_state_dtype t = TYPES[k];
        recur__state_widen_isa(w, h, 65536, t, RECUR_ISA_PORTABLE);
        for (int p = 1; p < np; p++) {
            recur__state_widen_isa(w2, h, 65536, t, paths[p]);
            cr_assert_eq(memcmp(w, w2, 65536 * 4), 0, "widen path %d differs", (int)paths[p]);
        }
        narrow_all(w, back, 65536, t);
        for (uint32_t i = 0; i < 65536; i++) {
            if (isnan(w[i])) cr_assert(isnan(widen1(back[i], t)) && (back[i] & 0x8000) == (i & 0x8000));
            else cr_assert_eq(back[i], i, "round trip of %04x gave %04x", i, back[i]);
        }
    }
    free(h); free(back); free(w); free(w2);
}

Test(state_dtype, narrow_spread_ties_specials_on_every_path_by_the_rule)
{
    const size_t n_spread = (size_t)(((uint64_t)1 << 32) / 509) + 1;
    float *x = malloc((n_spread + 65536 * 6 + 64) * 4);
    uint16_t *out = malloc((n_spread + 65536 * 6 + 64) * 2);
    for (size_t k = 0; k < 2; k++) {
        recur_state_dtype t = TYPES[k];
        size_t n = 0;
        for (uint64_t b = 0; b < ((uint64_t)1 << 32); b += 509) x[n++] = bits_f((uint32_t)b);
        for (uint32_t i = 0; i < 65536; i++) { /* ties between neighbouring finite halves, +-1 ulp */
            uint16_t a = (uint16_t)i, b = (uint16_t)(i + 1);
            float fa = widen1(a, t), fb = widen1(b, t);
            if (!isfinite(fa) || !isfinite(fb) || (a & 0x8000) != (b & 0x8000)) continue;
            float mid = (float)(((double)fa + fb) / 2);
            x[n++] = mid;
            x[n++] = nextafterf(mid, INFINITY);
            x[n++] = nextafterf(mid, -INFINITY);
        }
        const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, bits_f(0x7fffffff), bits_f(0xffffffff),
                            bits_f(0x7f800001), bits_f(0x7fc00001), FLT_MAX, -FLT_MAX, FLT_MIN, bits_f(1),
                            bits_f(0x80000001), 65504.0f, 65519.0f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f,
                            0x1.8p-25f, 0x1p-26f, 0x1p-14f, 0x1.ffcp-15f, 0x1p40f, 3.0e38f};
        for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) x[n++] = sp[i];
        narrow_all(x, out, n, t);
        for (size_t i = 0; i < n; i++) check_rule(x[i], out[i], t);
    }
    free(x); free(out);
}

Test(state_dtype, every_length_matches_on_every_path)
{
    recur_isa paths[3];
    int np = n_paths(paths);
    float x[67], w[67], w2[67];
    uint16_t h[68], h2[68];
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 67; i++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; x[i] = bits_f((uint32_t)(r >> 16)); }
    for (size_t k = 0; k < 2; k++)
        for (size_t n = 0; n <= 67; n++)
            for (int p = 0; p < np; p++) {
                h[n] = h2[n] = 0xabcd; /* past the end: untouched */
                recur__state_narrow_isa(h, x, n, TYPES[k], RECUR_ISA_PORTABLE);
                recur__state_narrow_isa(h2, x, n, TYPES[k], paths[p]);
                cr_assert_eq(memcmp(h, h2, (n + 1) * 2), 0, "narrow n=%zu path %d", n, (int)paths[p]);
                cr_assert_eq(h2[n], 0xabcd);
                recur__state_widen_isa(w, h, n, TYPES[k], RECUR_ISA_PORTABLE);
                recur__state_widen_isa(w2, h, n, TYPES[k], paths[p]);
                cr_assert_eq(memcmp(w, w2, n * 4), 0, "widen n=%zu path %d", n, (int)paths[p]);
            }
}
