/*
 * softmax_attention.c — causal softmax attention (the baseline of DESIGN.md §3): the whole
 * sequence at once, and one decode step over a caller-owned KV cache.
 *
 *   o_t = sum_{j<=t} p_tj v_j,   p_tj = exp(s_tj - m_t) / sum_{i<=t} exp(s_ti - m_t),
 *   s_tj = scale q_t.k_j,        m_t = max_{j<=t} s_tj
 * Subtracting the row maximum m_t keeps every exponent <= 0.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "exp_nonpos.h"
#include "recur.h"

/* Query rows per block of the full form: the score block is [SA_QBLOCK][T] floats. */
#define SA_QBLOCK 64
/* Keys per block of the decode step: the weight block lives on the stack. */
#define SA_KBLOCK 256

static int sa_check_dims(const recur_dims *d, int64_t T)
{
    if (T < 0 || d->H < 1 || d->K < 1 || d->V < 1 || d->H > RECUR_MAX_DIM ||
        d->K > RECUR_MAX_DIM || d->V > RECUR_MAX_DIM)
        return RECUR_ESHAPE;
    int64_t row = (int64_t)d->H * (d->K > d->V ? d->K : d->V);
    if (T > INT64_MAX / row || (uint64_t)(T * row) > SIZE_MAX / sizeof(float))
        return RECUR_ESHAPE;
    return RECUR_OK;
}

/* ---------------------------------------------------------------- row helpers (vectorisable) */

/* max_j x[j] (n >= 1) on order-preserving integer keys: for IEEE floats, flipping the magnitude
 * bits of negatives makes signed-integer order equal float order (-0 < +0, NaN at the ends), and
 * an integer max vectorises where a float compare-and-select does not (GCC, -ftrapping-math). */
static float sa_max(const float *x, int64_t n)
{
    int32_t best = INT32_MIN;
    for (int64_t j = 0; j < n; j++) {
        int32_t b;
        memcpy(&b, &x[j], sizeof b);
        const int32_t key = b ^ ((b >> 31) & 0x7fffffff);
        best = key > best ? key : best;
    }
    const int32_t b = best ^ ((best >> 31) & 0x7fffffff);
    float m;
    memcpy(&m, &b, sizeof m);
    return m;
}

typedef double sa_v8d __attribute__((vector_size(64)));
typedef float sa_v8f __attribute__((vector_size(32)));

/* sum_j x[j] in float64, eight lanes then the lanes in order, then the tail */
static double sa_sum(const float *x, int64_t n)
{
    sa_v8d acc = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        sa_v8f f;
        memcpy(&f, x + j, sizeof f);
        acc += __builtin_convertvector(f, sa_v8d);
    }
    double s = 0.0;
    for (int l = 0; l < 8; l++)
        s += acc[l];
    for (; j < n; j++)
        s += x[j];
    return s;
}

/* ---------------------------------------------------------------- whole sequence */

int recur_softmax_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                            float scale, float *o)
{
    if (!d || !q || !k || !v || !o)
        return RECUR_EINVAL;
    int err = sa_check_dims(d, d->T);
    if (err)
        return err;
    if (!isfinite(scale))
        return RECUR_ENONFINITE;
    const int64_t T = d->T;
    const int H = d->H, K = d->K, V = d->V;
    if (T == 0)
        return RECUR_OK;
    if (T > INT32_MAX) /* blasint is a 32-bit int */
        return RECUR_ESHAPE;
    if (scale <= 0.0f)
        scale = (float)(1.0 / sqrt((double)K)); /* K^-1/2 */

    const int64_t qb = T < SA_QBLOCK ? T : SA_QBLOCK;
    float *P = malloc((size_t)qb * (size_t)T * sizeof(float)); /* [qb][T] scores, then weights */
    float linv[SA_QBLOCK];                                    /* 1 / l_t of the block's rows */
    if (!P)
        return RECUR_ENOMEM;
    const int ldk = H * K, ldv = H * V;
    for (int h = 0; h < H; h++) {
        for (int64_t t0 = 0; t0 < T; t0 += qb) {
            const int nq = (int)(T - t0 < qb ? T - t0 : qb);
            const int nk = (int)(t0 + nq); /* keys 0 .. t0+nq-1 can be seen by this block */
            const float *Qb = q + ((size_t)t0 * H + h) * K;
            float *Ob = o + ((size_t)t0 * H + h) * V;
            /* s_tj = scale q_t.k_j   for the block's queries and every key up to its last query */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, K, scale, Qb, ldk,
                        k + h * K, ldk, 0.0f, P, nk);
            /* e_tj = exp(s_tj - m_t) for j <= t, 0 for j > t;  l_t = sum_j e_tj */
            for (int r = 0; r < nq; r++) {
                float *Pr = P + (size_t)r * nk;
                const int64_t n = t0 + r + 1; /* keys 0 .. t */
                const float m = sa_max(Pr, n);
                for (int64_t j = 0; j < n; j++)
                    Pr[j] = recur__exp_nonpos(Pr[j] - m);
                for (int64_t j = n; j < nk; j++)
                    Pr[j] = 0.0f;
                linv[r] = (float)(1.0 / sa_sum(Pr, n));
            }
            /* o_t = (sum_j e_tj v_j) / l_t */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, V, nk, 1.0f, P, nk,
                        v + h * V, ldv, 0.0f, Ob, ldv);
            for (int r = 0; r < nq; r++)
                for (int c = 0; c < V; c++)
                    Ob[(size_t)r * ldv + c] *= linv[r];
        }
    }
    free(P);
    return RECUR_OK;
}

