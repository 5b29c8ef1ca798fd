/* test_packed_gemm.c — the packed GEMM of core/packed_gemm.c.
 *
 * Reference: a float64 product computed here from the unpacked W. Tolerance (the deterministic
 * bound of one sequential fused chain of K steps plus the beta step, u = 2^-24):
 *   |y - y64| <= 1.01 (K + 2) u (sum_k |x_k W_nk| + |beta y0|)
 * Bit-level claims: the dispatched (SIMD) kernel equals the scalar formula of packed_gemm.h
 * (recur__packed_gemm_ref) with memcmp, and a row's output does not depend on M, on the row's
 * position, on strides or on the other rows. Shapes: M 1..67, N off the panel width, K odd.
 * Half panels (F16, BF16): the same kernel on 16-bit weights equals its scalar reference and the
 * fp32 kernel on the exactly widened matrix, bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "packed_gemm.h"
#include "test_rng.h"
#if defined(__SSE2__)
#include <xmmintrin.h> /* _mm_getcsr, _mm_setcsr */
#endif

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void) /* [-1, 1) */
{
    return (float)(xorshift_unit(&rng) * 2.0 - 1.0);
}

typedef struct {
    int N, K;
    float *W;  /* [N][K] row-major */
    float *Wp; /* packed, 64-byte aligned */
} mat;

static mat mat_new(int N, int K)
{
    mat a = {N, K, malloc(sizeof(float) * (size_t)N * K), NULL};
    size_t pf = recur__packed_floats(N, K);
    a.Wp = aligned_alloc(64, (pf * sizeof(float) + 63) / 64 * 64);
    cr_assert(a.W && a.Wp);
    for (size_t i = 0; i < (size_t)N * K; i++) a.W[i] = frand();
    recur__pack(a.Wp, a.W, N, K);
    return a;
}

static void mat_free(mat *a)
{
    free(a->W);
    free(a->Wp);
}

/* y (M x N, ldy) = beta*y0 + x W^T, against float64 with the bound of the header comment */
static void check_vs_f64(const mat *a, int M, const float *x, int ldx, const float *y0, float beta,
                         const float *y, int ldy)
{
    const double u = 0x1.0p-24;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < a->N; n++) {
            double s = 0, mag = 0;
            for (int k = 0; k < a->K; k++) {
                double t = (double)x[(size_t)m * ldx + k] * a->W[(size_t)n * a->K + k];
                s += t;
                mag += fabs(t);
            }
            double yb = beta == 0.0f ? 0.0 : (double)beta * y0[(size_t)m * ldy + n];
            s += yb;
            mag += fabs(yb);
            double err = fabs((double)y[(size_t)m * ldy + n] - s);
            double bound = 1.01 * (a->K + 2) * u * mag;
            cr_assert_leq(err, bound, "M %d N %d K %d beta %g: y[%d][%d] err %g > bound %g", M, a->N, a->K,
                          beta, m, n, err, bound);
        }
}

/* one product through both the dispatched kernel and the scalar reference: equal bits, within
 * the float64 bound, and nothing written outside the M x N block */
