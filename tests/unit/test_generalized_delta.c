/*
 * test_generalized_delta.c — the generalized (DPLR) delta rule of RWKV-7 (core/generalized_delta.h):
 * its per-head decode step against an independent float64 recurrence written here in plain loops
 * from the formula
 *   S_t = Diag(exp g_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T ,  o_t = scale S_t^T q_t
 * Tolerance: rel. RMS error <= 1e-5 (docs/DESIGN.md §8).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "generalized_delta.h"
#include "recur.h"
#include "test_mixer_util.h"
#include "test_rng.h"

#define TOL 1e-5

static uint64_t rng = 0x5eed6d72ULL;

static double nrand(void)
{
    const double u = xorshift_unit(&rng) + 1e-300, w = xorshift_unit(&rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* ---------------------------------------------------------------- inputs */

enum decay { DECAY_NONE, DECAY_MILD, DECAY_STRONG };
enum erase { ERASE_RWKV, ERASE_ZERO, ERASE_ORTHO, ERASE_GENERAL };

/* One problem: T tokens, H heads, sequence-first [T][H][K|V]; S0 [H][K][V]. */
typedef struct {
    int64_t T;
    int H, K, V;
    float *q, *k, *v, *g, *a, *b, *S0;
} problem;

/* RWKV-7's arguments: g = -e^{-1/2} sigmoid(x) (mild) or up to -8 (strong);
 * a = -kappa_hat, b = kappa_hat * sigmoid(x) with kappa_hat unit length. ERASE_ZERO: a = 0;
 * ERASE_ORTHO: kappa_hat orthogonal to k_t; ERASE_GENERAL: a, b independent, small. */
static problem make_problem(int64_t T, int H, int K, int V, enum decay dk, enum erase er)
{
    problem p = {.T = T, .H = H, .K = K, .V = V};
    const size_t nk = (size_t)T * H * K, nv = (size_t)T * H * V;
    p.q = fbuf(nk), p.k = fbuf(nk), p.v = fbuf(nv), p.g = fbuf(nk), p.a = fbuf(nk), p.b = fbuf(nk);
    p.S0 = fbuf((size_t)H * K * V);
    for (size_t i = 0; i < (size_t)H * K * V; i++)
        p.S0[i] = (float)(0.3 * nrand());
    double kh[4096];
    for (size_t r = 0; r < (size_t)T * H; r++) {
        float *q = p.q + r * K, *k = p.k + r * K, *g = p.g + r * K, *a = p.a + r * K, *b = p.b + r * K;
        for (int j = 0; j < V; j++)
            p.v[r * V + j] = (float)nrand();
        double kk = 0.0, kn = 0.0, dot = 0.0;
        for (int i = 0; i < K; i++) {
            q[i] = (float)(nrand() / sqrt(K) * 4.0);
            k[i] = (float)(nrand() / sqrt(K) * 2.0);
            kh[i] = nrand();
            kk += (double)k[i] * k[i];
            dot += kh[i] * k[i];
            switch (dk) {
            case DECAY_NONE: g[i] = 0.0f; break;
            case DECAY_MILD: g[i] = (float)(-exp(-0.5) * sigmoid(2.0 * nrand())); break;
            case DECAY_STRONG: g[i] = (float)(-8.0 * xorshift_unit(&rng)); break;
            }
        }
        if (er == ERASE_ORTHO)
            for (int i = 0; i < K; i++)
                kh[i] -= dot / kk * k[i];
        for (int i = 0; i < K; i++)
            kn += kh[i] * kh[i];
        for (int i = 0; i < K; i++) {
            const double u = kh[i] / sqrt(kn);
            switch (er) {
            case ERASE_RWKV:
            case ERASE_ORTHO:
                a[i] = (float)-u;
                b[i] = (float)(u * sigmoid(nrand()));
                break;
            case ERASE_ZERO:
                a[i] = 0.0f;
                b[i] = (float)nrand();
                break;
            case ERASE_GENERAL:
                a[i] = (float)(0.3 * nrand() / sqrt(K));
                b[i] = (float)(0.3 * nrand() / sqrt(K));
                break;
            }
        }
    }
    return p;
}

static void free_problem(problem *p)
{
    free(p->q), free(p->k), free(p->v), free(p->g), free(p->a), free(p->b), free(p->S0);
}

