/* test_gated_linear.c — linear attention, retention and GLA in all three forms.
 *
 * Every numeric check compares against ref_run below: a plain float64 token-by-token
 * recurrence written independently of core/gated_linear.c, with a stated tolerance
 * (relative RMS error <= 1e-5). Forms are also compared with each other, across chunk sizes
 * and across split calls; bad-input tests check the code and that nothing was written.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "test_rng.h"

#define TOL 1e-5

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double urand(void) /* [0,1) */
{
    return xorshift_unit(&rng_state);
}

static float *randn(size_t n, float s)
{
    float *a = malloc((n ? n : 1) * sizeof(float));
    cr_assert(a);
    for (size_t i = 0; i < n; i++) {
        double u1 = urand() + 1e-12, u2 = urand();
        a[i] = (float)(s * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    return a;
}

/* log gates uniform in [lo, hi] (both <= 0) */
static float *gates(size_t n, double lo, double hi)
{
    float *g = malloc((n ? n : 1) * sizeof(float));
    cr_assert(g);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(lo + (hi - lo) * urand());
    return g;
}

static float *dup(const float *a, size_t n)
{
    float *b = malloc((n ? n : 1) * sizeof(float));
    cr_assert(b);
    memcpy(b, a, n * sizeof(float));
    return b;
}

static double rel_rms(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double rel_rms_f(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        num += e * e;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---------------------------------------------------------------- float64 reference */

enum { M_LINEAR, M_RETENTION, M_GLA_SCALAR, M_GLA_KEY };

typedef struct {
    int mixer;
    int normalize;          /* linear */
    recur_feature_map fmap; /* linear */
    const float *gamma;     /* retention, [H] */
    const float *g;         /* gla */
} mix_args;

static double phi64(recur_feature_map f, double x)
{
    if (f == RECUR_FMAP_ELU1)
        return x > 0 ? x + 1.0 : exp(x);
    if (f == RECUR_FMAP_RELU)
        return x > 0 ? x : 0.0;
    return x;
}

/* S (float [H][K][V]) and z (float [H][K]) are read as the initial state; the final state is
 * written to S64/z64, outputs to o64 [T][H][V]. */
static void ref_run(const recur_dims *d, const float *q, const float *k, const float *v,
                    const mix_args *a, double scale, const float *S, const float *z, double *o64,
                    double *S64, double *z64)
{
    const int H = d->H, K = d->K, V = d->V;
    const int lin = a->mixer == M_LINEAR;
    const recur_feature_map f = lin ? a->fmap : RECUR_FMAP_IDENTITY;
    for (size_t i = 0; i < (size_t)H * K * V; i++)
        S64[i] = S[i];
    for (size_t i = 0; i < (size_t)H * K; i++)
        z64[i] = z ? z[i] : 0.0;
    for (int64_t t = 0; t < d->T; t++)
        for (int h = 0; h < H; h++) {
            const size_t r = (size_t)t * H + h;
            double *Sh = S64 + (size_t)h * K * V, *zh = z64 + (size_t)h * K;
            double den = 0;
            for (int j = 0; j < V; j++)
                o64[r * V + j] = 0;
            for (int i = 0; i < K; i++) {
                double dec = 1.0;
                if (a->mixer == M_RETENTION)
                    dec = a->gamma[h];
                else if (a->mixer == M_GLA_SCALAR)
                    dec = exp((double)a->g[r]);
                else if (a->mixer == M_GLA_KEY)
                    dec = exp((double)a->g[r * K + i]);
                double ki = phi64(f, k[r * K + i]), qi = scale * phi64(f, q[r * K + i]);
                for (int j = 0; j < V; j++) {
                    Sh[(size_t)i * V + j] = dec * Sh[(size_t)i * V + j] + ki * v[r * V + j];
                    o64[r * V + j] += qi * Sh[(size_t)i * V + j];
                }
                zh[i] = dec * zh[i] + ki;
                den += qi * zh[i];
            }
            if (lin && a->normalize)
                for (int j = 0; j < V; j++)
                    o64[r * V + j] /= den + (double)RECUR_LINEAR_EPS;
        }
}

/* ---------------------------------------------------------------- calling the library */

static int call(const recur_dims *d, const float *q, const float *k, const float *v,
                const mix_args *a, float scale, recur_form form, int64_t cs, float *S, float *z,
                float *o)
{
    switch (a->mixer) {
    case M_LINEAR:
        return recur_linear_attention(d, q, k, v, a->normalize, a->fmap, scale, form, cs, S, z, o);
    case M_RETENTION:
        return recur_retention(d, q, k, v, a->gamma, scale, form, cs, S, o);
    case M_GLA_SCALAR:
        return recur_gla(d, q, k, v, a->g, 0, scale, form, cs, S, o);
    default:
        return recur_gla(d, q, k, v, a->g, 1, scale, form, cs, S, o);
    }
}

typedef struct {
    recur_dims d;
    float *q, *k, *v, *g, *S0, *z0;
    float *gamma; /* [H], heap: the struct is returned by value */
    mix_args a;
} problem;

/* gate regime: glo..ghi for GLA log gates */
static problem make(int mixer, int64_t T, int H, int K, int V, double glo, double ghi)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.d = (recur_dims){T, H, K, V};
    const size_t nk = (size_t)T * H * K, nv = (size_t)T * H * V;
    p.q = randn(nk, 1.0f);
    p.k = randn(nk, 1.0f);
    p.v = randn(nv, 1.0f);
    p.S0 = randn((size_t)H * K * V, 0.5f);
    p.z0 = gates((size_t)H * K, 0.5, 2.0); /* a positive normaliser state */
    p.g = gates((size_t)T * H * (mixer == M_GLA_KEY ? K : 1), glo, ghi);
    p.gamma = malloc((size_t)H * sizeof(float));
    cr_assert(p.gamma);
    recur_multiscale_decays(H, p.gamma);
    p.a.mixer = mixer;
    p.a.normalize = 1;
    p.a.fmap = RECUR_FMAP_ELU1;
    p.a.gamma = p.gamma;
    p.a.g = p.g;
    return p;
}

static void drop(problem *p)
{
    free(p->q), free(p->k), free(p->v), free(p->g), free(p->S0), free(p->z0), free(p->gamma);
}

/* Run one form and compare o, S (and z) with the float64 reference: S within stol, the rest TOL. */
static void check_vs_ref_tol(problem *p, recur_form form, int64_t cs, const char *what, double stol)
{
    const recur_dims *d = &p->d;
    const size_t no = (size_t)d->T * d->H * d->V, ns = (size_t)d->H * d->K * d->V,
                 nz = (size_t)d->H * d->K;
    float *S = dup(p->S0, ns), *z = dup(p->z0, nz), *o = malloc((no ? no : 1) * sizeof(float));
    double *o64 = malloc((no ? no : 1) * sizeof(double)), *S64 = malloc(ns * sizeof(double)),
           *z64 = malloc(nz * sizeof(double));
    const int lin = p->a.mixer == M_LINEAR;
    int rc = call(d, p->q, p->k, p->v, &p->a, 0.0f, form, cs, S, z, o);
    cr_assert_eq(rc, RECUR_OK, "%s: rc %d", what, rc);
    ref_run(d, p->q, p->k, p->v, &p->a, 1.0 / sqrt((double)d->K), p->S0, lin ? p->z0 : NULL, o64,
            S64, z64);
    double eo = rel_rms(o, o64, no), es = rel_rms(S, S64, ns);
    cr_expect(eo <= TOL, "%s form %d cs %ld: o rel err %g", what, form, (long)cs, eo);
    cr_expect(es <= stol, "%s form %d cs %ld: S rel err %g", what, form, (long)cs, es);
    if (lin && p->a.normalize) {
        double ez = rel_rms(z, z64, nz);
        cr_expect(ez <= TOL, "%s form %d: z rel err %g", what, form, ez);
    }
    free(S), free(z), free(o), free(o64), free(S64), free(z64);
}

static void check_vs_ref(problem *p, recur_form form, int64_t cs, const char *what)
{
    check_vs_ref_tol(p, form, cs, what, TOL);
}

static const recur_form forms[3] = {RECUR_FORM_RECURRENT, RECUR_FORM_PARALLEL, RECUR_FORM_CHUNKWISE};
static const char *mixer_names[4] = {"linear", "retention", "gla-scalar", "gla-key"};

/* ---------------------------------------------------------------- against float64 */

Test(gated_linear, every_mixer_and_form_matches_float64)
{
    const int64_t Ts[] = {1, 2, 17, 65};
    for (int m = 0; m < 4; m++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            problem p = make(m, Ts[ti], 2, 16, 24, -0.3, 0.0);
            for (int f = 0; f < 3; f++)
                check_vs_ref(&p, forms[f], 16, mixer_names[m]);
            drop(&p);
        }
}

Test(gated_linear, head_dims_of_the_issue)
{
    /* K, V in {16, 60, 64, 100}: vector blocks, their tails, V != K */
    const int dims[4][2] = {{64, 64}, {60, 100}, {100, 60}, {16, 128}};
    for (int m = 0; m < 4; m++)
        for (int di = 0; di < 4; di++) {
            problem p = make(m, 70, 2, dims[di][0], dims[di][1], -0.5, 0.0);
            for (int f = 0; f < 3; f++)
                check_vs_ref(&p, forms[f], 32, mixer_names[m]);
            drop(&p);
        }
}

Test(gated_linear, linear_attention_feature_maps_and_unnormalised)
{
    const recur_feature_map maps[3] = {RECUR_FMAP_ELU1, RECUR_FMAP_RELU, RECUR_FMAP_IDENTITY};
    for (int mi = 0; mi < 3; mi++)
        for (int norm = 0; norm < 2; norm++) {
            if (maps[mi] == RECUR_FMAP_IDENTITY && norm)
                continue; /* q.z can cross zero: the normalised identity map is ill-conditioned */
            problem p = make(M_LINEAR, 40, 3, 8, 5, 0, 0);
            p.a.fmap = maps[mi];
            p.a.normalize = norm;
            for (int f = 0; f < 3; f++)
                check_vs_ref(&p, forms[f], 7, "linear fmap");
            drop(&p);
        }
}

Test(gated_linear, linear_attention_normaliser_lanes_and_tail_chunks)
{
    /* The chunkwise normaliser sums phi(q_t) ⊙ z_t in RECUR__VN lanes (16 / 8 / 4 per ISA), the
     * K % RECUR__VN last keys into lane 0, then the lanes across rows: K below, at and past one
     * vector and its multiples; V unaligned; T = 45 leaves a tail chunk at cs 16 (13 rows) and a
     * single short one at cs 64. The identity map with the normaliser (copied into the workspace
     * to be scaled) on positive q, k, where q.z stays away from zero. */
    const int dims[][2] = {{1, 5}, {3, 17}, {8, 33}, {17, 5}, {36, 20}, {100, 7}};
    for (int mi = 0; mi < 2; mi++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            problem p = make(M_LINEAR, 45, 2, dims[di][0], dims[di][1], 0, 0);
            if (mi == 1) {
                p.a.fmap = RECUR_FMAP_IDENTITY;
                for (size_t i = 0; i < (size_t)45 * 2 * dims[di][0]; i++)
                    p.q[i] = fabsf(p.q[i]) + 0.1f, p.k[i] = fabsf(p.k[i]) + 0.1f;
            }
            check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 16, "linear normaliser");
            check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 64, "linear normaliser");
            check_vs_ref(&p, RECUR_FORM_PARALLEL, 1, "linear normaliser");
            drop(&p);
        }
}

Test(gated_linear, long_sequence_and_strong_gates, .timeout = 60)
{
    /* T = 1000; strong gates g ~ -5 and mild gates; V != K */
    const double lo[2] = {-5.5, -0.05}, hi[2] = {-4.5, 0.0};
    for (int m = M_GLA_SCALAR; m <= M_GLA_KEY; m++)
        for (int r = 0; r < 2; r++) {
            problem p = make(m, 1000, 1, 16, 20, lo[r], hi[r]);
            check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 64, "gla long");
            check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 3, "gla long");
            check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 300, "gla long"); /* 2 row panels per chunk */
            check_vs_ref(&p, RECUR_FORM_RECURRENT, 1, "gla long");
            check_vs_ref(&p, RECUR_FORM_PARALLEL, 1, "gla long");
            drop(&p);
        }
    problem p = make(M_RETENTION, 1000, 2, 16, 8, 0, 0);
    check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 64, "retention long");
    check_vs_ref(&p, RECUR_FORM_PARALLEL, 1, "retention long");
    drop(&p);
    p = make(M_LINEAR, 1000, 1, 16, 8, 0, 0);
    check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 64, "linear long");
    check_vs_ref(&p, RECUR_FORM_PARALLEL, 1, "linear long");
    drop(&p);
}