static void run_case(int M, int N, int K, float beta)
{
    mat a = mat_new(N, K);
    int ldx = K + 3, ldy = N + 5; /* strided rows; pad columns must stay untouched */
    float *x = malloc(sizeof(float) * ((size_t)M * ldx + 1));
    float *y0 = malloc(sizeof(float) * (size_t)M * ldy);
    float *y1 = malloc(sizeof(float) * (size_t)M * ldy);
    float *y2 = malloc(sizeof(float) * (size_t)M * ldy);
    float *xs = x + 1; /* rows not 64-byte aligned */
    for (size_t i = 0; i < (size_t)M * ldx; i++) xs[i] = frand();
    for (size_t i = 0; i < (size_t)M * ldy; i++) y0[i] = frand();
    memcpy(y1, y0, sizeof(float) * (size_t)M * ldy);
    if (beta == 0.0f) /* beta == 0 must not read y */
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) y1[(size_t)m * ldy + n] = NAN;
    memcpy(y2, y1, sizeof(float) * (size_t)M * ldy);
    recur__packed_gemm(M, N, K, xs, ldx, a.Wp, beta, y1, ldy);
    recur__packed_gemm_ref(M, N, K, xs, ldx, a.Wp, beta, y2, ldy);
    cr_assert_eq(memcmp(y1, y2, sizeof(float) * (size_t)M * ldy), 0, "M %d N %d K %d beta %g: kernel != scalar formula",
                 M, N, K, beta);
    check_vs_f64(&a, M, xs, ldx, y0, beta, y1, ldy);
    for (int m = 0; m < M; m++)
        for (int n = N; n < ldy; n++)
            cr_assert_eq(memcmp(&y1[(size_t)m * ldy + n], &y0[(size_t)m * ldy + n], sizeof(float)), 0,
                         "column %d past N = %d written", n, N);
    free(x); free(y0); free(y1); free(y2);
    mat_free(&a);
}

Test(packed_gemm, every_m_from_1_to_67)
{
    for (int M = 1; M <= 67; M++) run_case(M, 47, 63, M % 2 ? 0.0f : 1.0f);
}

Test(packed_gemm, odd_shapes_and_betas)
{
    static const int Ms[] = {1, 2, 7, 8, 9, 17, 64, 67};
    static const int Ns[] = {1, 15, 16, 17, 31, 33, 100, 130};
    static const int Ks[] = {1, 3, 17, 65, 191};
    static const float betas[] = {0.0f, 1.0f, -0.75f};
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                run_case(Ms[i], Ns[j], Ks[k], betas[(i + j + k) % 3]);
}

/* Wp holds W [N][K] (elements of es bytes) as panels of RECUR_PANEL rows, k-major inside a
 * panel: Wp[p][k][j] = W[p * RECUR_PANEL + j][k], rows past N zero. */
static void check_panels(const void *W, const void *Wp, int N, int K, size_t es)
{
    static const uint8_t zero[4];
    const uint8_t *w = W, *wp = Wp;
    for (int p = 0; p < (N + RECUR_PANEL - 1) / RECUR_PANEL; p++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < RECUR_PANEL; j++) {
                int n = p * RECUR_PANEL + j;
                const uint8_t *want = n < N ? w + ((size_t)n * K + k) * es : zero;
                cr_assert_eq(memcmp(wp + (((size_t)p * K + k) * RECUR_PANEL + j) * es, want, es), 0,
                             "panel %d, k %d, row %d", p, k, j);
            }
}

Test(packed_gemm, packed_layout)
{
    mat a = mat_new(37, 5);
    cr_assert_eq(recur__packed_floats(37, 5), (size_t)3 * 5 * RECUR_PANEL);
    check_panels(a.W, a.Wp, 37, 5, sizeof(float));
    mat_free(&a);
}

/* The property batched decode is built on: row r's bits are those of the same row alone (M = 1),
 * wherever it sits in a block of any M and whatever the other rows hold. */
