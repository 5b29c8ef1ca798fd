/* test_safetensors_half.c — the F16 / BF16 widening of safetensors.c, for every bit pattern,
 * against the compiler's own _Float16 conversion and the bf16 definition (upper half of fp32).
 * Includes the source to reach its static helpers (h2o style). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "../../core/safetensors.c"

Test(safetensors_half, f16_every_pattern)
{
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        _Float16 x;
        memcpy(&x, &h, 2);
        float want = (float)x, got = half_to_float(h);
        if (isnan(want)) cr_assert(isnan(got), "0x%04x", b);
        else cr_assert(memcmp(&want, &got, 4) == 0, "0x%04x: %g vs %g", b, (double)got, (double)want);
    }
}

Test(safetensors_half, bf16_every_pattern)
{
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t bits = b << 16;
        float want, got = bf16_to_float((uint16_t)b);
        memcpy(&want, &bits, 4);
        cr_assert(memcmp(&want, &got, 4) == 0, "0x%04x", b);
    }
}
