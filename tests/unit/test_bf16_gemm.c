/* test_bf16_gemm.c — the bf16 GEMM of core/bf16_gemm.c (the bf16 prefill's kernel) on the path
 * RECUR_ISA selects (tests/test_isa.sh runs this binary on every path the CPU has; the vdpbf16ps
 * kernel runs where the CPU has avx512_bf16 and RECUR_ISA is avx512, elsewhere recur__bf16_gemm
 * is the scalar formula and these tests check that path).
 *
 * References:
 *  - float64: x and W rounded to bf16 by recur__bf16_round (checked below against the hardware's
 *    vcvtneps2bf16 and against hand-made cases), multiplied and summed in double. Tolerance
 *    (u = 2^-24; 2 ceil(K/2) rounded additions and the beta fmaf):
 *      |y - y64| <= gamma_{2 ceil(K/2) + 1} (sum_k |xb wb| + |beta y0|),  gamma_n = n u / (1 - n u)
 *  - the scalar formula of bf16_gemm.h (recur__bf16_gemm_ref, each output computed alone), bit for
 *    bit (memcmp): the kernel adds the odd k of a pair first, one rounding per product, like the
 *    instruction's definition; this also shows a row's result does not depend on M, its position
 *    or the other rows. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_gemm.h"
#include "isa.h"
#include "packed_gemm.h"
#include "test_rng.h"

static uint64_t rng = 0x5DEECE66Dull;
static float frand(void) { return (float)(xorshift_unit(&rng) * 2.0 - 1.0); }

typedef struct {
    int N, K;
    float *W;     /* [N][K] row-major */
    float *Wp;    /* fp32 panels */
    uint32_t *Wb; /* bf16 panels */
} bmat;

/* aligned_alloc needs a size that is a multiple of the alignment */
static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

static bmat bmat_new(int N, int K)
{
    bmat a = {N, K, malloc(sizeof(float) * (size_t)N * K), NULL, NULL};
    a.Wp = aligned_alloc(64, (recur__packed_floats(N, K) * sizeof(float) + 63) / 64 * 64);
    a.Wb = aligned_alloc(64, (recur__bf16_packed_bytes(N, K) + 63) / 64 * 64);
    cr_assert(a.W && a.Wp && a.Wb);
    for (size_t i = 0; i < (size_t)N * K; i++) a.W[i] = frand() * (i % 89 == 0 ? 16.0f : 1.0f);
    recur__pack(a.Wp, a.W, N, K);
    recur__pack_bf16(a.Wb, a.Wp, RECUR_WT_F32, N, K);
    return a;
}

static void bmat_free(bmat *a)
{
    free(a->W);
    free(a->Wp);
    free(a->Wb);
}

static double bf(float v) { return recur__half_to_float(recur__bf16_round(v), RECUR_WT_BF16); }

static void check_vs_f64(const bmat *a, int M, const float *x, int ldx, const float *y0, float beta, const float *y,
                         int ldy)
{
    const double u = 0x1.0p-24;
    const int n_add = 2 * ((a->K + 1) / 2) + 1;
    const double gamma = n_add * u / (1 - n_add * u);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < a->N; n++) {
            double s = 0, mag = 0;
            for (int k = 0; k < a->K; k++) {
                const double w = bf(a->W[(size_t)n * a->K + k]);
                cr_assert_eq(w, recur__bf16_weight(a->Wb, a->K, n, k), "packed weight (%d,%d)", n, k);
                const double t = bf(x[(size_t)m * ldx + k]) * w;
                s += t;
                mag += fabs(t);
            }
            const double yb = beta == 0.0f ? 0.0 : (double)beta * y0[(size_t)m * ldy + n];
            const double got = y[(size_t)m * ldy + n], want = s + yb;
            cr_assert_leq(fabs(got - want), gamma * (mag + fabs(yb)) + 1e-300,
                          "M=%d N=%d K=%d (%d,%d): %.9g vs %.9g (bound %.3g)", M, a->N, a->K, m, n, got, want,
                          gamma * (mag + fabs(yb)));
        }
}

