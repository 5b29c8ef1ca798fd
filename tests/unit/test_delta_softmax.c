/*
 * test_delta_softmax.c — the delta rule (DeltaNet, gated DeltaNet), causal softmax attention with
 * its KV-cache step, and block top-k attention, each against an independent float64 reference
 * written here in plain loops (the textbook recurrence / the seeds' script), never against our
 * own C. Tolerance: rel. RMS error <= 1e-5 (docs/DESIGN.md §8).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "test_mixer_util.h"

#define TOL 1e-5

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state;

static double urand(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static double nrand(void)
{
    double u = urand() + 1e-300, w = urand();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

static void fill_normal(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)nrand();
}

/* ---------------------------------------------------------------- delta rule: cases */

enum { GATE_NONE, GATE_ZERO, GATE_MILD, GATE_STRONG };

typedef struct {
    recur_dims d;
    float *q, *k, *v, *beta, *g, *S0; /* g NULL for GATE_NONE */
} dcase;

static dcase dcase_make(int64_t T, int H, int K, int V, int gate, uint64_t seed)
{
    dcase c = {.d = {T, H, K, V}};
    rng_state = seed;
    size_t nk = (size_t)T * H * K, nv = (size_t)T * H * V, nh = (size_t)T * H;
    c.q = fbuf(nk), c.k = fbuf(nk), c.v = fbuf(nv), c.beta = fbuf(nh);
    c.S0 = fbuf((size_t)H * K * V);
    fill_normal(c.q, nk);
    fill_normal(c.k, nk);
    fill_normal(c.v, nv);
    for (size_t r = 0; r < nh; r++) { /* L2-normalised keys (docs/DESIGN.md §3) */
        double n2 = 0.0;
        for (int i = 0; i < K; i++)
            n2 += (double)c.k[r * K + i] * c.k[r * K + i];
        for (int i = 0; i < K; i++)
            c.k[r * K + i] = (float)(c.k[r * K + i] / sqrt(n2));
        c.beta[r] = (float)(0.05 + 0.9 * urand());
    }
    for (size_t i = 0; i < (size_t)H * K * V; i++)
        c.S0[i] = (float)(0.3 * nrand());
    if (gate != GATE_NONE) {
        c.g = fbuf(nh);
        for (size_t r = 0; r < nh; r++)
            c.g[r] = gate == GATE_ZERO ? 0.0f
                     : gate == GATE_MILD ? (float)(-0.2 * urand())
                                         : (float)(-4.0 - 2.0 * urand()); /* strong: ~ -5 */
    }
    return c;
}

static void dcase_free(dcase *c)
{
    free(c->q), free(c->k), free(c->v), free(c->beta), free(c->g), free(c->S0);
}

/* The textbook recurrence in float64: S_t = (I - b k k^T) e^g S_{t-1} + b k v^T, o_t = s S_t^T q. */
static void ref_delta(const dcase *c, double scale, double *S, double *o)
{
    const int64_t T = c->d.T;
    const int H = c->d.H, K = c->d.K, V = c->d.V;
    double *kS = dbuf((size_t)V);
    for (size_t i = 0; i < (size_t)H * K * V; i++)
        S[i] = c->S0[i];
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *q = c->q + ((size_t)t * H + h) * K, *k = c->k + ((size_t)t * H + h) * K;
            const float *v = c->v + ((size_t)t * H + h) * V;
            double *Sh = S + (size_t)h * K * V;
            const double b = c->beta[t * H + h], eg = c->g ? exp((double)c->g[t * H + h]) : 1.0;
            for (size_t i = 0; i < (size_t)K * V; i++) /* S <- e^g S */
                Sh[i] *= eg;
            for (int j = 0; j < V; j++) { /* kS = k^T S */
                kS[j] = 0.0;
                for (int i = 0; i < K; i++)
                    kS[j] += k[i] * Sh[(size_t)i * V + j];
            }
            for (int i = 0; i < K; i++) /* S <- S - b k (k^T S) + b k v^T */
                for (int j = 0; j < V; j++)
                    Sh[(size_t)i * V + j] += b * k[i] * (v[j] - kS[j]);
            for (int j = 0; j < V; j++) {
                double acc = 0.0;
                for (int i = 0; i < K; i++)
                    acc += q[i] * Sh[(size_t)i * V + j];
                o[((size_t)t * H + h) * V + j] = scale * acc;
            }
        }
    free(kS);
}

/* Run one form; S starts from the case's S0. */
static int run_delta(const dcase *c, recur_form form, int64_t C, float scale, float *S, float *o)
{
    memcpy(S, c->S0, (size_t)c->d.H * c->d.K * c->d.V * sizeof(float));
    return recur_delta_rule(&c->d, c->q, c->k, c->v, c->beta, c->g, scale, form, C, S, o);
}

/* ---------------------------------------------------------------- delta rule: tests */

