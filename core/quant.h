/*
 * quant.h — block-quantized weights (Q8_0, Q4_0) in panels, and the GEMM that reads them.
 * Private to librecur.
 *
 * Block formats (llama.cpp's ggml-quants definitions; 32 consecutive weights of one row share a
 * scale d stored as IEEE fp16; the codes are computed with the fp32 d, dequantized with fp16(d)):
 *   Q8_0:  amax = max |x_i|,  d = amax / 127,  id = d ? 1/d : 0,  q_i = roundf(x_i * id)
 *          (ties away from zero, q in [-127, 127]);  x_i ~ q_i * fp16(d)
 *   Q4_0:  max = the x_i of largest |x_i| (the first on ties), d = max / -8, id = d ? 1/d : 0,
 *          q_i = min(15, (int8)(x_i * id + 8.5f))  (truncation; q in [0, 15]);
 *          x_i ~ (q_i - 8) * fp16(d)
 * (fp32 arithmetic throughout, fp16(d) rounded to nearest even.) A row whose length K is not a
 * multiple of 32 is padded with zeros to whole blocks.
 *
 * Packed layout of W [N][K] (quant of recur__pack's panels): panels of RECUR_PANEL = 16 outputs,
 * each a run of nb = ceil(K/32) blocks; one block of a panel is
 *   codes  Q8_0: 512 bytes, byte (g*16 + j)*4 + t = q[n][32b + 4g + t] + 128 (as uint8), g < 8
 *          Q4_0: 256 bytes, byte (g*16 + j)*4 + t = q[n][32b + 4g + t] | q[n][32b + 4g + 16 + t] << 4,
 *                g < 4 (the nibble pair of llama.cpp's byte: weights i and i + 16 of the block)
 *   scales 16 fp16, scale j = fp16(d) of row n's block b
 * with n = p*16 + j; rows n >= N are zero (codes of 0, scales +0). Four consecutive k of one
 * output sit in one 32-bit lane: vpdpbusd's unsigned-by-signed 4-term dot product.
 *
 * The GEMM quantizes each row of x to Q8_0 too (llama.cpp's vec_dot_q8_0_q8_0 / q4_0_q8_0) and
 * multiplies integers. With xq, dx the Q8_0 codes and fp16 scale of x's row m, wq the signed
 * weight code (Q8_0: q, Q4_0: q - 8) and dw its scale:
 *
 *   isum_b = sum over the block's k of wq[n][k] * xq[m][k]        (exact int32)
 *   acc = 0;  for b = 0 .. nb-1 in order:  acc = fmaf(dw[n][b] * dx[m][b], (float)isum_b, acc)
 *   y[m][n] = (beta == 0) ? acc : fmaf(beta, y[m][n], acc)
 *
 * dw*dx is exact in fp32 (two fp16 values) and so is (float)isum_b (|isum| < 2^24): one rounding
 * per block. Every path computes isum_b exactly (vpdpbusd, or fp32 FMAs over integer values, which
 * are exact below 2^24), so the AVX-512 (VNNI or not) and AVX2 paths agree bit for bit; the
 * portable path rounds the product and the sum separately (isa.h), acc = acc + (dw*dx)*isum.
 * A row's result is independent of M and of its place in the batch, as for packed_gemm.h.
 * What it costs: x is rounded to 8 bits per element (relative error up to 1/254 of its block's
 * largest |x|) besides the weights' own rounding; docs/MODELS.md reports the bits/byte.
 */
#ifndef RECUR_QUANT_H
#define RECUR_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "packed_gemm.h"

#define RECUR_QBLOCK 32 /* weights per scale */
/* Version of the packed layout above: a change of layout (or of the quantization formulas) bumps
 * it, so that a cached quantized file of an older layout is refused (weights_cache.h). */
#define RECUR_QUANT_LAYOUT_VERSION 1u

/* Whether wt is a block-quantized type. */
static inline int recur__wtype_quant(recur_wtype wt) { return wt == RECUR_WT_Q8_0 || wt == RECUR_WT_Q4_0; }

/* Bytes of one block of one panel (codes + 16 scales): Q8_0 544, Q4_0 288. */
static inline size_t recur__qblock_panel_bytes(recur_wtype wt) { return wt == RECUR_WT_Q8_0 ? 544 : 288; }

/* One block of n <= 32 values (the rest taken as 0) -> codes q[32] (Q8_0: -127..127; Q4_0:
 * 0..15) and the fp16 bits of d; the formulas above. Non-finite input gives codes 0 and a NaN
 * scale (the product then propagates NaN). */
uint16_t recur__quantize_q8_0(const float *x, int n, int8_t q[RECUR_QBLOCK]);
uint16_t recur__quantize_q4_0(const float *x, int n, uint8_t q[RECUR_QBLOCK]);

/* Pack W (a matrix already packed by recur__pack / recur__pack_half, elements of type src_wt,
 * N x K) into Wq [recur__packed_bytes(N, K, wt)] quantized as wt (Q8_0 or Q4_0). */
void recur__pack_quant(void *Wq, recur_wtype wt, const void *Wp, recur_wtype src_wt, int N, int K);

/* Weight (n, k) of a quant-packed W as fp32 (its exact dequantized value wq * dw) — tests. */
float recur__quant_weight(const void *Wq, recur_wtype wt, int N, int K, int n, int k);

/* x [M][K] (row stride ldx) -> for each row its Q8_0 blocks: xq [M][nb*32], dx [M][nb] (the fp32
 * value of the fp16 scale), xsum [M][nb] (the sum of the block's codes). recur__quantize_q8_0's
 * codes and scales bit for bit on every path (quant_gemm.c: AVX-512 / AVX2 vectors per block). */
void recur__quantize_rows_q8(int M, int K, const float *x, int ldx, int8_t *xq, float *dx, int32_t *xsum);

/* y = beta*y + x W^T with W quant-packed (the formula above); the path isa.h chose. */
void recur__quant_gemm(int M, int N, int K, const float *x, int ldx, const void *Wq, recur_wtype wt, float beta,
                       float *y, int ldy);
/* The same in plain scalar C, fused or not as the running path (tests compare bit for bit). */
void recur__quant_gemm_ref(int M, int N, int K, const float *x, int ldx, const void *Wq, recur_wtype wt,
                           float beta, float *y, int ldy);

#endif /* RECUR_QUANT_H */
