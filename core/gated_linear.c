/*
 * gated_linear.c — the engine behind linear attention, retention and GLA (gated_linear.h).
 *
 * Per head:  S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T ;  o_t = scale S_t^T q_t
 * (and optionally the normaliser z_t = Diag(exp g_t) z_{t-1} + k_t, den_t = scale q_t^T z_t).
 *
 * Forms:
 *   recurrent  token by token, one fused pass over S per token, no allocation.
 *   chunkwise  chunks of C tokens: intra-chunk masked (Q K^T ⊙ D) V, inter-chunk Q~ S, state
 *              update Diag(exp b_C) S + K~^T V, all on cblas_sgemm. The tail chunk shrinks.
 *   parallel   the same chunk kernel with a single chunk of T tokens: the masked T x T matmul.
 *
 * Numerics. Within a chunk, b_t = sum_{j<=t} g_j (double, per key dim for GLA) is the
 * cumulative log decay from the chunk start. Every exponential taken has a non-positive
 * argument: exp(b_t), exp(b_last - b_s), exp(b_t - b_s) for s <= t, and exp(g). Decay masks
 * of scalar gates are running products of exp(g) <= 1 in double.
 */
#include "gated_linear.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a sub-block for per-key gates: off-diagonal sub-blocks go through sgemm with a
 * reference point between them, diagonal sub-blocks through a direct product loop. */
#define GL_SUB 16

/* ---------------------------------------------------------------- validation */

int gl_check_dims(const recur_dims *d)
{
    if (!d)
        return RECUR_EINVAL;
    if (d->T < 0 || d->H < 1 || d->K < 1 || d->V < 1 || d->H > RECUR_MAX_DIM ||
        d->K > RECUR_MAX_DIM || d->V > RECUR_MAX_DIM)
        return RECUR_ESHAPE;
    /* T*H*max(K,V) floats must be addressable in int64_t and size_t bytes. */
    uint64_t per_t = (uint64_t)d->H * (uint64_t)(d->K > d->V ? d->K : d->V);
    uint64_t max_elems = (uint64_t)INT64_MAX / sizeof(double);
    if ((uint64_t)SIZE_MAX / sizeof(double) < max_elems)
        max_elems = (uint64_t)SIZE_MAX / sizeof(double);
    if ((uint64_t)d->T > max_elems / per_t)
        return RECUR_ESHAPE;
    return RECUR_OK;
}

int gl_check_form(recur_form form, int64_t chunk_size)
{
    if (form != RECUR_FORM_RECURRENT && form != RECUR_FORM_PARALLEL && form != RECUR_FORM_CHUNKWISE)
        return RECUR_EINVAL;
    if (form == RECUR_FORM_CHUNKWISE && chunk_size < 1)
        return RECUR_ESHAPE;
    return RECUR_OK;
}

int gl_resolve_scale(float scale, int K, float *out)
{
    if (!isfinite(scale))
        return RECUR_ENONFINITE;
    *out = scale > 0.0f ? scale : (float)(1.0 / sqrt((double)K));
    return RECUR_OK;
}

int gl_check_log_gates(const float *g, int64_t n)
{
    int positive = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(g[i]))
            return RECUR_ENONFINITE;
        positive |= g[i] > 0.0f;
    }
    return positive ? RECUR_ERANGE : RECUR_OK;
}

/* ---------------------------------------------------------------- feature map */

/* phi(x): elu(x)+1 = x+1 for x > 0 and exp(x) for x <= 0 (a non-positive argument). */
static inline float fmap1(recur_feature_map f, float x)
{
    switch (f) {
    case RECUR_FMAP_ELU1: return x > 0.0f ? x + 1.0f : expf(x);
    case RECUR_FMAP_RELU: return x > 0.0f ? x : 0.0f;
    default: return x;
    }
}

/* dst[i] = mul * phi(src[i]), i < n */
static void load_row(float *restrict dst, const float *restrict src, int n, recur_feature_map f,
                     float mul)
{
    switch (f) {
    case RECUR_FMAP_ELU1:
        for (int i = 0; i < n; i++)
            dst[i] = mul * fmap1(RECUR_FMAP_ELU1, src[i]);
        break;
    case RECUR_FMAP_RELU:
        for (int i = 0; i < n; i++)
            dst[i] = mul * (src[i] > 0.0f ? src[i] : 0.0f);
        break;
    default:
        if (mul == 1.0f)
            memcpy(dst, src, (size_t)n * sizeof(float));
        else
            for (int i = 0; i < n; i++)
                dst[i] = mul * src[i];
    }
}

