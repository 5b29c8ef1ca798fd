/*
 * state_dtype.h — a session state held in half precision (docs/MODEL.md "State dtype"): the one
 * home of the conversions between the stored halves and the fp32 a step computes in.
 *
 *   widen:  half -> fp32, exact (every half is an fp32 value; an f16 NaN comes out quiet, as
 *           vcvtph2ps makes it; a bf16 is its fp32's high half, NaN or not).
 *   narrow: fp32 -> the nearest half, ties to even, once; beyond the half's largest finite value
 *           it is +-inf (IEEE overflow), fp32 subnormals round like any value (no flush to zero),
 *           a NaN stays a NaN of the same sign, quiet, with the high bits of its payload
 *           (bf16: payload >> 16; f16: payload >> 13).
 * The AVX-512, AVX2 and portable paths give the same bits for every input (integer arithmetic
 * for bf16; F16C's vcvtps2ph / vcvtph2ps for f16, whose rounding, subnormals and NaN rule the
 * portable code reproduces). vcvtneps2bf16 (avx512_bf16) is not used: it flushes fp32
 * subnormals to zero, so it would disagree with the other paths (tests/unit/test_state_dtype.c
 * checks every path on every half and on 2^24 spread floats plus the edges).
 */
#ifndef RECUR_STATE_DTYPE_H
#define RECUR_STATE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include "isa.h"
#include "recur.h"

/* dst[i] = narrow(src[i]) / widen(src[i]), i < n, on the process's ISA path. */
void recur__state_narrow(uint16_t *dst, const float *src, size_t n, recur_state_dtype t);
void recur__state_widen(float *dst, const uint16_t *src, size_t n, recur_state_dtype t);
/* The same on a given path (tests; a vector path the CPU lacks must not be asked for). */
void recur__state_narrow_isa(uint16_t *dst, const float *src, size_t n, recur_state_dtype t, recur_isa isa);
void recur__state_widen_isa(float *dst, const uint16_t *src, size_t n, recur_state_dtype t, recur_isa isa);

/* Bytes of one stored state element: 4 (f32) or 2. */
static inline size_t recur__state_elem(recur_state_dtype t) { return t == RECUR_STATE_F32 ? 4 : 2; }

#endif /* RECUR_STATE_DTYPE_H */
