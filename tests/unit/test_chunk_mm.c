/* test_chunk_mm.c — recur__mm and recur__transpose (core/chunk_mm.h) against a float64 loop.
 *
 * Random shapes (including empty ones, tails of every width and k beyond one k block), strides
 * (row-major, transposed and fully strided A), both betas, every triangle flag and diagonal
 * offset. C starts as NaN where beta = 0 (it must not be read) and every entry outside the
 * written triangle must keep its sentinel; A's entries above the diagonal are NaN under
 * RECUR_MM_A_LOWER (they must not be read). Tolerance: |C - ref| <= 1e-5 (1 + |alpha| sum |A B|
 * + |ref|) per entry.
 *
 * chunk_ahead.h's set of lines (every line handed out once, in order; the rest read exactly) and
 * the products drawing on it (recur__mm_ahead_bind: same results, the set drained).
 *
 * Built twice: as is (the AVX-512 kernel on machines that have it), and by
 * test_chunk_mm_portable.c with RECUR_MM_PORTABLE (the OpenBLAS path every other machine runs),
 * which adds its own cases.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef CHUNK_MM_PORTABLE_TEST
/* this copy's names get a suffix of their own (core/isa_rename.h), as each per-ISA object's do:
 * librecur's unsuffixed recur__mm is core/isa.c's jump to the running path */
#define RECUR_ISA_SUFFIX test
#include "isa_rename.h"
#include "chunk_mm.c"
#else
#include "chunk_mm.h"
#endif
#include "chunk_ahead.h"
#include "test_rng.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t next_u32(void)
{
    return (uint32_t)(xorshift64(&rng) >> 32);
}

static int irand(int n) /* [0, n) */
{
    return (int)(next_u32() % (uint32_t)n);
}

static float frand(void) /* [-1, 1) */
{
    return (float)next_u32() / 2147483648.0f - 1.0f;
}

/* One random case; returns the number of bad entries. layout of A: 0 row-major (ars = lda,
 * acs = 1), 1 transposed (ars = 1, acs = lda), 2 neither stride 1 (acs = 2). A single row or a
 * single term sometimes gets a unit stride it never steps (ars = 1 for m = 1, acs = 1 for k = 1). */
static int one_case(int m, int n, int k, int flags, int diag, int layout, float beta)
{
    const float alpha = frand() * 2.0f;
    const int transA = layout == 1;
    const ptrdiff_t lda = layout == 2 ? 2 * (ptrdiff_t)k + 1 + irand(3)
                          : transA    ? m + irand(4)
                                      : k + irand(4);
    ptrdiff_t ars = transA ? 1 : lda, acs = transA ? lda : layout == 2 ? 2 : 1;
    if (layout == 0 && m == 1 && irand(2))
        ars = 1;
    if (layout == 1 && k == 1 && irand(2))
        acs = 1;
    const ptrdiff_t ldb = n + irand(4), ldc = n + irand(4);
    const size_t na = (size_t)(transA ? (k > 0 ? k : 1) : (m > 0 ? m : 1)) * (size_t)lda + 1;
    const size_t nb = (size_t)(k > 0 ? k : 1) * (size_t)ldb + 1, nc = (size_t)(m > 0 ? m : 1) * (size_t)ldc + 1;
    float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
    float *C = malloc(nc * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    cr_assert(A && B && C && C0);
    for (size_t i = 0; i < na; i++)
        A[i] = frand();
    for (size_t i = 0; i < nb; i++)
        B[i] = frand();
    for (size_t i = 0; i < nc; i++)
        C0[i] = beta == 0.0f ? NAN : frand();
    memcpy(C, C0, nc * sizeof(float));
    /* A_LOWER: entries above the diagonal are poison, so reading one shows up as NaN */
    if (flags & RECUR_MM_A_LOWER)
        for (int i = 0; i < m; i++)
            for (int p = i + diag + 1; p < k; p++)
                if (p >= 0)
                    A[i * ars + p * acs] = NAN;

    recur__mm(m, n, k, alpha, A, ars, acs, B, ldb, beta, C, ldc, flags, diag);

    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float got = C[i * ldc + j];
            const int tri = i + diag;
            const int written = !((flags & RECUR_MM_C_LOWER) && j > tri) &&
                                !((flags & RECUR_MM_C_UPPER) && j <= tri);
            if (!written) {
                const float was = C0[i * ldc + j];
                bad += !(got == was || (isnan(got) && isnan(was)));
                continue;
            }
            int pe = k;
            if (flags & RECUR_MM_A_LOWER)
                pe = tri + 1 < 0 ? 0 : tri + 1 < k ? tri + 1 : k;
            double s = 0.0, mag = 0.0;
            for (int p = 0; p < pe; p++) {
                const double x = (double)A[i * ars + p * acs] * B[p * ldb + j];
                s += x;
                mag += fabs(x);
            }
            const double ref = (beta != 0.0f ? (double)C0[i * ldc + j] : 0.0) + alpha * s;
            bad += !(fabs(got - ref) <= 1e-5 * (1.0 + fabs(alpha) * mag + fabs(ref)));
        }
    /* nothing past the last row's n entries of a row is written */
    for (int i = 0; i < m; i++)
        for (ptrdiff_t j = n; j < ldc; j++) {
            const float got = C[i * ldc + j], was = C0[i * ldc + j];
            bad += !(got == was || (isnan(got) && isnan(was)));
        }
    free(A);
    free(B);
    free(C);
    free(C0);
    return bad;
}

