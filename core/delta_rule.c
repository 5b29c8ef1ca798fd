/*
 * delta_rule.c — DeltaNet and gated DeltaNet (docs/DESIGN.md §3), three forms.
 *
 * Per head, with S in R^{K x V} (key-major), b = beta_t, g = g_t (0 for plain DeltaNet):
 *   S_t = (I - b k_t k_t^T) e^g S_{t-1} + b k_t v_t^T        o_t = scale S_t^T q_t
 * which we evaluate as the "delta" of a decayed state:
 *   S' = e^g S_{t-1};  u_t = b (v_t - S'^T k_t);  S_t = S' + k_t u_t^T.
 *
 * Chunkwise (WY/UT form, Yang et al. 2024 "Parallelizing Linear Transformers with the Delta Rule",
 * and Gated DeltaNet; FLA's chunk_delta_rule / chunk_gated_delta_rule). Inside a chunk of c tokens
 * with start state S0 and cumulative log-gates a_t = sum_{s<=t} g_s (so a_t - a_s <= 0 for s <= t):
 *   S_t = e^{a_t} S0 + sum_{s<=t} e^{a_t - a_s} k_s u_s^T
 *   u_t = b_t (v_t - e^{a_t} S0^T k_t - sum_{s<t} e^{a_t - a_s} (k_t.k_s) u_s)
 * i.e. (I + A) U = diag(b) (V - diag(e^a) K S0),  A[t][s] = b_t e^{a_t - a_s} k_t.k_s for s < t
 * (strictly lower, so I + A is unit lower triangular: a forward substitution,
 * recur__solve_unit_lower of chunk_mm.h). Then
 *   O   = scale diag(e^a) Q S0 + (scale (Q K^T) o D) U,  D[t][s] = e^{a_t - a_s} for s <= t, else 0
 *   S_c = e^{a_c} S0 + (diag(e^{a_c - a}) K)^T U
 * Only a_t - a_s (s <= t), a_c - a_s and a_t are exponentiated: all <= 0.
 *
 * We solve directly for U (FLA splits it into W = T diag(b e^a) K and U~ = T diag(b) V because
 * its kernels run chunks in parallel; we run them in order, which saves the W half of the solve).
 *
 * Parallel = chunkwise with one chunk. The fp32 solve holds up at that size: against a float64
 * recurrence at T = 1000 (one chunk), rel. RMS error of o stayed <= 4e-6 even with strongly
 * correlated keys and beta near 1, and solving in float64 (dtrsm) did not lower it (measured
 * 2026-11-29, with strsm; the blocked substitution passes the same float64 tests),
 * so there is no float64 path. Its memory is one T x T float matrix (see dr_chunk).
 *
 * Cost (why chunkwise does not beat recurrent here): per token and head, chunkwise does 3KV
 * multiply-adds for the state products (K S0, Q S0, K^T U), exactly what the fused recurrent step
 * does, plus c (K + V) for the causal halves of Q K^T, K K^T, the solve and M U: 1.67x the
 * recurrent work at c = 64, K = V = 64 (1.17x at c = 16). The recurrent step already runs at
 * ~57 GFLOP/s; the products here run at 90-105 (recur__mm, the level of OpenBLAS sgemm on one
 * 64^3 product), so at c = 64 even a chunk step with no overhead at all would only tie. Measured
 * 2026-11-29 (H=4, K=V=64, T=16k, 1 thread, CPU time, shared machine): recurrent 28-30 ms;
 * chunkwise 32 / 36 / 36-39 / 50 ms at c = 16 / 32 / 64 / 128 (on strsm/sgemm before recur__mm:
 * 43 / 47 / 55 / 74 ms).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_ahead.h"
#include "chunk_decay.h"
#include "chunk_mm.h"
#include "chunk_work.h"
#include "exp_nonpos.h"
#include "mixer.h"

/* ---------------------------------------------------------------- validation */

