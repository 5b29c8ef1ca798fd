/*
 * gated_linear.c — the engine behind linear attention, retention and GLA (gated_linear.h).
 *
 * Per head:  S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T ;  o_t = scale S_t^T q_t
 * (and optionally the normaliser z_t = Diag(exp g_t) z_{t-1} + k_t, den_t = scale q_t^T z_t).
 *
 * Forms:
 *   recurrent  token by token, one fused pass over S per token, no allocation.
 *   chunkwise  chunks of C tokens: intra-chunk masked (Q K^T ⊙ D) V, inter-chunk Q~ S, state
 *              update Diag(exp b_C) S + K~^T V, all on recur__mm (chunk_mm.h: a register-blocked
 *              kernel that reads transposed operands in place and skips the zero half of the
 *              causal products; OpenBLAS spent more on per-call overhead and packing of the
 *              64 x 64 blocks than on arithmetic). Chunks outer, heads inner. The tail chunk
 *              shrinks. The normaliser is folded into the rows of phi(Q) (chunk_step).
 *   parallel   the same chunk kernel with a single chunk of T tokens: the masked T x T matmul,
 *              computed GL_PANEL rows at a time (memory O(GL_PANEL * T), not O(T^2)).
 * A single token (T == 1) takes the recurrent path in every form: it is the decode step.
 *
 * Numerics. Within a chunk, b_t = sum_{j<=t} g_j (double, per key dim for GLA) is the
 * cumulative log decay from the chunk start (gates floored at GL_LOG_FLOOR first; the
 * recurrent form multiplies by exp(g) directly). Every exponential taken has a non-positive
 * argument: exp(b_t), exp(b_last - b_s), exp(b_t - b_s) for s <= t, and exp(g); they go
 * through recur__exp_nonpos (exp_nonpos.h), a vectorisable exp for x <= 0 (max rel. error 8e-8
 * against exp in double, 0 below -87 where exp(x) leaves the normal float range), or, for a row
 * of gates all in [-0.34375, 0], its polynomial alone (recur__exp_reduced: the same bits there).
 *
 * Per-key gates (GLA), scores A[t][s] = scale sum_i q_t[i] k_s[i] exp(b_t[i] - b_s[i]), s <= t:
 *   no key decays below exp(-GL_KEY_RANGE) over the chunk (the common case; key_decays):
 *     A = scale Qt K^^T,  Qt_t = q_t ⊙ exp(b_t),  K^_s = k_s ⊙ exp(-b_s) = k_s / exp(b_s)
 *     one causal product through the chunk's start, like a scalar gate's Q K^T (still only
 *     x <= 0 is exponentiated), and the state S = Diag(exp b_last) (S_prev + K^^T V).
 *   else (scores_per_key): row blocks of GL_SUB through a reference point r = J0 - 1 (two
 *     non-positive exponents, one recur__mm), diagonal blocks as running products of exp(g);
 *     S = Diag(exp b_last) S_prev + Kt^T V with Kt_s = k_s ⊙ exp(b_last - b_s).
 */
#include "gated_linear.h"
#include "chunk_ahead.h"
#include "chunk_decay.h"
#include "chunk_mm.h"
#include "chunk_work.h"
#include "exp_nonpos.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a sub-block for per-key gates: off-diagonal sub-blocks go through recur__mm with a
 * reference point between them, diagonal sub-blocks through diag_per_key (16 lanes = 16 rows). */
#define GL_SUB 16
/* Per-key gates: the largest decay exp(-GL_KEY_RANGE) of any key over a chunk (the parallel form:
 * all T tokens) for which its scores are one product through the chunk's start (key_decays): the
 * key factors exp(-b_s) grow to e^40 < 2^58, so k overflows there only beyond 2^70 in magnitude;
 * the query factors exp(b_t) shrink to e^-40 > 2^-58, normal floats for |q| >= 2^-68. The state's
 * sum Kt^T V of n rows reaches n |k| |v| e^40: finite while n |k| |v| < 2^70 (|k|, |v| < 4e9 at
 * n = 64); the fallback's (Kt <= |k|) overflows only where the state itself does. */
#define GL_KEY_RANGE 40.0
/* Per-key sub-blocks whose KjT is carried forward by a factor before it is rebuilt from exp */
#define GL_KJ_CHAIN 8
/* Rows of the score matrix held at once: the parallel form (one chunk of T tokens) computes
 * its T x T masked matmul in row panels of this many rows, so it needs O(GL_PANEL * T) memory.
 * A multiple of GL_SUB. */
#define GL_PANEL 256
/* ---------------------------------------------------------------- validation */

int gl_check_form_scale(recur_form form, int64_t chunk_size, float scale, int K, float *out)
{
    const int rc = recur__check_form(form, chunk_size);
    return rc ? rc : recur__resolve_scale(scale, K, out);
}

int gl_check_log_gates(const float *g, int64_t n)
{
    /* Without an early exit, so the loop vectorises; last to first (gated_linear.h) */
    uint32_t nonfinite = 0, positive = 0;
    for (int64_t i = n; i-- > 0;) {
        uint32_t x;
        memcpy(&x, &g[i], sizeof x);
        nonfinite |= gl_bits_nonfinite(x);
        positive |= gl_bits_positive(x);
    }
    return nonfinite ? RECUR_ENONFINITE : positive ? RECUR_ERANGE : RECUR_OK;
}

/* ---------------------------------------------------------------- small kernels */