Test(gated_linear, per_key_scores_on_both_sides_of_the_range_bound)
{
    /* gated_linear.c takes a chunk's per-key scores as one product through the chunk's start while
     * no key decays by more than e^-40 over the chunk (GL_KEY_RANGE), else through reference
     * points every 16 rows. Gates of -0.6: a 64-token chunk spans a range of 38.4 (the product,
     * factors up to e^38.4), a 70-token one 42 (the fallback), chunks of 16 span 9.6; the parallel
     * form (one chunk of T = 200) 120 (the fallback). Then mild gates with one key at -1: every
     * chunk of 64 falls back because of that key alone, chunks of 16 do not. Then mild gates
     * with tokens [64, 128) at -1: with chunks of 64 the second chunk's try fails, the third
     * (mild) takes the fallback without a try (its head's last chunk fell back), the tail the
     * product again. */
    for (int r = 0; r < 3; r++) {
        problem p = make(M_GLA_KEY, 200, 2, 16, 12, -0.05, 0.0);
        for (size_t i = 0; i < (size_t)200 * 2 * 16; i++)
            p.g[i] = r == 0   ? -0.6f + 0.001f * (float)(i % 7)
                     : r == 1 ? (i % 16 == 3 ? -1.0f : p.g[i])
                              : (i / (2 * 16) >= 64 && i / (2 * 16) < 128 ? -1.0f : p.g[i]);
        check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 64, "range bound");
        check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 70, "range bound");
        check_vs_ref(&p, RECUR_FORM_CHUNKWISE, 16, "range bound");
        check_vs_ref(&p, RECUR_FORM_PARALLEL, 1, "range bound");
        drop(&p);
    }
}