/* ---------------------------------------------------------------- recurrent form */

/* One token of one head, decay a_i = exp(g_i) per key row (all rows equal when ag == NULL):
 *   S[i,:] = a_i S[i,:] + k_i v ;  o += q_i S[i,:]      (q already carries scale and phi)
 *   z[i]   = a_i z[i] + k_i     ;  den += q_i z[i]       */
static void step_token(float *restrict S, float *restrict z, float *restrict o, float *den,
                       const float *restrict q, const float *restrict k, const float *restrict v,
                       float a_all, const float *restrict g_key, int K, int V)
{
    memset(o, 0, (size_t)V * sizeof(float));
    float dsum = 0.0f;
    for (int i = 0; i < K; i++) {
        /* A_t = Diag(exp g_t): row i of S decays by exp(g_t[i]), g <= 0 */
        const float a = g_key ? expf(g_key[i]) : a_all;
        const float ki = k[i], qi = q[i];
        float *restrict Si = S + (size_t)i * V;
        for (int j = 0; j < V; j++) {
            const float s = a * Si[j] + ki * v[j];
            Si[j] = s;
            o[j] += qi * s;
        }
        if (z) {
            z[i] = a * z[i] + ki;
            dsum += qi * z[i];
        }
    }
    *den = dsum;
}

static void run_recurrent(const gl_problem *p)
{
    /* phi(q)*scale and phi(k) of one token: on the stack, so the decode step never allocates. */
    float qf[RECUR_MAX_DIM], kf[RECUR_MAX_DIM];
    const int H = p->H, K = p->K, V = p->V;
    for (int h = 0; h < H; h++) {
        float *S = p->S + (size_t)h * K * V;
        float *z = p->z ? p->z + (size_t)h * K : NULL;
        for (int64_t t = 0; t < p->T; t++) {
            const size_t row = (size_t)t * H + h;
            float *o = p->o + row * V;
            load_row(qf, p->q + row * K, K, p->fmap, p->scale);
            load_row(kf, p->k + row * K, K, p->fmap, 1.0f);
            float a = 1.0f;
            const float *gk = NULL;
            switch (p->gate) {
            case GL_GATE_HEAD: a = p->gamma[h]; break;
            case GL_GATE_SCALAR: a = expf(p->g[row]); break;
            case GL_GATE_KEY: gk = p->g + row * K; break;
            default: break;
            }
            float den = 0.0f;
            step_token(S, z, o, &den, qf, kf, p->v + row * V, a, gk, K, V);
            /* o_t = o_t / (scale phi(q_t)^T z_t + eps) */
            if (p->normalize) {
                const float inv = 1.0f / (den + RECUR_LINEAR_EPS);
                for (int j = 0; j < V; j++)
                    o[j] *= inv;
            }
        }
    }
}

/* ---------------------------------------------------------------- chunk kernel */

typedef struct {
    int64_t C;                 /* chunk capacity */
    float *Qr, *Kr;            /* [C][K]  phi(q), phi(k) of the chunk */
    float *Qt, *Kt;            /* [C][K]  q_t exp(b_t), k_s exp(b_last - b_s) */
    float *A;                  /* [C][C]  scale (Q K^T ⊙ D), lower triangular */
    float *den;                /* [C]     normaliser of each row */
    double *b;                 /* [C] or [C][K] cumulative log decay within the chunk */
    double *ad;                /* [C]     exp(g_t) (scalar gates) */
    float *ag;                 /* [C][K]  exp(g_t) per key (per-key gates) */
    float *Kj;                 /* [C][K]  per-key: k_s exp(b_r - b_s) for a reference r */
    float *Qj;                 /* [GL_SUB][K] per-key: q_t exp(b_t - b_r) */
    float *edec;               /* [K]     exp(b_last) per key (state decay) */
    void *mem;
} gl_work;