Test(delta, every_form_and_chunk_size_matches_float64_reference)
{
    static const int shapes[][4] = {/* T, H, K, V */
                                    {64, 1, 16, 16}, {65, 2, 60, 100}, {63, 3, 64, 64},
                                    {40, 8, 16, 60}, {130, 1, 100, 16}, {1, 2, 64, 60},
                                    {37, 2, 7, 33},  {20, 1, 33, 32}}; /* odd K, V tails */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int gate = GATE_NONE; gate <= GATE_STRONG; gate++) {
            const int64_t T = shapes[si][0];
            const int H = shapes[si][1], K = shapes[si][2], V = shapes[si][3];
            dcase c = dcase_make(T, H, K, V, gate, 100 + si * 7 + gate);
            size_t nS = (size_t)H * K * V, no = (size_t)T * H * V;
            double *Sr = dbuf(nS), *orf = dbuf(no);
            ref_delta(&c, 1.0 / sqrt(K), Sr, orf);
            float *S = fbuf(nS), *o = fbuf(no);
            const struct { recur_form f; int64_t C; } runs[] = {
                {RECUR_FORM_RECURRENT, 0}, {RECUR_FORM_PARALLEL, 0}, {RECUR_FORM_CHUNKWISE, 1},
                {RECUR_FORM_CHUNKWISE, 3}, {RECUR_FORM_CHUNKWISE, 16}, {RECUR_FORM_CHUNKWISE, 64},
                {RECUR_FORM_CHUNKWISE, T}, {RECUR_FORM_CHUNKWISE, 1000000}};
            for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                cr_assert_eq(run_delta(&c, runs[ri].f, runs[ri].C, 0.0f, S, o), RECUR_OK);
                double eo = rel_rms(o, orf, no), eS = rel_rms(S, Sr, nS);
                cr_expect(eo <= TOL && eS <= TOL,
                          "T=%ld H=%d K=%d V=%d gate=%d form=%d C=%ld: rel RMS o %.2e S %.2e",
                          (long)T, H, K, V, gate, runs[ri].f, (long)runs[ri].C, eo, eS);
            }
            free(S), free(o), free(Sr), free(orf);
            dcase_free(&c);
        }
}

Test(delta, thousand_tokens_parallel_and_chunkwise_match_float64_reference)
{
    for (int gate = GATE_NONE; gate <= GATE_STRONG; gate += 2) { /* none, mild */
        dcase c = dcase_make(1000, 1, 64, 64, gate, 7 + gate);
        size_t nS = 64 * 64, no = 1000 * 64;
        double *Sr = dbuf(nS), *orf = dbuf(no);
        ref_delta(&c, 0.125, Sr, orf);
        float *S = fbuf(nS), *o = fbuf(no);
        const recur_form forms[] = {RECUR_FORM_RECURRENT, RECUR_FORM_PARALLEL, RECUR_FORM_CHUNKWISE};
        for (int fi = 0; fi < 3; fi++) {
            cr_assert_eq(run_delta(&c, forms[fi], 64, 0.0f, S, o), RECUR_OK);
            double eo = rel_rms(o, orf, no), eS = rel_rms(S, Sr, nS);
            cr_expect(eo <= TOL && eS <= TOL, "gate=%d form=%d: rel RMS o %.2e S %.2e", gate,
                      forms[fi], eo, eS);
        }
        free(S), free(o), free(Sr), free(orf);
        dcase_free(&c);
    }
}

Test(delta, forms_agree_and_chunk_size_never_changes_the_result)
{
    dcase c = dcase_make(100, 2, 16, 24, GATE_MILD, 42);
    size_t nS = 2 * 16 * 24, no = 100 * 2 * 24;
    float *S1 = fbuf(nS), *o1 = fbuf(no), *S = fbuf(nS), *o = fbuf(no);
    cr_assert_eq(run_delta(&c, RECUR_FORM_RECURRENT, 0, 0.0f, S1, o1), RECUR_OK);
    const int64_t Cs[] = {1, 3, 16, 64, 100};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(run_delta(&c, RECUR_FORM_CHUNKWISE, Cs[i], 0.0f, S, o), RECUR_OK);
        cr_expect(rel_rms_ff(o, o1, no) <= TOL && rel_rms_ff(S, S1, nS) <= TOL,
                  "chunk %ld differs from recurrent", (long)Cs[i]);
    }
    cr_assert_eq(run_delta(&c, RECUR_FORM_PARALLEL, 0, 0.0f, S, o), RECUR_OK);
    cr_expect(rel_rms_ff(o, o1, no) <= TOL && rel_rms_ff(S, S1, nS) <= TOL, "parallel differs");
    free(S1), free(o1), free(S), free(o);
    dcase_free(&c);
}