Test(gated_linear, per_key_decays_near_the_range_bound_keep_float_precision)
{
    /* Chunks that decay every key by ~38 (gates -0.6 at cs 64, -0.3 at cs 128): the state's
     * decay exp(b_last) and the restarts of the running products take a double argument of
     * magnitude up to 38. Rounded to float first, the argument alone costs |b| 2^-24 relative
     * (~1e-6 here: S rel. RMS 1.6e-6 / 2.0e-6 measured so); gated_linear.c's exp_nonpos_d splits
     * it into float + remainder (S 4.6e-7 / 3.0-3.5e-7 on avx512, avx2 and portable). */
    for (int r = 0; r < 2; r++) {
        problem p = make(M_GLA_KEY, 256, 2, 64, 32, -0.05, 0.0);
        for (size_t i = 0; i < (size_t)256 * 2 * 64; i++)
            p.g[i] = r == 0 ? -0.6f + 0.001f * (float)(i % 7) : -0.3f - 0.001f * (float)(i % 5);
        check_vs_ref_tol(&p, RECUR_FORM_CHUNKWISE, r == 0 ? 64 : 128, "near the range bound", 1e-6);
        drop(&p);
    }
}

Test(gated_linear, extreme_finite_gates_reset_the_state)
{
    /* g as low as -FLT_MAX is finite and legal: exp(g) = 0 wipes the state. Mixed with g = 0. */
    for (int m = M_GLA_SCALAR; m <= M_GLA_KEY; m++) {
        problem p = make(m, 90, 2, 16, 8, -1.0, 0.0);
        const size_t ng = (size_t)90 * 2 * (m == M_GLA_KEY ? 16 : 1);
        for (size_t i = 0; i < ng; i++)
            p.g[i] = (i % 7 == 0) ? -3.4e38f : (i % 5 == 0) ? -1e30f : (i % 3 == 0) ? 0.0f : p.g[i];
        for (int f = 0; f < 3; f++) {
            check_vs_ref(&p, forms[f], 5, "extreme gates");
            check_vs_ref(&p, forms[f], 64, "extreme gates");
        }
        drop(&p);
    }
    /* a tiny gamma */
    problem p = make(M_RETENTION, 50, 2, 8, 8, 0, 0);
    p.gamma[0] = 1e-30f;
    p.gamma[1] = 1.0f;
    for (int f = 0; f < 3; f++)
        check_vs_ref(&p, forms[f], 7, "tiny gamma");
    drop(&p);
}