/* shapes off the panel (16), pair (2) and tile (14 rows, 2 panels) edges */
Test(bf16_gemm, kernel_vs_float64_and_formula)
{
    const int Ms[] = {1, 2, 13, 14, 15, 29, 64};
    const int Ns[] = {1, 15, 16, 17, 33, 50};
    const int Ks[] = {1, 2, 3, 31, 64, 129, 512};
    for (size_t in = 0; in < sizeof Ns / sizeof *Ns; in++)
        for (size_t ik = 0; ik < sizeof Ks / sizeof *Ks; ik++) {
            bmat a = bmat_new(Ns[in], Ks[ik]);
            for (size_t im = 0; im < sizeof Ms / sizeof *Ms; im++)
                for (int bi = 0; bi < 2; bi++) {
                    const int M = Ms[im], N = a.N, K = a.K, ldx = K + 3, ldy = N + 5;
                    const float beta = bi ? 0.75f : 0.0f;
                    float *x = malloc(sizeof(float) * (size_t)M * ldx);
                    float *y0 = malloc(sizeof(float) * (size_t)M * ldy), *y = malloc(sizeof(float) * (size_t)M * ldy);
                    float *yr = malloc(sizeof(float) * (size_t)M * ldy);
                    cr_assert(x && y0 && y && yr);
                    for (int i = 0; i < M * ldx; i++) x[i] = frand() * (i % 37 == 0 ? 30.0f : 2.0f);
                    for (int i = 0; i < M * ldy; i++) y0[i] = frand();
                    memcpy(y, y0, sizeof(float) * (size_t)M * ldy);
                    memcpy(yr, y0, sizeof(float) * (size_t)M * ldy);
                    recur__bf16_gemm(M, N, K, x, ldx, a.Wb, beta, y, ldy);
                    recur__bf16_gemm_ref(M, N, K, x, ldx, a.Wb, beta, yr, ldy);
                    cr_assert(!memcmp(y, yr, sizeof(float) * (size_t)M * ldy),
                              "kernel != formula at M=%d N=%d K=%d beta=%g (padding columns untouched too)", M, N, K,
                              beta);
                    check_vs_f64(&a, M, x, ldx, y0, beta, y, ldy);
                    free(x), free(y0), free(y), free(yr);
                }
            bmat_free(&a);
        }
}

/* a row's result is the same bits alone or at any place of a larger call (prefill pieces) */
Test(bf16_gemm, row_independent_of_M)
{
    const int N = 70, K = 96, M = 37;
    bmat a = bmat_new(N, K);
    float *x = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * M * N), y1[70];
    cr_assert(x && y);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    recur__bf16_gemm(M, N, K, x, K, a.Wb, 0.0f, y, N);
    for (int m = 0; m < M; m++) {
        recur__bf16_gemm(1, N, K, x + (size_t)m * K, K, a.Wb, 0.0f, y1, N);
        cr_assert(!memcmp(y1, y + (size_t)m * N, sizeof y1), "row %d differs alone", m);
    }
    free(x), free(y);
    bmat_free(&a);
}

/* big K x M: the rounded rows do not fit the stack buffer (heap path) */
Test(bf16_gemm, large_call_heap_buffer)
{
    const int N = 20, K = 2050, M = 40;
    bmat a = bmat_new(N, K);
    float *x = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * M * N), *yr = malloc(sizeof(float) * M * N);
    cr_assert(x && y && yr);
    for (int i = 0; i < M * K; i++) x[i] = frand();
    recur__bf16_gemm(M, N, K, x, K, a.Wb, 0.0f, y, N);
    recur__bf16_gemm_ref(M, N, K, x, K, a.Wb, 0.0f, yr, N);
    cr_assert(!memcmp(y, yr, sizeof(float) * M * N));
    check_vs_f64(&a, M, x, K, y, 0.0f, y, N);
    free(x), free(y), free(yr);
    bmat_free(&a);
}

static uint16_t bits_round(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return recur__bf16_round(f);
}