Test(delta, split_calls_equal_one_call)
{
    const int64_t T = 90, split = 37;
    const int H = 2, K = 16, V = 20;
    for (int gate = GATE_NONE; gate <= GATE_MILD; gate += 2) {
        dcase c = dcase_make(T, H, K, V, gate, 9 + gate);
        size_t nS = (size_t)H * K * V, no = (size_t)T * H * V;
        float *S1 = fbuf(nS), *o1 = fbuf(no), *S = fbuf(nS), *o = fbuf(no);
        const recur_form forms[] = {RECUR_FORM_RECURRENT, RECUR_FORM_PARALLEL, RECUR_FORM_CHUNKWISE};
        for (int fi = 0; fi < 3; fi++) {
            cr_assert_eq(run_delta(&c, forms[fi], 16, 0.0f, S1, o1), RECUR_OK);
            memcpy(S, c.S0, nS * sizeof(float));
            recur_dims d1 = {split, H, K, V}, d2 = {T - split, H, K, V};
            cr_assert_eq(recur_delta_rule(&d1, c.q, c.k, c.v, c.beta, c.g, 0.0f, forms[fi], 16, S, o),
                         RECUR_OK);
            cr_assert_eq(recur_delta_rule(&d2, c.q + split * H * K, c.k + split * H * K,
                                          c.v + split * H * V, c.beta + split * H,
                                          c.g ? c.g + split * H : NULL, 0.0f, forms[fi], 16, S,
                                          o + split * H * V),
                         RECUR_OK);
            cr_expect(rel_rms_ff(o, o1, no) <= TOL && rel_rms_ff(S, S1, nS) <= TOL,
                      "gate=%d form=%d: split differs", gate, forms[fi]);
        }
        free(S1), free(o1), free(S), free(o);
        dcase_free(&c);
    }
}

Test(delta, gated_with_zero_gates_equals_ungated)
{
    dcase z = dcase_make(70, 2, 16, 16, GATE_ZERO, 5), n = dcase_make(70, 2, 16, 16, GATE_NONE, 5);
    size_t nS = 2 * 16 * 16, no = 70 * 2 * 16;
    float *Sz = fbuf(nS), *oz = fbuf(no), *Sn = fbuf(nS), *on = fbuf(no);
    const recur_form forms[] = {RECUR_FORM_RECURRENT, RECUR_FORM_PARALLEL, RECUR_FORM_CHUNKWISE};
    for (int fi = 0; fi < 3; fi++) {
        cr_assert_eq(run_delta(&z, forms[fi], 16, 0.0f, Sz, oz), RECUR_OK);
        cr_assert_eq(run_delta(&n, forms[fi], 16, 0.0f, Sn, on), RECUR_OK);
        cr_expect(rel_rms_ff(oz, on, no) <= 1e-6 && rel_rms_ff(Sz, Sn, nS) <= 1e-6,
                  "form=%d: g=0 differs from DeltaNet", forms[fi]);
    }
    free(Sz), free(oz), free(Sn), free(on);
    dcase_free(&z), dcase_free(&n);
}

Test(delta, default_scale_beta_one_and_empty_sequence)
{
    dcase c = dcase_make(20, 1, 16, 8, GATE_MILD, 11);
    size_t nS = 16 * 8, no = 20 * 8;
    float *S = fbuf(nS), *o = fbuf(no), *S2 = fbuf(nS), *o2 = fbuf(no);
    /* scale <= 0 is K^-1/2 */
    cr_assert_eq(run_delta(&c, RECUR_FORM_CHUNKWISE, 8, 0.0f, S, o), RECUR_OK);
    cr_assert_eq(run_delta(&c, RECUR_FORM_CHUNKWISE, 8, 0.25f, S2, o2), RECUR_OK);
    cr_expect(rel_rms_ff(o, o2, no) <= 1e-7);
    cr_assert_eq(run_delta(&c, RECUR_FORM_CHUNKWISE, 8, -3.0f, S2, o2), RECUR_OK);
    cr_expect(rel_rms_ff(o, o2, no) <= 1e-7);
    /* beta = 1 is allowed, and against the reference */
    for (int i = 0; i < 20; i++)
        c.beta[i] = 1.0f;
    double *Sr = dbuf(nS), *orf = dbuf(no);
    ref_delta(&c, 0.25, Sr, orf);
    cr_assert_eq(run_delta(&c, RECUR_FORM_PARALLEL, 0, 0.0f, S, o), RECUR_OK);
    cr_expect(rel_rms(o, orf, no) <= TOL && rel_rms(S, Sr, nS) <= TOL);
    /* T = 0 keeps the state and writes nothing */
    recur_dims d0 = {0, 1, 16, 8};
    for (int f = 0; f < 3; f++) {
        memcpy(S, c.S0, nS * sizeof(float));
        o[0] = 123.0f;
        cr_assert_eq(recur_delta_rule(&d0, c.q, c.k, c.v, c.beta, c.g, 0.0f, (recur_form)f, 4, S, o),
                     RECUR_OK);
        cr_expect(memcmp(S, c.S0, nS * sizeof(float)) == 0 && o[0] == 123.0f);
    }
    free(S), free(o), free(S2), free(o2), free(Sr), free(orf);
    dcase_free(&c);
}

