/*
 * delta_rule.c — DeltaNet and gated DeltaNet (DESIGN.md §3), three forms.
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
 * (strictly lower, so I + A is unit lower triangular: a forward substitution, dr_solve). Then
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
 * 2026-11-29, with strsm; the blocked substitution of dr_solve passes the same float64 tests),
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

#include "chunk_decay.h"
#include "chunk_mm.h"
#include "exp_nonpos.h"
#include "recur.h"

/* ---------------------------------------------------------------- validation */

/* Everything is checked before anything is written: on error S and o are untouched. */
static int dr_check(const recur_dims *d, const float *q, const float *k, const float *v,
                    const float *beta, const float *g, float scale, recur_form form,
                    int64_t chunk_size, const float *S, const float *o)
{
    if (!d || !q || !k || !v || !beta || !S || !o)
        return RECUR_EINVAL;
    if (form != RECUR_FORM_RECURRENT && form != RECUR_FORM_PARALLEL && form != RECUR_FORM_CHUNKWISE)
        return RECUR_EINVAL;
    if (d->T < 0 || d->H < 1 || d->K < 1 || d->V < 1 || d->H > RECUR_MAX_DIM ||
        d->K > RECUR_MAX_DIM || d->V > RECUR_MAX_DIM)
        return RECUR_ESHAPE;
    if (form == RECUR_FORM_CHUNKWISE && chunk_size < 1)
        return RECUR_ESHAPE; /* as the other mixers (gated_linear.c) */
    int64_t row = (int64_t)d->H * (d->K > d->V ? d->K : d->V); /* <= 2^24 */
    if (d->T > INT64_MAX / row || (uint64_t)(d->T * row) > SIZE_MAX / sizeof(float))
        return RECUR_ESHAPE;
    /* Non-finite anywhere wins over out-of-range anywhere, whatever their order. */
    const int64_t n = d->T * d->H;
    int nonfinite = !isfinite(scale), range = 0;
    for (int64_t i = 0; i < n; i++) {
        nonfinite |= !isfinite(beta[i]);
        range |= !(beta[i] > 0.0f && beta[i] <= 1.0f);
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

/* Column tiles of DR_TILE = 32 state columns held as two 16-float vectors (GCC/clang vector
 * extensions: one zmm with AVX-512, split into ymm/xmm otherwise). The tile's accumulators stay
 * in registers across the row loop; a V-long accumulator array in memory made every row wait on
 * the previous row's store (measured 3x slower). */
#define DR_TILE 32
typedef float dr_v16 __attribute__((vector_size(64)));

static inline dr_v16 dr_load(const float *p)
{
    dr_v16 x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void dr_store(float *p, dr_v16 x)
{
    memcpy(p, &x, sizeof x);
}

/* r[0..w) = S[:, j0..j0+w)^T k,  S [K][V] */
static inline void dr_tile_stk(const float *restrict S, int K, int V, int j0, int w,
                               const float *restrict kt, float *restrict r)
{
    if (w == DR_TILE) {
        dr_v16 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0};
        int i = 0;
        for (; i + 1 < K; i += 2) {
            const float *S0 = S + (size_t)i * V + j0, *S1 = S0 + V;
            a0 += kt[i] * dr_load(S0);
            a1 += kt[i] * dr_load(S0 + 16);
            b0 += kt[i + 1] * dr_load(S1);
            b1 += kt[i + 1] * dr_load(S1 + 16);
        }
        if (i < K) {
            const float *S0 = S + (size_t)i * V + j0;
            a0 += kt[i] * dr_load(S0);
            a1 += kt[i] * dr_load(S0 + 16);
        }
        dr_store(r, a0 + b0);
        dr_store(r + 16, a1 + b1);
        return;
    }
    for (int j = 0; j < w; j++)
        r[j] = 0.0f;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < w; j++)
            r[j] += kt[i] * S[(size_t)i * V + j0 + j];
}

/* S[:, tile] = eg S[:, tile] + k u[tile]^T  and  r[tile] = S[:, tile]^T q  (new S) */
static inline void dr_tile_update(float *restrict S, int K, int V, int j0, int w, float eg,
                                  const float *restrict kt, const float *restrict u,
                                  const float *restrict qt, float *restrict r)
{
    if (w == DR_TILE) {
        const dr_v16 u0 = dr_load(u), u1 = dr_load(u + 16);
        dr_v16 a0 = {0}, a1 = {0};
        for (int i = 0; i < K; i++) {
            float *Si = S + (size_t)i * V + j0;
            const dr_v16 s0 = eg * dr_load(Si) + kt[i] * u0;
            const dr_v16 s1 = eg * dr_load(Si + 16) + kt[i] * u1;
            dr_store(Si, s0);
            dr_store(Si + 16, s1);
            a0 += qt[i] * s0;
            a1 += qt[i] * s1;
        }
        dr_store(r, a0);
        dr_store(r + 16, a1);
        return;
    }
    for (int j = 0; j < w; j++)
        r[j] = 0.0f;
    for (int i = 0; i < K; i++) {
        float *Si = S + (size_t)i * V + j0;
        for (int j = 0; j < w; j++) {
            const float sij = eg * Si[j] + kt[i] * u[j];
            Si[j] = sij;
            r[j] += qt[i] * sij;
        }
    }
}

/* Token by token: per head and token, two passes over the state, tile by tile. */
static void dr_recurrent(const recur_dims *d, const float *q, const float *k, const float *v,
                         const float *beta, const float *g, float scale, float *S, float *o)
{
    const int H = d->H, K = d->K, V = d->V;
    float u[RECUR_MAX_DIM], acc[DR_TILE];
    for (int64_t t = 0; t < d->T; t++) {
        for (int h = 0; h < H; h++) {
            const float *kt = k + ((size_t)t * H + h) * K; /* [K] */
            const float *qt = q + ((size_t)t * H + h) * K; /* [K] */
            const float *vt = v + ((size_t)t * H + h) * V; /* [V] */
            float *ot = o + ((size_t)t * H + h) * V;       /* [V] */
            float *Sh = S + (size_t)h * K * V;             /* [K][V] */
            const float b = beta[t * H + h];
            const float eg = g ? expf(g[t * H + h]) : 1.0f; /* g <= 0 */

            /* u = b (v - S'^T k) = b (v - e^g S^T k),  S' = e^g S */
            for (int j0 = 0; j0 < V; j0 += DR_TILE) {
                const int w = V - j0 < DR_TILE ? V - j0 : DR_TILE;
                dr_tile_stk(Sh, K, V, j0, w, kt, u + j0);
                for (int j = 0; j < w; j++)
                    u[j0 + j] = b * (vt[j0 + j] - eg * u[j0 + j]);
            }
            /* S = S' + k u^T ;  o = scale S^T q */
            for (int j0 = 0; j0 < V; j0 += DR_TILE) {
                const int w = V - j0 < DR_TILE ? V - j0 : DR_TILE;
                dr_tile_update(Sh, K, V, j0, w, eg, kt, u + j0, qt, acc);
                for (int j = 0; j < w; j++)
                    ot[j0 + j] = scale * acc[j];
            }
        }
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
} dr_work;

static void dr_work_free(dr_work *w)
{
    free(w->B);
    free(w->U);
    free(w->Kd);
    free(w->QT);
    free(w->KT);
    free(w->bt);
    free(w->dw);
    free(w->du);
    free(w->a);
}

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

static int dr_work_alloc(dr_work *w, int64_t cmax, int K, int V)
{
    memset(w, 0, sizeof *w);
    w->cmax = cmax;
    if (cmax > INT32_MAX) /* recur__mm takes int sizes */
        return RECUR_ESHAPE;
    size_t bB = dr_bytes(cmax, cmax, sizeof(float));
    if (!bB)
        return RECUR_ESHAPE;
    w->B = malloc(bB);
    w->U = malloc((size_t)cmax * V * sizeof(float));
    w->Kd = malloc((size_t)cmax * K * sizeof(float));
    w->QT = malloc((size_t)cmax * K * sizeof(float));
    w->KT = malloc((size_t)cmax * K * sizeof(float));
    w->bt = malloc((size_t)cmax * sizeof(float));
    w->dw = malloc((size_t)cmax * sizeof(float));
    w->du = malloc((size_t)cmax * sizeof(float));
    w->a = malloc((size_t)cmax * sizeof(double));
    if (!w->B || !w->U || !w->Kd || !w->QT || !w->KT || !w->bt || !w->dw || !w->du || !w->a) {
        dr_work_free(w);
        return RECUR_ENOMEM;
    }
    return RECUR_OK;
}

/* Rows of the diagonal blocks of the forward substitution; the blocks below them are one
 * recur__mm each. */
#define DR_NB 16

/* (I + A) U = R in place on U [c][V] (row stride V); A strictly lower, A[t][s] at B[t*ldb + s].
 * Blocked forward substitution:  U_J -= A[J, 0:J0] U[0:J0]  (one product), then inside J
 *   u_t -= sum_{J0 <= s < t} A[t][s] u_s,   t = J0+1 .. J1-1
 * with 16 columns of u_t held in a register while s runs. */
static void dr_solve(int c, int V, const float *B, int64_t ldb, float *U)
{
    for (int J0 = 0; J0 < c; J0 += DR_NB) {
        const int J1 = J0 + DR_NB < c ? J0 + DR_NB : c;
        if (J0 > 0)
            recur__mm(J1 - J0, V, J0, -1.0f, B + (size_t)J0 * ldb, ldb, 1, U, V, 1.0f,
                      U + (size_t)J0 * V, V, 0, 0);
        for (int t = J0 + 1; t < J1; t++) {
            const float *At = B + (size_t)t * ldb;
            float *Ut = U + (size_t)t * V;
            int j = 0;
            for (; j + 16 <= V; j += 16) {
                dr_v16 acc = dr_load(Ut + j);
                for (int s = J0; s < t; s++)
                    acc -= At[s] * dr_load(U + (size_t)s * V + j);
                dr_store(Ut + j, acc);
            }
            for (; j < V; j++) {
                float x = Ut[j];
                for (int s = J0; s < t; s++)
                    x -= At[s] * U[(size_t)s * V + j];
                Ut[j] = x;
            }
        }
    }
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
    dr_solve(c, V, B, ldb, U);

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
    if (scale <= 0.0f)
        scale = (float)(1.0 / sqrt((double)d->K)); /* K^-1/2 */

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
     * independent. Heads inner: a chunk's rows [c][H][K] are read once, front to back. */
    for (int64_t t0 = 0; t0 < d->T; t0 += C) {
        const int c = (int)(d->T - t0 < C ? d->T - t0 : C); /* the tail chunk shrinks */
        /* the chunk's rows of every head, streamed in front to back (recur__touch) */
        const size_t nk = (size_t)c * d->H * d->K, nv = (size_t)c * d->H * d->V;
        const size_t rk = (size_t)t0 * d->H * d->K, rv = (size_t)t0 * d->H * d->V;
        volatile float sink =
            recur__touch(q + rk, nk) + recur__touch(k + rk, nk) + recur__touch(v + rv, nv);
        (void)sink;
        for (int h = 0; h < d->H; h++) {
            dr_chunk(d, &w, h, t0, c, q, k, v, beta, g, scale, S + (size_t)h * d->K * d->V, o);
        }
    }
    dr_work_free(&w);
    return RECUR_OK;
}