/* Carve one allocation into aligned pieces; RECUR_ESHAPE if the sizes overflow. */
static int work_alloc(gl_work *w, int64_t C, int K, gl_gate_kind gate)
{
    memset(w, 0, sizeof *w);
    w->C = C;
    if (C > INT32_MAX || (uint64_t)C > (uint64_t)(SIZE_MAX / sizeof(float)) / (uint64_t)C)
        return RECUR_ESHAPE;
    const size_t c = (size_t)C, k = (size_t)K;
    const int key = gate == GL_GATE_KEY;
    size_t sizes[12] = {
        c * k * sizeof(float), c * k * sizeof(float), c * k * sizeof(float), c * k * sizeof(float),
        c * c * sizeof(float), c * sizeof(float),
        (key ? c * k : c) * sizeof(double), c * sizeof(double),
        key ? c * k * sizeof(float) : 0, key ? c * k * sizeof(float) : 0,
        key ? (size_t)GL_SUB * k * sizeof(float) : 0, k * sizeof(float),
    };
    size_t off[12], total = 0;
    for (int i = 0; i < 12; i++) {
        size_t sz = (sizes[i] + 63) & ~(size_t)63;
        if (sz < sizes[i] || total > SIZE_MAX - sz)
            return RECUR_ESHAPE;
        off[i] = total;
        total += sz;
    }
    char *m = aligned_alloc(64, total ? total : 64);
    if (!m)
        return RECUR_ENOMEM;
    w->mem = m;
    w->Qr = (float *)(m + off[0]);
    w->Kr = (float *)(m + off[1]);
    w->Qt = (float *)(m + off[2]);
    w->Kt = (float *)(m + off[3]);
    w->A = (float *)(m + off[4]);
    w->den = (float *)(m + off[5]);
    w->b = (double *)(m + off[6]);
    w->ad = (double *)(m + off[7]);
    w->ag = key ? (float *)(m + off[8]) : NULL;
    w->Kj = key ? (float *)(m + off[9]) : NULL;
    w->Qj = key ? (float *)(m + off[10]) : NULL;
    w->edec = (float *)(m + off[11]);
    return RECUR_OK;
}

/* Scalar-gate mask, in place on A (n x n, row-major):
 *   A[t,s] = scale * (q_t.k_s) * D[t,s],  D[t,s] = exp(b_t - b_s) = prod_{j=s+1..t} exp(g_j)  (s <= t)
 *   A[t,s] = 0                                                                          (s > t)
 * ad == NULL means no gate (D = 1). The product runs in double and stops once it is below
 * the float range (every further factor is <= 1). */
static void mask_scalar(float *A, int n, const double *ad, float scale)
{
    for (int t = 0; t < n; t++) {
        float *At = A + (size_t)t * n;
        if (!ad) {
            for (int s = 0; s <= t; s++)
                At[s] *= scale;
        } else {
            double d = 1.0;
            int s = t;
            for (; s >= 0; s--) {
                if (s < t)
                    d *= ad[s + 1];
                if (d < 1e-46)
                    break;
                At[s] *= (float)(scale * d);
            }
            for (; s >= 0; s--)
                At[s] = 0.0f;
        }
        for (int s = t + 1; s < n; s++)
            At[s] = 0.0f;
    }
}

/* Per-key-gate intra-chunk scores, A (n x n):
 *   A[t,s] = scale * sum_i q_t[i] k_s[i] exp(b_t[i] - b_s[i])   (s <= t), 0 above.
 * Rows are cut into sub-blocks J = [J0, J1). For s < J0 <= t, with r = J0 - 1:
 *   exp(b_t - b_s) = exp(b_t - b_r) * exp(b_r - b_s), both arguments <= 0, so
 *   A[J, 0:J0] = scale * (Q ⊙ exp(b_t - b_r)) (K ⊙ exp(b_r - b_s))^T     -- one sgemm.
 * Inside the diagonal sub-block the decay is a running product of exp(g) <= 1. */