/* Every bad argument returns its code and leaves S and o exactly as they were. */
Test(delta, bad_arguments_return_their_code_and_change_nothing)
{
    const int T = 12, H = 2, K = 8, V = 4;
    dcase c = dcase_make(T, H, K, V, GATE_MILD, 3);
    size_t nS = (size_t)H * K * V, no = (size_t)T * H * V;
    float *S = fbuf(nS), *o = fbuf(no), *Sref = fbuf(nS), *oref = fbuf(no);
    float *bb = fbuf((size_t)T * H), *gb = fbuf((size_t)T * H);
    for (size_t i = 0; i < nS; i++)
        Sref[i] = (float)i;
    for (size_t i = 0; i < no; i++)
        oref[i] = -(float)i;
    const recur_dims good = {T, H, K, V};
    struct bad {
        recur_dims d;
        int null_arg; /* 0 none, 1 q, 2 k, 3 v, 4 beta, 5 S, 6 o, 7 dims */
        int form;
        int64_t C;
        float scale, beta_val, g_val; /* beta_val / g_val: written at [5] when not 0.5 / -0.5 */
        int expect;
    } cases[] = {
        {good, 1, 2, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 2, 0, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 3, 1, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 4, 2, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 5, 2, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 6, 2, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 7, 2, 4, 0, .5f, -.5f, RECUR_EINVAL},
        {good, 0, 7, 4, 0, .5f, -.5f, RECUR_EINVAL},   /* unknown form */
        {good, 0, 2, 0, 0, .5f, -.5f, RECUR_ESHAPE},   /* chunk_size 0 */
        {good, 0, 2, -5, 0, .5f, -.5f, RECUR_ESHAPE},  /* chunk_size < 0 */
        {{-1, H, K, V}, 0, 2, 4, 0, .5f, -.5f, RECUR_ESHAPE},
        {{T, 0, K, V}, 0, 2, 4, 0, .5f, -.5f, RECUR_ESHAPE},
        {{T, H, 0, V}, 0, 2, 4, 0, .5f, -.5f, RECUR_ESHAPE},
        {{T, H, K, 0}, 0, 2, 4, 0, .5f, -.5f, RECUR_ESHAPE},
        {{T, H, RECUR_MAX_DIM + 1, V}, 0, 2, 4, 0, .5f, -.5f, RECUR_ESHAPE},
        {{T, RECUR_MAX_DIM + 1, K, V}, 0, 0, 4, 0, .5f, -.5f, RECUR_ESHAPE},
        {{INT64_MAX / 2, H, K, V}, 0, 0, 4, 0, .5f, -.5f, RECUR_ESHAPE}, /* sizes overflow */
        {good, 0, 2, 4, NAN, .5f, -.5f, RECUR_ENONFINITE},
        {good, 0, 0, 4, INFINITY, .5f, -.5f, RECUR_ENONFINITE},
        {good, 0, 2, 4, 0, 0.0f, -.5f, RECUR_ERANGE},
        {good, 0, 1, 4, 0, -0.1f, -.5f, RECUR_ERANGE},
        {good, 0, 0, 4, 0, 2.0001f, -.5f, RECUR_ERANGE},
        {good, 0, 2, 4, 0, NAN, -.5f, RECUR_ENONFINITE},
        {good, 0, 2, 4, 0, INFINITY, -.5f, RECUR_ENONFINITE},
        {good, 0, 2, 4, 0, .5f, 1e-6f, RECUR_ERANGE},
        {good, 0, 0, 4, 0, .5f, 0.3f, RECUR_ERANGE},
        {good, 0, 1, 4, 0, .5f, NAN, RECUR_ENONFINITE},
        {good, 0, 2, 4, 0, .5f, -INFINITY, RECUR_ENONFINITE},
        {good, 0, 2, 4, 0, 2.0f, NAN, RECUR_ENONFINITE}, /* non-finite wins over out of range */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct bad *b = &cases[i];
        memcpy(bb, c.beta, (size_t)T * H * sizeof(float));
        memcpy(gb, c.g, (size_t)T * H * sizeof(float));
        if (b->beta_val != .5f)
            bb[5] = b->beta_val;
        if (!(b->g_val == -.5f))
            gb[5] = b->g_val;
        memcpy(S, Sref, nS * sizeof(float));
        memcpy(o, oref, no * sizeof(float));
        int rc = recur_delta_rule(b->null_arg == 7 ? NULL : &b->d, b->null_arg == 1 ? NULL : c.q,
                                  b->null_arg == 2 ? NULL : c.k, b->null_arg == 3 ? NULL : c.v,
                                  b->null_arg == 4 ? NULL : bb, gb, b->scale, (recur_form)b->form,
                                  b->C, b->null_arg == 5 ? NULL : S, b->null_arg == 6 ? NULL : o);
        cr_expect_eq(rc, b->expect, "case %zu: got %d (%s), want %d", i, rc, recur_strerror(rc),
                     b->expect);
        cr_expect(memcmp(S, Sref, nS * sizeof(float)) == 0, "case %zu changed S", i);
        cr_expect(memcmp(o, oref, no * sizeof(float)) == 0, "case %zu changed o", i);
    }
    free(S), free(o), free(Sref), free(oref), free(bb), free(gb);
    dcase_free(&c);
}

/* ---------------------------------------------------------------- softmax attention */

/* s[j] = scale q_t.k_j of head h for j <= last, in float64. */
static void ref_scores(const recur_dims *d, const float *q, const float *k, int64_t t, int h, int64_t last,
                       double scale, double *s)
{
    const int H = d->H, K = d->K;
    for (int64_t j = 0; j <= last; j++) {
        double acc = 0.0;
        for (int i = 0; i < K; i++)
            acc += (double)q[((size_t)t * H + h) * K + i] * k[((size_t)j * H + h) * K + i];
        s[j] = scale * acc;
    }
}

