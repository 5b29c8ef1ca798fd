/* test_chunk_mm_portable.c — recur__mm as machines without AVX-512 run it (RECUR_MM_PORTABLE:
 * OpenBLAS sgemm on rectangles, triangles through a thread-local scratch, the plain loop when the
 * scratch cannot be had), compiled in here from core/chunk_mm.c so its statics can be reached.
 *
 * Runs every test of test_chunk_mm.c, then: every flag combination x diagonal shifts x A layouts
 * (row-major, transposed, neither stride 1) x odd sizes from 1 up past the triangle split, both
 * betas, against float64 (one_case: NaN in C where beta = 0 and outside the triangle, NaN in A
 * above its diagonal); proof that sgemm did the work (calls counted); and the same cases in a
 * thread whose scratch allocation fails, which must stay exact without calling sgemm.
 */
#define RECUR_MM_PORTABLE 1
#define CHUNK_MM_PORTABLE_TEST 1

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* every cblas_sgemm of chunk_mm.c comes through here */
static atomic_long sgemm_calls;
static void counted_sgemm(const enum CBLAS_ORDER o, const enum CBLAS_TRANSPOSE ta,
                          const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n,
                          const blasint k, const float alpha, const float *A, const blasint lda,
                          const float *B, const blasint ldb, const float beta, float *C,
                          const blasint ldc)
{
    atomic_fetch_add(&sgemm_calls, 1);
    cblas_sgemm(o, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
#define cblas_sgemm counted_sgemm

/* scratch allocation that fails on request (per thread) */
static _Thread_local int alloc_fails;
static void *test_alloc(size_t bytes)
{
    return alloc_fails ? NULL : aligned_alloc(64, bytes);
}
#define MM_SCRATCH_ALLOC(bytes) test_alloc(bytes)

#include "test_chunk_mm.c"

static const int sizes[] = {1, 2, 3, 5, 17, 63, 64, 65, 97, 131};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

/* Every flag set (including C_LOWER | C_UPPER: nothing written) with diag shifts from far below
 * to far above the matrix, three A layouts, both betas, random sizes from sizes[]. */
static int flag_sweep(int per_combo)
{
    static const int diags[] = {-140, -70, -9, -2, -1, 0, 1, 2, 7, 64, 150};
    int bad = 0;
    for (int flags = 0; flags < 8; flags++)
        for (int d = 0; d < (int)(sizeof diags / sizeof diags[0]); d++)
            for (int layout = 0; layout < 3; layout++)
                for (int b = 0; b < 2; b++)
                    for (int t = 0; t < per_combo; t++) {
                        const int m = sizes[irand(NSIZES)], n = sizes[irand(NSIZES)];
                        const int k = sizes[irand(NSIZES)];
                        bad += one_case(m, n, k, flags, diags[d], layout, (float)b);
                    }
    return bad;
}

Test(chunk_mm_portable, every_flag_diag_layout_beta)
{
    atomic_store(&sgemm_calls, 0);
    const int bad = flag_sweep(3);
    cr_assert_eq(bad, 0, "%d bad entries", bad);
    cr_assert_gt(atomic_load(&sgemm_calls), 1000, "sgemm was called %ld times",
                 atomic_load(&sgemm_calls));
}

Test(chunk_mm_portable, size_one_and_odd_sizes)
{
    int bad = 0;
    for (int flags = 0; flags < 8; flags++)
        for (int diag = -3; diag <= 3; diag++)
            for (int layout = 0; layout < 3; layout++)
                for (int b = 0; b < 2; b++) {
                    bad += one_case(1, 1, 1, flags, diag, layout, (float)b);
                    bad += one_case(1, 7, 5, flags, diag, layout, (float)b);
                    bad += one_case(5, 1, 3, flags, diag, layout, (float)b);
                    bad += one_case(3, 5, 1, flags, diag, layout, (float)b);
                    bad += one_case(7, 3, 0, flags, diag, layout, (float)b); /* k = 0: 0 or C */
                }
    cr_assert_eq(bad, 0, "%d bad entries", bad);
}

/* The chunk shapes go to sgemm, not to the plain loop. */
Test(chunk_mm_portable, chunk_shapes_use_sgemm)
{
    static const int flag_sets[] = {0, RECUR_MM_A_LOWER, RECUR_MM_C_LOWER, RECUR_MM_C_UPPER,
                                    RECUR_MM_A_LOWER | RECUR_MM_C_LOWER};
    for (int f = 0; f < 5; f++)
        for (int layout = 0; layout < 3; layout++) {
            atomic_store(&sgemm_calls, 0);
            cr_assert_eq(one_case(64, 64, 64, flag_sets[f], -1, layout, 0.0f), 0);
            cr_assert_gt(atomic_load(&sgemm_calls), 0, "flags %d layout %d", flag_sets[f], layout);
        }
}

static void *no_scratch_thread(void *arg)
{
    int *bad = arg;
    alloc_fails = 1; /* this thread's scratch is empty and cannot grow */
    *bad = flag_sweep(1);
    /* a case that needs scratch goes to the plain loop: no sgemm */
    atomic_store(&sgemm_calls, 0);
    *bad += one_case(64, 64, 64, RECUR_MM_A_LOWER | RECUR_MM_C_LOWER, 0, 0, 0.0f);
    *bad += one_case(33, 40, 20, 0, 0, 2, 1.0f);
    if (atomic_load(&sgemm_calls) != 0)
        *bad += 1000000;
    return NULL;
}

Test(chunk_mm_portable, scratch_allocation_failure_stays_exact)
{
    pthread_t th;
    int bad = -1;
    cr_assert_eq(pthread_create(&th, NULL, no_scratch_thread, &bad), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(bad, 0, "%d bad entries (1000000+: sgemm called without scratch)", bad);
}

/* The scratch of a thread that exits is freed by the key destructor, and a new thread grows its
 * own: run cases in a few short-lived threads (ASan builds would report a leak). */
static void *scratch_thread(void *arg)
{
    int *bad = arg;
    *bad = one_case(131, 97, 65, RECUR_MM_A_LOWER | RECUR_MM_C_LOWER, 3, 2, 1.0f);
    return NULL;
}

Test(chunk_mm_portable, scratch_per_thread)
{
    for (int r = 0; r < 4; r++) {
        pthread_t th;
        int bad = -1;
        cr_assert_eq(pthread_create(&th, NULL, scratch_thread, &bad), 0);
        cr_assert_eq(pthread_join(th, NULL), 0);
        cr_assert_eq(bad, 0);
    }
}
