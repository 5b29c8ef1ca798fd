/*
 * generalized_delta.c — the generalized (DPLR) delta rule of RWKV-7 (generalized_delta.h).
 *
 * Per head, S in R^{K x V} (key-major), w_t = exp(g_t) per key:
 *   S_t = Diag(w_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T        o_t = scale S_t^T q_t
 *
 * Forms: recurrent (recur__gdr_step token by token; also any call with T == 1), chunkwise (the
 * DPLR chunk algorithm below) and parallel (chunkwise with one chunk of T tokens: 4 T^2 floats).
 *
 * Cost (why chunkwise does not beat recurrent on a CPU, as for the delta rule): per token and head
 * the recurrent step does 5KV multiply-adds (erase read-out, decay + two rank-one writes, read);
 * chunkwise does 4KV for the state products (a S0, q S0, B^T U, K^T V) plus 2c(K + V) for the
 * causal halves of the four score matrices, the three in-chunk products and the solve: 1.6x the
 * recurrent work at c = 64, K = V = 64 (1.0x at c = 16), plus the per-key exponentials. Measured
 * 2026-12-02 (H = 4, K = V = 64, T = 16k, c = 64, 1 thread, load average 14 on 2 shared cores,
 * so only ratios mean much): recurrent 0.087 s, chunkwise 0.18 s, the PyTorch chunk form of the
 * same algorithm (tools/bench/torch_chunkwise.py) 4.6 s.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_ahead.h"
#include "chunk_mm.h"
#include "chunk_work.h"
#include "exp_nonpos.h"
#include "gated_linear.h"
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

/* ---------------------------------------------------------------- validation */

/* Everything is checked before anything is written: on error S and o are untouched. A NaN or
 * infinity in g, a or b (or scale) wins over a g > 0 anywhere. */
static int gdr_check(const recur_dims *d, const float *q, const float *k, const float *v,
                     const float *g, const float *a, const float *b, float scale, recur_form form,
                     int64_t chunk_size, const float *S, const float *o)
{
    if (!q || !k || !v || !g || !a || !b || !S || !o)
        return RECUR_EINVAL;
    const int rc = recur__check_form_dims(form, chunk_size, d);
    if (rc)
        return rc;
    /* one pass over g, a and b together, first to last: unlike GLA's gates (gated_linear.h),
     * reading them last to first did not help here (48 MB at T = 16k, H 4, K 64, more than L3
     * keeps: at T = 16k the same to 1.6 % more CPU time per token, 4 alternated runs, load 3-5) */
    const int64_t n = d->T * d->H * d->K;
    uint32_t nonfinite = !isfinite(scale), positive = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t xg, xa, xb;
        memcpy(&xg, &g[i], sizeof xg);
        memcpy(&xa, &a[i], sizeof xa);
        memcpy(&xb, &b[i], sizeof xb);
        nonfinite |= gl_bits_nonfinite(xg) | gl_bits_nonfinite(xa) | gl_bits_nonfinite(xb);
        positive |= gl_bits_positive(xg);
    }
    return nonfinite ? RECUR_ENONFINITE : positive ? RECUR_ERANGE : RECUR_OK;
}