/* ot[V] = sum_j softmax_j(s) v_j of head h over the keys j <= last that count: all of them when
 * kept is NULL, else those whose block j / block is kept; in float64. */
static void ref_mix(const recur_dims *d, const double *s, int64_t last, const uint8_t *kept,
                    int64_t block, const float *v, int h, double *ot)
{
    const int H = d->H, V = d->V;
    double m = -INFINITY, l = 0.0;
    for (int64_t j = 0; j <= last; j++)
        if (!kept || kept[j / block])
            m = s[j] > m ? s[j] : m;
    for (int c = 0; c < V; c++)
        ot[c] = 0.0;
    for (int64_t j = 0; j <= last; j++) {
        if (kept && !kept[j / block])
            continue;
        double w = exp(s[j] - m);
        l += w;
        for (int c = 0; c < V; c++)
            ot[c] += w * v[((size_t)j * H + h) * V + c];
    }
    for (int c = 0; c < V; c++)
        ot[c] /= l;
}

/* o_t = sum_{j<=t} softmax_j(s q_t.k_j) v_j in float64. */
static void ref_softmax(const recur_dims *d, const float *q, const float *k, const float *v,
                        double scale, double *o)
{
    double *s = dbuf((size_t)d->T);
    for (int64_t t = 0; t < d->T; t++)
        for (int h = 0; h < d->H; h++) {
            ref_scores(d, q, k, t, h, t, scale, s);
            ref_mix(d, s, t, NULL, 1, v, h, o + ((size_t)t * d->H + h) * d->V);
        }
    free(s);
}

Test(softmax, matches_float64_reference)
{
    static const int shapes[][4] = {{1, 1, 16, 16}, {63, 2, 60, 100}, {65, 3, 64, 64}, {200, 1, 100, 16},
                                    {130, 8, 16, 60}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        recur_dims d = {shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3]};
        size_t nk = (size_t)d.T * d.H * d.K, nv = (size_t)d.T * d.H * d.V;
        rng_state = 77 + si;
        float *q = fbuf(nk), *k = fbuf(nk), *v = fbuf(nv), *o = fbuf(nv);
        double *orf = dbuf(nv);
        fill_normal(q, nk), fill_normal(k, nk), fill_normal(v, nv);
        const float scales[] = {0.0f, 0.5f, 3.0f};
        for (int sc = 0; sc < 3; sc++) {
            ref_softmax(&d, q, k, v, scales[sc] > 0 ? scales[sc] : 1.0 / sqrt(d.K), orf);
            cr_assert_eq(recur_softmax_attention(&d, q, k, v, scales[sc], o), RECUR_OK);
            double e = rel_rms(o, orf, nv);
            cr_expect(e <= TOL, "T=%ld H=%d K=%d V=%d scale=%g: rel RMS %.2e", (long)d.T, d.H, d.K,
                      d.V, scales[sc], e);
        }
        free(q), free(k), free(v), free(o), free(orf);
    }
}

Test(softmax, large_scores_stay_finite_and_exact)
{
    recur_dims d = {40, 2, 16, 8};
    size_t nk = 40 * 2 * 16, nv = 40 * 2 * 8;
    rng_state = 5;
    float *q = fbuf(nk), *k = fbuf(nk), *v = fbuf(nv), *o = fbuf(nv), *ok = fbuf(2 * 8);
    float *kc = fbuf(nk), *vc = fbuf(nv);
    double *orf = dbuf(nv);
    fill_normal(q, nk), fill_normal(k, nk), fill_normal(v, nv);
    for (size_t i = 0; i < nk; i++)
        q[i] *= 30.0f; /* scores in the hundreds: exp would overflow without the max */
    ref_softmax(&d, q, k, v, 10.0, orf);
    cr_assert_eq(recur_softmax_attention(&d, q, k, v, 10.0f, o), RECUR_OK);
    cr_expect(rel_rms(o, orf, nv) <= TOL, "full: rel RMS %.2e", rel_rms(o, orf, nv));
    for (int64_t t = 0; t < 40; t++) {
        cr_assert_eq(recur_softmax_attention_step(&d, q + t * 32, k + t * 32, v + t * 16, 10.0f, kc, vc,
                                                  t, 40, ok),
                     RECUR_OK);
        cr_expect(rel_rms(ok, orf + t * 16, 16) <= TOL, "step %ld", (long)t);
    }
    free(q), free(k), free(v), free(o), free(ok), free(kc), free(vc), free(orf);
}