Test(gated_linear, zero_gates_equal_unnormalised_identity_linear_attention)
{
    /* GLA with g = 0 and retention with gamma = 1 are linear attention with phi = identity. */
    problem p = make(M_GLA_KEY, 30, 2, 8, 8, 0, 0);
    const size_t no = 30 * 2 * 8, ns = 2 * 8 * 8;
    float *S1 = dup(p.S0, ns), *S2 = dup(p.S0, ns), *S3 = dup(p.S0, ns);
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *o3 = malloc(no * 4);
    float one[2] = {1.0f, 1.0f};
    cr_assert_eq(recur_gla(&p.d, p.q, p.k, p.v, p.g, 1, 0, RECUR_FORM_CHUNKWISE, 8, S1, o1), 0);
    cr_assert_eq(recur_retention(&p.d, p.q, p.k, p.v, one, 0, RECUR_FORM_CHUNKWISE, 8, S2, o2), 0);
    cr_assert_eq(recur_linear_attention(&p.d, p.q, p.k, p.v, 0, RECUR_FMAP_IDENTITY, 0,
                                        RECUR_FORM_CHUNKWISE, 8, S3, NULL, o3), 0);
    cr_expect(rel_rms_f(o1, o3, no) < 1e-6 && rel_rms_f(o2, o3, no) < 1e-6);
    cr_expect(rel_rms_f(S1, S3, ns) < 1e-6 && rel_rms_f(S2, S3, ns) < 1e-6);
    free(S1), free(S2), free(S3), free(o1), free(o2), free(o3);
    drop(&p);
}

/* ---------------------------------------------------------------- forms agree with each other */

static const char *mixer_names[4];

static void run_form(problem *p, recur_form form, int64_t cs, float *S, float *z, float *o)
{
    memcpy(S, p->S0, (size_t)p->d.H * p->d.K * p->d.V * sizeof(float));
    memcpy(z, p->z0, (size_t)p->d.H * p->d.K * sizeof(float));
    int rc = call(&p->d, p->q, p->k, p->v, &p->a, 0.0f, form, cs, S, z, o);
    cr_assert_eq(rc, RECUR_OK, "%s form %d cs %ld: rc %d", mixer_names[p->a.mixer], form, (long)cs, rc);
}