/* The float64 recurrence, token by token: o [T][H][V], S [H][K][V] (in: S0, out: final). */
static void reference(const problem *p, double scale, double *o, double *S)
{
    const int H = p->H, K = p->K, V = p->V;
    for (size_t i = 0; i < (size_t)H * K * V; i++)
        S[i] = p->S0[i];
    double *u = dbuf((size_t)V);
    for (int64_t t = 0; t < p->T; t++)
        for (int h = 0; h < H; h++) {
            const size_t r = (size_t)t * H + h;
            const float *q = p->q + r * K, *k = p->k + r * K, *g = p->g + r * K;
            const float *a = p->a + r * K, *b = p->b + r * K, *v = p->v + r * V;
            double *Sh = S + (size_t)h * K * V, *ot = o + r * V;
            for (int j = 0; j < V; j++) {
                u[j] = 0.0;
                for (int i = 0; i < K; i++)
                    u[j] += (double)a[i] * Sh[(size_t)i * V + j];
            }
            for (int i = 0; i < K; i++)
                for (int j = 0; j < V; j++) {
                    double *x = &Sh[(size_t)i * V + j];
                    *x = exp((double)g[i]) * *x + (double)b[i] * u[j] + (double)k[i] * v[j];
                }
            for (int j = 0; j < V; j++) {
                ot[j] = 0.0;
                for (int i = 0; i < K; i++)
                    ot[j] += scale * q[i] * Sh[(size_t)i * V + j];
            }
        }
    free(u);
}

/* ---------------------------------------------------------------- the decode step */

/* recur__gdr_step token by token, head by head, against the float64 recurrence. */
static void check_step(int64_t T, int H, int K, int V, enum decay dk, enum erase er, float scale)
{
    problem p = make_problem(T, H, K, V, dk, er);
    const size_t nv = (size_t)T * H * V, ns = (size_t)H * K * V;
    float *o = fbuf(nv), *S = fbuf(ns);
    double *ro = dbuf(nv), *rS = dbuf(ns);
    memcpy(S, p.S0, ns * sizeof(float));
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const size_t r = (size_t)t * H + h;
            recur__gdr_step(S + (size_t)h * K * V, p.q + r * K, p.k + r * K, p.v + r * V,
                            p.g + r * K, p.a + r * K, p.b + r * K, scale, K, V, o + r * V);
        }
    reference(&p, scale, ro, rS);
    const double eo = rel_rms(o, ro, nv), es = rel_rms(S, rS, ns);
    cr_expect(eo <= TOL && es <= TOL,
              "step T=%lld H=%d K=%d V=%d decay=%d erase=%d: rel. RMS o %.3g, S %.3g (tol %g)",
              (long long)T, H, K, V, (int)dk, (int)er, eo, es, TOL);
    free(o), free(S), free(ro), free(rS);
    free_problem(&p);
}

