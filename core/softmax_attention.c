/*
 * softmax_attention.c — causal softmax attention (the baseline of docs/DESIGN.md §3): the whole
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
#include "mixer.h"

/* Keys per block of the decode step: the weight block lives on the stack. */
#define SA_KBLOCK 256

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

/* T query rows at positions pos0 + t against the cache's keys [0, pos0 + t] (mixer.h), a block of
 * RECUR__SOFTMAX_QBLOCK query rows at a time, per head:
 *   s_tj = scale q_t.k_j (sgemm, for every key up to the block's last query);
 *   e_tj = exp(s_tj - m_t) for j <= pos0 + t, else 0;  l_t = sum_j e_tj;
 *   o_t = (sum_j e_tj v_j) / l_t (sgemm).   m_t = max_j s_tj: every exponent is <= 0. */
void recur__softmax_rows(int H, int K, int V, const float *q, float scale, const float *k_cache,
                         const float *v_cache, int64_t pos0, int64_t T, float *P, float *o)
{
    const int64_t qb = T < RECUR__SOFTMAX_QBLOCK ? T : RECUR__SOFTMAX_QBLOCK;
    float linv[RECUR__SOFTMAX_QBLOCK]; /* 1 / l_t of the block's rows */
    const int ldk = H * K, ldv = H * V;
    for (int h = 0; h < H; h++) {
        for (int64_t t0 = 0; t0 < T; t0 += qb) {
            const int nq = (int)(T - t0 < qb ? T - t0 : qb);
            const int nk = (int)(pos0 + t0 + nq); /* keys this block's queries can see */
            const float *Qb = q + ((size_t)t0 * H + h) * K;
            float *Ob = o + ((size_t)t0 * H + h) * V;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, K, scale, Qb, ldk,
                        k_cache + h * K, ldk, 0.0f, P, nk);
            for (int r = 0; r < nq; r++) {
                float *Pr = P + (size_t)r * nk;
                const int64_t n = pos0 + t0 + r + 1; /* keys 0 .. pos0 + t */
                const float m = sa_max(Pr, n);
                for (int64_t j = 0; j < n; j++)
                    Pr[j] = recur__exp_nonpos(Pr[j] - m);
                for (int64_t j = n; j < nk; j++)
                    Pr[j] = 0.0f;
                linv[r] = (float)(1.0 / sa_sum(Pr, n));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, V, nk, 1.0f, P, nk,
                        v_cache + h * V, ldv, 0.0f, Ob, ldv);
            for (int r = 0; r < nq; r++)
                for (int c = 0; c < V; c++)
                    Ob[(size_t)r * ldv + c] *= linv[r];
        }
    }
}

int recur_softmax_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                            float scale, float *o)
{
    if (!d || !q || !k || !v || !o)
        return RECUR_EINVAL;
    int err = recur__check_dims(d);
    if (err)
        return err;
    if ((err = recur__resolve_scale(scale, d->K, &scale)))
        return err;
    const int64_t T = d->T;
    if (T == 0)
        return RECUR_OK;
    if (T > INT32_MAX) /* blasint is a 32-bit int */
        return RECUR_ESHAPE;
    const int64_t qb = T < RECUR__SOFTMAX_QBLOCK ? T : RECUR__SOFTMAX_QBLOCK;
    float *P = malloc((size_t)qb * (size_t)T * sizeof(float)); /* [qb][T] scores, then weights */
    if (!P)
        return RECUR_ENOMEM;
    recur__softmax_rows(d->H, d->K, d->V, q, scale, k, v, 0, T, P, o);
    free(P);
    return RECUR_OK;
}

/* ---------------------------------------------------------------- one decode step */

/* One query per head against keys [0, pos] (mixer.h): one pass over the cache in blocks of
 * SA_KBLOCK keys with a running maximum (the online softmax of flash-decoding), no heap memory:
 *   s_j = scale q.k_j (sgemv);  m' = max(m, max_j s_j);  o, l *= exp(m - m');
 *   w_j = exp(s_j - m');  l += sum_j w_j;  o += sum_j w_j v_j (sgemv);  finally o /= l.
 * Every exponent is <= 0. */
void recur__softmax_step(int H, int K, int V, const float *q, float scale, const float *k_cache,
                         const float *v_cache, int64_t pos, float *o)
{
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
}

int recur_softmax_attention_step(const recur_dims *d, const float *q, const float *k,
                                 const float *v, float scale, float *k_cache, float *v_cache,
                                 int64_t pos, int64_t max_len, float *o)
{
    if (!d || !q || !k || !v || !k_cache || !v_cache || !o)
        return RECUR_EINVAL;
    if (max_len < 0)
        return RECUR_ESHAPE;
    const recur_dims cache = {.T = max_len, .H = d->H, .K = d->K, .V = d->V};
    int err = recur__check_dims(&cache);
    if (err)
        return err;
    if (pos < 0)
        return RECUR_EINVAL;
    if (!isfinite(scale))
        return RECUR_ENONFINITE;
    if (pos >= max_len)
        return RECUR_ECONTEXT;
    const int H = d->H, K = d->K, V = d->V;
    recur__resolve_scale(scale, K, &scale); /* finite: checked */
    /* the cache absorbs (k_t, v_t) at pos */
    memcpy(k_cache + (size_t)pos * H * K, k, (size_t)H * K * sizeof(float));
    memcpy(v_cache + (size_t)pos * H * V, v, (size_t)H * V * sizeof(float));
    recur__softmax_step(H, K, V, q, scale, k_cache, v_cache, pos, o);
    return RECUR_OK;
}