Test(gated_linear, chunk_size_never_changes_the_result)
{
    const int64_t T = 100;
    for (int m = 0; m < 4; m++) {
        problem p = make(m, T, 2, 12, 10, -1.0, 0.0);
        const size_t no = (size_t)T * 2 * 10, ns = 2 * 12 * 10, nz = 2 * 12;
        float *Sr = malloc(ns * 4), *zr = malloc(nz * 4), *orf = malloc(no * 4);
        float *S = malloc(ns * 4), *z = malloc(nz * 4), *o = malloc(no * 4);
        run_form(&p, RECUR_FORM_RECURRENT, 1, Sr, zr, orf);
        const int64_t sizes[] = {1, 3, 16, 64, T, T + 5, INT64_MAX};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            run_form(&p, RECUR_FORM_CHUNKWISE, sizes[i], S, z, o);
            cr_expect(rel_rms_f(o, orf, no) < TOL, "%s cs %ld: o differs", mixer_names[m], (long)sizes[i]);
            cr_expect(rel_rms_f(S, Sr, ns) < TOL, "%s cs %ld: S differs", mixer_names[m], (long)sizes[i]);
            if (m == M_LINEAR)
                cr_expect(rel_rms_f(z, zr, nz) < TOL, "z differs at cs %ld", (long)sizes[i]);
        }
        run_form(&p, RECUR_FORM_PARALLEL, 0, S, z, o);
        cr_expect(rel_rms_f(o, orf, no) < TOL, "%s parallel: o differs", mixer_names[m]);
        cr_expect(rel_rms_f(S, Sr, ns) < TOL, "%s parallel: S differs", mixer_names[m]);
        free(Sr), free(zr), free(orf), free(S), free(z), free(o);
        drop(&p);
    }
}

Test(gated_linear, split_calls_equal_one_call)
{
    const int64_t T = 77, cut[] = {0, 1, 30, 64, 76, 77};
    for (int m = 0; m < 4; m++) {
        problem p = make(m, T, 3, 8, 6, -0.7, 0.0);
        const int H = 3, K = 8, V = 6;
        const size_t no = (size_t)T * H * V, ns = (size_t)H * K * V, nz = (size_t)H * K;
        float *S1 = malloc(ns * 4), *z1 = malloc(nz * 4), *o1 = malloc(no * 4);
        run_form(&p, RECUR_FORM_CHUNKWISE, 16, S1, z1, o1);
        for (size_t c = 0; c < sizeof cut / sizeof *cut; c++)
            for (int f = 0; f < 3; f++) {
                /* first part in form f, second part in the next form */
                const int64_t a = cut[c];
                float *S = dup(p.S0, ns), *z = dup(p.z0, nz), *o = malloc(no * 4);
                recur_dims d1 = {a, H, K, V}, d2 = {T - a, H, K, V};
                mix_args a1 = p.a, a2 = p.a;
                a2.g = p.g + (size_t)a * H * (m == M_GLA_KEY ? K : 1);
                cr_assert_eq(call(&d1, p.q, p.k, p.v, &a1, 0, forms[f], 5, S, z, o), 0);
                cr_assert_eq(call(&d2, p.q + (size_t)a * H * K, p.k + (size_t)a * H * K,
                                  p.v + (size_t)a * H * V, &a2, 0, forms[(f + 1) % 3], 5, S, z,
                                  o + (size_t)a * H * V), 0);
                cr_expect(rel_rms_f(o, o1, no) < TOL, "%s cut %ld form %d: o", mixer_names[m], (long)a, f);
                cr_expect(rel_rms_f(S, S1, ns) < TOL, "%s cut %ld form %d: S", mixer_names[m], (long)a, f);
                if (m == M_LINEAR)
                    cr_expect(rel_rms_f(z, z1, nz) < TOL, "cut %ld: z", (long)a);
                free(S), free(z), free(o);
            }
        free(S1), free(z1), free(o1);
        drop(&p);
    }
}

Test(gated_linear, decode_steps_equal_prefill)
{
    /* T == 1 calls one after another (the decode step) equal one chunkwise prefill. */
    for (int m = 0; m < 4; m++) {
        problem p = make(m, 20, 2, 8, 8, -2.0, 0.0);
        const int H = 2, K = 8, V = 8;
        const size_t no = 20 * H * V, ns = H * K * V, nz = H * K;
        float *S1 = malloc(ns * 4), *z1 = malloc(nz * 4), *o1 = malloc(no * 4);
        run_form(&p, RECUR_FORM_CHUNKWISE, 64, S1, z1, o1);
        float *S = dup(p.S0, ns), *z = dup(p.z0, nz), *o = malloc(no * 4);
        recur_dims d1 = {1, H, K, V};
        for (int t = 0; t < 20; t++) {
            mix_args a = p.a;
            a.g = p.g + (size_t)t * H * (m == M_GLA_KEY ? K : 1);
            cr_assert_eq(call(&d1, p.q + (size_t)t * H * K, p.k + (size_t)t * H * K,
                              p.v + (size_t)t * H * V, &a, 0, forms[t % 3], 4, S, z,
                              o + (size_t)t * H * V), 0);
        }
        cr_expect(rel_rms_f(o, o1, no) < TOL, "%s: o", mixer_names[m]);
        cr_expect(rel_rms_f(S, S1, ns) < TOL, "%s: S", mixer_names[m]);
        free(S), free(z), free(o), free(S1), free(z1), free(o1);
        drop(&p);
    }
}

