/*
 * mixer.h — what the mixer files share with each other and with the model (not public).
 *
 * Argument checks (mixer_check.c): every public mixer entry point validates its dimensions,
 * form and scale with these, so one rule holds for all of them.
 *
 * Decode steps: each mixer's per-head step lives in its own file (gated_linear.c gl_step for
 * linear attention, retention and GLA; delta_rule.c dr_step for DeltaNet and gated DeltaNet;
 * generalized_delta.c recur__gdr_step for RWKV-7's generalized delta rule, generalized_delta.h;
 * softmax_attention.c recur__softmax_step below) and is that mixer's recurrent form, which is
 * what the model's decode calls (model_forward.c) — one home per recurrence. The softmax steps
 * are declared here because the model keeps the KV cache itself; no validation, no allocation.
 */
#ifndef RECUR_MIXER_H
#define RECUR_MIXER_H

#include <stdint.h>
#include <string.h>
#include "recur.h"

/* ---------------------------------------------------------------- checks (mixer_check.c) */

/* RECUR_EINVAL when d is NULL; RECUR_ESHAPE unless T >= 0, 1 <= H, K, V <= RECUR_MAX_DIM and
 * T*H*max(K,V) floats are addressable in int64_t and size_t bytes. */
int recur__check_dims(const recur_dims *d);

/* RECUR_EINVAL for an unknown form; RECUR_ESHAPE for chunk_size < 1 when form is chunkwise. */
int recur__check_form(recur_form form, int64_t chunk_size);

/* RECUR_EINVAL when d is NULL, then recur__check_form, then recur__check_dims: the first
 * non-zero code. */
int recur__check_form_dims(recur_form form, int64_t chunk_size, const recur_dims *d);

/* scale NaN/Inf -> RECUR_ENONFINITE; otherwise *out = scale > 0 ? scale : K^-1/2. */
int recur__resolve_scale(float scale, int K, float *out);

/* ---------------------------------------------------------------- 16-float vectors */

/* 16 floats as one value (GCC/clang vector extensions: one zmm with AVX-512, split into ymm/xmm
 * otherwise); the register-blocked loops of the mixers are written on it. Unaligned loads and
 * stores through memcpy. */
typedef float recur__v16 __attribute__((vector_size(64)));

static inline recur__v16 recur__v16_load(const float *p)
{
    recur__v16 x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void recur__v16_store(float *p, recur__v16 x)
{
    memcpy(p, &x, sizeof x);
}

/* The widest vector of the instruction set this object is compiled for (per-ISA objects, isa.h):
 * RECUR__VN floats, 16 with AVX-512, 8 with AVX2, 4 with SSE2. A recur__v16 loop compiled
 * without AVX-512 is split by the compiler into pieces that go through the stack (the decode
 * steps ran 10x slower as AVX2 code); the decode steps' column blocks are written on this type
 * instead, RECUR__VN / 4 groups of 16 columns per block (four registers of each accumulator).
 * Columns are independent, so the width changes nothing but speed. */
#if defined(__AVX512F__)
#define RECUR__VN 16
#elif defined(__AVX__)
#define RECUR__VN 8
#else
#define RECUR__VN 4
#endif
typedef float recur__vn __attribute__((vector_size(4 * RECUR__VN)));

static inline recur__vn recur__vn_load(const float *p)
{
    recur__vn x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void recur__vn_store(float *p, recur__vn x)
{
    memcpy(p, &x, sizeof x);
}

/* recur__lane16[l]: 1 in lane l, 0 in the others (mixer_check.c) */
extern const recur__v16 recur__lane16[16];

/* ---------------------------------------------------------------- decode steps */

/* softmax_attention.c — one query row per head against keys [0, pos] of a KV cache
 * k_cache [..][H][K], v_cache [..][H][V] (row pos already written), q, o [H][V]:
 *   o_h = sum_{j<=pos} softmax_j(scale q_h.k_j) v_j                          */
void recur__softmax_step(int H, int K, int V, const float *q, float scale, const float *k_cache,
                         const float *v_cache, int64_t pos, float *o);

/* softmax_attention.c — T query rows, row t at position pos0 + t, against keys [0, pos0 + t]
 * of the cache (rows [0, pos0 + T) written): the causal form with a prefix. P is scratch of
 * min(T, RECUR__SOFTMAX_QBLOCK) * (pos0 + T) floats. T, pos0 + T <= INT32_MAX. */
#define RECUR__SOFTMAX_QBLOCK 64
void recur__softmax_rows(int H, int K, int V, const float *q, float scale, const float *k_cache,
                         const float *v_cache, int64_t pos0, int64_t T, float *P, float *o);

#endif /* RECUR_MIXER_H */