static void scores_per_key(gl_work *w, int n, int K, float scale)
{
    float *A = w->A;
    const double *b = w->b;
    for (int J0 = 0; J0 < n; J0 += GL_SUB) {
        const int J1 = J0 + GL_SUB < n ? J0 + GL_SUB : n, m = J1 - J0;
        if (J0 > 0) {
            const double *br = b + (size_t)(J0 - 1) * K;
            for (int t = J0; t < J1; t++) {
                const double *bt = b + (size_t)t * K;
                const float *qt = w->Qr + (size_t)t * K;
                float *dst = w->Qj + (size_t)(t - J0) * K;
                for (int i = 0; i < K; i++)
                    dst[i] = qt[i] * expf((float)(bt[i] - br[i]));
            }
            for (int s = 0; s < J0; s++) {
                const double *bs = b + (size_t)s * K;
                const float *ks = w->Kr + (size_t)s * K;
                float *dst = w->Kj + (size_t)s * K;
                for (int i = 0; i < K; i++)
                    dst[i] = ks[i] * expf((float)(br[i] - bs[i]));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, J0, K, scale, w->Qj, K, w->Kj,
                        K, 0.0f, A + (size_t)J0 * n, n);
        }
        /* diagonal sub-block: wq[i] = k_s[i] prod_{j=s+1..t} exp(g_j[i]) */
        float wq[RECUR_MAX_DIM];
        for (int s = J0; s < J1; s++) {
            const float *ks = w->Kr + (size_t)s * K;
            for (int i = 0; i < K; i++)
                wq[i] = ks[i];
            for (int t = s; t < J1; t++) {
                if (t > s) {
                    const float *at = w->ag + (size_t)t * K;
                    for (int i = 0; i < K; i++)
                        wq[i] *= at[i];
                }
                const float *qt = w->Qr + (size_t)t * K;
                float acc = 0.0f;
                for (int i = 0; i < K; i++)
                    acc += qt[i] * wq[i];
                A[(size_t)t * n + s] = scale * acc;
            }
        }
        for (int t = J0; t < J1; t++)
            for (int s = t + 1; s < n; s++)
                A[(size_t)t * n + s] = 0.0f;
    }
}