/* recur_retention over p from its initial state: S [H][K][V] and o [T][H][V] (asserted to succeed). */
static void retention_from_start(const problem *p, const float *gamma, float scale, int form, int chunk,
                                 float *S, float *o)
{
    memcpy(S, p->S0, (size_t)p->d.H * p->d.K * p->d.V * sizeof(float));
    cr_assert_eq(recur_retention(&p->d, p->q, p->k, p->v, gamma, scale, form, chunk, S, o), 0);
}

Test(gated_linear, explicit_scale_and_default_scale)
{
    problem p = make(M_RETENTION, 10, 1, 16, 4, 0, 0);
    float S1[64], S2[64], o1[40], o2[40];
    retention_from_start(&p, NULL, 0.0f, RECUR_FORM_RECURRENT, 1, S1, o1);
    retention_from_start(&p, NULL, 0.25f, RECUR_FORM_RECURRENT, 1, S2, o2);
    cr_expect(rel_rms_f(o1, o2, 40) < 1e-7, "scale 0 must mean K^-1/2 = 0.25");
    cr_assert_eq(recur_retention(&p.d, p.q, p.k, p.v, NULL, 0.5f, RECUR_FORM_CHUNKWISE, 3, S2, o2), 0);
    cr_assert_eq(recur_retention(&p.d, p.q, p.k, p.v, NULL, -1.0f, RECUR_FORM_CHUNKWISE, 3, S1, o1), 0);
    for (int i = 0; i < 40; i++) /* same state path, scale 0.5 vs 0.25: o doubles */
        cr_expect(fabsf(o2[i] - 2.0f * o1[i]) <= 1e-5f * (1.0f + fabsf(o2[i])));
    drop(&p);
}

Test(gated_linear, multiscale_decays)
{
    float g[40];
    recur_multiscale_decays(40, g);
    cr_expect_eq(g[0], 0.96875f);
    cr_expect_eq(g[1], 0.984375f);
    cr_expect_eq(g[3], (float)(1.0 - 1.0 / 256));
    for (int h = 0; h < 40; h++)
        cr_expect(g[h] > 0.0f && g[h] <= 1.0f && (h == 0 || g[h] >= g[h - 1]));
    /* gamma == NULL in recur_retention means these decays */
    problem p = make(M_RETENTION, 12, 3, 4, 4, 0, 0);
    float S1[48], S2[48], o1[144], o2[144];
    retention_from_start(&p, NULL, 0, RECUR_FORM_CHUNKWISE, 5, S1, o1);
    retention_from_start(&p, g, 0, RECUR_FORM_CHUNKWISE, 5, S2, o2);
    cr_expect(memcmp(o1, o2, sizeof o1) == 0 && memcmp(S1, S2, sizeof S1) == 0);
    drop(&p);
}

/* Each thread runs every mixer chunkwise (per-thread workspace cache) and parallel; results
 * must equal the main thread's bit for bit. */
typedef struct {
    problem *p;
    float *o[4], *S[4];
} thread_job;

static void *thread_body(void *arg)
{
    thread_job *j = arg;
    for (int rep = 0; rep < 3; rep++)
        for (int m = 0; m < 4; m++) {
            problem *p = &j->p[m];
            float z[64];
            memcpy(j->S[m], p->S0, (size_t)p->d.H * p->d.K * p->d.V * sizeof(float));
            memcpy(z, p->z0, (size_t)p->d.H * p->d.K * sizeof(float));
            recur_form f = rep == 1 ? RECUR_FORM_PARALLEL : RECUR_FORM_CHUNKWISE;
            if (call(&p->d, p->q, p->k, p->v, &p->a, 0, f, 16 + rep, j->S[m], z, j->o[m]) != 0)
                return (void *)1;
        }
    return NULL;
}

Test(gated_linear, threads_share_nothing)
{
    problem p[4];
    for (int m = 0; m < 4; m++)
        p[m] = make(m, 150, 2, 16, 12, -0.5, 0.0);
    const size_t no = 150 * 2 * 12, ns = 2 * 16 * 12;
    thread_job jobs[3];
    for (int i = 0; i < 3; i++) {
        jobs[i].p = p;
        for (int m = 0; m < 4; m++) {
            jobs[i].o[m] = malloc(no * 4);
            jobs[i].S[m] = malloc(ns * 4);
        }
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, thread_body, &jobs[i]), 0);
    cr_assert_null(thread_body(&jobs[2]));
    for (int i = 0; i < 2; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        cr_assert_null(ret);
        for (int m = 0; m < 4; m++) {
            cr_expect(memcmp(jobs[i].o[m], jobs[2].o[m], no * 4) == 0, "thread %d mixer %d: o", i, m);
            cr_expect(memcmp(jobs[i].S[m], jobs[2].S[m], ns * 4) == 0, "thread %d mixer %d: S", i, m);
        }
    }
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 4; m++)
            free(jobs[i].o[m]), free(jobs[i].S[m]);
    for (int m = 0; m < 4; m++)
        drop(&p[m]);
}