Test(chunk_mm, random_shapes_flags_and_strides)
{
    static const int flag_sets[] = {0, RECUR_MM_A_LOWER, RECUR_MM_C_LOWER, RECUR_MM_C_UPPER,
                                    RECUR_MM_A_LOWER | RECUR_MM_C_LOWER};
    int bad = 0, cases = 0;
    for (int trial = 0; trial < 1500; trial++) {
        const int big = trial % 50 == 0; /* k beyond one 256 block, n beyond one 64 panel */
        const int m = irand(big ? 90 : 40), n = irand(big ? 200 : 80) + (trial % 7 == 0 ? 0 : 1);
        const int k = irand(big ? 600 : 70);
        const int flags = flag_sets[irand(5)], diag = irand(9) - 4;
        bad += one_case(m, n, k, flags, diag, irand(3), (float)irand(2));
        cases++;
    }
    cr_assert_eq(bad, 0, "%d bad entries over %d cases", bad, cases);
}

Test(chunk_mm, chunk_shapes)
{
    /* the shapes the chunkwise kernels call, chunk 64 and K = V = 64 */
    int bad = 0;
    bad += one_case(64, 64, 64, 0, 0, 0, 0.0f);
    bad += one_case(64, 64, 64, 0, 0, 1, 1.0f);
    bad += one_case(64, 64, 64, RECUR_MM_C_LOWER, 0, 0, 0.0f);
    bad += one_case(64, 64, 64, RECUR_MM_C_LOWER, -1, 0, 0.0f);
    bad += one_case(64, 64, 64, RECUR_MM_C_UPPER, -1, 0, 0.0f);
    bad += one_case(64, 64, 64, RECUR_MM_A_LOWER, 0, 1, 1.0f);
    bad += one_case(44, 64, 300, RECUR_MM_A_LOWER, 256, 0, 1.0f); /* a panel of the parallel form */
    cr_assert_eq(bad, 0);
}