/* ---------------------------------------------------------------- chunkwise
 *
 * Inside a chunk of n tokens with start state S0 and cumulative log decays per key
 * gam_t = sum_{j<=t} g_j (gam_{-1} = 0; every difference gam_t - gam_s with s <= t is <= 0), let
 * u_t = a_t^T S_{t-1} be the erase read-out (a row of V). Then every token writes two rank-one
 * terms, (b_t, u_t) and (k_t, v_t), into a diagonally decayed state:
 *   S_t = e^{gam_t} S0 + sum_{s<=t} e^{gam_t - gam_s} (b_s u_s + k_s v_s^T)      (per key row)
 * and u_t follows from S_{t-1}:
 *   u_t = (a_t e^{gam_{t-1}})^T S0 + sum_{s<t} Aab[t][s] u_s + sum_{s<t} Aak[t][s] v_s
 *   Aab[t][s] = sum_i a_t[i] b_s[i] e^{gam_{t-1}[i] - gam_s[i]},  Aak likewise with k_s  (s < t)
 * i.e. the unit lower triangular system (I - Aab) U = At S0 + Aak V, At = a ⊙ e^{gam_{t-1}}.
 * With U known, everything else is a product:
 *   O   = scale (Qt S0 + Mqb U + Mqk V),   Qt = q ⊙ e^{gam_t}
 *   Mqb[t][s] = sum_i q_t[i] b_s[i] e^{gam_t[i] - gam_s[i]},  Mqk likewise with k_s  (s <= t)
 *   S_c = e^{gam_c} S0 + Bh^T U + Kh^T V,  Bh_s = b_s ⊙ e^{gam_c - gam_s},  Kh_s likewise
 * (FLA's chunk_dplr derives the same system in its V x K writing; this is our derivation for the
 * key-major state, solved directly for U as delta_rule.c does.)
 *
 * The four score matrices have a per-key decay, so they are no plain products. Rows are cut
 * into blocks J = [J0, J1) of GDR_SUB tokens. Left of the block (s < J0) a reference r = J0 - 1
 * splits every decay into two non-positive exponents, e^{x_t - gam_s} = e^{x_t - gam_r}
 * e^{gam_r - gam_s} (x_t = gam_{t-1} or gam_t, both at or after r), so that part is four
 * recur__mm products of rescaled rows (the right operands carried from block to block by one
 * factor per key, gdr_left). Inside the block (gdr_diag) the decays are running
 * products of e^{g} <= 1 with the 16 columns in the lanes of one vector. Only non-positive
 * arguments are exponentiated (recur__exp_nonpos), most decays as running products of e^{g}
 * restarted from exp every GDR_SUB tokens; gates are floored at GL_LOG_FLOOR (gated_linear.h)
 * before they are summed (e^{-1000} is 0 in double, so no decay changes, but the sums stay small
 * enough that their differences are exact). */
#define GDR_SUB 16
/* left blocks whose YbT, YkT columns are carried forward by a factor before all are rebuilt */
#define GDR_CHAIN 8

typedef struct {
    int64_t cmax;              /* the longest chunk */
    float *Nab, *Aak;          /* [cmax][cmax] strictly lower: -Aab (the solve's A), Aak */
    float *Mqb, *Mqk;          /* [cmax][cmax] lower with the diagonal */
    float *U;                  /* [cmax][V]    right-hand side, then U */
    float *Qt, *At, *Bh, *Kh;  /* [cmax][K]    the rescaled rows of the state products */
    float *Yb, *Yk;            /* [cmax][K]    b_s, k_s ⊙ e^{gam_r - gam_s}, the columns s0 <= s < J0
                                * gdr_left (re)builds, from row 0 */
    float *YbT, *YkT;          /* [K][cmax]    their transposes (right operands of recur__mm) */
    int y_cols, y_chain;       /* YbT, YkT hold columns [0, y_cols) for the reference y_cols - 1,
                                * built y_chain blocks ago from exp directly (-1: none) */
    float *Xa, *Xq;            /* [GDR_SUB][K] a_t ⊙ e^{gam_{t-1} - gam_r}, q_t ⊙ e^{gam_t - gam_r} */
    float *w;                  /* [cmax][K]    e^{g_t} */
    float *edec;               /* [K]          e^{gam_c} */
    double *gam;               /* [cmax+1][K]  row t+1: gam_t; row 0: gam_{-1} = 0 */
    recur__ahead *ahead;       /* the next chunk's rows, prefetched by gdr_diag (chunk_ahead.h) */
    void *mem;                 /* the block to free: NULL for the thread's (recur__chunk_carve) */
} gdr_work;

/* Carve one block (the thread's, reused call after call up to RECUR_CHUNK_WORK_MAX, chunk_work.h);
 * RECUR_ESHAPE when the sizes overflow, RECUR_ENOMEM when it fails. */
