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
 * (strictly lower, so I + A is unit lower triangular: one strsm). Then
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
 * 2026-11-29), so there is no float64 path. Its memory is one T x T float matrix (see dr_chunk).
 *
 * Cost (why chunkwise does not beat recurrent here): per token and head, chunkwise does 3KV
 * multiply-adds for the state products (K S0, Q S0, K^T U), exactly what the fused recurrent step
 * does, plus c (1.5 K + V) for the in-chunk matrices (Q K^T, K K^T, strsm, strmm): 1.8x the
 * recurrent work at c = 64, K = V = 64. So chunkwise wins only where sgemm runs that much faster
 * than the fused, vectorised recurrent loop, which on this machine it does not. Measured
 * 2026-11-29 (H=4, K=V=64, T=16k, 1 thread, CPU time): recurrent 35 ms, chunkwise 43 / 47 / 55 /
 * 74 ms at c = 16 / 32 / 64 / 128 (PyTorch's chunkwise of the same op, c = 64: 2-4x slower).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

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
    float *B;     /* [cmax][cmax]  lower + diagonal: M;  strictly upper: A^T (see dr_chunk) */
    float *U;     /* [cmax][V]     right-hand side R, then U, then M U */
    float *Kd;    /* [cmax][K]     diag(e^{a_c - a}) K (gated only) */
    float *bt;    /* [cmax]        beta of the chunk's tokens */
    float *dg;    /* [cmax]        the diagonal of M, kept while ssyrk overwrites it */
    double *a;    /* [cmax]        cumulative log-gates */
} dr_work;

static void dr_work_free(dr_work *w)
{
    free(w->B);
    free(w->U);
    free(w->Kd);
    free(w->bt);
    free(w->dg);
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
    if (cmax > INT32_MAX) /* blasint is a 32-bit int */
        return RECUR_ESHAPE;
    size_t bB = dr_bytes(cmax, cmax, sizeof(float));
    if (!bB)
        return RECUR_ESHAPE;
    w->B = malloc(bB);
    w->U = malloc((size_t)cmax * V * sizeof(float));
    w->Kd = malloc((size_t)cmax * K * sizeof(float));
    w->bt = malloc((size_t)cmax * sizeof(float));
    w->dg = malloc((size_t)cmax * sizeof(float));
    w->a = malloc((size_t)cmax * sizeof(double));
    if (!w->B || !w->U || !w->Kd || !w->bt || !w->dg || !w->a) {
        dr_work_free(w);
        return RECUR_ENOMEM;
    }
    return RECUR_OK;
}

/* One chunk [t0, t0 + c) of one head h; Sh [K][V] holds S0 on entry and S_c on return.
 * The two c x c matrices share one buffer B, so the parallel form (c = T) needs T^2 floats, not
 * twice that:  B[t][s] = M[t][s] for s <= t,  B[s][t] = A[t][s] for s < t (A stored transposed). */
static void dr_chunk(const recur_dims *d, dr_work *w, int h, int64_t t0, int c, const float *q,
                     const float *k, const float *v, const float *beta, const float *g, float scale,
                     float *Sh, float *o)
{
    const int H = d->H, K = d->K, V = d->V;
    const int ldk = H * K, ldv = H * V;
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

    /* O = scale diag(e^a) Q S0   (the rest, M U, is added at the end) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, V, K, 1.0f, Qc, ldk, Sh, V, 0.0f, Oc,
                ldv);
    for (int t = 0; t < c; t++) {
        const float f = scale * (g ? recur__exp_nonpos((float)a[t]) : 1.0f);
        float *Ot = Oc + (size_t)t * ldv;
        for (int j = 0; j < V; j++)
            Ot[j] *= f;
    }

    /* R = diag(b) (V - diag(e^a) K S0) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, V, K, 1.0f, Kc, ldk, Sh, V, 0.0f, U,
                V);
    for (int t = 0; t < c; t++) {
        const float ea = g ? recur__exp_nonpos((float)a[t]) : 1.0f;
        const float *vt = Vc + (size_t)t * ldv;
        float *Ut = U + (size_t)t * V;
        for (int j = 0; j < V; j++)
            Ut[j] = bt[t] * (vt[j] - ea * Ut[j]);
    }

    /* B = scale Q K^T, then its strict upper triangle <- K K^T (ssyrk writes the upper triangle
     * with the diagonal: the diagonal of scale Q K^T is kept aside and put back) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c, c, K, scale, Qc, ldk, Kc, ldk, 0.0f, B,
                c);
    for (int t = 0; t < c; t++)
        w->dg[t] = B[(size_t)t * c + t];
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, c, K, 1.0f, Kc, ldk, 0.0f, B, c);
    for (int t = 0; t < c; t++)
        B[(size_t)t * c + t] = w->dg[t];

    /* M[t][s] = scale e^{a_t - a_s} q_t.k_s  (row t, s < t; the diagonal needs no decay)
     * A[t][s] = b_t e^{a_t - a_s} k_t.k_s   stored at B[s][t] (row s, t > s) */
    for (int r = 0; r < c; r++) {
        float *Br = B + (size_t)r * c;
        if (g) {
            for (int s = 0; s < r; s++)
                Br[s] *= recur__exp_nonpos((float)(a[r] - a[s]));
            for (int t = r + 1; t < c; t++)
                Br[t] *= bt[t] * recur__exp_nonpos((float)(a[t] - a[r]));
        } else {
            for (int t = r + 1; t < c; t++)
                Br[t] *= bt[t];
        }
    }

    /* (I + A) U = R:  A = (strict upper of B)^T, unit lower triangular system; the diagonal and
     * the lower part of B are not read */
    cblas_strsm(CblasRowMajor, CblasLeft, CblasUpper, CblasTrans, CblasUnit, c, V, 1.0f, B, c, U,
                V);

    /* S_c = e^{a_c} S0 + (diag(e^{a_c - a}) K)^T U */
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
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, V, c, 1.0f, w->Kd, K, U, V, 1.0f,
                    Sh, V);
    } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, V, c, 1.0f, Kc, ldk, U, V, 1.0f,
                    Sh, V);
    }

    /* O += M U  (M lower triangular with its diagonal: strmm in place on U, which is done) */
    cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, c, V, 1.0f, B, c,
                U, V);
    for (int t = 0; t < c; t++) {
        const float *Ut = U + (size_t)t * V;
        float *Ot = Oc + (size_t)t * ldv;
        for (int j = 0; j < V; j++)
            Ot[j] += Ut[j];
    }
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
        for (int h = 0; h < d->H; h++)
            dr_chunk(d, &w, h, t0, c, q, k, v, beta, g, scale, S + (size_t)h * d->K * d->V, o);
    }
    dr_work_free(&w);
    return RECUR_OK;
}
