/*
 * packed_gemm.h — y = beta*y + x W^T on a weight matrix packed once (model load), used for every
 * projection, MLP and LM-head GEMM of the model. Private to librecur.
 *
 * Why not sgemm: cblas_sgemm repacks all of W on every call (about a third of its time at
 * M = 64), and its result for a row depends on M (sgemv for one row, different blocking for
 * many), so a session's logits would depend on the batch it was stepped in. Here every output
 * element is computed by the same operations whatever M, the row's position or the tile shape:
 *
 *   acc = 0;  for k = 0 .. K-1 in order:  acc = fmaf(x[m][k], W[n][k], acc)
 *   y[m][n] = (beta == 0) ? acc : fmaf(beta, y[m][n], acc)
 *
 * (one sequential fused chain per element; vector lanes are independent elements). The AVX-512
 * and AVX2 paths compute exactly this; the portable path (isa.h) the same chain unfused,
 *   acc = acc + x[m][k] * W[n][k]   (product rounded, then the sum),   y = beta*y + acc likewise,
 * because a CPU without FMA has no fused instruction (libm's fmaf per element was 20-80x slower).
 * Each path agrees bit for bit with recur__packed_gemm_ref, which follows the running path.
 *
 * Packed layout of W [N][K] (nn.Linear, row-major): column panels of RECUR_PANEL outputs,
 *   Wp[p][k][j] = W[p*RECUR_PANEL + j][k]     p < ceil(N/RECUR_PANEL), k < K, j < RECUR_PANEL
 * k-major inside a panel (one 64-byte line per k), panels back to back, rows n >= N zero.
 *
 * Element types (recur_wtype): fp32, or the 16-bit halves of a weights file (IEEE binary16 or
 * bfloat16) kept as they are, in the same layout (a 32-byte half line per k). A half weight is
 * widened to fp32 exactly (every F16 / BF16 value is an fp32 value) as its panel vector is
 * loaded, and then enters the same chain: a half-packed W gives bit for bit what the fp32-packed
 * widening of the same W gives, while reading half the bytes (batch-1 decode streams W).
 */
#ifndef RECUR_PACKED_GEMM_H
#define RECUR_PACKED_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RECUR_PANEL 16

typedef enum {
    RECUR_WT_F32 = 0,  /* float */
    RECUR_WT_F16 = 1,  /* uint16_t, IEEE 754 binary16 */
    RECUR_WT_BF16 = 2, /* uint16_t, bfloat16 (the high half of an fp32) */
    RECUR_WT_Q8_0 = 3, /* 8-bit codes, an fp16 scale per 32 (quant.h: its own packed layout) */
    RECUR_WT_Q4_0 = 4  /* 4-bit codes, an fp16 scale per 32 (quant.h) */
} recur_wtype;

/* Bytes of one element of type t (quantized types: 1, their rows are not element-addressable;
 * size them with recur__packed_bytes). */
static inline size_t recur__wtype_size(recur_wtype t) { return t == RECUR_WT_F32 ? 4 : t <= RECUR_WT_BF16 ? 2 : 1; }

/* "F32", "F16", "BF16", "Q8_0" or "Q4_0". */
const char *recur__wtype_name(recur_wtype t);

/* A 16-bit half of type t (F16 or BF16) widened to fp32, exactly (subnormals, inf, NaN too). */
static inline float recur__half_to_float(uint16_t h, recur_wtype t)
{
    uint32_t bits;
    if (t == RECUR_WT_BF16) {
        bits = (uint32_t)h << 16;
    } else {
        uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        if (exp == 0) {
            if (man == 0) bits = sign;
            else { /* subnormal: renormalise */
                int e = -1;
                do { e++; man <<= 1; } while (!(man & 0x400));
                bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
            }
        } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
        else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* fp32 -> the nearest half of type t (F16 or BF16), ties to even; overflow gives inf. The inverse
 * of recur__half_to_float on the halves (seeded half models, tests, benchmarks). */
uint16_t recur__float_to_half(float f, recur_wtype t);

/* Whether a half of type t is finite (exponent field not all ones). */
static inline int recur__half_finite(uint16_t h, recur_wtype t)
{
    return t == RECUR_WT_BF16 ? (h & 0x7f80) != 0x7f80 : (h & 0x7c00) != 0x7c00;
}

/* Elements of the packed form of a [N][K] matrix: ceil(N/RECUR_PANEL) * K * RECUR_PANEL. */
size_t recur__packed_floats(int N, int K);
/* Bytes of the packed form of a [N][K] matrix of type t (quantized: quant.h's layout). */
size_t recur__packed_bytes(int N, int K, recur_wtype t);

/* Pack W [N][K] (row stride K) into Wp [recur__packed_floats(N, K)] (caller-owned, 64-byte
 * aligned for the vector paths). recur__pack_half: the same for 16-bit halves (either type:
 * the bits are moved, padding is +0). */
void recur__pack(float *Wp, const float *W, int N, int K);
void recur__pack_half(uint16_t *Wp, const uint16_t *W, int N, int K);

/* y[M][N] (row stride ldy) = beta*y + x[M][K] (row stride ldx) W^T, W packed by recur__pack.
 * beta == 0 never reads y (it may hold anything). M >= 0, N >= 1, K >= 1. x and y must not
 * overlap. The path isa.h chose (AVX-512, AVX2+FMA+F16C, portable C). */
void recur__packed_gemm(int M, int N, int K, const float *x, int ldx, const float *Wp, float beta,
                        float *y, int ldy);

/* The same function in plain scalar C (the formula above, literally; fused on the AVX paths,
 * unfused on the portable one): the reference the running path must equal bit for bit (tests). */
void recur__packed_gemm_ref(int M, int N, int K, const float *x, int ldx, const float *Wp,
                            float beta, float *y, int ldy);

/* recur__packed_gemm on a W packed with elements of type wt (F32: recur__pack, F16 / BF16:
 * recur__pack_half; Q8_0 / Q4_0: recur__pack_quant, computed by quant.h's formula), and its
 * scalar reference (each weight widened by recur__half_to_float). */
void recur__packed_gemm_t(int M, int N, int K, const float *x, int ldx, const void *Wp,
                          recur_wtype wt, float beta, float *y, int ldy);
void recur__packed_gemm_ref_t(int M, int N, int K, const float *x, int ldx, const void *Wp,
                              recur_wtype wt, float beta, float *y, int ldy);

#endif /* RECUR_PACKED_GEMM_H */
