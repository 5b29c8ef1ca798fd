/* quant.c — Q8_0 / Q4_0 blocks: quantizing a block, packing a matrix into quantized panels, and
 * the scalar reference of the quantized GEMM (formulas: quant.h). The rows of x are quantized by
 * quant_gemm.c (recur__quantize_rows_q8: this file's block formula, vectorized per path). */
#include <math.h>
#include <string.h>
#include "isa.h"
#include "quant.h"

/* roundf (ties away from zero) without a libm call (v + copysign(0.5, v) is exact in double, the
 * conversion truncates), clamped to [-127, 127] and NaN -> 0 (only an underflowed scale, whose
 * inverse is inf, gets there; llama.cpp's conversion is undefined then) */
static inline int round_q8(float v)
{
    if (!(v == v)) return 0;
    if (v >= 127.0f) return 127;
    if (v <= -127.0f) return -127;
    return (int)((double)v + (v < 0.0f ? -0.5 : 0.5));
}

uint16_t recur__quantize_q8_0(const float *x, int n, int8_t q[RECUR_QBLOCK])
{
    /* branch-free loops (they vectorize: this also quantizes every row of x per GEMM call) */
    float v[RECUR_QBLOCK] = {0}, amax = 0.0f;
    int bad = 0;
    memcpy(v, x, sizeof(float) * (size_t)n);
    for (int i = 0; i < RECUR_QBLOCK; i++) {
        const float a = fabsf(v[i]);
        amax = a > amax ? a : amax;
        bad |= v[i] != v[i];
    }
    memset(q, 0, RECUR_QBLOCK);
    if (bad || amax > 3.4028234e38f) return 0x7e00; /* NaN or inf: NaN scale, codes 0 */
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    if (id > 3.4028234e38f) { /* d underflowed (amax < 2^-121): the slow, clamped rounding */
        for (int i = 0; i < n; i++) q[i] = (int8_t)round_q8(v[i] * id);
    } else {
        for (int i = 0; i < RECUR_QBLOCK; i++) { /* |v id| <= 127.5: roundf as trunc + the exact fraction */
            const float t = v[i] * id;
            const int r = (int)t;
            const float f = t - (float)r;
            q[i] = (int8_t)(r + (f >= 0.5f) - (f <= -0.5f));
        }
    }
    return recur__float_to_half(d, RECUR_WT_F16);
}

uint16_t recur__quantize_q4_0(const float *x, int n, uint8_t q[RECUR_QBLOCK])
{
    float amax = 0.0f, max = 0.0f;
    int finite = 1;
    for (int i = 0; i < n; i++) {
        finite &= isfinite(x[i]) != 0;
        if (amax < fabsf(x[i])) { amax = fabsf(x[i]); max = x[i]; }
    }
    memset(q, 8, RECUR_QBLOCK); /* code 8: weight 0 (padding) */
    if (!finite) return 0x7e00;
    const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) {
        const float v = x[i] * id + 8.5f; /* in [0, 16.5]: (int8) truncates; NaN (see round_q8) -> 0 */
        q[i] = (uint8_t)(!(v > 0.0f) ? 0 : v >= 15.0f ? 15 : (int)v);
    }
    return recur__float_to_half(d, RECUR_WT_F16);
}

/* weight (n, k) of a recur__pack / recur__pack_half panel layout, fp32 */
static float packed_at(const void *Wp, recur_wtype wt, int K, int n, int k)
{
    size_t i = ((size_t)(n / RECUR_PANEL) * K + (size_t)k) * RECUR_PANEL + (size_t)(n % RECUR_PANEL);
    return wt == RECUR_WT_F32 ? ((const float *)Wp)[i] : recur__half_to_float(((const uint16_t *)Wp)[i], wt);
}