/* the rounding rule, by hand: nearest even, DAZ, quiet NaN, overflow to inf */
Test(bf16_gemm, rounding_cases)
{
    cr_assert_eq(bits_round(0x3f800000u), 0x3f80);        /* 1.0 */
    cr_assert_eq(bits_round(0x3f808000u), 0x3f80);        /* tie, even below */
    cr_assert_eq(bits_round(0x3f818000u), 0x3f82);        /* tie, even above */
    cr_assert_eq(bits_round(0x3f808001u), 0x3f81);        /* above the tie */
    cr_assert_eq(bits_round(0xbf807fffu), 0xbf80);        /* below the tie, negative */
    cr_assert_eq(bits_round(0x00400000u), 0x0000);        /* subnormal -> +0 */
    cr_assert_eq(bits_round(0x80000001u), 0x8000);        /* subnormal -> -0 */
    cr_assert_eq(bits_round(0x7f7fffffu), 0x7f80);        /* FLT_MAX rounds to inf */
    cr_assert_eq(bits_round(0xff800000u), 0xff80);        /* -inf */
    cr_assert_eq(bits_round(0x7f800001u), 0x7fc0);        /* signalling NaN -> quiet */
    cr_assert_eq(bits_round(0xffc12345u), 0xffc1);        /* quiet NaN keeps sign and top bits */
    cr_assert_eq(bits_round(0x00800000u), 0x0080);        /* FLT_MIN stays */
}

/* recur__bf16_round equals the instruction (vcvtneps2bf16) on edge and random values */
Test(bf16_gemm, rounding_matches_hardware)
{
    if (!recur__isa_bf16()) cr_skip_test("no avx512_bf16 on this path (RECUR_ISA or the CPU): the scalar rule only");
    enum { n = 4096 };
    static float v[n];
    static uint16_t hw[n];
    const uint32_t edge[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf807fffu, 0x00400000u, 0x80000001u,
                             0x7f7fffffu, 0xff800000u, 0x7f800001u, 0xffc12345u, 0x00800000u, 0x007fffffu,
                             0x0u, 0x80000000u, 0x7f7f8000u, 0x3fffffffu};
    const int ne = (int)(sizeof edge / sizeof *edge);
    for (int i = 0; i < n; i++) {
        uint32_t b = i < ne ? edge[i] : (uint32_t)xorshift64(&rng);
        memcpy(&v[i], &b, 4);
    }
    cr_assert(recur__bf16_round_hw(v, n, hw));
    for (int i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        cr_assert_eq(hw[i], recur__bf16_round(v[i]), "0x%08x: hw 0x%04x rule 0x%04x", b, hw[i], recur__bf16_round(v[i]));
    }
}

/* half weights: an F16 / BF16 panel rounds each weight once, as its fp32 value would */
Test(bf16_gemm, pack_from_half_panels)
{
    const int N = 33, K = 45;
    const recur_wtype types[] = {RECUR_WT_F16, RECUR_WT_BF16};
    for (int t = 0; t < 2; t++) {
        uint16_t *Wh = malloc(sizeof(uint16_t) * N * K), *Whp = alloc64(recur__packed_floats(N, K) * 2);
        float *Wf = malloc(sizeof(float) * N * K), *Wfp = alloc64(recur__packed_floats(N, K) * 4);
        uint32_t *A = alloc64(recur__bf16_packed_bytes(N, K)), *B = alloc64(recur__bf16_packed_bytes(N, K));
        cr_assert(Wh && Whp && Wf && Wfp && A && B);
        for (int i = 0; i < N * K; i++) {
            Wh[i] = recur__float_to_half(frand() * 3.0f, types[t]);
            Wf[i] = recur__half_to_float(Wh[i], types[t]);
        }
        recur__pack_half(Whp, Wh, N, K);
        recur__pack(Wfp, Wf, N, K);
        recur__pack_bf16(A, Whp, types[t], N, K);
        recur__pack_bf16(B, Wfp, RECUR_WT_F32, N, K);
        cr_assert(!memcmp(A, B, recur__bf16_packed_bytes(N, K)), "%s", recur__wtype_name(types[t]));
        if (types[t] == RECUR_WT_BF16) /* a BF16 weight is itself */
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) cr_assert_eq(recur__bf16_weight(A, K, n, k), Wf[(size_t)n * K + k]);
        free(Wh), free(Whp), free(Wf), free(Wfp), free(A), free(B);
    }
}