/* A non-positive log decay held in double, as a float argument for recur__exp_nonpos. The gates
 * were floored at GL_LOG_FLOOR, so |x| <= 1000 * T fits a float and the conversion never
 * overflows. */
static inline float narrow(double x)
{
    return (float)x;
}

/* e^x for a non-positive x held in double, to float precision whatever |x|: recur__exp_nonpos of
 * narrow(x) alone is off by up to |x| 2^-24 relative (the rounded argument), 2e-6 at x = -32.
 *   e^x = e^{xf} e^{x - xf},  xf = narrow(x),  r = x - xf,  |r| <= |x| 2^-24,  e^r = 1 + r
 * to r^2/2 < 1.4e-11 wherever e^x is not 0 in float (x >= -87), so the error is recur__exp_nonpos'
 * (8.3e-8) and two roundings. Used where the per-key decays are restarted from exp (every GL_SUB
 * tokens) and for exp(b_last), so the running products start to float precision
 * (test_gated_linear: per_key_decays_near_the_range_bound_keep_float_precision). */
static inline float exp_nonpos_d(double x)
{
    const float xf = narrow(x);
    return recur__exp_nonpos(xf) * (1.0f + (float)(x - (double)xf));
}

static const double zeros_d[RECUR_MAX_DIM]; /* b_{-1} = 0 */

static inline double floor_log(float g)
{
    const double x = g;
    return x > GL_LOG_FLOOR ? x : GL_LOG_FLOOR;
}

/* sum_i a[i] b[i] with 16 partial sums, so it vectorises without reassociation flags */
static inline float dot(const float *restrict a, const float *restrict b, int n)
{
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            acc[j] = fmaf(a[i + j], b[i + j], acc[j]);
    float s = 0.0f;
    for (; i < n; i++)
        s = fmaf(a[i], b[i], s);
    for (int w = 8; w > 0; w /= 2) /* pairwise, so the reduction vectorises too */
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return s + acc[0];
}

/* z += k, then returns q ⊙ z in RECUR__VN lanes (mixer.h) whose sum is q^T z (the n % RECUR__VN
 * last keys added into lane 0): the normaliser's running sum and its dot in one pass, the lanes
 * summed later across rows (chunk_step), off this pass's dependency chain */
static inline recur__vn add_mul(float *restrict z, const float *restrict k, const float *restrict q,
                                int n)
{
    recur__vn acc = {0};
    int i = 0;
    for (; i + RECUR__VN <= n; i += RECUR__VN) {
        const recur__vn zi = recur__vn_load(z + i) + recur__vn_load(k + i);
        recur__vn_store(z + i, zi);
        acc += recur__vn_load(q + i) * zi;
    }
    for (; i < n; i++) {
        z[i] += k[i];
        acc[0] = fmaf(q[i], z[i], acc[0]);
    }
    return acc;
}

/* ---------------------------------------------------------------- feature map */