Test(softmax, decode_steps_equal_the_full_sequence)
{
    /* 600 tokens: the step's key blocks (256) are crossed twice */
    recur_dims d = {600, 2, 60, 24};
    const int64_t max_len = 700;
    size_t nk = (size_t)d.T * d.H * d.K, nv = (size_t)d.T * d.H * d.V;
    rng_state = 17;
    float *q = fbuf(nk), *k = fbuf(nk), *v = fbuf(nv), *o = fbuf(nv), *os = fbuf(nv);
    float *kc = fbuf((size_t)max_len * d.H * d.K), *vc = fbuf((size_t)max_len * d.H * d.V);
    fill_normal(q, nk), fill_normal(k, nk), fill_normal(v, nv);
    cr_assert_eq(recur_softmax_attention(&d, q, k, v, 0.0f, o), RECUR_OK);
    for (int64_t t = 0; t < d.T; t++)
        cr_assert_eq(recur_softmax_attention_step(&d, q + t * d.H * d.K, k + t * d.H * d.K,
                                                  v + t * d.H * d.V, 0.0f, kc, vc, t, max_len,
                                                  os + t * d.H * d.V),
                     RECUR_OK);
    cr_expect(rel_rms_ff(os, o, nv) <= TOL, "steps vs full: rel RMS %.2e", rel_rms_ff(os, o, nv));
    cr_expect(memcmp(kc, k, nk * sizeof(float)) == 0 && memcmp(vc, v, nv * sizeof(float)) == 0,
              "the cache holds exactly the tokens");
    free(q), free(k), free(v), free(o), free(os), free(kc), free(vc);
}

Test(softmax, bad_arguments_return_their_code_and_change_nothing)
{
    const int H = 2, K = 4, V = 3, L = 5;
    float q[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, k[2 * 4] = {1, 0, 0, 0, 0, 1, 0, 0}, v[2 * 3] = {1, 2, 3, 4, 5, 6};
    float kc[5 * 2 * 4], vc[5 * 2 * 3], o[2 * 3], kc0[5 * 2 * 4], vc0[5 * 2 * 3], o0[2 * 3];
    for (int i = 0; i < L * H * K; i++)
        kc0[i] = (float)i;
    for (int i = 0; i < L * H * V; i++)
        vc0[i] = -(float)i;
    for (int i = 0; i < H * V; i++)
        o0[i] = 99.0f;
    const recur_dims good = {1, H, K, V}, bad_k = {1, H, RECUR_MAX_DIM + 1, V}, bad_h = {1, 0, K, V};
    struct {
        const recur_dims *d;
        int null_arg; /* 1 q, 2 k, 3 v, 4 k_cache, 5 v_cache, 6 o */
        float scale;
        int64_t pos, max_len;
        int expect;
    } cases[] = {
        {&good, 0, 0, 5, 5, RECUR_ECONTEXT}, {&good, 0, 0, 6, 5, RECUR_ECONTEXT},
        {&good, 0, 0, 0, 0, RECUR_ECONTEXT}, {&good, 0, 0, -1, 5, RECUR_EINVAL},
        {&good, 0, 0, 0, -1, RECUR_ESHAPE},  {NULL, 0, 0, 0, 5, RECUR_EINVAL},
        {&good, 1, 0, 0, 5, RECUR_EINVAL},   {&good, 2, 0, 0, 5, RECUR_EINVAL},
        {&good, 3, 0, 0, 5, RECUR_EINVAL},   {&good, 4, 0, 0, 5, RECUR_EINVAL},
        {&good, 5, 0, 0, 5, RECUR_EINVAL},   {&good, 6, 0, 0, 5, RECUR_EINVAL},
        {&bad_k, 0, 0, 0, 5, RECUR_ESHAPE},  {&bad_h, 0, 0, 0, 5, RECUR_ESHAPE},
        {&good, 0, NAN, 0, 5, RECUR_ENONFINITE}, {&good, 0, -INFINITY, 0, 5, RECUR_ENONFINITE},
        {&good, 0, 0, 0, INT64_MAX, RECUR_ESHAPE}, /* cache size overflows */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(kc, kc0, sizeof kc), memcpy(vc, vc0, sizeof vc), memcpy(o, o0, sizeof o);
        int n = cases[i].null_arg;
        int rc = recur_softmax_attention_step(cases[i].d, n == 1 ? NULL : q, n == 2 ? NULL : k,
                                              n == 3 ? NULL : v, cases[i].scale, n == 4 ? NULL : kc,
                                              n == 5 ? NULL : vc, cases[i].pos, cases[i].max_len,
                                              n == 6 ? NULL : o);
        cr_expect_eq(rc, cases[i].expect, "case %zu: got %d, want %d", i, rc, cases[i].expect);
        cr_expect(memcmp(kc, kc0, sizeof kc) == 0 && memcmp(vc, vc0, sizeof vc) == 0 &&
                      memcmp(o, o0, sizeof o) == 0,
                  "case %zu changed the cache or o", i);
    }
    /* the last free position still works */
    cr_expect_eq(recur_softmax_attention_step(&good, q, k, v, 0, kc, vc, 4, 5, o), RECUR_OK);

    /* the whole-sequence form */
    recur_dims d3 = {1, H, K, V};
    memcpy(o, o0, sizeof o);
    cr_expect_eq(recur_softmax_attention(NULL, q, k, v, 0, o), RECUR_EINVAL);
    cr_expect_eq(recur_softmax_attention(&d3, q, NULL, v, 0, o), RECUR_EINVAL);
    cr_expect_eq(recur_softmax_attention(&d3, q, k, v, NAN, o), RECUR_ENONFINITE);
    cr_expect_eq(recur_softmax_attention(&bad_k, q, k, v, 0, o), RECUR_ESHAPE);
    recur_dims dneg = {-1, H, K, V}, d0 = {0, H, K, V};
    cr_expect_eq(recur_softmax_attention(&dneg, q, k, v, 0, o), RECUR_ESHAPE);
    cr_expect_eq(recur_softmax_attention(&d0, q, k, v, 0, o), RECUR_OK);
    cr_expect(memcmp(o, o0, sizeof o) == 0, "an error or T = 0 changed o");
}

/* ---------------------------------------------------------------- block top-k attention */

/* The seeds' reference script in float64, plus the causal rule of recur.h: block score = mean of
 * s q.k_j over the block's counted keys (causal: j <= t), top min(topk, candidates) blocks with
 * ties to the lower index, softmax over the kept (counted) keys. */
static void ref_block_topk(const recur_dims *d, const float *q, const float *k, const float *v,
                           int64_t block, int64_t topk, int causal, double scale, double *o,
                           uint8_t *keep)
{
    const int64_t T = d->T, nb = (T + block - 1) / block;
    const int H = d->H, V = d->V;
    double *s = dbuf((size_t)T), *bs = dbuf((size_t)nb);
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const int64_t last = causal ? t : T - 1;
            ref_scores(d, q, k, t, h, last, scale, s);
            int64_t ncand = 0;
            for (int64_t b = 0; b < nb; b++) {
                int64_t lo = b * block, hi = (b + 1) * block < last + 1 ? (b + 1) * block : last + 1;
                if (hi <= lo)
                    break;
                double sum = 0.0;
                for (int64_t j = lo; j < hi; j++)
                    sum += s[j];
                bs[b] = sum / (double)(hi - lo);
                ncand = b + 1;
            }
            uint8_t *kp = keep + ((size_t)t * H + h) * nb;
            for (int64_t b = 0; b < nb; b++)
                kp[b] = 0;
            const int64_t n = topk < ncand ? topk : ncand;
            for (int64_t r = 0; r < n; r++) { /* selection: highest score, lowest index on ties */
                int64_t best = -1;
                for (int64_t b = 0; b < ncand; b++)
                    if (!kp[b] && (best < 0 || bs[b] > bs[best]))
                        best = b;
                kp[best] = 1;
            }
            ref_mix(d, s, last, kp, block, v, h, o + ((size_t)t * H + h) * V);
        }
    free(s), free(bs);
}

