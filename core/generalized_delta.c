/*
 * generalized_delta.c — the generalized (DPLR) delta rule of RWKV-7 (generalized_delta.h).
 *
 * Per head, S in R^{K x V} (key-major), w_t = exp(g_t) per key:
 *   S_t = Diag(w_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T        o_t = scale S_t^T q_t
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exp_nonpos.h"
#include "generalized_delta.h"
#include "mixer.h"

/* ---------------------------------------------------------------- recurrent */

/* One token of one head, written as two passes over S (the first only reads it):
 *   u   = a^T S                      (the erase read-out, from the state before the decay)
 *   S_i = w_i S_i + b_i u + k_i v    (row i of S, w = exp(g))
 *   o   = scale sum_i q_i S_i
 * Columns go in blocks of NZ <= GDR_ZB vectors of 16 (one zmm each with AVX-512), the block's u,
 * v and o held in registers across all K rows (as dr_step does: a V-long accumulator in memory
 * made every row wait on the previous row's store); the V % 16 last columns in plain loops.
 * Columns are independent, so the blocking changes nothing but speed. */
#define GDR_ZB 4
static inline __attribute__((always_inline)) void gdr_step_block(const int NZ, float *restrict S,
                                                                int K, int V,
                                                                const float *restrict w,
                                                                const float *restrict k,
                                                                const float *restrict q,
                                                                const float *restrict a,
                                                                const float *restrict b,
                                                                const float *restrict v,
                                                                float *restrict o)
{
    recur__v16 u[GDR_ZB], vv[GDR_ZB], acc[GDR_ZB];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) {
        u[z] = (recur__v16){0};
        vv[z] = recur__v16_load(v + 16 * z);
        acc[z] = (recur__v16){0};
    }
    for (int i = 0; i < K; i++) {
        const float *row = S + (size_t)i * V;
        const float ai = a[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++)
            u[z] += ai * recur__v16_load(row + 16 * z);
    }
    for (int i = 0; i < K; i++) {
        float *row = S + (size_t)i * V;
        const float wi = w[i], bi = b[i], ki = k[i], qi = q[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++) {
            const recur__v16 r = wi * recur__v16_load(row + 16 * z) + bi * u[z] + ki * vv[z];
            recur__v16_store(row + 16 * z, r);
            acc[z] += qi * r;
        }
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++)
        recur__v16_store(o + 16 * z, acc[z]);
}

void recur__gdr_step(float *restrict S, const float *restrict q, const float *restrict k,
                     const float *restrict v, const float *restrict g, const float *restrict a,
                     const float *restrict b, float scale, int K, int V, float *restrict o)
{
    float w[RECUR_MAX_DIM], qs[RECUR_MAX_DIM]; /* exp(g) and scale q: K floats each */
    for (int i = 0; i < K; i++) {
        w[i] = recur__exp_nonpos(g[i]);
        qs[i] = scale * q[i];
    }
    const int V16 = V - V % 16;
    for (int j0 = 0; j0 < V16; j0 += 16 * GDR_ZB) {
        switch ((V16 - j0) / 16 < GDR_ZB ? (V16 - j0) / 16 : GDR_ZB) {
        case 4: gdr_step_block(4, S + j0, K, V, w, k, qs, a, b, v + j0, o + j0); break;
        case 3: gdr_step_block(3, S + j0, K, V, w, k, qs, a, b, v + j0, o + j0); break;
        case 2: gdr_step_block(2, S + j0, K, V, w, k, qs, a, b, v + j0, o + j0); break;
        default: gdr_step_block(1, S + j0, K, V, w, k, qs, a, b, v + j0, o + j0); break;
        }
    }
    if (V16 == V)
        return;
    float u[16]; /* the column tail, V % 16 < 16 columns */
    const int n = V - V16;
    for (int j = 0; j < n; j++)
        u[j] = 0.0f, o[V16 + j] = 0.0f;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < n; j++)
            u[j] += a[i] * S[(size_t)i * V + V16 + j];
    for (int i = 0; i < K; i++) {
        float *Si = S + (size_t)i * V + V16;
        for (int j = 0; j < n; j++) {
            Si[j] = w[i] * Si[j] + b[i] * u[j] + k[i] * v[V16 + j];
            o[V16 + j] += qs[i] * Si[j];
        }
    }
}