void recur__pack_quant(void *Wq, recur_wtype wt, const void *Wp, recur_wtype src_wt, int N, int K)
{
    const int np = (N + RECUR_PANEL - 1) / RECUR_PANEL, nb = (K + RECUR_QBLOCK - 1) / RECUR_QBLOCK;
    const size_t bb = recur__qblock_panel_bytes(wt), codes = bb - 2 * RECUR_PANEL;
    unsigned char *out = Wq;
    memset(Wq, 0, (size_t)np * nb * bb);
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            unsigned char *blk = out + ((size_t)p * nb + b) * bb;
            const int k0 = b * RECUR_QBLOCK, kn = K - k0 < RECUR_QBLOCK ? K - k0 : RECUR_QBLOCK;
            for (int j = 0; j < RECUR_PANEL; j++) {
                const int n = p * RECUR_PANEL + j;
                float v[RECUR_QBLOCK] = {0};
                int8_t q8[RECUR_QBLOCK];
                uint8_t q4[RECUR_QBLOCK];
                uint16_t d = 0;
                if (n < N) {
                    for (int i = 0; i < kn; i++) v[i] = packed_at(Wp, src_wt, K, n, k0 + i);
                    d = wt == RECUR_WT_Q8_0 ? recur__quantize_q8_0(v, kn, q8) : recur__quantize_q4_0(v, kn, q4);
                } else {
                    memset(q8, 0, sizeof q8);
                    memset(q4, 8, sizeof q4);
                }
                memcpy(blk + codes + 2 * j, &d, 2);
                for (int g = 0; g < (wt == RECUR_WT_Q8_0 ? 8 : 4); g++)
                    for (int t = 0; t < 4; t++) {
                        unsigned char *c = blk + ((size_t)g * RECUR_PANEL + j) * 4 + t;
                        if (wt == RECUR_WT_Q8_0) *c = (unsigned char)(q8[4 * g + t] + 128);
                        else *c = (unsigned char)(q4[4 * g + t] | q4[4 * g + 16 + t] << 4);
                    }
            }
        }
}

/* code (signed: Q8_0 q, Q4_0 q - 8) and fp16 scale bits of weight (n, k) */
static int quant_code(const void *Wq, recur_wtype wt, int K, int n, int k, uint16_t *scale)
{
    const int nb = (K + RECUR_QBLOCK - 1) / RECUR_QBLOCK, b = k / RECUR_QBLOCK, i = k % RECUR_QBLOCK, j = n % RECUR_PANEL;
    const size_t bb = recur__qblock_panel_bytes(wt);
    const unsigned char *blk = (const unsigned char *)Wq + ((size_t)(n / RECUR_PANEL) * nb + b) * bb;
    memcpy(scale, blk + bb - 2 * RECUR_PANEL + 2 * j, 2);
    if (wt == RECUR_WT_Q8_0) return (int)blk[((size_t)(i / 4) * RECUR_PANEL + j) * 4 + i % 4] - 128;
    const int hi = i >= 16, ii = i - 16 * hi;
    const unsigned char c = blk[((size_t)(ii / 4) * RECUR_PANEL + j) * 4 + ii % 4];
    return (hi ? c >> 4 : c & 15) - 8;
}

float recur__quant_weight(const void *Wq, recur_wtype wt, int N, int K, int n, int k)
{
    (void)N;
    uint16_t s;
    int c = quant_code(Wq, wt, K, n, k, &s);
    return (float)c * recur__half_to_float(s, RECUR_WT_F16);
}

/* ---------------------------------------------------------------- scalar reference */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

void recur__quant_gemm_ref(int M, int N, int K, const float *x, int ldx, const void *Wq, recur_wtype wt,
                           float beta, float *y, int ldy)
{
    const int nb = (K + RECUR_QBLOCK - 1) / RECUR_QBLOCK, fused = recur__isa() != RECUR_ISA_PORTABLE;
    for (int m = 0; m < M; m++) {
        int8_t xq[RECUR_QBLOCK];
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const int k0 = b * RECUR_QBLOCK, kn = K - k0 < RECUR_QBLOCK ? K - k0 : RECUR_QBLOCK;
                const float dx = recur__half_to_float(recur__quantize_q8_0(x + (size_t)m * ldx + k0, kn, xq), RECUR_WT_F16);
                int32_t isum = 0;
                uint16_t s = 0;
                for (int i = 0; i < kn; i++) isum += quant_code(Wq, wt, K, n, k0 + i, &s) * xq[i];
                if (!kn) continue;
                const float dd = recur__half_to_float(s, RECUR_WT_F16) * dx;
                acc = fused ? fmaf(dd, (float)isum, acc) : acc + dd * (float)isum;
            }
            float *yo = y + (size_t)m * ldy + n;
            *yo = beta == 0.0f ? acc : fused ? fmaf(beta, *yo, acc) : beta * *yo + acc;
        }
    }
}
#pragma GCC pop_options