Test(chunk_mm, transpose)
{
    for (int trial = 0; trial < 300; trial++) {
        const int rows = irand(70), cols = irand(70);
        const ptrdiff_t lds = cols + irand(5), ldd = rows + irand(5);
        const size_t ns = (size_t)(rows ? rows : 1) * lds + 1, nd = (size_t)(cols ? cols : 1) * ldd + 1;
        float *s = malloc(ns * sizeof(float)), *d = malloc(nd * sizeof(float));
        cr_assert(s && d);
        for (size_t i = 0; i < ns; i++)
            s[i] = frand();
        for (size_t i = 0; i < nd; i++)
            d[i] = 7.0f;
        recur__transpose(s, lds, rows, cols, d, ldd);
        for (int i = 0; i < cols; i++)
            for (ptrdiff_t t = 0; t < ldd; t++)
                cr_assert_eq(d[i * ldd + t], t < rows ? s[t * lds + i] : 7.0f, "rows %d cols %d", rows, cols);
        free(s);
        free(d);
    }
}

/* ---- chunk_ahead.h. Arrays of random lengths (some empty, most not whole lines); the first
 * float of every line is 1 and every other float 1000, so recur__ahead_rest's sum counts the
 * lines it read (exact) and shows any float read that does not start a line. */
typedef struct {
    float *rows[RECUR_AHEAD_MAX];
    size_t n[RECUR_AHEAD_MAX];
    int na;
    size_t lines; /* over all arrays */
} ahead_case;

static void ahead_case_make(ahead_case *c)
{
    c->na = 1 + irand(RECUR_AHEAD_MAX);
    c->lines = 0;
    for (int j = 0; j < c->na; j++) {
        c->n[j] = irand(5) == 0 ? 0 : (size_t)irand(400);
        c->rows[j] = malloc((c->n[j] + 1) * sizeof(float));
        cr_assert(c->rows[j]);
        for (size_t i = 0; i < c->n[j]; i++)
            c->rows[j][i] = i % RECUR_AHEAD_LINE ? 1000.0f : 1.0f;
        c->lines += (c->n[j] + RECUR_AHEAD_LINE - 1) / RECUR_AHEAD_LINE;
    }
}

static void ahead_case_free(ahead_case *c)
{
    for (int j = 0; j < c->na; j++)
        free(c->rows[j]);
}

Test(chunk_ahead, take_hands_out_every_line_once_in_order)
{
    for (int trial = 0; trial < 300; trial++) {
        ahead_case c;
        ahead_case_make(&c);
        recur__ahead ah;
        recur__ahead_set(&ah, (const float *const *)c.rows, c.n, c.na, 0);
        const size_t stop = (size_t)irand((int)c.lines + 1); /* then recur__ahead_rest */
        size_t taken = 0;
        int j = 0;
        size_t at = 0; /* floats of array j handed out */
        for (;;) {
            const float *p = NULL;
            const int want = 1 + irand(40);
            const int got = recur__ahead_take(&ah, &p, taken < stop ? want : 0);
            if (taken >= stop || !got)
                break;
            while (at >= c.n[j]) /* the next array with lines left */
                j++, at = 0;
            cr_assert(got <= want);
            cr_assert_eq(p, c.rows[j] + at, "trial %d: a range out of order", trial);
            const size_t left = (c.n[j] - at + RECUR_AHEAD_LINE - 1) / RECUR_AHEAD_LINE;
            cr_assert(got == want || (size_t)got == left, "trial %d: a short range", trial);
            at += (size_t)got * RECUR_AHEAD_LINE;
            taken += (size_t)got;
        }
        cr_assert(taken <= c.lines);
        if (stop == c.lines)
            cr_assert_eq(taken, c.lines, "trial %d: lines never handed out", trial);
        cr_assert_eq(recur__ahead_rest(&ah), (float)(c.lines - taken), "trial %d: the rest", trial);
        ahead_case_free(&c);
    }
}