Test(packed_gemm, row_bits_independent_of_m_and_position)
{
    static const int shapes[][2] = {{774, 192}, {192, 192}, {40, 24}, {300, 65}, {1024, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], K = shapes[s][1];
        mat a = mat_new(N, K);
        float *row = malloc(sizeof(float) * K), *alone = malloc(sizeof(float) * N);
        float *yb0 = malloc(sizeof(float) * N);
        for (int k = 0; k < K; k++) row[k] = frand();
        for (int n = 0; n < N; n++) yb0[n] = frand();
        for (int beta = 0; beta <= 1; beta++) {
            memcpy(alone, yb0, sizeof(float) * N);
            recur__packed_gemm(1, N, K, row, K, a.Wp, (float)beta, alone, N);
            static const int Ms[] = {2, 3, 8, 9, 15, 16, 63, 64, 67, 256};
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
                int M = Ms[mi];
                float *x = malloc(sizeof(float) * (size_t)M * K), *y = malloc(sizeof(float) * (size_t)M * N);
                int positions[] = {0, 1, M / 2, M - 1};
                for (int pi = 0; pi < 4; pi++) {
                    int p = positions[pi];
                    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = frand();
                    for (size_t i = 0; i < (size_t)M * N; i++) y[i] = frand();
                    memcpy(x + (size_t)p * K, row, sizeof(float) * K);
                    memcpy(y + (size_t)p * N, yb0, sizeof(float) * N);
                    recur__packed_gemm(M, N, K, x, K, a.Wp, (float)beta, y, N);
                    cr_assert_eq(memcmp(y + (size_t)p * N, alone, sizeof(float) * N), 0,
                                 "N %d K %d beta %d: row at %d of M = %d differs from M = 1", N, K, beta, p, M);
                }
                free(x);
                free(y);
            }
        }
        free(row); free(alone); free(yb0);
        mat_free(&a);
    }
}

/* ---------------------------------------------------------------- half panels (F16, BF16) */

/* A matrix of half values: W16 [N][K] row-major, its half-packed form, and the exact widening
 * of the same values (a.W) with its fp32-packed form (a.Wp): two packings of one matrix. Values
 * span F16's subnormals, small and large magnitudes and exact zeros. */
typedef struct {
    mat a;
    uint16_t *W16, *Wp16;
} hmat;

static hmat hmat_new(int N, int K, recur_wtype wt)
{
    hmat h;
    h.a = mat_new(N, K);
    h.W16 = malloc(sizeof(uint16_t) * (size_t)N * K);
    size_t pf = recur__packed_floats(N, K);
    h.Wp16 = aligned_alloc(64, (pf * 2 + 63) / 64 * 64);
    cr_assert(h.W16 && h.Wp16);
    for (size_t i = 0; i < (size_t)N * K; i++) {
        float v = h.a.W[i];
        switch (i % 7) {
        case 0: v *= 1e-6f; break;   /* F16 subnormal range */
        case 1: v *= 300.0f; break;
        case 2: v = 0.0f; break;
        default: break;
        }
        h.W16[i] = recur__float_to_half(v, wt);
        h.a.W[i] = recur__half_to_float(h.W16[i], wt);
    }
    recur__pack(h.a.Wp, h.a.W, N, K);
    recur__pack_half(h.Wp16, h.W16, N, K);
    return h;
}

static void hmat_free(hmat *h)
{
    mat_free(&h->a);
    free(h->W16);
    free(h->Wp16);
}

/* the half kernel == its scalar reference == the fp32 kernel on the widened matrix (memcmp), and
 * within the float64 bound of the widened values */
static void run_half_case(int M, int N, int K, float beta, recur_wtype wt)
{
    hmat h = hmat_new(N, K, wt);
    int ldx = K + 1, ldy = N + 2;
    float *x = malloc(sizeof(float) * (size_t)M * ldx), *y0 = malloc(sizeof(float) * (size_t)M * ldy);
    float *y1 = malloc(sizeof(float) * (size_t)M * ldy), *y2 = malloc(sizeof(float) * (size_t)M * ldy);
    float *y3 = malloc(sizeof(float) * (size_t)M * ldy);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = frand();
    for (size_t i = 0; i < (size_t)M * ldy; i++) y0[i] = frand();
    memcpy(y1, y0, sizeof(float) * (size_t)M * ldy);
    memcpy(y2, y0, sizeof(float) * (size_t)M * ldy);
    memcpy(y3, y0, sizeof(float) * (size_t)M * ldy);
    recur__packed_gemm_t(M, N, K, x, ldx, h.Wp16, wt, beta, y1, ldy);
    recur__packed_gemm_ref_t(M, N, K, x, ldx, h.Wp16, wt, beta, y2, ldy);
    recur__packed_gemm(M, N, K, x, ldx, h.a.Wp, beta, y3, ldy);
    const char *tn = wt == RECUR_WT_F16 ? "F16" : "BF16";
    cr_assert_eq(memcmp(y1, y2, sizeof(float) * (size_t)M * ldy), 0, "%s M %d N %d K %d: kernel != scalar", tn, M, N, K);
    cr_assert_eq(memcmp(y1, y3, sizeof(float) * (size_t)M * ldy), 0, "%s M %d N %d K %d: half != fp32-packed", tn, M, N,
                 K);
    check_vs_f64(&h.a, M, x, ldx, y0, beta, y1, ldy);
    free(x); free(y0); free(y1); free(y2); free(y3);
    hmat_free(&h);
}