static int gdr_work_alloc(gdr_work *w, int64_t cmax, int K, int V)
{
    memset(w, 0, sizeof *w);
    w->cmax = cmax;
    /* recur__mm takes int sizes; every piece is at most (cmax + 1) * max(cmax, K, V) doubles */
    const uint64_t widest = (uint64_t)(cmax > K ? cmax : K) > (uint64_t)V ? (uint64_t)(cmax > K ? cmax : K) : (uint64_t)V;
    if (cmax > INT32_MAX || (uint64_t)cmax + 1 > (SIZE_MAX / sizeof(double) / 32) / widest)
        return RECUR_ESHAPE;
    const size_t c = (size_t)cmax, cc = c * c * sizeof(float), ck = c * K * sizeof(float);
    const size_t sizes[] = {cc, cc, cc, cc, c * V * sizeof(float), ck, ck, ck, ck, ck, ck, ck, ck,
                            GDR_SUB * (size_t)K * sizeof(float), GDR_SUB * (size_t)K * sizeof(float),
                            ck, K * sizeof(float), (c + 1) * K * sizeof(double)};
    enum { N = sizeof sizes / sizeof sizes[0] };
    size_t off[N];
    char *m;
    const int rc = recur__chunk_carve(sizes, N, off, &m, &w->mem);
    if (rc)
        return rc;
    float **f[] = {&w->Nab, &w->Aak, &w->Mqb, &w->Mqk, &w->U, &w->Qt, &w->At, &w->Bh, &w->Kh,
                   &w->Yb, &w->Yk, &w->YbT, &w->YkT, &w->Xa, &w->Xq, &w->w, &w->edec};
    for (int i = 0; i < N - 1; i++)
        *f[i] = (float *)(m + off[i]);
    w->gam = (double *)(m + off[N - 1]);
    return RECUR_OK;
}

/* e^x of a non-positive difference held in double (|x| <= 1000 T fits a float) */
static inline float exp_diff(double x)
{
    return recur__exp_nonpos((float)x);
}

/* yb_s = b_s ⊙ f_s,  yk_s = k_s ⊙ f_s,  f_s = e^{gam_{n-1} - gam_s} = prod_{j=s+1..n-1} e^{g_j}
 * for s < n (exponents <= 0): suffix products of e^{g} (the rows of wg, [..][K]), taken from exp
 * directly every GDR_SUB rows from the last, so that no chain is longer than GDR_SUB - 1 products
 * (n K / GDR_SUB exponentials, not n K). b, k rows with stride ld, outputs [n][K]. */
static void decay_rows_to(const double *gam, const float *wg, const float *Bc, const float *Kc,
                          size_t ld, int n, int K, float *yb, float *yk)
{
    const double *restrict gl = gam + (size_t)n * K; /* gam_{n-1} */
    float f[RECUR_MAX_DIM];
    for (int s = n - 1; s >= 0; s--) {
        const double *restrict gs = gam + (size_t)(s + 1) * K;
        const float *restrict bs = Bc + (size_t)s * ld, *restrict ks = Kc + (size_t)s * ld;
        float *restrict ybs = yb + (size_t)s * K, *restrict yks = yk + (size_t)s * K;
        if ((n - 1 - s) % GDR_SUB == 0)
            for (int i = 0; i < K; i++)
                f[i] = exp_diff(gl[i] - gs[i]);
        else {
            const float *restrict wn = wg + (size_t)(s + 1) * K;
            for (int i = 0; i < K; i++)
                f[i] *= wn[i];
        }
        for (int i = 0; i < K; i++) {
            ybs[i] = bs[i] * f[i];
            yks[i] = ks[i] * f[i];
        }
    }
}

/* The diagonal block [J0, J1) (m <= 16 rows) of the four score matrices. Column s of the block
 * is lane s - J0. For each key i two running vectors carry the decayed columns,
 *   pb[s] = b_s[i] prod_{j=s+1..t} e^{g_j[i]},   pk likewise with k_s[i]   (lanes s > t are 0)
 * and row t takes a_t[i] times them before token t's factor (s < t: Aab, Aak) and q_t[i] times
 * them after it (s <= t: Mqb, Mqk). Keys go four at a time so each row's four accumulators are
 * loaded and stored once per four keys. Rows are read with stride ld (the inputs' H K). Token
 * t's own lane enters as b_t[i] (k_t[i]) broadcast and masked to lane t, a bitwise and, not a
 * product with the unit vector e_t: the same values, one multiply fewer each. */