Test(block_topk, matches_float64_reference_causal_and_not)
{
    static const int cases[][6] = {/* T, H, K, V, block, topk */
                                   {12, 1, 6, 6, 4, 2},   {13, 1, 6, 6, 4, 2},   {1, 2, 16, 8, 4, 2},
                                   {64, 2, 16, 16, 16, 2}, {65, 3, 60, 100, 16, 3}, {63, 1, 64, 64, 8, 1},
                                   {50, 2, 16, 8, 1, 5},   {40, 1, 16, 8, 7, 100}, {100, 8, 16, 60, 10, 12}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int causal = 0; causal <= 1; causal++) {
            recur_dims d = {cases[ci][0], cases[ci][1], cases[ci][2], cases[ci][3]};
            const int64_t block = cases[ci][4], topk = cases[ci][5];
            const int64_t nb = (d.T + block - 1) / block;
            size_t nk = (size_t)d.T * d.H * d.K, nv = (size_t)d.T * d.H * d.V;
            size_t nkeep = (size_t)d.T * d.H * nb;
            rng_state = 1000 + ci;
            float *q = fbuf(nk), *k = fbuf(nk), *v = fbuf(nv), *o = fbuf(nv);
            double *orf = dbuf(nv);
            uint8_t *keep = malloc(nkeep), *rkeep = malloc(nkeep);
            fill_normal(q, nk), fill_normal(k, nk), fill_normal(v, nv);
            ref_block_topk(&d, q, k, v, block, topk, causal, 1.0 / sqrt(d.K), orf, rkeep);
            cr_assert_eq(recur_block_topk_attention(&d, q, k, v, block, topk, causal, 0.0f, o, keep),
                         RECUR_OK);
            cr_expect(memcmp(keep, rkeep, nkeep) == 0, "case %zu causal=%d: kept blocks differ", ci,
                      causal);
            double e = rel_rms(o, orf, nv);
            cr_expect(e <= TOL, "case %zu causal=%d: rel RMS %.2e", ci, causal, e);
            /* exactly min(topk, candidates) blocks per query; with v = 1 every row sums to 1 */
            for (int64_t t = 0; t < d.T; t++)
                for (int h = 0; h < d.H; h++) {
                    int64_t ncand = causal ? t / block + 1 : nb, kept = 0;
                    for (int64_t b = 0; b < nb; b++) {
                        kept += keep[((size_t)t * d.H + h) * nb + b];
                        cr_expect(!(causal && b >= ncand && keep[((size_t)t * d.H + h) * nb + b]),
                                  "a future-only block was kept");
                    }
                    cr_expect_eq(kept, topk < ncand ? topk : ncand, "t=%ld h=%d kept %ld", (long)t, h,
                                 (long)kept);
                }
            for (size_t i = 0; i < nv; i++)
                v[i] = 1.0f;
            cr_assert_eq(recur_block_topk_attention(&d, q, k, v, block, topk, causal, 0.0f, o, NULL),
                         RECUR_OK);
            for (size_t i = 0; i < nv; i++)
                cr_expect(fabsf(o[i] - 1.0f) <= 1e-6f, "case %zu: weights sum to %g", ci, o[i]);
            free(q), free(k), free(v), free(o), free(orf), free(keep), free(rkeep);
        }
}