/* One chunk of n tokens [t0, t0+n) of head h; S (and z) advance from the chunk start to its end. */
static void chunk_step(const gl_problem *p, gl_work *w, int h, int64_t t0, int n)
{
    const int H = p->H, K = p->K, V = p->V;
    const size_t row0 = (size_t)t0 * H + h;
    const int ldq = H * K, ldv = H * V;
    const float *v = p->v + row0 * V;
    float *o = p->o + row0 * V;
    float *S = p->S + (size_t)h * K * V;
    float *z = p->z ? p->z + (size_t)h * K : NULL;
    const float scale = p->scale;

    for (int t = 0; t < n; t++) {
        load_row(w->Qr + (size_t)t * K, p->q + row0 * K + (size_t)t * ldq, K, p->fmap, 1.0f);
        load_row(w->Kr + (size_t)t * K, p->k + row0 * K + (size_t)t * ldq, K, p->fmap, 1.0f);
    }

    /* b_t = sum_{j<=t} g_j (double); Qt = q_t exp(b_t); Kt = k_s exp(b_last - b_s); edec = exp(b_last) */
    const float *Qt = w->Qr, *Kt = w->Kr;
    const double *ad = NULL;
    switch (p->gate) {
    case GL_GATE_NONE:
        for (int i = 0; i < K; i++)
            w->edec[i] = 1.0f;
        break;
    case GL_GATE_HEAD:
    case GL_GATE_SCALAR: {
        const double lg = p->gate == GL_GATE_HEAD ? log((double)p->gamma[h]) : 0.0;
        double acc = 0.0;
        for (int t = 0; t < n; t++) {
            const double gt = p->gate == GL_GATE_HEAD ? lg : (double)p->g[row0 + (size_t)t * H];
            acc = p->gate == GL_GATE_HEAD ? lg * (t + 1) : acc + gt;
            w->b[t] = acc;
            w->ad[t] = p->gate == GL_GATE_HEAD ? (double)p->gamma[h] : exp(gt);
        }
        const double bl = w->b[n - 1];
        for (int t = 0; t < n; t++) {
            const float eq = (float)exp(w->b[t]), ek = (float)exp(bl - w->b[t]);
            for (int i = 0; i < K; i++) {
                w->Qt[(size_t)t * K + i] = w->Qr[(size_t)t * K + i] * eq;
                w->Kt[(size_t)t * K + i] = w->Kr[(size_t)t * K + i] * ek;
            }
        }
        for (int i = 0; i < K; i++)
            w->edec[i] = (float)exp(bl);
        Qt = w->Qt;
        Kt = w->Kt;
        ad = w->ad;
        break;
    }
    case GL_GATE_KEY: {
        for (int t = 0; t < n; t++) {
            const float *gt = p->g + (row0 + (size_t)t * H) * K;
            double *bt = w->b + (size_t)t * K;
            const double *bp = t ? bt - K : NULL;
            for (int i = 0; i < K; i++) {
                bt[i] = (bp ? bp[i] : 0.0) + (double)gt[i];
                w->ag[(size_t)t * K + i] = expf(gt[i]);
            }
        }
        const double *bl = w->b + (size_t)(n - 1) * K;
        for (int t = 0; t < n; t++) {
            const double *bt = w->b + (size_t)t * K;
            for (int i = 0; i < K; i++) {
                w->Qt[(size_t)t * K + i] = w->Qr[(size_t)t * K + i] * (float)exp(bt[i]);
                w->Kt[(size_t)t * K + i] = w->Kr[(size_t)t * K + i] * expf((float)(bl[i] - bt[i]));
            }
        }
        for (int i = 0; i < K; i++)
            w->edec[i] = (float)exp(bl[i]);
        Qt = w->Qt;
        Kt = w->Kt;
        break;
    }
    }

    /* A = scale (Q K^T ⊙ D), causal */
    if (p->gate == GL_GATE_KEY) {
        scores_per_key(w, n, K, scale);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, K, 1.0f, w->Qr, K, w->Kr, K, 0.0f,
                    w->A, n);
        mask_scalar(w->A, n, ad, scale);
    }

    /* o_t = scale (q_t ⊙ exp b_t)^T S_prev  +  sum_{s<=t} A[t,s] v_s */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, V, K, scale, Qt, K, S, V, 0.0f, o, ldv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, V, n, 1.0f, w->A, n, v, ldv, 1.0f, o, ldv);

    if (z) {
        /* den_t = sum_{s<=t} A[t,s] + scale (q_t ⊙ exp b_t)^T z_prev */
        for (int t = 0; t < n; t++) {
            const float *At = w->A + (size_t)t * n, *qt = Qt + (size_t)t * K;
            float a = 0.0f, c = 0.0f;
            for (int s = 0; s <= t; s++)
                a += At[s];
            for (int i = 0; i < K; i++)
                c += qt[i] * z[i];
            w->den[t] = a + scale * c;
        }
        /* z = exp(b_last) ⊙ z + sum_s k_s ⊙ exp(b_last - b_s) */
        for (int i = 0; i < K; i++)
            z[i] *= w->edec[i];
        for (int s = 0; s < n; s++)
            for (int i = 0; i < K; i++)
                z[i] += Kt[(size_t)s * K + i];
    }

    /* S = Diag(exp b_last) S + (K ⊙ exp(b_last - b_s))^T V */
    if (p->gate != GL_GATE_NONE)
        for (int i = 0; i < K; i++) {
            const float e = w->edec[i];
            float *Si = S + (size_t)i * V;
            for (int j = 0; j < V; j++)
                Si[j] *= e;
        }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, V, n, 1.0f, Kt, K, v, ldv, 1.0f, S, V);

    /* o_t /= den_t + eps */
    if (p->normalize)
        for (int t = 0; t < n; t++) {
            const float inv = 1.0f / (w->den[t] + RECUR_LINEAR_EPS);
            float *ot = o + (size_t)t * ldv;
            for (int j = 0; j < V; j++)
                ot[j] *= inv;
        }
}

static int run_chunked(const gl_problem *p, int64_t C)
{
    gl_work w;
    int rc = work_alloc(&w, C, p->K, p->gate);
    if (rc)
        return rc;
    for (int h = 0; h < p->H; h++)
        for (int64_t t0 = 0; t0 < p->T; t0 += C) {
            const int64_t n = p->T - t0 < C ? p->T - t0 : C; /* the tail chunk shrinks */
            chunk_step(p, &w, h, t0, (int)n);
        }
    free(w.mem);
    return RECUR_OK;
}

/* ---------------------------------------------------------------- entry */

int gl_run(const gl_problem *p, recur_form form, int64_t chunk_size)
{
    if (p->T == 0)
        return RECUR_OK;
    /* One token is the decode step in every form: the same function, without allocation. */
    if (form == RECUR_FORM_RECURRENT || p->T == 1) {
        run_recurrent(p);
        return RECUR_OK;
    }
    const int64_t C = form == RECUR_FORM_PARALLEL || chunk_size > p->T ? p->T : chunk_size;
    return run_chunked(p, C);
}
