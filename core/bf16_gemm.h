/*
 * bf16_gemm.h — y = beta*y + x W^T with both inputs rounded to bfloat16 and fp32 accumulation: the
 * GEMM of the bf16 prefill (recur_model_set_prefill_dtype, docs/MODEL.md "Prefill dtype"), on
 * AVX-512 BF16 (vdpbf16ps). Private to librecur.
 *
 * Rounding (as vcvtne2ps2bf16 / vcvtneps2bf16 do, MXCSR not consulted): an fp32 value to the
 * nearest bfloat16, ties to even; a subnormal input becomes a zero of its sign (DAZ); a NaN stays
 * a quiet NaN of its sign (the top 16 bits with the quiet bit set); overflow rounds to inf.
 * xb = bf16(x) per element of x when the call starts, wb = bf16(W) once when W is packed (an F32
 * or F16 weight rounded the same way, a BF16 weight exactly itself).
 *
 * Formula (vdpbf16ps, per the instruction's definition: the two products of a k pair are exact in
 * fp32, each added with one rounding to nearest even, the odd k first; subnormal results flushed
 * to zero of their sign, FTZ):
 *   acc = 0
 *   for i = 0 .. ceil(K/2)-1 in order:
 *       acc = ftz(acc + xb[m][2i+1] * wb[n][2i+1])
 *       acc = ftz(acc + xb[m][2i]   * wb[n][2i])
 *   y[m][n] = (beta == 0) ? acc : fmaf(beta, y[m][n], acc)
 * (xb, wb = 0 past K.) One chain per element whatever M, the row's place or the tile shape, so a
 * row's result does not depend on the other rows (as for packed_gemm.h). recur__bf16_gemm_ref is
 * this formula in plain C; the tests compare the kernel with it and with the float64 product of
 * the rounded inputs, |y - y64| <= gamma_{2 ceil(K/2) + 1} (sum_k |xb wb| + |beta y0|).
 *
 * What it costs: every x and W element carries 8 significant bits instead of 24 (relative
 * rounding error up to 2^-9 each); the sum is fp32 as elsewhere. docs/MODELS.md reports the
 * held-out bits/byte.
 *
 * Packed layout of W [N][K] (pairs of k interleaved, vdpbf16ps's operand): column panels of
 * RECUR_PANEL = 16 outputs, each ceil(K/2) lines of 16 32-bit lanes,
 *   Wb[p][i][j] = wb[n][2i] | wb[n][2i+1] << 16     n = p*16 + j
 * (uint32_t, the low half the even k), 64 bytes per line, panels back to back; rows n >= N and
 * k >= K zero.
 */
#ifndef RECUR_BF16_GEMM_H
#define RECUR_BF16_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include "packed_gemm.h"

/* fp32 -> bfloat16 bits, the rounding above. */
static inline uint16_t recur__bf16_round(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) return (uint16_t)((b >> 16) | 0x0040u); /* NaN */
    if ((b & 0x7f800000u) == 0) return (uint16_t)((b >> 16) & 0x8000u);                             /* DAZ */
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* Bytes of the bf16 panels of a [N][K] matrix: ceil(N/16) * ceil(K/2) * 64. */
size_t recur__bf16_packed_bytes(int N, int K);

/* W, already packed by recur__pack / recur__pack_half (elements of type src_wt: F32, F16 or
 * BF16; N x K), into Wb [recur__bf16_packed_bytes(N, K) bytes, 64-byte aligned], rounded. */
void recur__pack_bf16(uint32_t *Wb, const void *Wp, recur_wtype src_wt, int N, int K);

/* Weight (n, k) of bf16 panels as fp32 (exact) — tests. */
float recur__bf16_weight(const uint32_t *Wb, int K, int n, int k);

/* y[M][N] (row stride ldy) = beta*y + x[M][K] (row stride ldx) W^T, W in bf16 panels: the
 * formula above. M >= 0, N >= 1, K >= 1; beta == 0 never reads y; x and y must not overlap.
 * Runs vdpbf16ps where recur__isa_bf16(); elsewhere the scalar reference (the same bits, slowly:
 * a model refuses the bf16 prefill there, so only tests get it). */
void recur__bf16_gemm(int M, int N, int K, const float *x, int ldx, const uint32_t *Wb, float beta, float *y,
                      int ldy);

/* The formula in plain scalar C, element by element (the tests' reference). */
void recur__bf16_gemm_ref(int M, int N, int K, const float *x, int ldx, const uint32_t *Wb, float beta, float *y,
                          int ldy);

/* Round n floats of x to bf16 with the vector instruction (vcvtneps2bf16) — tests compare it
 * with recur__bf16_round. Returns 0 (and writes nothing) where recur__isa_bf16() is false. */
int recur__bf16_round_hw(const float *x, int n, uint16_t *out);

#endif /* RECUR_BF16_GEMM_H */