/* Everything is checked before anything is written: on error S and o are untouched. */
static int dr_check(const recur_dims *d, const float *q, const float *k, const float *v,
                    const float *beta, const float *g, float scale, recur_form form,
                    int64_t chunk_size, const float *S, const float *o)
{
    if (!q || !k || !v || !beta || !S || !o)
        return RECUR_EINVAL;
    const int rc = recur__check_form_dims(form, chunk_size, d);
    if (rc)
        return rc;
    /* Non-finite anywhere wins over out-of-range anywhere, whatever their order. */
    const int64_t n = d->T * d->H;
    int nonfinite = !isfinite(scale), range = 0;
    for (int64_t i = 0; i < n; i++) {
        nonfinite |= !isfinite(beta[i]);
        range |= !(beta[i] > 0.0f && beta[i] <= 2.0f); /* (0, 2]: allow_neg_eigval doubles it */
    }
    if (g)
        for (int64_t i = 0; i < n; i++) {
            nonfinite |= !isfinite(g[i]);
            range |= g[i] > 0.0f;
        }
    if (nonfinite)
        return RECUR_ENONFINITE;
    if (range)
        return RECUR_ERANGE;
    return RECUR_OK;
}

/* ---------------------------------------------------------------- recurrent */

/* One token of one head:
 *   S' = eg S ;  u = b (v - S'^T k) ;  S = S' + k u^T ;  o = scale S^T q
 * in two passes over S (the first only reads it: u = b (v - eg (S^T k))). Columns go in blocks of
 * NZ <= DR_ZB groups of 16 (GCC/clang vector extensions on the native width, mixer.h: 4 zmm, ymm
 * or xmm per accumulator), the block's
 * u and o held in registers across all K rows (a V-long accumulator in memory made every row
 * wait on the previous row's store: 2-3x slower); the V % 16 last columns in plain loops.
 * Columns are independent, so the blocking changes nothing but speed. */
#define DR_ZB (RECUR__VN / 4) /* groups of 16 columns per block: 4 native vectors (mixer.h) */
static inline __attribute__((always_inline)) void dr_step_block(const int NZ, float *restrict S, int K,
                                                               int V, float eg, float b,
                                                               const float *restrict k,
                                                               const float *restrict q, float scale,
                                                               const float *restrict v,
                                                               float *restrict o)
{
    enum { P = 16 / RECUR__VN, W = RECUR__VN }; /* P vectors of W floats per 16 columns */
    recur__vn u[4 * P], acc[4 * P]; /* NZ <= DR_ZB <= 4 */
#pragma GCC unroll 4
    for (int z = 0; z < NZ * P; z++) {
        u[z] = (recur__vn){0};
        acc[z] = (recur__vn){0};
    }
    for (int i = 0; i < K; i++) {
        const float *row = S + (size_t)i * V;
        const float ki = k[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ * P; z++)
            u[z] += ki * recur__vn_load(row + W * z);
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ * P; z++)
        u[z] = b * (recur__vn_load(v + W * z) - eg * u[z]);
    for (int i = 0; i < K; i++) {
        float *row = S + (size_t)i * V;
        const float ki = k[i], qi = scale * q[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ * P; z++) {
            const recur__vn r = ki * u[z] + eg * recur__vn_load(row + W * z);
            recur__vn_store(row + W * z, r);
            acc[z] += qi * r;
        }
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ * P; z++)
        recur__vn_store(o + W * z, acc[z]);
}