Test(chunk_ahead, steps_hand_out_their_share)
{
    for (int trial = 0; trial < 300; trial++) {
        ahead_case c;
        ahead_case_make(&c);
        recur__ahead ah;
        const size_t points = 1 + (size_t)irand(50);
        recur__ahead_set(&ah, (const float *const *)c.rows, c.n, c.na, points);
        const size_t per = (c.lines + points - 1) / points;
        const size_t steps = (size_t)irand((int)points + 5);
        for (size_t s = 0; s < steps; s++)
            recur__ahead_step(&ah);
        recur__ahead_step(NULL); /* nothing */
        const size_t done = steps * per < c.lines ? steps * per : c.lines;
        cr_assert_eq(recur__ahead_rest(&ah), (float)(c.lines - done), "trial %d", trial);
        ahead_case_free(&c);
    }
}

Test(chunk_ahead, chunk_rows_clipped_to_T)
{
    /* [T][H][K] and [T][H][V] rows of the chunk at t0: T = 10, H = 2, K = 3, V = 5, C = 4 */
    static float a[10 * 2 * 3], b[10 * 2 * 5];
    const float *const in[2] = {a, b};
    static const unsigned char is_v[2] = {0, 1};
    recur__ahead ah;
    recur__ahead_chunk(&ah, in, is_v, 2, 10, 2, 3, 5, 8, 4, 0); /* the tail: rows 8, 9 */
    cr_assert_eq(ah.na, 2);
    cr_assert_eq(ah.rows[0], a + 8 * 6);
    cr_assert_eq(ah.n[0], 2 * 6);
    cr_assert_eq(ah.rows[1], b + 8 * 10);
    cr_assert_eq(ah.n[1], 2 * 10);
    recur__ahead_chunk(&ah, in, is_v, 2, 10, 2, 3, 5, 12, 4, 0); /* past T: nothing */
    cr_assert_eq(ah.na, 0);
    cr_assert_eq(recur__ahead_rest(&ah), 0.0f);
}

#ifndef CHUNK_MM_PORTABLE_TEST
Test(chunk_ahead, products_draw_on_the_bound_set_and_compute_the_same)
{
    enum { N = 64 };
    static float A[N * N], B[N * N], C0[N * N], C1[N * N], next[4 * N * N];
    for (int i = 0; i < N * N; i++)
        A[i] = frand(), B[i] = frand();
    for (int i = 0; i < 4 * N * N; i++)
        next[i] = i % RECUR_AHEAD_LINE ? 1000.0f : 1.0f;
    const float *rows[1] = {next};
    const size_t n[1] = {4 * N * N}, lines = n[0] / RECUR_AHEAD_LINE;
    static const int flag_sets[] = {0, RECUR_MM_A_LOWER, RECUR_MM_C_LOWER, RECUR_MM_C_UPPER};
    for (int f = 0; f < 4; f++) {
        const int flags = flag_sets[f], diag = flags == RECUR_MM_C_UPPER ? -1 : 0;
        recur__ahead ah;
        recur__ahead_set(&ah, rows, n, 1, 0);
        memset(C0, 0, sizeof C0);
        memset(C1, 0, sizeof C1);
        recur__mm(N, N, N, 0.5f, A, N, 1, B, N, 0.0f, C0, N, flags, diag);
        const int bound = recur__mm_ahead_bind(&ah);
        recur__mm(N, N, N, 0.5f, A, N, 1, B, N, 0.0f, C1, N, flags, diag);
        recur__mm_ahead_bind(NULL);
        cr_assert_eq(memcmp(C0, C1, sizeof C0), 0, "flags %d: prefetching changed C", flags);
        const float rest = recur__ahead_rest(&ah);
        if (bound) /* AVX-512: a line every second term of every tile, the k loop of 64 */
            cr_assert(rest < (float)lines, "flags %d: nothing drawn", flags);
        else
            cr_assert_eq(rest, (float)lines, "flags %d: an unbound set was drawn on", flags);
        /* the binding is gone: another product draws nothing */
        recur__mm(N, N, N, 0.5f, A, N, 1, B, N, 0.0f, C1, N, flags, diag);
        cr_assert_eq(recur__ahead_rest(&ah), rest);
    }
}
#endif