typedef int32_t gdr_v16i __attribute__((vector_size(64)));
static inline recur__v16 gdr_at_lane(float x, gdr_v16i lane)
{
    const recur__v16 b = {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
    return (recur__v16)((gdr_v16i)b & lane);
}

/* keys [i0, i0 + ni), ni <= 4, of every row of the block */
static inline __attribute__((always_inline)) void
gdr_diag_keys(const int ni, const gdr_work *w, const float *Qc, const float *Kc, const float *Ac,
              const float *Bc, size_t ld, int J0, int m, int K, int i0, const gdr_v16i *lane,
              recur__v16 *ab, recur__v16 *ak, recur__v16 *qb, recur__v16 *qk)
{
    recur__v16 pb[4] = {{0}, {0}, {0}, {0}}, pk[4] = {{0}, {0}, {0}, {0}};
    for (int t = 0; t < m; t++) {
        const size_t row = (size_t)(J0 + t) * ld + i0;
        const float *wt = w->w + (size_t)(J0 + t) * K + i0;
        recur__v16 xab = ab[t], xak = ak[t], xqb = qb[t], xqk = qk[t];
        for (int j = 0; j < ni; j++) {
            const float at = Ac[row + j], qt = Qc[row + j];
            xab += at * pb[j];
            xak += at * pk[j];
            pb[j] = pb[j] * wt[j] + gdr_at_lane(Bc[row + j], lane[t]);
            pk[j] = pk[j] * wt[j] + gdr_at_lane(Kc[row + j], lane[t]);
            xqb += qt * pb[j];
            xqk += qt * pk[j];
        }
        ab[t] = xab, ak[t] = xak, qb[t] = xqb, qk[t] = xqk;
    }
}

static void gdr_diag(gdr_work *w, const float *Qc, const float *Kc, const float *Ac,
                     const float *Bc, size_t ld, int J0, int J1, int K)
{
    const int m = J1 - J0;
    const int64_t lc = w->cmax;
    recur__v16 ab[GDR_SUB], ak[GDR_SUB], qb[GDR_SUB], qk[GDR_SUB];
    gdr_v16i lane[GDR_SUB]; /* all ones in lane t */
    for (int t = 0; t < m; t++) {
        ab[t] = ak[t] = qb[t] = qk[t] = (recur__v16){0};
        lane[t] = recur__lane16[t] != 0.0f;
    }
    for (int i0 = 0; i0 < K; i0 += 4) {
        recur__ahead_step(w->ahead);
        if (K - i0 >= 4) /* four keys, unrolled */
            gdr_diag_keys(4, w, Qc, Kc, Ac, Bc, ld, J0, m, K, i0, lane, ab, ak, qb, qk);
        else
            gdr_diag_keys(K - i0, w, Qc, Kc, Ac, Bc, ld, J0, m, K, i0, lane, ab, ak, qb, qk);
    }
    /* the rows' lanes s > t (s >= t for Nab, Aak) are 0 and never read (recur__mm A_LOWER and
     * recur__solve_unit_lower stop at the diagonal): whole vectors where the row has 16 columns
     * from J0 on, else lane by lane */
    if (J0 + GDR_SUB <= lc) {
        for (int t = 0; t < m; t++) {
            const size_t r = (size_t)(J0 + t) * lc + J0;
            recur__v16_store(w->Nab + r, -ab[t]);
            recur__v16_store(w->Aak + r, ak[t]);
            recur__v16_store(w->Mqb + r, qb[t]);
            recur__v16_store(w->Mqk + r, qk[t]);
        }
        return;
    }
    for (int t = 0; t < m; t++) {
        float rab[GDR_SUB], rak[GDR_SUB], rqb[GDR_SUB], rqk[GDR_SUB];
        recur__v16_store(rab, ab[t]);
        recur__v16_store(rak, ak[t]);
        recur__v16_store(rqb, qb[t]);
        recur__v16_store(rqk, qk[t]);
        const size_t r = (size_t)(J0 + t) * lc + J0;
        for (int s = 0; s < t; s++) {
            w->Nab[r + s] = -rab[s];
            w->Aak[r + s] = rak[s];
        }
        for (int s = 0; s <= t; s++) {
            w->Mqb[r + s] = rqb[s];
            w->Mqk[r + s] = rqk[s];
        }
    }
}

/* Columns s < J0 of the rows [J0, J1), through the reference r = J0 - 1 (see above). */
static void gdr_left(gdr_work *w, const float *Qc, const float *Kc, const float *Ac,
                     const float *Bc, size_t ld, int J0, int J1, int K)
{
    const int m = J1 - J0;
    const int64_t lc = w->cmax;
    /* e = e^{gam_{t-1} - gam_r} then e^{gam_t - gam_r}: a running product of e^{g_t} from 1
     * (t = J0), at most GDR_SUB factors */
    float e[RECUR_MAX_DIM];
    for (int i = 0; i < K; i++)
        e[i] = 1.0f;
    for (int t = J0; t < J1; t++) {
        const float *restrict at = Ac + (size_t)t * ld, *restrict qt = Qc + (size_t)t * ld;
        const float *restrict wt = w->w + (size_t)t * K;
        float *restrict xa = w->Xa + (size_t)(t - J0) * K, *restrict xq = w->Xq + (size_t)(t - J0) * K;
        for (int i = 0; i < K; i++) {
            xa[i] = at[i] * e[i];
            e[i] *= wt[i];
            xq[i] = qt[i] * e[i];
        }
    }
    /* YbT, YkT: columns s < J0 for the reference r = J0 - 1. After the previous block (reference
     * r' = r - GDR_SUB) the columns s <= r' only need the factor e^{gam_r - gam_r'} (one exp per
     * key), and the GDR_SUB new columns are suffix products of e^{g} back to r (decay_rows_to);
     * every GDR_CHAIN blocks (and in a chunk's first left block) all J0 columns are taken afresh,
     * which bounds the factors any column accumulates. */
    const int fresh = w->y_cols != J0 - GDR_SUB || w->y_chain >= GDR_CHAIN;
    const int s0 = fresh ? 0 : J0 - GDR_SUB;
    if (fresh)
        w->y_chain = 0;
    else {
        const double *gr = w->gam + (size_t)J0 * K, *gp = w->gam + (size_t)s0 * K; /* gam_r, gam_r' */
        for (int i = 0; i < K; i++) {
            const float f = exp_diff(gr[i] - gp[i]);
            float *restrict yb = w->YbT + (size_t)i * lc, *restrict yk = w->YkT + (size_t)i * lc;
            for (int s = 0; s < s0; s++) {
                yb[s] *= f;
                yk[s] *= f;
            }
        }
        w->y_chain++;
    }
    decay_rows_to(w->gam + (size_t)s0 * K, w->w + (size_t)s0 * K, Bc + (size_t)s0 * ld,
                  Kc + (size_t)s0 * ld, ld, J0 - s0, K, w->Yb, w->Yk);
    recur__transpose(w->Yb, K, J0 - s0, K, w->YbT + s0, lc);
    recur__transpose(w->Yk, K, J0 - s0, K, w->YkT + s0, lc);
    w->y_cols = J0;
    const size_t r = (size_t)J0 * lc;
    recur__mm(m, J0, K, -1.0f, w->Xa, K, 1, w->YbT, lc, 0.0f, w->Nab + r, lc, 0, 0);
    recur__mm(m, J0, K, 1.0f, w->Xa, K, 1, w->YkT, lc, 0.0f, w->Aak + r, lc, 0, 0);
    recur__mm(m, J0, K, 1.0f, w->Xq, K, 1, w->YbT, lc, 0.0f, w->Mqb + r, lc, 0, 0);
    recur__mm(m, J0, K, 1.0f, w->Xq, K, 1, w->YkT, lc, 0.0f, w->Mqk + r, lc, 0, 0);
}

/* One chunk [t0, t0 + n) of head h; Sh [K][V] holds S0 on entry and S_c on return. */
static void gdr_chunk(const recur_dims *d, gdr_work *w, int h, int64_t t0, int n, const float *q,
                      const float *k, const float *v, const float *g, const float *a,
                      const float *b, float scale, float *Sh, float *o)
{
    const int H = d->H, K = d->K, V = d->V;
    const size_t ldk = (size_t)H * K, ldv = (size_t)H * V, rk = ((size_t)t0 * H + h) * K;
    const float *Qc = q + rk, *Kc = k + rk, *Ac = a + rk, *Bc = b + rk, *Gc = g + rk;
    const float *Vc = v + ((size_t)t0 * H + h) * V;
    float *Oc = o + ((size_t)t0 * H + h) * V;
    const int64_t lc = w->cmax;

    /* gam_t (floored gates, double), e^{g_t}; Qt = q ⊙ e^{gam_t}, At = a ⊙ e^{gam_{t-1}} with
     * e = e^{gam_t} a running product of e^{g_t} from e^{gam_{-1}} = 1, taken from exp directly
     * every GDR_SUB tokens (no chain longer than GDR_SUB - 1 products) */
    double *gam = w->gam;
    float e[RECUR_MAX_DIM];
    for (int i = 0; i < K; i++) {
        gam[i] = 0.0;
        e[i] = 1.0f;
    }
    for (int t = 0; t < n; t++) {
        const float *restrict gt = Gc + (size_t)t * ldk;
        const double *restrict gp = gam + (size_t)t * K;
        double *restrict gn = gam + (size_t)(t + 1) * K;
        float *restrict wt = w->w + (size_t)t * K;
        float *restrict qt = w->Qt + (size_t)t * K, *restrict at = w->At + (size_t)t * K;
        const float *restrict qi = Qc + (size_t)t * ldk, *restrict ai = Ac + (size_t)t * ldk;
        for (int i = 0; i < K; i++)
            gn[i] = gp[i] + (double)gl_floor_gate(gt[i]);
        for (int i = 0; i < K; i++) { /* separate, so that it vectorises */
            wt[i] = recur__exp_nonpos(gt[i]);
            at[i] = ai[i] * e[i];
        }
        if (t % GDR_SUB == GDR_SUB - 1)
            for (int i = 0; i < K; i++)
                e[i] = exp_diff(gn[i]);
        else
            for (int i = 0; i < K; i++)
                e[i] *= wt[i];
        for (int i = 0; i < K; i++)
            qt[i] = qi[i] * e[i];
    }
    /* Bh, Kh = b_s, k_s ⊙ e^{gam_c - gam_s};  edec = e^{gam_c} */
    const double *gc = gam + (size_t)n * K;
    decay_rows_to(gam, w->w, Bc, Kc, ldk, n, K, w->Bh, w->Kh);
    for (int i = 0; i < K; i++)
        w->edec[i] = exp_diff(gc[i]);

    /* the score matrices, a block of rows at a time */
    w->y_cols = -1;
    for (int J0 = 0; J0 < n; J0 += GDR_SUB) {
        const int J1 = J0 + GDR_SUB < n ? J0 + GDR_SUB : n;
        if (J0 > 0)
            gdr_left(w, Qc, Kc, Ac, Bc, ldk, J0, J1, K);
        gdr_diag(w, Qc, Kc, Ac, Bc, ldk, J0, J1, K);
    }

    /* (I - Aab) U = At S0 + Aak V */
    float *U = w->U;
    recur__mm(n, V, K, 1.0f, w->At, K, 1, Sh, V, 0.0f, U, V, 0, 0);
    recur__mm(n, V, n, 1.0f, w->Aak, lc, 1, Vc, ldv, 1.0f, U, V, RECUR_MM_A_LOWER, -1);
    recur__solve_unit_lower(n, V, w->Nab, lc, U);

    /* O = scale (Qt S0 + Mqb U + Mqk V) */
    recur__mm(n, V, K, scale, w->Qt, K, 1, Sh, V, 0.0f, Oc, ldv, 0, 0);
    recur__mm(n, V, n, scale, w->Mqb, lc, 1, U, V, 1.0f, Oc, ldv, RECUR_MM_A_LOWER, 0);
    recur__mm(n, V, n, scale, w->Mqk, lc, 1, Vc, ldv, 1.0f, Oc, ldv, RECUR_MM_A_LOWER, 0);

    /* S_c = e^{gam_c} S0 + Bh^T U + Kh^T V   (Bh, Kh read transposed in place) */
    for (int i = 0; i < K; i++) {
        float *Si = Sh + (size_t)i * V;
        const float e = w->edec[i];
        for (int j = 0; j < V; j++)
            Si[j] *= e;
    }
    recur__mm(K, V, n, 1.0f, w->Bh, 1, K, U, V, 1.0f, Sh, V, 0, 0);
    recur__mm(K, V, n, 1.0f, w->Kh, 1, K, Vc, ldv, 1.0f, Sh, V, 0, 0);
}

/* ---------------------------------------------------------------- entry point */

int recur_generalized_delta(const recur_dims *d, const float *q, const float *k, const float *v,
                            const float *g, const float *a, const float *b, float scale,
                            recur_form form, int64_t chunk_size, float *S, float *o)
{
    int err = gdr_check(d, q, k, v, g, a, b, scale, form, chunk_size, S, o);
    if (err)
        return err;
    if (d->T == 0)
        return RECUR_OK;
    recur__resolve_scale(scale, d->K, &scale); /* finite: checked */
    const int H = d->H, K = d->K, V = d->V;

    /* One token is the decode step in every form. */
    if (form == RECUR_FORM_RECURRENT || d->T == 1) {
        for (int64_t t = 0; t < d->T; t++)
            for (int h = 0; h < H; h++) {
                const size_t rk = ((size_t)t * H + h) * K, rv = ((size_t)t * H + h) * V;
                recur__gdr_step(S + (size_t)h * K * V, q + rk, k + rk, v + rv, g + rk, a + rk,
                                b + rk, scale, K, V, o + rv);
            }
        return RECUR_OK;
    }

    int64_t C = form == RECUR_FORM_PARALLEL ? d->T : chunk_size;
    if (C > d->T)
        C = d->T;
    gdr_work w;
    err = gdr_work_alloc(&w, C, K, V);
    if (err)
        return err;
    /* Chunks in order (each needs its predecessor's S), heads inner: a chunk's rows [c][H][K]
     * are read once, front to back, before its steps, except the lines prefetched during the
     * previous chunk (chunk_ahead.h): by the products where they can (with o's rows), else by
     * gdr_diag. */
    const float *const in[7] = {q, k, v, g, a, b, o};
    static const unsigned char is_v[7] = {0, 0, 1, 0, 0, 0, 1};
    recur__ahead ah;
    const int by_mm = recur__mm_ahead_bind(&ah); /* else gdr_diag steps, without o */
    const int na = by_mm ? 7 : 6;
    recur__ahead_chunk(&ah, in, is_v, na, d->T, H, K, V, 0, C, 0);
    w.ahead = by_mm ? NULL : &ah;
    for (int64_t t0 = 0; t0 < d->T; t0 += C) {
        const int n = (int)(d->T - t0 < C ? d->T - t0 : C); /* the tail chunk shrinks */
        volatile float sink = recur__ahead_rest(&ah);
        (void)sink;
        /* gdr_diag runs H ceil(n / GDR_SUB) ceil(K / 4) times per chunk */
        recur__ahead_chunk(&ah, in, is_v, na, d->T, H, K, V, t0 + n, C,
                           (size_t)H * (size_t)((n + GDR_SUB - 1) / GDR_SUB) * (size_t)((K + 3) / 4));
        for (int h = 0; h < H; h++)
            gdr_chunk(d, &w, h, t0, n, q, k, v, g, a, b, scale, S + (size_t)h * K * V, o);
    }
    recur__mm_ahead_bind(NULL);
    free(w.mem);
    return RECUR_OK;
}