/* Every F16 and BF16 bit pattern's widening and finiteness: test_safetensors_half.c. */

Test(packed_gemm, float_to_half_rounds_to_nearest_even)
{
    /* every finite half round-trips; fp32 values (incl. exact ties and the subnormal range)
     * round as _Float16's conversion does, and BF16 as the high half rounded to nearest even */
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        if (recur__half_finite(h, RECUR_WT_F16))
            cr_assert_eq(recur__float_to_half(recur__half_to_float(h, RECUR_WT_F16), RECUR_WT_F16), h,
                         "F16 %04x", b);
        if (recur__half_finite(h, RECUR_WT_BF16) && (h & 0x7fff) != 0)
            cr_assert_eq(recur__float_to_half(recur__half_to_float(h, RECUR_WT_BF16), RECUR_WT_BF16),
                         h, "BF16 %04x", b);
    }
    uint64_t seed = 7;
    for (int i = 0; i < 200000; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t fb = (uint32_t)(seed >> 32) & 0xc7ffffffu; /* |f| < 2^8: F16 range, subnormals */
        if (i & 1)
            fb &= 0xffffe000u | 0x1000u; /* an exact F16 tie */
        float f;
        memcpy(&f, &fb, 4);
        _Float16 x = (_Float16)f;
        uint16_t want;
        memcpy(&want, &x, 2);
        cr_assert_eq(recur__float_to_half(f, RECUR_WT_F16), want, "F16 of %08x", fb);
        uint32_t rb = (fb + 0x7fffu + ((fb >> 16) & 1u)) >> 16;
        cr_assert_eq(recur__float_to_half(f, RECUR_WT_BF16), (uint16_t)rb, "BF16 of %08x", fb);
    }
}

Test(packed_gemm, half_panels_odd_shapes)
{
    static const int Ms[] = {1, 2, 8, 9, 13, 14, 15, 28, 29, 64, 67};
    static const int Ns[] = {1, 15, 17, 33, 130};
    static const int Ks[] = {1, 2, 17, 64, 191};
    static const float betas[] = {0.0f, 1.0f, -0.75f};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
            for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
                for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                    run_half_case(Ms[i], Ns[j], Ks[k], betas[(i + j + k) % 3], t ? RECUR_WT_BF16 : RECUR_WT_F16);
}