/* dst[i] = mul * phi(src[i]), i < n */
static void load_row(float *restrict dst, const float *restrict src, int n, recur_feature_map f,
                     float mul)
{
    switch (f) {
    case RECUR_FMAP_ELU1:
        /* phi(x) = elu(x) + 1 = x + 1 for x > 0, exp(x) for x <= 0, written as
         * exp_nonpos(x) + max(x, 0) (exp_nonpos is exactly 1 for x > 0): the exponential is then
         * taken unconditionally, which lets the loop vectorise. NaN stays NaN. */
        for (int i = 0; i < n; i++)
            dst[i] = mul * (recur__exp_nonpos(src[i]) + (src[i] > 0.0f ? src[i] : 0.0f));
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

/* One token of one head, decay a[i] = exp(g_t[i]) of key row i:
 *   S[i,:] = a_i S[i,:] + k_i v^T ;  o = sum_i q_i S[i,:]     (q already carries scale and phi)
 *   z[i]   = a_i z[i] + k_i       ;  den = sum_i q_i z[i]
 * Columns go in blocks of NZ <= GL_ZB groups of 16 (4 native vectors per accumulator, mixer.h:
 * 64 columns with AVX-512, 32 with AVX2, 16 with SSE2), the block's v and o held in
 * registers across all K rows of S (a V-long o in memory made every row wait on the previous
 * row's store: ~2x slower); the V % 16 last columns row by row. Columns are independent, so the
 * blocking changes nothing but speed. */
#define GL_ZB (RECUR__VN / 4) /* groups of 16 columns per block: 4 native vectors (mixer.h) */
static inline __attribute__((always_inline)) void gl_step_block(const int NZ, float *restrict S, int K,
                                                               int V, const float *restrict a,
                                                               const float *restrict k,
                                                               const float *restrict q,
                                                               const float *restrict v,
                                                               float *restrict o)
{
    enum { P = 16 / RECUR__VN, W = RECUR__VN }; /* P vectors of W floats per 16 columns */
    recur__vn vv[4 * P], acc[4 * P]; /* NZ <= GL_ZB <= 4 */
#pragma GCC unroll 4
    for (int z = 0; z < NZ * P; z++) {
        vv[z] = recur__vn_load(v + W * z);
        acc[z] = (recur__vn){0};
    }
    for (int i = 0; i < K; i++) {
        float *row = S + (size_t)i * V;
        const float ai = a[i], ki = k[i], qi = q[i];
#pragma GCC unroll 4
        for (int z = 0; z < NZ * P; z++) {
            const recur__vn r = ai * recur__vn_load(row + W * z) + ki * vv[z];
            recur__vn_store(row + W * z, r);
            acc[z] += qi * r;
        }
    }
#pragma GCC unroll 4
    for (int z = 0; z < NZ * P; z++)
        recur__vn_store(o + W * z, acc[z]);
}

static void gl_step(float *restrict S, float *restrict z, float *restrict o, float *den,
                    const float *restrict q, const float *restrict k, const float *restrict v,
                    const float *restrict a, int K, int V)
{
    const int V16 = V - V % 16;
    for (int j0 = 0; j0 < V16; j0 += 16 * GL_ZB) {
        switch ((V16 - j0) / 16 < GL_ZB ? (V16 - j0) / 16 : GL_ZB) {
        case 4: gl_step_block(4, S + j0, K, V, a, k, q, v + j0, o + j0); break;
        case 3: gl_step_block(3, S + j0, K, V, a, k, q, v + j0, o + j0); break;
        case 2: gl_step_block(2, S + j0, K, V, a, k, q, v + j0, o + j0); break;
        default: gl_step_block(1, S + j0, K, V, a, k, q, v + j0, o + j0); break;
        }
    }
    if (V16 < V) { /* column tail: accumulate o row by row */
        for (int j = V16; j < V; j++)
            o[j] = 0.0f;
        for (int i = 0; i < K; i++) {
            const float ai = a[i], ki = k[i], qi = q[i];
            float *restrict Si = S + (size_t)i * V;
            for (int j = V16; j < V; j++) {
                const float s = ai * Si[j] + ki * v[j];
                Si[j] = s;
                o[j] += qi * s;
            }
        }
    }
    if (z) {
        for (int i = 0; i < K; i++)
            z[i] = fmaf(a[i], z[i], k[i]);
        *den = dot(q, z, K);
    }
}

static void fill(float *a, int n, float x)
{
    for (int i = 0; i < n; i++)
        a[i] = x;
}

static void run_recurrent(const gl_problem *p)
{
    /* phi(q)*scale and phi(k) of one token: on the stack, so the decode step never allocates. */
    float qf[RECUR_MAX_DIM], kf[RECUR_MAX_DIM], af[RECUR_MAX_DIM];
    const int H = p->H, K = p->K, V = p->V;
    for (int h = 0; h < H; h++) {
        float *S = p->S + (size_t)h * K * V;
        float *z = p->z ? p->z + (size_t)h * K : NULL;
        for (int64_t t = 0; t < p->T; t++) {
            const size_t row = (size_t)t * H + h;
            float *o = p->o + row * V;
            load_row(qf, p->q + row * K, K, p->fmap, p->scale);
            load_row(kf, p->k + row * K, K, p->fmap, 1.0f);
            /* A_t = Diag(exp g_t): the decay of each key row (g <= 0) */
            switch (p->gate) {
            case GL_GATE_NONE: fill(af, K, 1.0f); break;
            case GL_GATE_HEAD: fill(af, K, p->gamma[h]); break;
            case GL_GATE_SCALAR: fill(af, K, expf(p->g[row])); break;
            case GL_GATE_KEY:
                for (int i = 0; i < K; i++)
                    af[i] = recur__exp_nonpos(p->g[row * K + i]);
                break;
            }
            float den = 0.0f;
            gl_step(S, z, o, &den, qf, kf, p->v + row * V, af, K, V);
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
    float *KrT;                /* [K][C]  phi(k) transposed: the right operand of Q K^T */
    float *Qt, *Kt;            /* [C][K]  q_t exp(b_t), k_s exp(b_last - b_s) */
    float *A;                  /* [P][C]  a row panel of scale (Q K^T ⊙ D), P = min(C, GL_PANEL) */
    float *qz;                 /* [C][RECUR__VN] the normaliser's q_t ⊙ z_t in lanes (add_mul),
                                * then [RECUR__VN][C] the same transposed */
    double *b;                 /* [C] or [C][K] cumulative log decay within the chunk */
    float *Kj;                 /* [C][K]  per-key: k_s exp(b_r - b_s) for a reference r */
    float *ag;                 /* [C][K]  exp(g_t) per key (per-key gates) */
    float *KjT;                /* [K][C]  per-key: Kj transposed */
    int kj_cols, kj_chain;     /* per-key: KjT holds columns [0, kj_cols) for the reference
                                * kj_cols - 1, built kj_chain sub-blocks ago from exp directly */
    float *Qj;                 /* [GL_SUB][K] per-key: q_t exp(b_t - b_r) */
    float *edec;               /* [K]     exp(b_last) per key (state decay) */
    float *dw, *du;            /* [C]     scratch of recur__decay_rows */
    unsigned char *slow;       /* [H]     per-key: the head's last chunk exceeded GL_KEY_RANGE
                                * (key_decays then makes the fallback's factors first) */
    recur__ahead *ahead;       /* the next chunk's rows, prefetched by the per-key kernels
                                * (key_decays, diag_per_key) or the feature map (chunk_ahead.h);
                                * NULL: none */
    void *mem;                 /* the block to free: NULL for the thread's (recur__chunk_carve) */
} gl_work;

/* Carve one allocation into aligned pieces; RECUR_ESHAPE if the sizes overflow. */
static int work_alloc(gl_work *w, int64_t C, int K, int H, gl_gate_kind gate)
{
    memset(w, 0, sizeof *w);
    w->C = C;
    if (C > INT32_MAX || (uint64_t)C > (uint64_t)(SIZE_MAX / sizeof(double)) / GL_PANEL / (uint64_t)K)
        return RECUR_ESHAPE;
    const size_t c = (size_t)C, k = (size_t)K;
    const int key = gate == GL_GATE_KEY;
    const size_t fck = c * k * sizeof(float), dck = c * k * sizeof(double);
    size_t sizes[16] = {
        fck, fck, fck, fck, fck,                                      /* Qr Kr KrT Qt Kt */
        c * (c < GL_PANEL ? c : GL_PANEL) * sizeof(float), 2 * c * RECUR__VN * sizeof(float), /* A qz */
        key ? dck : c * sizeof(double), key ? fck : 0,                 /* b Kj */
        key ? fck : 0, key ? fck : 0,                                  /* ag KjT */
        key ? (size_t)GL_SUB * k * sizeof(float) : 0, k * sizeof(float),     /* Qj edec */
        c * sizeof(float), c * sizeof(float),                                /* dw du */
        key ? (size_t)H : 0,                                                 /* slow */
    };
    size_t off[16];
    char *m;
    const int rc = recur__chunk_carve(sizes, 16, off, &m, &w->mem);
    if (rc)
        return rc;
    w->Qr = (float *)(m + off[0]);
    w->Kr = (float *)(m + off[1]);
    w->KrT = (float *)(m + off[2]);
    w->Qt = (float *)(m + off[3]);
    w->Kt = (float *)(m + off[4]);
    w->A = (float *)(m + off[5]);
    w->qz = (float *)(m + off[6]);
    w->b = (double *)(m + off[7]);
    w->Kj = key ? (float *)(m + off[8]) : NULL;
    w->ag = key ? (float *)(m + off[9]) : NULL;
    w->KjT = key ? (float *)(m + off[10]) : NULL;
    w->Qj = key ? (float *)(m + off[11]) : NULL;
    w->edec = (float *)(m + off[12]);
    w->dw = (float *)(m + off[13]);
    w->du = (float *)(m + off[14]);
    w->slow = key ? (unsigned char *)(m + off[15]) : NULL;
    if (key)
        memset(w->slow, 0, (size_t)H);
    return RECUR_OK;
}

/* The diagonal sub-block [J0, J1) (at most GL_SUB = 16 rows) of the per-key scores:
 *   A[t][s] = scale * sum_i q_t[i] KP_t[i][s],  KP_t[i][s] = k_s[i] prod_{j=s+1..t} exp(g_j[i])
 * The 16 columns s sit in the lanes of one vector, so no dot product is reduced across lanes;
 * for each key i, KP_t[i][:] = KP_{t-1}[i][:] exp(g_t[i]) + k_t[i] e_t (lanes s > t stay 0; the
 * new lane is k[i][J0:J1] masked to lane t, a bitwise and), and
 *   acc_t += q_t[i] KP_t[i][:]
 * two multiply-adds per (t, i) (carrying the decay P alone and multiplying by k afterwards took
 * three). Rows t at AJ + (t - J0) lda; only s <= t is written. (A dot product per (t, s) pair,
 * as before, spent most of its time in the horizontal sums: 5x slower.) */
typedef int32_t gl_v16i __attribute__((vector_size(64)));
static void diag_per_key(const gl_work *w, const float *Qr, size_t lr, int J0, int J1, int K,
                         float scale, float *AJ, int64_t lda)
{
    const int m = J1 - J0;
    recur__v16 acc[GL_SUB];
    gl_v16i lane[GL_SUB]; /* all ones in lane t */
    for (int t = 0; t < GL_SUB; t++) {
        acc[t] = (recur__v16){0};
        lane[t] = recur__lane16[t] != 0.0f;
    }
    /* keys four at a time, so acc[t] is loaded and stored once per four */
    int i = 0;
    for (; i + 4 <= K; i += 4) {
        gl_v16i kv[4];
        recur__v16 kp[4] = {{0}, {0}, {0}, {0}};
        recur__ahead_step(w->ahead);
        for (int j = 0; j < 4; j++) {
            float kl[GL_SUB] = {0};
            const float *ki = w->KrT + (size_t)(i + j) * w->C + J0;
            for (int l = 0; l < m; l++)
                kl[l] = ki[l];
            memcpy(&kv[j], kl, sizeof kv[j]);
        }
        for (int t = 0; t < m; t++) {
            const float *at = w->ag + (size_t)(J0 + t) * K + i, *qt = Qr + (size_t)(J0 + t) * lr + i;
            recur__v16 x = acc[t];
            for (int j = 0; j < 4; j++) {
                kp[j] = kp[j] * at[j] + (recur__v16)(kv[j] & lane[t]);
                x += qt[j] * kp[j];
            }
            acc[t] = x;
        }
    }
    for (; i < K; i++) {
        float kl[GL_SUB] = {0};
        const float *ki = w->KrT + (size_t)i * w->C + J0;
        for (int l = 0; l < m; l++)
            kl[l] = ki[l];
        gl_v16i kv;
        recur__v16 kp = {0};
        memcpy(&kv, kl, sizeof kv);
        for (int t = 0; t < m; t++) {
            kp = kp * w->ag[(size_t)(J0 + t) * K + i] + (recur__v16)(kv & lane[t]);
            acc[t] += Qr[(size_t)(J0 + t) * lr + i] * kp;
        }
    }
    for (int t = 0; t < m; t++) {
        float row[GL_SUB];
        memcpy(row, &acc[t], sizeof row);
        float *At = AJ + (size_t)t * lda + J0;
        for (int s = 0; s <= t; s++)
            At[s] = scale * row[s];
    }
}

/* Per-key-gate scores for the row panel [r0, r1) (row t at A + (t - r0) r1):
 *   A[t,s] = scale * sum_i q_t[i] k_s[i] exp(b_t[i] - b_s[i])   (s <= t)
 * Rows are cut into sub-blocks J = [J0, J1). For s < J0 <= t, with r = J0 - 1:
 *   exp(b_t - b_s) = exp(b_t - b_r) * exp(b_r - b_s), both arguments <= 0, so
 *   A[J, 0:J0] = scale * (Q ⊙ exp(b_t - b_r)) (K ⊙ exp(b_r - b_s))^T     -- one recur__mm.
 * Inside the diagonal sub-block the decay is a running product of exp(g) <= 1. */
static void scores_per_key(gl_work *w, const float *Qr, const float *Kr, size_t lr, int r0, int r1,
                           int K, float scale)
{
    const double *b = w->b;
    const int64_t C = w->C;
    for (int J0 = r0; J0 < r1; J0 += GL_SUB) {
        const int J1 = J0 + GL_SUB < r1 ? J0 + GL_SUB : r1, m = J1 - J0;
        float *AJ = w->A + (size_t)(J0 - r0) * r1; /* row J0 of the panel */
        if (J0 > 0) {
            const double *br = b + (size_t)(J0 - 1) * K;
            /* Qj[t] = q_t ⊙ exp(b_t - b_r) = q_t ⊙ prod_{j=J0..t} exp(g_j): a running product */
            float e[RECUR_MAX_DIM];
            for (int i = 0; i < K; i++)
                e[i] = 1.0f;
            for (int t = J0; t < J1; t++) {
                const float *restrict qt = Qr + (size_t)t * lr, *restrict at = w->ag + (size_t)t * K;
                float *restrict dst = w->Qj + (size_t)(t - J0) * K;
                for (int i = 0; i < K; i++) {
                    e[i] *= at[i];
                    dst[i] = qt[i] * e[i];
                }
            }
            /* KjT[i][s] = k_s[i] exp(b_r[i] - b_s[i]), s < J0 (transposed for recur__mm). After
             * the previous sub-block (reference r' = r - GL_SUB) the columns s <= r' only need
             * the factor exp(b_r - b_r'), and the new rows are suffix products of exp(g):
             *   Kj[s] = k_s ⊙ prod_{j=s+1..r} exp(g_j),   s = r' + 1 .. r
             * so a sub-block costs K exponentials, not J0 K. Every GL_KJ_CHAIN sub-blocks (and at
             * a fresh start past the first sub-block) all J0 rows are taken from exp directly,
             * which bounds the rounding a chain of factors accumulates. The first sub-block of a
             * chunk (J0 = GL_SUB) has no older columns: its rows are suffix products alone (no
             * chain longer than GL_SUB - 1, as everywhere; GL_SUB K exponentials fewer). */
            const int fresh = J0 > GL_SUB && (w->kj_cols != J0 - GL_SUB || w->kj_chain >= GL_KJ_CHAIN);
            const int s0 = fresh ? 0 : J0 - GL_SUB;
            if (fresh) {
                for (int s = 0; s < J0; s++) {
                    const double *restrict bs = b + (size_t)s * K;
                    const float *restrict ks = Kr + (size_t)s * lr;
                    float *restrict dst = w->Kj + (size_t)s * K;
                    for (int i = 0; i < K; i++)
                        dst[i] = ks[i] * recur__exp_nonpos(narrow(br[i] - bs[i]));
                }
                w->kj_chain = 0;
            } else {
                const double *bp = b + (size_t)(s0 ? s0 - 1 : 0) * K; /* b_r' */
                for (int i = 0; i < K && s0; i++) {
                    const float f = recur__exp_nonpos(narrow(br[i] - bp[i]));
                    float *restrict row = w->KjT + (size_t)i * C;
                    for (int s = 0; s < s0; s++)
                        row[s] *= f;
                }
                for (int i = 0; i < K; i++)
                    e[i] = 1.0f;
                for (int s = J0 - 1; s >= s0; s--) {
                    const float *restrict ks = Kr + (size_t)s * lr, *restrict as = w->ag + (size_t)s * K;
                    float *restrict dst = w->Kj + (size_t)s * K;
                    for (int i = 0; i < K; i++) {
                        dst[i] = ks[i] * e[i];
                        e[i] *= as[i];
                    }
                }
                w->kj_chain = s0 ? w->kj_chain + 1 : 0;
            }
            recur__transpose(w->Kj + (size_t)s0 * K, K, J0 - s0, K, w->KjT + s0, C);
            w->kj_cols = J0;
            recur__mm(m, J0, K, scale, w->Qj, K, 1, w->KjT, C, 0.0f, AJ, r1, 0, 0);
        }
        diag_per_key(w, Qr, lr, J0, J1, K, scale, AJ, r1);
    }
}

/* S[i][:] *= e[i], i < K */
static void decay_state(float *S, const float *e, int K, int V)
{
    for (int i = 0; i < K; i++) {
        const float ei = e[i];
        float *restrict Si = S + (size_t)i * V;
        for (int j = 0; j < V; j++)
            Si[j] *= ei;
    }
}

/* min(0, min_i b_last[i]): the chunk's strongest log decay over its keys */
static double deepest_decay(const double *b_last, int K)
{
    double lo = 0.0;
    for (int i = 0; i < K; i++)
        lo = b_last[i] < lo ? b_last[i] : lo;
    return lo;
}

/* The per-key decays of one chunk of n tokens (row0: its first row of head h):
 *   b_t = sum_{j<=t} max(g_j, GL_LOG_FLOOR)  (double),  edec = exp(b_last),  Qt_t = q_t exp(b_t)
 *   Kt_s = k_s exp(-b_s)            while no key decays by more than GL_KEY_RANGE (returns 1)
 *          k_s exp(b_last - b_s)    else (returns 0; b [n][K] and ag_t = exp(g_t) are then set)
 * In the first case the scores are one product through the chunk's start,
 *   A[t][s] = scale sum_i q_t[i] k_s[i] exp(b_t[i] - b_s[i]) = scale Qt_t . Kt_s,
 * exp(b_t) in [e^-GL_KEY_RANGE, 1], exp(-b_s) = 1 / exp(b_s) in [1, e^GL_KEY_RANGE] (only
 * non-positive numbers are exponentiated), and the state is Diag(edec) (S + Kt^T V). In the
 * second, scores_per_key (reference points every GL_SUB rows; running products inside).
 * exp(b_t) is a running product of exp(g), restarted from exp every GL_SUB tokens (exp_nonpos_d),
 * so no chain is longer than GL_SUB - 1 products; exp(b_last - b_s) likewise, backwards.
 * The first case is tried in one pass over the rows (gates, q and k read once, only Qt and Kt
 * stored); when the range turns out too large at its end, its Kt is dropped (it may hold inf)
 * and b, ag and Kt are made in two more passes. A head whose last chunk was too large (w->slow)
 * skips the try and makes b, ag, Qt and Kt directly (strong gates last: the try cost the
 * fallback ~7 %); whether this chunk was decides the next one's. */
static int key_decays(const gl_problem *p, gl_work *w, const float *Qr, const float *Kr, size_t lr,
                      size_t row0, int n, int h)
{
    const int H = p->H, K = p->K;
    float e[RECUR_MAX_DIM];
    w->kj_cols = -1; /* scores_per_key starts afresh in every chunk */
    if (!w->slow[h]) {
        double acc[RECUR_MAX_DIM];
        for (int i = 0; i < K; i++)
            acc[i] = 0.0;
        for (int t = 0; t < n; t++) {
            recur__ahead_step(w->ahead); /* the next chunk's rows (run_chunked), a few per token */
            const float *restrict gt = p->g + (row0 + (size_t)t * H) * K;
            const float *restrict qr = Qr + (size_t)t * lr, *restrict kr = Kr + (size_t)t * lr;
            float *restrict qt = w->Qt + (size_t)t * K, *restrict kt = w->Kt + (size_t)t * K;
            for (int i = 0; i < K; i++)
                acc[i] += (double)gl_floor_gate(gt[i]);
            uint32_t top = 0; /* the largest magnitude of the row's gates, on the bits */
            for (int i = 0; i < K; i++) {
                uint32_t x;
                memcpy(&x, &gt[i], sizeof x);
                top = x > top ? x : top;
            }
            if (t % GL_SUB == 0)
                for (int i = 0; i < K; i++)
                    e[i] = exp_nonpos_d(acc[i]);
            else if (top <= RECUR_EXP_REDUCED_BITS) /* every g in [-0.34375, 0]: no reduction */
                for (int i = 0; i < K; i++)
                    e[i] *= recur__exp_reduced(gt[i]);
            else
                for (int i = 0; i < K; i++)
                    e[i] *= recur__exp_nonpos(gt[i]);
            for (int i = 0; i < K; i++) {
                qt[i] = qr[i] * e[i];
                kt[i] = kr[i] / e[i];
            }
        }
        for (int i = 0; i < K; i++)
            w->edec[i] = exp_nonpos_d(acc[i]);
        if (deepest_decay(acc, K) >= -GL_KEY_RANGE)
            return 1;
    }
    for (int t = 0; t < n; t++) {
        recur__ahead_step(w->ahead); /* as above (nothing left if the try ran) */
        const float *restrict gt = p->g + (row0 + (size_t)t * H) * K;
        double *restrict bt = w->b + (size_t)t * K;
        const double *restrict bp = t ? bt - K : zeros_d;
        float *restrict at = w->ag + (size_t)t * K;
        for (int i = 0; i < K; i++) /* at = g floored, as scratch */
            at[i] = gl_floor_gate(gt[i]);
        for (int i = 0; i < K; i++)
            bt[i] = bp[i] + (double)at[i];
        for (int i = 0; i < K; i++)
            at[i] = recur__exp_nonpos(gt[i]);
    }
    const double *bl = w->b + (size_t)(n - 1) * K;
    if (w->slow[h]) { /* Qt and edec, not made above */
        for (int t = 0; t < n; t++) {
            const double *restrict bt = w->b + (size_t)t * K;
            const float *restrict qr = Qr + (size_t)t * lr, *restrict at = w->ag + (size_t)t * K;
            float *restrict qt = w->Qt + (size_t)t * K;
            if (t % GL_SUB == 0)
                for (int i = 0; i < K; i++)
                    e[i] = exp_nonpos_d(bt[i]);
            else
                for (int i = 0; i < K; i++)
                    e[i] *= at[i];
            for (int i = 0; i < K; i++)
                qt[i] = qr[i] * e[i];
        }
        for (int i = 0; i < K; i++)
            w->edec[i] = exp_nonpos_d(bl[i]);
    }
    for (int s = n - 1; s >= 0; s--) {
        const double *restrict bs = w->b + (size_t)s * K;
        const float *restrict kr = Kr + (size_t)s * lr;
        float *restrict kt = w->Kt + (size_t)s * K;
        if ((n - 1 - s) % GL_SUB == 0)
            for (int i = 0; i < K; i++)
                e[i] = exp_nonpos_d(bl[i] - bs[i]);
        else {
            const float *restrict an = w->ag + (size_t)(s + 1) * K;
            for (int i = 0; i < K; i++)
                e[i] *= an[i];
        }
        for (int i = 0; i < K; i++)
            kt[i] = kr[i] * e[i];
    }
    w->slow[h] = deepest_decay(bl, K) < -GL_KEY_RANGE;
    return 0;
}

/* One chunk of n tokens [t0, t0+n) of head h; S (and z) advance from the chunk start to its end.
 * Every product goes through recur__mm (chunk_mm.h), which reads transposed operands in place
 * and skips the zero half of the causal ones. */
static void chunk_step(const gl_problem *p, gl_work *w, int h, int64_t t0, int n)
{
    const int H = p->H, K = p->K, V = p->V;
    const size_t row0 = (size_t)t0 * H + h;
    const int ldq = H * K, ldv = H * V;
    const int64_t C = w->C;
    const float *v = p->v + row0 * V;
    float *o = p->o + row0 * V;
    float *S = p->S + (size_t)h * K * V;
    float *z = p->z ? p->z + (size_t)h * K : NULL;
    const float scale = p->scale;

    /* Qr, Kr = phi(q), phi(k) [n][K] with row stride lr: the inputs themselves for the identity
     * map without the normaliser, else mapped into the workspace. With the normaliser (linear
     * attention, no gate: gl_run) the same pass keeps z_t = z_prev + sum_{s<=t} phi(k_s) as a
     * running sum (z ends as z_{n-1}) and folds scale and the division into row t of Qr:
     *   den_t = scale phi(q_t)^T z_t,   Qr_t = f_t phi(q_t),   f_t = scale / (den_t + eps)
     * so every product below takes alpha 1 and o_t comes out divided (no pass over o after it,
     * no second pass over Qr and Kr for the denominators). */
    const float *Qr = p->q + row0 * K, *Kr = p->k + row0 * K;
    size_t lr = (size_t)ldq;
    if (p->fmap != RECUR_FMAP_IDENTITY || p->normalize) {
        for (int t = 0; t < n; t++) {
            float *restrict qr = w->Qr + (size_t)t * K, *restrict kr = w->Kr + (size_t)t * K;
            recur__ahead_step(w->ahead);
            load_row(qr, Qr + (size_t)t * ldq, K, p->fmap, 1.0f);
            load_row(kr, Kr + (size_t)t * ldq, K, p->fmap, 1.0f);
            if (p->normalize)
                recur__vn_store(w->qz + (size_t)t * RECUR__VN, add_mul(z, kr, qr, K));
        }
        if (p->normalize) {
            /* den_t / scale = the sum of row t's lanes: the lanes transposed ([RECUR__VN][C]),
             * so the sums and f_t run across rows, one vector of rows at a time */
            float *restrict f = w->qz + (size_t)C * RECUR__VN;
            recur__transpose(w->qz, RECUR__VN, n, RECUR__VN, f, C);
            for (int l = 1; l < RECUR__VN; l++) {
                const float *restrict fl = f + (size_t)l * C;
                for (int t = 0; t < n; t++)
                    f[t] += fl[t];
            }
            for (int t = 0; t < n; t++)
                f[t] = scale / (scale * f[t] + RECUR_LINEAR_EPS);
            for (int t = 0; t < n; t++) {
                float *restrict qr = w->Qr + (size_t)t * K;
                const float ft = f[t];
                for (int i = 0; i < K; i++)
                    qr[i] *= ft;
            }
        }
        Qr = w->Qr;
        Kr = w->Kr;
        lr = (size_t)K;
    }
    /* the scale of the products (1 where Qr carries it) */
    const float alpha = p->normalize ? 1.0f : scale;
    /* b_t = sum_{j<=t} g_j (double);  Qt = q_t exp(b_t);  Kt = k_s exp(b_last - b_s);
     * edec = exp(b_last) (per-key gates: key_decays) */
    const float *Qt = Qr, *Kt = Kr; /* row stride lt */
    size_t lt = lr;
    const double *bs = NULL; /* scalar b for the mask */
    int through_start = 0;   /* per-key: scores through the chunk's start, Kt = k_s exp(-b_s) */
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
            acc = p->gate == GL_GATE_HEAD ? lg * (t + 1)
                                          : acc + floor_log(p->g[row0 + (size_t)t * H]);
            w->b[t] = acc;
        }
        const double bl = w->b[n - 1];
        for (int t = 0; t < n; t++) {
            const float eq = recur__exp_nonpos(narrow(w->b[t]));
            const float ek = recur__exp_nonpos(narrow(bl - w->b[t]));
            for (int i = 0; i < K; i++) {
                w->Qt[(size_t)t * K + i] = Qr[(size_t)t * lr + i] * eq;
                w->Kt[(size_t)t * K + i] = Kr[(size_t)t * lr + i] * ek;
            }
        }
        const float el = recur__exp_nonpos(narrow(bl));
        for (int i = 0; i < K; i++)
            w->edec[i] = el;
        Qt = w->Qt;
        Kt = w->Kt;
        lt = (size_t)K;
        bs = w->b;
        break;
    }
    case GL_GATE_KEY:
        through_start = key_decays(p, w, Qr, Kr, lr, row0, n, h);
        Qt = w->Qt;
        Kt = w->Kt;
        lt = (size_t)K;
        break;
    }
    /* the right operand of the scores: K^T, or Kt^T when they go through the chunk's start */
    if (through_start)
        recur__transpose(Kt, lt, n, K, w->KrT, C);
    else
        recur__transpose(Kr, lr, n, K, w->KrT, C);

    /* o_t = scale (q_t ⊙ exp b_t)^T S_prev */
    recur__mm(n, V, K, alpha, Qt, (ptrdiff_t)lt, 1, S, V, 0.0f, o, ldv, 0, 0);

    /* o_t += sum_{s<=t} A[t,s] v_s with A = scale (Q K^T ⊙ D), causal; a panel of rows at a time */
    for (int r0 = 0; r0 < n; r0 += GL_PANEL) {
        const int r1 = r0 + GL_PANEL < n ? r0 + GL_PANEL : n, m = r1 - r0;
        if (through_start) {
            /* A[t][s] = scale (q_t ⊙ exp(b_t)) . (k_s ⊙ exp(-b_s)), s <= t */
            recur__mm(m, r1, K, scale, Qt + (size_t)r0 * lt, (ptrdiff_t)lt, 1, w->KrT, C, 0.0f,
                      w->A, r1, RECUR_MM_C_LOWER, r0);
        } else if (p->gate == GL_GATE_KEY) {
            scores_per_key(w, Qr, Kr, lr, r0, r1, K, scale);
        } else {
            /* A[t][s] = q_t.k_s for s <= t (times scale when there is no mask to apply it) */
            recur__mm(m, r1, K, bs ? 1.0f : alpha, Qr + (size_t)r0 * lr, (ptrdiff_t)lr, 1, w->KrT, C,
                      0.0f, w->A, r1, RECUR_MM_C_LOWER, r0);
            /* the scalar-gate mask: A[t,s] *= scale exp(b_t - b_s), s <= t (b_t - b_s <= 0;
             * entries above the diagonal are left as they are: recur__mm with RECUR_MM_A_LOWER
             * stops at s = t) */
            if (bs)
                recur__decay_rows(w->A, r1, r0, r1, 0, bs, scale, NULL, w->dw, w->du);
        }
        recur__mm(m, V, r1, 1.0f, w->A, r1, 1, v, ldv, 1.0f, o + (size_t)r0 * ldv, ldv,
                  RECUR_MM_A_LOWER, r0);
    }

    /* S = Diag(exp b_last) S + (K ⊙ exp(b_last - b_s))^T V   (Kt read transposed in place), or
     * Diag(exp b_last) (S + (K ⊙ exp(-b_s))^T V) when the scores went through the chunk's start */
    if (p->gate != GL_GATE_NONE && !through_start)
        decay_state(S, w->edec, K, V);
    recur__mm(K, V, n, 1.0f, Kt, 1, (ptrdiff_t)lt, v, ldv, 1.0f, S, V, 0, 0);
    if (through_start)
        decay_state(S, w->edec, K, V);
}

static int run_chunked(const gl_problem *p, int64_t C)
{
    gl_work w;
    int rc = work_alloc(&w, C, p->K, p->H, p->gate);
    if (rc)
        return rc;
    /* Chunks outer, heads inner: a chunk's rows [C][H][K] are one contiguous block, streamed in
     * once and then used by every head from cache (heads outer walked the whole sequence H times
     * in strided pieces). The next chunk's block is prefetched during the current one
     * (chunk_ahead.h): by the products where they can (with o's rows), else by key_decays and
     * the feature map (per-key gates, linear attention); what is left is read front to back
     * before the chunk's steps. */
    recur__ahead ah;
    const int by_mm = recur__mm_ahead_bind(&ah);
    const int key = p->gate == GL_GATE_KEY;
    const float *in[5] = {p->q, p->k, p->v};
    unsigned char is_v[5] = {0, 0, 1};
    int na = 3;
    if (key)
        in[na] = p->g, is_v[na++] = 0;
    if (by_mm)
        in[na] = p->o, is_v[na++] = 1;
    w.ahead = !by_mm && (key || p->fmap != RECUR_FMAP_IDENTITY) ? &ah : NULL;
    recur__ahead_chunk(&ah, in, is_v, na, p->T, p->H, p->K, p->V, 0, C, 0);
    for (int64_t t0 = 0; t0 < p->T; t0 += C) {
        const int64_t n = p->T - t0 < C ? p->T - t0 : C; /* the tail chunk shrinks */
        volatile float sink = recur__ahead_rest(&ah);
        (void)sink;
        /* key_decays steps once per token and head, a feature map once per row it maps: H n
         * steps (on the per-key fallback diag_per_key steps too, drawing on the same lines
         * earlier; a step with nothing left does nothing) */
        recur__ahead_chunk(&ah, in, is_v, na, p->T, p->H, p->K, p->V, t0 + n, C, (size_t)p->H * (size_t)n);
        for (int h = 0; h < p->H; h++)
            chunk_step(p, &w, h, t0, (int)n);
    }
    recur__mm_ahead_bind(NULL);
    free(w.mem); /* NULL when the thread's cached block was used */
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
    /* The normaliser is linear attention's (gated_linear.h): the chunk kernel's running sum of
     * k has no decay. */
    if (p->z && p->gate != GL_GATE_NONE)
        return RECUR_EINVAL;
    const int64_t C = form == RECUR_FORM_PARALLEL || chunk_size > p->T ? p->T : chunk_size;
    return run_chunked(p, C);
}
