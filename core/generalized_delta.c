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
 * made every row wait on the previous row's store). The last vector of a block holds `last`
 * <= 16 columns: 16 everywhere but in the V % 16 tail, whose lanes past `last` are loaded as 0
 * and never stored. Columns are independent, so the blocking changes nothing but speed. */
#define GDR_ZB 4

/* the first n <= 16 floats of p, the other lanes 0 */
static inline recur__v16 gdr_load(const float *p, int n)
{
    if (n == 16)
        return recur__v16_load(p);
    float x[16] = {0};
    memcpy(x, p, (size_t)n * sizeof(float));
    return recur__v16_load(x);
}

static inline void gdr_store(float *p, recur__v16 x, int n)
{
    if (n == 16) {
        recur__v16_store(p, x);
        return;
    }
    float y[16];
    recur__v16_store(y, x);
    memcpy(p, y, (size_t)n * sizeof(float));
}

static inline __attribute__((always_inline)) void gdr_step_block(const int NZ, const int last,
                                                                float *restrict S, int K, int V,
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
        vv[z] = gdr_load(v + 16 * z, z == NZ - 1 ? last : 16);
        acc[z] = (recur__v16){0};
    }
    for (int i = 0; i < K; i++) {
        const float *row = S + (size_t)i * V;
        const float ai = a[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++)
            u[z] += ai * gdr_load(row + 16 * z, z == NZ - 1 ? last : 16);
    }
    for (int i = 0; i < K; i++) {
        float *row = S + (size_t)i * V;
        const float wi = w[i], bi = b[i], ki = k[i], qi = q[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ; z++) {
            const int n = z == NZ - 1 ? last : 16;
            const recur__v16 r = wi * gdr_load(row + 16 * z, n) + bi * u[z] + ki * vv[z];
            gdr_store(row + 16 * z, r, n);
            acc[z] += qi * r;
        }
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++)
        gdr_store(o + 16 * z, acc[z], z == NZ - 1 ? last : 16);
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
    int j0 = 0;
    for (; j0 + 16 * GDR_ZB <= V; j0 += 16 * GDR_ZB) /* whole blocks of 64 columns */
        gdr_step_block(GDR_ZB, 16, S + j0, K, V, w, k, qs, a, b, v + j0, o + j0);
    const int rest = V - j0; /* < 64 columns: 0-3 whole vectors, then a partial one */
    if (rest == 0)
        return;
    float *Sj = S + j0, *oj = o + j0;
    const float *vj = v + j0;
    if (rest % 16 == 0) {
        if (rest == 48)
            gdr_step_block(3, 16, Sj, K, V, w, k, qs, a, b, vj, oj);
        else if (rest == 32)
            gdr_step_block(2, 16, Sj, K, V, w, k, qs, a, b, vj, oj);
        else
            gdr_step_block(1, 16, Sj, K, V, w, k, qs, a, b, vj, oj);
    } else {
        const int whole = rest / 16, part = rest % 16;
        if (whole == 3)
            gdr_step_block(4, part, Sj, K, V, w, k, qs, a, b, vj, oj);
        else if (whole == 2)
            gdr_step_block(3, part, Sj, K, V, w, k, qs, a, b, vj, oj);
        else if (whole == 1)
            gdr_step_block(2, part, Sj, K, V, w, k, qs, a, b, vj, oj);
        else
            gdr_step_block(1, part, Sj, K, V, w, k, qs, a, b, vj, oj);
    }
}