static void dr_step(float *restrict S, const float *restrict q, const float *restrict k,
                       const float *restrict v, float b, float eg, float scale, int K, int V,
                       float *restrict o)
{
    const int V16 = V - V % 16;
    for (int j0 = 0; j0 < V16; j0 += 16 * DR_ZB) {
        switch ((V16 - j0) / 16 < DR_ZB ? (V16 - j0) / 16 : DR_ZB) {
        case 4: dr_step_block(4, S + j0, K, V, eg, b, k, q, scale, v + j0, o + j0); break;
        case 3: dr_step_block(3, S + j0, K, V, eg, b, k, q, scale, v + j0, o + j0); break;
        case 2: dr_step_block(2, S + j0, K, V, eg, b, k, q, scale, v + j0, o + j0); break;
        default: dr_step_block(1, S + j0, K, V, eg, b, k, q, scale, v + j0, o + j0); break;
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
            u[j] += k[i] * S[(size_t)i * V + V16 + j];
    for (int j = 0; j < n; j++)
        u[j] = b * (v[V16 + j] - eg * u[j]);
    for (int i = 0; i < K; i++) {
        float *Si = S + (size_t)i * V + V16;
        const float ki = k[i], qi = scale * q[i];
        for (int j = 0; j < n; j++) {
            Si[j] = ki * u[j] + eg * Si[j];
            o[V16 + j] += qi * Si[j];
        }
    }
}

/* Token by token, head by head: the step above. */
static void dr_recurrent(const recur_dims *d, const float *q, const float *k, const float *v,
                         const float *beta, const float *g, float scale, float *S, float *o)
{
    const int H = d->H, K = d->K, V = d->V;
    for (int64_t t = 0; t < d->T; t++)
        for (int h = 0; h < H; h++) {
            const size_t row = (size_t)t * H + h;
            const float eg = g ? expf(g[row]) : 1.0f; /* g <= 0 */
            dr_step(S + (size_t)h * K * V, q + row * K, k + row * K, v + row * V,
                              beta[row], eg, scale, K, V, o + row * V);
        }
}

/* ---------------------------------------------------------------- chunkwise */

typedef struct {
    int64_t cmax; /* the longest chunk */
    float *B;     /* [cmax][cmax]  strictly lower: A;  upper with the diagonal: M^T (see dr_chunk) */
    float *U;     /* [cmax][V]     right-hand side R, then U */
    float *Kd;    /* [cmax][K]     diag(e^{a_c - a}) K (gated only) */
    float *QT;    /* [K][cmax]     Q of the chunk, transposed */
    float *KT;    /* [K][cmax]     K of the chunk, transposed */
    float *bt;    /* [cmax]        beta of the chunk's tokens */
    float *dw;    /* [cmax]        scratch of recur__decay_* */
    float *du;    /* [cmax]        scratch of recur__decay_* */
    double *a;    /* [cmax]        cumulative log-gates */
    void *mem;    /* the block to free: NULL for the thread's (recur__chunk_carve, chunk_work.h) */
} dr_work;

/* n1 * n2 * size without overflow, or 0 on overflow. */
static size_t dr_bytes(uint64_t n1, uint64_t n2, size_t size)
{
    if (n1 && n2 > SIZE_MAX / n1)
        return 0;
    uint64_t n = n1 * n2;
    if (n && size > SIZE_MAX / n)
        return 0;
    return (size_t)(n * size);
}

/* Carve one block (the thread's, reused call after call, up to RECUR_CHUNK_WORK_MAX) into the
 * pieces above, each 64-byte aligned; RECUR_ESHAPE when the sizes overflow, RECUR_ENOMEM. */
static int dr_work_alloc(dr_work *w, int64_t cmax, int K, int V)
{
    memset(w, 0, sizeof *w);
    w->cmax = cmax;
    if (cmax > INT32_MAX) /* recur__mm takes int sizes */
        return RECUR_ESHAPE;
    const size_t bB = dr_bytes(cmax, cmax, sizeof(float));
    if (!bB)
        return RECUR_ESHAPE;
    const size_t c = (size_t)cmax;
    /* B U Kd QT KT bt dw du a */
    const size_t sizes[9] = {bB, c * V * sizeof(float), c * K * sizeof(float), c * K * sizeof(float),
                             c * K * sizeof(float), c * sizeof(float), c * sizeof(float),
                             c * sizeof(float), c * sizeof(double)};
    size_t off[9];
    char *m;
    const int rc = recur__chunk_carve(sizes, 9, off, &m, &w->mem);
    if (rc)
        return rc;
    float **f[8] = {&w->B, &w->U, &w->Kd, &w->QT, &w->KT, &w->bt, &w->dw, &w->du};
    for (int i = 0; i < 8; i++)
        *f[i] = (float *)(m + off[i]);
    w->a = (double *)(m + off[8]);
    return RECUR_OK;
}

/* One chunk [t0, t0 + c) of one head h; Sh [K][V] holds S0 on entry and S_c on return.
 * The two c x c matrices share one buffer B, so the parallel form (c = T) needs T^2 floats, not
 * twice that:  B[t][s] = A[t][s] for s < t,  B[s][t] = M[t][s] for s <= t (M stored transposed).
 * Every product is recur__mm (chunk_mm.h), which writes exactly the triangle asked for. */
static void dr_chunk(const recur_dims *d, dr_work *w, int h, int64_t t0, int c, const float *q,
                     const float *k, const float *v, const float *beta, const float *g, float scale,
                     float *Sh, float *o)
{
    const int H = d->H, K = d->K, V = d->V;
    const int ldk = H * K, ldv = H * V;
    const int64_t ldb = c; /* B is c x c for this chunk */
    const float *Qc = q + ((size_t)t0 * H + h) * K; /* [c][K], row stride H*K */
    const float *Kc = k + ((size_t)t0 * H + h) * K; /* [c][K], row stride H*K */
    const float *Vc = v + ((size_t)t0 * H + h) * V; /* [c][V], row stride H*V */
    float *Oc = o + ((size_t)t0 * H + h) * V;       /* [c][V], row stride H*V */
    float *B = w->B, *U = w->U, *bt = w->bt;
    double *a = w->a;

    /* a_t = sum_{s<=t} g_s  inside the chunk (0 for DeltaNet);  b_t gathered */
    double acc = 0.0;
    for (int t = 0; t < c; t++) {
        if (g)
            acc += g[(t0 + t) * H + h];
        a[t] = acc;
        bt[t] = beta[(t0 + t) * H + h];
    }
    recur__transpose(Qc, ldk, c, K, w->QT, c);
    recur__transpose(Kc, ldk, c, K, w->KT, c);

    /* O = scale diag(e^a) Q S0   (the rest, M U, is added at the end) */
    recur__mm(c, V, K, scale, Qc, ldk, 1, Sh, V, 0.0f, Oc, ldv, 0, 0);
    if (g)
        for (int t = 0; t < c; t++) {
            const float f = recur__exp_nonpos((float)a[t]);
            float *Ot = Oc + (size_t)t * ldv;
            for (int j = 0; j < V; j++)
                Ot[j] *= f;
        }

    /* R = diag(b) (V - diag(e^a) K S0) */
    recur__mm(c, V, K, 1.0f, Kc, ldk, 1, Sh, V, 0.0f, U, V, 0, 0);
    for (int t = 0; t < c; t++) {
        const float ea = g ? recur__exp_nonpos((float)a[t]) : 1.0f;
        const float *vt = Vc + (size_t)t * ldv;
        float *Ut = U + (size_t)t * V;
        for (int j = 0; j < V; j++)
            Ut[j] = bt[t] * (vt[j] - ea * Ut[j]);
    }

    /* B[s][t] = scale k_s.q_t  (t >= s: M^T);  B[t][s] = k_t.k_s  (s < t: A before decay) */
    recur__mm(c, c, K, scale, Kc, ldk, 1, w->QT, c, 0.0f, B, ldb, RECUR_MM_C_UPPER, -1);
    recur__mm(c, c, K, 1.0f, Kc, ldk, 1, w->KT, c, 0.0f, B, ldb, RECUR_MM_C_LOWER, -1);

    /* A[t][s] = b_t e^{a_t - a_s} k_t.k_s  (row t, s < t)
     * M[t][s] = scale e^{a_t - a_s} q_t.k_s stored at B[s][t] (row s, t > s; the diagonal needs
     * no decay) */
    if (g) {
        recur__decay_rows(B, ldb, 0, c, 1, a, 1.0f, bt, w->dw, w->du);
        recur__decay_cols(B, ldb, c, a, w->dw, w->du);
    } else {
        for (int r = 1; r < c; r++) {
            float *Br = B + (size_t)r * ldb;
            for (int s = 0; s < r; s++)
                Br[s] *= bt[r];
        }
    }

    /* (I + A) U = R */
    recur__solve_unit_lower(c, V, B, ldb, U);

    /* S_c = e^{a_c} S0 + (diag(e^{a_c - a}) K)^T U   (K read transposed in place) */
    if (g) {
        const double ac = a[c - 1];
        const float ec = recur__exp_nonpos((float)ac);
        for (size_t i = 0; i < (size_t)K * V; i++)
            Sh[i] *= ec;
        for (int s = 0; s < c; s++) {
            const float f = recur__exp_nonpos((float)(ac - a[s]));
            const float *ks = Kc + (size_t)s * ldk;
            float *kd = w->Kd + (size_t)s * K;
            for (int i = 0; i < K; i++)
                kd[i] = f * ks[i];
        }
        recur__mm(K, V, c, 1.0f, w->Kd, 1, K, U, V, 1.0f, Sh, V, 0, 0);
    } else {
        recur__mm(K, V, c, 1.0f, Kc, 1, ldk, U, V, 1.0f, Sh, V, 0, 0);
    }

    /* O += M U   (M lower with its diagonal, read from B's upper triangle: M(t,s) = B[s][t]) */
    recur__mm(c, V, c, 1.0f, B, 1, ldb, U, V, 1.0f, Oc, ldv, RECUR_MM_A_LOWER, 0);
}

/* ---------------------------------------------------------------- entry point */

int recur_delta_rule(const recur_dims *d, const float *q, const float *k, const float *v,
                     const float *beta, const float *g, float scale, recur_form form,
                     int64_t chunk_size, float *S, float *o)
{
    int err = dr_check(d, q, k, v, beta, g, scale, form, chunk_size, S, o);
    if (err)
        return err;
    if (d->T == 0)
        return RECUR_OK;
    recur__resolve_scale(scale, d->K, &scale); /* finite: checked */

    if (form == RECUR_FORM_RECURRENT) {
        dr_recurrent(d, q, k, v, beta, g, scale, S, o);
        return RECUR_OK;
    }

    int64_t C = form == RECUR_FORM_PARALLEL ? d->T : chunk_size;
    if (C > d->T)
        C = d->T;
    dr_work w;
    err = dr_work_alloc(&w, C, d->K, d->V);
    if (err)
        return err;
    /* Chunks run in order (each needs its predecessor's S); inside a chunk the heads are
     * independent. Heads inner: a chunk's rows [c][H][K] are read once, front to back. The next
     * chunk's rows (and o's) are prefetched by the products where they can (chunk_ahead.h); what
     * is left, on other paths all of q k v, is read front to back before the chunk's steps. */
    recur__ahead ah;
    const int by_mm = recur__mm_ahead_bind(&ah);
    const float *const in[4] = {q, k, v, o};
    static const unsigned char is_v[4] = {0, 0, 1, 1};
    const int na = by_mm ? 4 : 3;
    recur__ahead_chunk(&ah, in, is_v, na, d->T, d->H, d->K, d->V, 0, C, 0);
    for (int64_t t0 = 0; t0 < d->T; t0 += C) {
        const int c = (int)(d->T - t0 < C ? d->T - t0 : C); /* the tail chunk shrinks */
        volatile float sink = recur__ahead_rest(&ah);
        (void)sink;
        recur__ahead_chunk(&ah, in, is_v, na, d->T, d->H, d->K, d->V, t0 + c, C, 0);
        for (int h = 0; h < d->H; h++) {
            dr_chunk(d, &w, h, t0, c, q, k, v, beta, g, scale, S + (size_t)h * d->K * d->V, o);
        }
    }
    recur__mm_ahead_bind(NULL);
    free(w.mem);
    return RECUR_OK;
}