Test(block_topk, ties_go_to_the_lower_block_index)
{
    /* every key equal: every block scores the same, so blocks 0 .. topk-1 are kept */
    recur_dims d = {22, 1, 8, 4};
    const int64_t block = 4, topk = 3, nb = 6;
    rng_state = 3;
    float q[22 * 8], k[22 * 8], v[22 * 4], o[22 * 4];
    uint8_t keep[22 * 6];
    fill_normal(q, 22 * 8), fill_normal(v, 22 * 4);
    for (int t = 0; t < 22; t++)
        for (int i = 0; i < 8; i++)
            k[t * 8 + i] = (float)(i + 1) / 8.0f;
    for (int causal = 0; causal <= 1; causal++) {
        cr_assert_eq(recur_block_topk_attention(&d, q, k, v, block, topk, causal, 0.0f, o, keep), RECUR_OK);
        for (int t = 0; t < 22; t++) {
            int64_t ncand = causal ? t / block + 1 : nb;
            for (int64_t b = 0; b < nb; b++)
                cr_expect_eq(keep[t * nb + b], b < (topk < ncand ? topk : ncand),
                             "causal=%d t=%d block %ld", causal, t, (long)b);
        }
    }
}

Test(block_topk, keeping_every_block_is_causal_softmax)
{
    recur_dims d = {70, 2, 16, 12};
    size_t nk = 70 * 2 * 16, nv = 70 * 2 * 12;
    rng_state = 8;
    float *q = fbuf(nk), *k = fbuf(nk), *v = fbuf(nv), *o = fbuf(nv), *os = fbuf(nv);
    fill_normal(q, nk), fill_normal(k, nk), fill_normal(v, nv);
    cr_assert_eq(recur_block_topk_attention(&d, q, k, v, 8, 9, 1, 0.0f, o, NULL), RECUR_OK);
    cr_assert_eq(recur_softmax_attention(&d, q, k, v, 0.0f, os), RECUR_OK);
    cr_expect(rel_rms_ff(o, os, nv) <= TOL, "rel RMS %.2e", rel_rms_ff(o, os, nv));
    free(q), free(k), free(v), free(o), free(os);
}

Test(block_topk, bad_arguments_return_their_code_and_change_nothing)
{
    recur_dims d = {6, 1, 4, 2};
    float q[24] = {0}, k[24] = {0}, v[12] = {0}, o[12], o0[12];
    uint8_t keep[12], keep0[12];
    for (int i = 0; i < 12; i++)
        o0[i] = (float)i, keep0[i] = 7;
    recur_dims bad_v = {6, 1, 4, 0}, neg = {-2, 1, 4, 2}, huge = {INT64_MAX / 4, 2, 4, 2};
    struct {
        const recur_dims *d;
        int null_arg;
        int64_t block, topk;
        float scale;
        int expect;
    } cases[] = {
        {&d, 0, 0, 2, 0, RECUR_EINVAL},        {&d, 0, 2, 0, 0, RECUR_EINVAL},
        {&d, 0, -1, 2, 0, RECUR_EINVAL},       {&d, 0, 2, -3, 0, RECUR_EINVAL},
        {NULL, 0, 2, 2, 0, RECUR_EINVAL},      {&d, 1, 2, 2, 0, RECUR_EINVAL},
        {&d, 2, 2, 2, 0, RECUR_EINVAL},        {&d, 3, 2, 2, 0, RECUR_EINVAL},
        {&d, 4, 2, 2, 0, RECUR_EINVAL},        {&bad_v, 0, 2, 2, 0, RECUR_ESHAPE},
        {&neg, 0, 2, 2, 0, RECUR_ESHAPE},      {&huge, 0, 1, 2, 0, RECUR_ESHAPE},
        {&d, 0, 2, 2, NAN, RECUR_ENONFINITE},  {&d, 0, 2, 2, INFINITY, RECUR_ENONFINITE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(o, o0, sizeof o), memcpy(keep, keep0, sizeof keep);
        int n = cases[i].null_arg;
        int rc = recur_block_topk_attention(cases[i].d, n == 1 ? NULL : q, n == 2 ? NULL : k,
                                            n == 3 ? NULL : v, cases[i].block, cases[i].topk, 1,
                                            cases[i].scale, n == 4 ? NULL : o, keep);
        cr_expect_eq(rc, cases[i].expect, "case %zu: got %d, want %d", i, rc, cases[i].expect);
        cr_expect(memcmp(o, o0, sizeof o) == 0 && memcmp(keep, keep0, sizeof keep) == 0,
                  "case %zu wrote something", i);
    }
    /* a block longer than the sequence is one block */
    cr_expect_eq(recur_block_topk_attention(&d, q, k, v, INT64_MAX, 1, 0, 0, o, keep), RECUR_OK);
    for (int t = 0; t < 6; t++)
        cr_expect_eq(keep[t], 1);
}
