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
            for (int er = ERASE_RWKV; er <= ERASE_GENERAL; er++)
                check_step(40, 2, shapes[s][0], shapes[s][1], (enum decay)dk, (enum erase)er,
                           er == ERASE_RWKV ? 1.0f : 0.125f);
}

Test(generalized_delta, step_long_run_stays_exact)
{
    check_step(3000, 1, 64, 64, DECAY_MILD, ERASE_RWKV, 1.0f);
    check_step(3000, 1, 64, 64, DECAY_NONE, ERASE_RWKV, 1.0f);
}
