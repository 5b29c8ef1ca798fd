/* test_safetensors_half.c — the F16 / BF16 widening every loaded half tensor goes through
 * (recur__half_to_float, packed_gemm.h; model_load.c's recur__load_tensor), and recur__half_finite,
 * for every bit pattern, against the compiler's own _Float16 conversion and the bf16 definition
 * (upper half of fp32). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "packed_gemm.h"

Test(safetensors_half, f16_every_pattern)
{
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        _Float16 x;
        memcpy(&x, &h, 2);
        float want = (float)x, got = recur__half_to_float(h, RECUR_WT_F16);
        if (isnan(want)) cr_assert(isnan(got), "0x%04x", b);
        else cr_assert(memcmp(&want, &got, 4) == 0, "0x%04x: %g vs %g", b, (double)got, (double)want);
        cr_assert_eq(recur__half_finite(h, RECUR_WT_F16), isfinite(want) != 0, "F16 0x%04x", b);
    }
}

Test(safetensors_half, bf16_every_pattern)
{
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t bits = b << 16;
        float want, got = recur__half_to_float((uint16_t)b, RECUR_WT_BF16);
        memcpy(&want, &bits, 4);
        cr_assert(memcmp(&want, &got, 4) == 0, "0x%04x", b);
        cr_assert_eq(recur__half_finite((uint16_t)b, RECUR_WT_BF16), isfinite(want) != 0, "BF16 0x%04x", b);
    }
}