/* ---------------------------------------------------------------- no-ops and errors */

Test(gated_linear, empty_sequence_keeps_the_state)
{
    for (int m = 0; m < 4; m++)
        for (int f = 0; f < 3; f++) {
            problem p = make(m, 0, 2, 4, 3, -1, 0);
            float *S = dup(p.S0, 24), *z = dup(p.z0, 8);
            float o = 123.0f;
            cr_assert_eq(call(&p.d, p.q, p.k, p.v, &p.a, 0, forms[f], 1, S, z, &o), RECUR_OK);
            cr_expect(memcmp(S, p.S0, 24 * 4) == 0 && memcmp(z, p.z0, 8 * 4) == 0 && o == 123.0f);
            /* with no tokens, the sequence arrays may be NULL */
            mix_args a = p.a;
            a.g = NULL;
            cr_assert_eq(call(&p.d, NULL, NULL, NULL, &a, 0, forms[f], 1, S, z, NULL), RECUR_OK);
            cr_expect(memcmp(S, p.S0, 24 * 4) == 0);
            free(S), free(z);
            drop(&p);
        }
}

Test(gated_linear, unnormalised_linear_attention_leaves_z_alone)
{
    problem p = make(M_LINEAR, 9, 2, 4, 4, 0, 0);
    p.a.normalize = 0;
    float S[32], z[8], o[72];
    memcpy(S, p.S0, sizeof S);
    memcpy(z, p.z0, sizeof z);
    for (int f = 0; f < 3; f++)
        cr_assert_eq(call(&p.d, p.q, p.k, p.v, &p.a, 0, forms[f], 2, S, z, o), 0);
    cr_expect(memcmp(z, p.z0, sizeof z) == 0);
    cr_assert_eq(call(&p.d, p.q, p.k, p.v, &p.a, 0, RECUR_FORM_CHUNKWISE, 2, S, NULL, o), 0);
    drop(&p);
}

/* Call with a bad argument: expect the code, and that S, z and o were not written. */
static void expect_error(problem *p, const mix_args *a, const recur_dims *d, float scale,
                         recur_form form, int64_t cs, int nullS, int nullz, int want, const char *what)
{
    const size_t ns = (size_t)p->d.H * p->d.K * p->d.V, nz = (size_t)p->d.H * p->d.K,
                 no = (size_t)p->d.T * p->d.H * p->d.V;
    float *S = dup(p->S0, ns), *z = dup(p->z0, nz), *o = malloc(no * 4);
    for (size_t i = 0; i < no; i++)
        o[i] = -7.0f;
    int rc = call(d, p->q, p->k, p->v, a, scale, form, cs, nullS ? NULL : S, nullz ? NULL : z, o);
    cr_expect_eq(rc, want, "%s: got %d (%s), want %d", what, rc, recur_strerror(rc), want);
    cr_expect(memcmp(S, p->S0, ns * 4) == 0, "%s: S written", what);
    cr_expect(memcmp(z, p->z0, nz * 4) == 0, "%s: z written", what);
    for (size_t i = 0; i < no; i++)
        if (o[i] != -7.0f) {
            cr_expect(0, "%s: o written", what);
            break;
        }
    free(S), free(z), free(o);
}