Test(generalized_delta, step_matches_float64_recurrence)
{
    const int shapes[][2] = {{64, 64}, {32, 48}, {16, 70}, {48, 5}, {7, 129}, {1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int dk = DECAY_NONE; dk <= DECAY_STRONG; dk++)
            for (int er = ERASE_RWKV; er <= ERASE_GENERAL; er++) {
                /* In one dimension no unit vector is orthogonal to k: the projection leaves
                 * exactly 0 without a fused multiply-add (the portable build) and 0/0 = NaN. */
                if (er == ERASE_ORTHO && shapes[s][0] == 1)
                    continue;
                check_step(40, 2, shapes[s][0], shapes[s][1], (enum decay)dk, (enum erase)er,
                           er == ERASE_RWKV ? 1.0f : 0.125f);
            }
}

Test(generalized_delta, step_long_run_stays_exact)
{
    check_step(3000, 1, 64, 64, DECAY_MILD, ERASE_RWKV, 1.0f);
    check_step(3000, 1, 64, 64, DECAY_NONE, ERASE_RWKV, 1.0f);
}

/* ---------------------------------------------------------------- the public entry, every form */

static const char *form_name(recur_form f)
{
    return f == RECUR_FORM_RECURRENT ? "recurrent" : f == RECUR_FORM_PARALLEL ? "parallel" : "chunkwise";
}

/* recur_generalized_delta in one form from S0: o [T][H][V], S [H][K][V] (allocated here). */
static int run_form(const problem *p, recur_form form, int64_t chunk, float scale, float **o, float **S)
{
    const recur_dims d = {.T = p->T, .H = p->H, .K = p->K, .V = p->V};
    const size_t ns = (size_t)p->H * p->K * p->V;
    *o = fbuf((size_t)p->T * p->H * p->V);
    *S = fbuf(ns);
    memcpy(*S, p->S0, ns * sizeof(float));
    return recur_generalized_delta(&d, p->q, p->k, p->v, p->g, p->a, p->b, scale, form, chunk, *S, *o);
}

static void check_forms(int64_t T, int H, int K, int V, enum decay dk, enum erase er,
                        const int64_t *chunks, int nchunks)
{
    problem p = make_problem(T, H, K, V, dk, er);
    const size_t nv = (size_t)T * H * V, ns = (size_t)H * K * V;
    double *ro = dbuf(nv), *rS = dbuf(ns);
    const float scale = er == ERASE_RWKV ? 1.0f : 0.0f; /* 0: the default K^-1/2 */
    reference(&p, scale > 0.0f ? scale : 1.0 / sqrt((double)K), ro, rS);
    for (int f = 0; f < 3; f++)
        for (int c = 0; c < (f == RECUR_FORM_CHUNKWISE ? nchunks : 1); c++) {
            float *o, *S;
            cr_assert_eq(run_form(&p, (recur_form)f, chunks[c], scale, &o, &S), RECUR_OK);
            const double eo = rel_rms(o, ro, nv), es = rel_rms(S, rS, ns);
            cr_expect(eo <= TOL && es <= TOL,
                      "%s C=%lld T=%lld H=%d K=%d V=%d decay=%d erase=%d: rel. RMS o %.3g, S %.3g",
                      form_name((recur_form)f), (long long)chunks[c], (long long)T, H, K, V,
                      (int)dk, (int)er, eo, es);
            free(o), free(S);
        }
    free(ro), free(rS);
    free_problem(&p);
}

Test(generalized_delta, every_form_matches_float64_recurrence)
{
    const int64_t chunks[] = {1, 3, 16, 17, 64, 100000};
    const int shapes[][4] = {{1, 2, 16, 24}, {65, 2, 64, 64}, {100, 3, 60, 40}, {130, 1, 100, 48},
                             {33, 2, 7, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int dk = DECAY_NONE; dk <= DECAY_STRONG; dk++)
            for (int er = ERASE_RWKV; er <= ERASE_GENERAL; er++)
                check_forms(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], (enum decay)dk,
                            (enum erase)er, chunks, 6);
}

Test(generalized_delta, thousand_tokens_in_one_chunk, .timeout = 60)
{
    /* the left blocks' operands are carried from block to block and rebuilt every GDR_CHAIN = 8
     * (at J0 = 160, 288, ...): 1000 in one chunk; 170 puts a rebuild in each chunk's last,
     * 10-row block and leaves a tail chunk of 150 */
    const int64_t chunks[] = {64, 170, 1000};
    check_forms(1000, 2, 64, 32, DECAY_STRONG, ERASE_RWKV, chunks, 3);
    check_forms(1000, 2, 64, 32, DECAY_MILD, ERASE_RWKV, chunks, 3);
    check_forms(1000, 1, 32, 32, DECAY_NONE, ERASE_ORTHO, chunks, 3);
}

Test(generalized_delta, split_calls_equal_one_call)
{
    problem p = make_problem(150, 2, 32, 24, DECAY_MILD, ERASE_RWKV);
    const int H = 2, K = 32, V = 24;
    const size_t ns = (size_t)H * K * V;
    for (int f = 0; f < 3; f++) {
        float *o1, *S1;
        cr_assert_eq(run_form(&p, (recur_form)f, 16, 1.0f, &o1, &S1), RECUR_OK);
        float *o = fbuf((size_t)150 * H * V), *S = fbuf(ns);
        memcpy(S, p.S0, ns * sizeof(float));
        const int64_t cuts[] = {0, 1, 37, 38, 101, 150};
        for (int c = 0; c + 1 < 6; c++) {
            const int64_t a = cuts[c], n = cuts[c + 1] - a;
            const recur_dims d = {.T = n, .H = H, .K = K, .V = V};
            const size_t rk = (size_t)a * H * K;
            cr_assert_eq(recur_generalized_delta(&d, p.q + rk, p.k + rk, p.v + (size_t)a * H * V,
                                                 p.g + rk, p.a + rk, p.b + rk, 1.0f, (recur_form)f,
                                                 16, S, o + (size_t)a * H * V),
                         RECUR_OK);
        }
        const double eo = rel_rms_ff(o, o1, (size_t)150 * H * V), es = rel_rms_ff(S, S1, ns);
        cr_expect(eo <= 2e-6 && es <= 2e-6, "%s: pieces vs one call: o %.3g, S %.3g",
                  form_name((recur_form)f), eo, es);
        free(o1), free(S1), free(o), free(S);
    }
    free_problem(&p);
}

Test(generalized_delta, bad_arguments_return_their_code_and_change_nothing)
{
    problem p = make_problem(20, 2, 16, 8, DECAY_MILD, ERASE_RWKV);
    const recur_dims d = {.T = 20, .H = 2, .K = 16, .V = 8};
    const size_t ns = 2 * 16 * 8, nv = 20 * 2 * 8, nk = 20 * 2 * 16;
    float *S = fbuf(ns), *o = fbuf(nv);
    memcpy(S, p.S0, ns * sizeof(float));
    for (size_t i = 0; i < nv; i++)
        o[i] = 7.0f;
#define EXPECT_UNTOUCHED(call, code)                                                             \
    do {                                                                                         \
        cr_expect_eq((call), (code), "%s", #call);                                               \
        cr_expect(memcmp(S, p.S0, ns * sizeof(float)) == 0, "S changed by %s", #call);          \
        for (size_t i_ = 0; i_ < nv; i_++)                                                       \
            cr_assert(o[i_] == 7.0f, "o changed by %s", #call);                                 \
    } while (0)
    const float *q = p.q, *k = p.k, *v = p.v, *g = p.g, *a = p.a, *b = p.b;
    const recur_form CH = RECUR_FORM_CHUNKWISE;
    EXPECT_UNTOUCHED(recur_generalized_delta(NULL, q, k, v, g, a, b, 1, CH, 8, S, o), RECUR_EINVAL);
    EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, NULL, a, b, 1, CH, 8, S, o), RECUR_EINVAL);
    EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, g, NULL, b, 1, CH, 8, S, o), RECUR_EINVAL);
    EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, g, a, b, 1, (recur_form)7, 8, S, o), RECUR_EINVAL);
    EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, g, a, b, 1, CH, 0, S, o), RECUR_ESHAPE);
    EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, g, a, b, NAN, CH, 8, S, o), RECUR_ENONFINITE);
    const recur_dims bad = {.T = 20, .H = 2, .K = 0, .V = 8};
    EXPECT_UNTOUCHED(recur_generalized_delta(&bad, q, k, v, g, a, b, 1, CH, 8, S, o), RECUR_ESHAPE);
    float *x = fbuf(nk);
    const float bads[] = {NAN, INFINITY, -INFINITY, 0.5f};
    for (int f = 0; f < 3; f++)
        for (int j = 0; j < 4; j++) {
            const int code = j == 3 ? RECUR_ERANGE : RECUR_ENONFINITE;
            memcpy(x, g, nk * sizeof(float));
            x[nk - 3] = bads[j];
            EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, x, a, b, 1, (recur_form)f, 8, S, o), code);
            if (j == 3)
                continue; /* a and b may take any finite value */
            memcpy(x, a, nk * sizeof(float));
            x[5] = bads[j];
            EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, g, x, b, 1, (recur_form)f, 8, S, o), code);
            memcpy(x, b, nk * sizeof(float));
            x[nk - 1] = bads[j];
            EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, g, a, x, 1, (recur_form)f, 8, S, o), code);
        }
    /* NaN in a wins over g > 0 elsewhere */
    float *y = fbuf(nk);
    memcpy(x, g, nk * sizeof(float));
    x[0] = 1.0f;
    memcpy(y, a, nk * sizeof(float));
    y[nk - 1] = NAN;
    EXPECT_UNTOUCHED(recur_generalized_delta(&d, q, k, v, x, y, b, 1, CH, 8, S, o), RECUR_ENONFINITE);