Test(packed_gemm, half_every_m_and_row_independence)
{
    /* M = 1..67 on one matrix: each block equal to the fp32-packed result, and every row equal
     * to that row alone (M = 1) */
    for (int t = 0; t < 2; t++) {
        recur_wtype wt = t ? RECUR_WT_BF16 : RECUR_WT_F16;
        const int N = 47, K = 63, Mmax = 67;
        hmat h = hmat_new(N, K, wt);
        float *x = malloc(sizeof(float) * Mmax * K), *y = malloc(sizeof(float) * Mmax * N);
        float *yf = malloc(sizeof(float) * Mmax * N), *alone = malloc(sizeof(float) * Mmax * N);
        for (int i = 0; i < Mmax * K; i++) x[i] = frand();
        for (int m = 0; m < Mmax; m++)
            recur__packed_gemm_t(1, N, K, x + m * K, K, h.Wp16, wt, 0.0f, alone + m * N, N);
        for (int M = 1; M <= Mmax; M++) {
            recur__packed_gemm_t(M, N, K, x, K, h.Wp16, wt, 0.0f, y, N);
            recur__packed_gemm(M, N, K, x, K, h.a.Wp, 0.0f, yf, N);
            cr_assert_eq(memcmp(y, yf, sizeof(float) * M * N), 0, "M %d: half != fp32-packed", M);
            cr_assert_eq(memcmp(y, alone, sizeof(float) * M * N), 0, "M %d: a row differs from M = 1", M);
        }
        free(x); free(y); free(yf); free(alone);
        hmat_free(&h);
    }
}

Test(packed_gemm, half_packed_layout)
{
    hmat h = hmat_new(37, 5, RECUR_WT_BF16);
    check_panels(h.W16, h.Wp16, 37, 5, sizeof(uint16_t));
    hmat_free(&h);
}

/* Every finite F16 bit pattern, widened by the running path's kernel: W [1024][64] holds the
 * 65,536 patterns (non-finite ones, which a weights file may not hold, as 0), x the identity
 * (M = 64) and then each of its rows alone (M = 1, the decode tile), so y[m][n] = 0 + ... + 1 * W[n][m]
 * is the widened weight itself: equal to recur__half_to_float's, and the kernel's whole result
 * equal to the scalar reference's (memcmp). */
static void every_f16_pattern(void)
{
    enum { N = 1024, K = 64 };
    uint16_t *W16 = malloc(sizeof(uint16_t) * N * K), *Wp16 = aligned_alloc(64, (recur__packed_floats(N, K) * 2 + 63) / 64 * 64);
    float *x = calloc((size_t)K * K, sizeof(float)), *y = malloc(sizeof(float) * K * N), *yr = malloc(sizeof(float) * K * N);
    cr_assert(W16 && Wp16 && x && y && yr);
    for (uint32_t i = 0; i < N * K; i++) W16[i] = recur__half_finite((uint16_t)i, RECUR_WT_F16) ? (uint16_t)i : 0;
    for (int k = 0; k < K; k++) x[k * K + k] = 1.0f;
    recur__pack_half(Wp16, W16, N, K);
    recur__packed_gemm_t(K, N, K, x, K, Wp16, RECUR_WT_F16, 0.0f, y, N);
    recur__packed_gemm_ref_t(K, N, K, x, K, Wp16, RECUR_WT_F16, 0.0f, yr, N);
    cr_assert_eq(memcmp(y, yr, sizeof(float) * K * N), 0, "kernel != scalar reference");
    for (int m = 0; m < K; m++) {
        float row[N];
        recur__packed_gemm_t(1, N, K, x + m * K, K, Wp16, RECUR_WT_F16, 0.0f, row, N);
        cr_assert_eq(memcmp(row, y + (size_t)m * N, sizeof row), 0, "row %d alone != in the block", m);
        for (int n = 0; n < N; n++)
            cr_assert(row[n] == recur__half_to_float(W16[n * K + m], RECUR_WT_F16), "F16 %04x: %a", W16[n * K + m], row[n]);
    }
    free(W16); free(Wp16); free(x); free(y); free(yr);
}

Test(packed_gemm, every_f16_pattern_widens_exactly) { every_f16_pattern(); }

#if defined(__SSE2__)
/* The same with MXCSR.DAZ set (a host thread may set it): the portable path's SSE2 widening
 * reads a subnormal F16 as a subnormal fp32, so under DAZ the F16 GEMM takes the plain C tile. */
Test(packed_gemm, every_f16_pattern_widens_exactly_under_daz)
{
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x0040);
    every_f16_pattern();
    _mm_setcsr(csr);
}
#endif