Test(gated_linear, bad_arguments_are_reported_and_change_nothing)
{
    for (int m = 0; m < 4; m++) {
        problem p = make(m, 6, 2, 4, 3, -1, 0);
        const char *nm = mixer_names[m];
        recur_dims d = p.d;
        cr_expect_eq(call(NULL, p.q, p.k, p.v, &p.a, 0, RECUR_FORM_RECURRENT, 1, p.S0, p.z0, NULL),
                     RECUR_EINVAL, "%s: NULL dims", nm);
        expect_error(&p, &p.a, &d, 0, RECUR_FORM_RECURRENT, 1, 1, 0, RECUR_EINVAL, "NULL S");
        expect_error(&p, &p.a, &d, 0, (recur_form)7, 1, 0, 0, RECUR_EINVAL, "bad form");
        expect_error(&p, &p.a, &d, 0, (recur_form)-1, 1, 0, 0, RECUR_EINVAL, "bad form");
        expect_error(&p, &p.a, &d, 0, RECUR_FORM_CHUNKWISE, 0, 0, 0, RECUR_ESHAPE, "chunk 0");
        expect_error(&p, &p.a, &d, 0, RECUR_FORM_CHUNKWISE, -5, 0, 0, RECUR_ESHAPE, "chunk < 0");
        expect_error(&p, &p.a, &d, NAN, RECUR_FORM_CHUNKWISE, 4, 0, 0, RECUR_ENONFINITE, "scale NaN");
        expect_error(&p, &p.a, &d, INFINITY, RECUR_FORM_PARALLEL, 4, 0, 0, RECUR_ENONFINITE, "scale inf");
        const recur_dims bad[] = {{-1, 2, 4, 3}, {6, 0, 4, 3}, {6, 2, 0, 3}, {6, 2, 4, 0},
                                  {6, 2, RECUR_MAX_DIM + 1, 3}, {6, RECUR_MAX_DIM + 1, 4, 3},
                                  {6, 2, 4, RECUR_MAX_DIM + 1}, {INT64_MAX / 2, 2, 4, 3}};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
            expect_error(&p, &p.a, &bad[i], 0, RECUR_FORM_RECURRENT, 1, 0, 0, RECUR_ESHAPE, "bad dims");
        /* a NULL sequence array with T > 0 */
        {
            float *S = dup(p.S0, 24), *z = dup(p.z0, 8), o[36];
            cr_expect_eq(call(&d, NULL, p.k, p.v, &p.a, 0, RECUR_FORM_RECURRENT, 1, S, z, o), RECUR_EINVAL);
            cr_expect_eq(call(&d, p.q, NULL, p.v, &p.a, 0, RECUR_FORM_PARALLEL, 1, S, z, o), RECUR_EINVAL);
            cr_expect_eq(call(&d, p.q, p.k, NULL, &p.a, 0, RECUR_FORM_CHUNKWISE, 1, S, z, o), RECUR_EINVAL);
            cr_expect_eq(call(&d, p.q, p.k, p.v, &p.a, 0, RECUR_FORM_CHUNKWISE, 1, S, z, NULL), RECUR_EINVAL);
            cr_expect(memcmp(S, p.S0, 24 * 4) == 0);
            free(S), free(z);
        }
        if (m == M_GLA_SCALAR || m == M_GLA_KEY) {
            const size_t ng = 6 * 2 * (m == M_GLA_KEY ? 4 : 1);
            float *g = dup(p.g, ng);
            mix_args a = p.a;
            a.g = g;
            g[ng - 1] = NAN;
            expect_error(&p, &a, &d, 0, RECUR_FORM_CHUNKWISE, 4, 0, 0, RECUR_ENONFINITE, "g NaN");
            g[ng - 1] = -INFINITY;
            expect_error(&p, &a, &d, 0, RECUR_FORM_RECURRENT, 4, 0, 0, RECUR_ENONFINITE, "g -inf");
            g[ng - 1] = 1e-3f;
            expect_error(&p, &a, &d, 0, RECUR_FORM_PARALLEL, 4, 0, 0, RECUR_ERANGE, "g > 0");
            g[ng - 1] = -0.0f;
            float *S = dup(p.S0, 24), o[36];
            cr_expect_eq(call(&d, p.q, p.k, p.v, &a, 0, RECUR_FORM_CHUNKWISE, 4, S, NULL, o), 0, "g = -0 is fine");
            a.g = NULL;
            expect_error(&p, &a, &d, 0, RECUR_FORM_CHUNKWISE, 4, 0, 0, RECUR_EINVAL, "g NULL");
            free(S), free(g);
        }
        if (m == M_RETENTION) {
            float gm[2] = {0.9f, 0.0f};
            mix_args a = p.a;
            a.gamma = gm;
            expect_error(&p, &a, &d, 0, RECUR_FORM_CHUNKWISE, 4, 0, 0, RECUR_ERANGE, "gamma 0");
            gm[1] = 1.0001f;
            expect_error(&p, &a, &d, 0, RECUR_FORM_CHUNKWISE, 4, 0, 0, RECUR_ERANGE, "gamma > 1");
            gm[1] = -0.5f;
            expect_error(&p, &a, &d, 0, RECUR_FORM_RECURRENT, 4, 0, 0, RECUR_ERANGE, "gamma < 0");
            gm[1] = NAN;
            expect_error(&p, &a, &d, 0, RECUR_FORM_PARALLEL, 4, 0, 0, RECUR_ENONFINITE, "gamma NaN");
            gm[1] = INFINITY;
            expect_error(&p, &a, &d, 0, RECUR_FORM_PARALLEL, 4, 0, 0, RECUR_ENONFINITE, "gamma inf");
        }
        if (m == M_LINEAR) {
            expect_error(&p, &p.a, &d, 0, RECUR_FORM_CHUNKWISE, 4, 0, 1, RECUR_EINVAL, "normalize, z NULL");
            mix_args a = p.a;
            a.fmap = (recur_feature_map)9;
            expect_error(&p, &a, &d, 0, RECUR_FORM_CHUNKWISE, 4, 0, 0, RECUR_EINVAL, "bad fmap");
        }
        drop(&p);
    }
}