/* ---------------------------------------------------------------- one decode step */

int recur_softmax_attention_step(const recur_dims *d, const float *q, const float *k,
                                 const float *v, float scale, float *k_cache, float *v_cache,
                                 int64_t pos, int64_t max_len, float *o)
{
    if (!d || !q || !k || !v || !k_cache || !v_cache || !o)
        return RECUR_EINVAL;
    if (max_len < 0)
        return RECUR_ESHAPE;
    int err = sa_check_dims(d, max_len);
    if (err)
        return err;
    if (pos < 0)
        return RECUR_EINVAL;
    if (!isfinite(scale))
        return RECUR_ENONFINITE;
    if (pos >= max_len)
        return RECUR_ECONTEXT;
    const int H = d->H, K = d->K, V = d->V;
    if (scale <= 0.0f)
        scale = (float)(1.0 / sqrt((double)K)); /* K^-1/2 */

    /* the cache absorbs (k_t, v_t) at pos */
    for (size_t i = 0; i < (size_t)H * K; i++)
        k_cache[(size_t)pos * H * K + i] = k[i];
    for (size_t i = 0; i < (size_t)H * V; i++)
        v_cache[(size_t)pos * H * V + i] = v[i];

    /* One pass over the cache in blocks of SA_KBLOCK keys, with a running maximum (the online
     * softmax of flash-decoding), so the step needs no heap memory:
     *   s_j = scale q.k_j (sgemv);  m' = max(m, max_j s_j);  o, l *= exp(m - m');
     *   w_j = exp(s_j - m');  l += sum_j w_j;  o += sum_j w_j v_j (sgemv);  finally o /= l.
     * Every exponent is <= 0. */
    const int ldk = H * K, ldv = H * V;
    float w[SA_KBLOCK];
    for (int h = 0; h < H; h++) {
        const float *qh = q + (size_t)h * K;
        float *oh = o + (size_t)h * V;
        float m = -INFINITY;
        double l = 0.0;
        for (int c = 0; c < V; c++)
            oh[c] = 0.0f;
        for (int64_t j0 = 0; j0 <= pos; j0 += SA_KBLOCK) {
            const int n = (int)(pos + 1 - j0 < SA_KBLOCK ? pos + 1 - j0 : SA_KBLOCK);
            memset(w, 0, sizeof w); /* beta = 0 has let stale NaNs through (OpenBLAS #929, #2496) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, K, scale,
                        k_cache + ((size_t)j0 * H + h) * K, ldk, qh, 1, 0.0f, w, 1);
            const float mb = sa_max(w, n);
            if (mb > m) {
                const float f = expf(m - mb); /* 0 on the first block (m = -inf) */
                for (int c = 0; c < V; c++)
                    oh[c] *= f;
                l *= f;
                m = mb;
            }
            for (int j = 0; j < n; j++)
                w[j] = recur__exp_nonpos(w[j] - m);
            l += sa_sum(w, n);
            cblas_sgemv(CblasRowMajor, CblasTrans, n, V, 1.0f, v_cache + ((size_t)j0 * H + h) * V,
                        ldv, w, 1, 1.0f, oh, 1);
        }
        const float inv = (float)(1.0 / l);
        for (int c = 0; c < V; c++)
            oh[c] *= inv;
    }
    return RECUR_OK;
}