#undef EXPECT_UNTOUCHED
    /* T = 0 keeps the state; g = -0.0 and a huge negative g are fine */
    const recur_dims d0 = {.T = 0, .H = 2, .K = 16, .V = 8};
    cr_expect_eq(recur_generalized_delta(&d0, q, k, v, g, a, b, 1, CH, 8, S, o), RECUR_OK);
    cr_expect(memcmp(S, p.S0, ns * sizeof(float)) == 0);
    free(x), free(y), free(S), free(o);
    free_problem(&p);
}

Test(generalized_delta, extreme_finite_gates_and_tiny_shapes)
{
    /* g = -3e38 on a few tokens (e^g = 0: the decayed state is dropped; sums of such gates must
     * not overflow into differences that are wrong) and 1 x 1 heads */
    const int64_t chunks[] = {1, 5, 64};
    check_forms(40, 1, 1, 1, DECAY_MILD, ERASE_GENERAL, chunks, 3);
    problem p = make_problem(150, 2, 32, 24, DECAY_MILD, ERASE_RWKV);
    for (int64_t t = 10; t < 150; t += 37)
        for (int i = 0; i < 2 * 32; i++)
            p.g[(size_t)t * 2 * 32 + i] = i % 3 ? -3e38f : -1e-30f;
    const size_t nv = (size_t)150 * 2 * 24, ns = (size_t)2 * 32 * 24;
    double *ro = dbuf(nv), *rS = dbuf(ns);
    reference(&p, 1.0, ro, rS);
    for (int f = 0; f < 3; f++)
        for (int c = 0; c < 3; c++) {
            float *o, *S;
            cr_assert_eq(run_form(&p, (recur_form)f, chunks[c], 1.0f, &o, &S), RECUR_OK);
            const double eo = rel_rms(o, ro, nv), es = rel_rms(S, rS, ns);
            cr_expect(eo <= TOL && es <= TOL, "%s C=%lld, gates -3e38: rel. RMS o %.3g, S %.3g",
                      form_name((recur_form)f), (long long)chunks[c], eo, es);
            free(o), free(S);
        }
    free(ro), free(rS);
    free_problem(&p);
}
