/*
 * chunk_mm.h — the small dense products of the chunkwise kernels (private to core/).
 *
 *   C[i][j] = beta C[i][j] + alpha sum_p A(i,p) B[p][j]       i < m, j < n, p < k
 *
 * A(i,p) = A[i*ars + p*acs]: any strides, so a row-major matrix (ars = lda, acs = 1) and a
 * transposed view (ars = 1, acs = lda) cost the same and nothing is copied or packed. B and C are
 * row-major with row strides ldb and ldc. beta is 0 (C is not read: it may hold garbage) or 1.
 * flags (diag shifts the diagonal: row i of C sits at diagonal index i + diag):
 *   RECUR_MM_A_LOWER  A(i,p) = 0 for p > i + diag: those terms are skipped, A there is never read
 *   RECUR_MM_C_LOWER  only C[i][j] with j <= i + diag is computed and written
 *   RECUR_MM_C_UPPER  only C[i][j] with j >  i + diag is computed and written
 *
 * What runs where:
 *   AVX-512 path (isa.h; not when built with RECUR_MM_PORTABLE): a 6 x 64 register-blocked kernel (24 accumulators;
 *     2 or 4 rows for row tails) that reads both operands in place and skips the zero half of
 *     causal products, its tiles cut at 16-row diagonal bands (chunk_mm.c). Why not
 *     sgemm there: the chunkwise forms multiply 64 x 64 blocks thousands of times per call, and
 *     OpenBLAS pays per call (argument checks, kernel choice, packing), cannot read an operand
 *     with two non-unit strides, and cannot skip a triangle.
 *   AVX2 and portable paths (or built with -DRECUR_MM_PORTABLE): OpenBLAS cblas_sgemm on rectangles, triangles
 *     cut in row halves down to 16 rows and the small remainders through a thread-local scratch,
 *     because a plain C loop reaches only 14-21 GFLOP/s (chunkwise 3-5x slower) while sgemm brings
 *     a tuned kernel for every CPU. Same contract, same results up to rounding.
 *     Scratch: two buffers per calling thread, grown to the largest call, owned by the thread,
 *     freed at thread exit (pthread key destructor). If one cannot be allocated, or a stride is
 *     not one sgemm accepts, that call runs the plain loop: exact, never an error.
 * Chunkwise tokens/s at T = 16k (H 4, K = V = 64, chunk 64; Zen 4, OpenBLAS 0.3.21, 1 thread,
 * 2026-11-29), six mixers: AVX-512 kernel 100 %, portable sgemm path 89-94 %, the former plain
 * loop 17-20 %.
 */
#ifndef RECUR_CHUNK_MM_H
#define RECUR_CHUNK_MM_H

#include <stddef.h>

#define RECUR_MM_A_LOWER 1
#define RECUR_MM_C_LOWER 2
#define RECUR_MM_C_UPPER 4

void recur__mm(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
               const float *B, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc, int flags,
               int diag);

/* The next chunk's lines for the products to prefetch while they compute (chunk_ahead.h), this
 * thread's calls from now on; NULL: none. Returns 1 where they do (the AVX-512 path: each tile up
 * to one line every second term), 0 where they do not (ah is then not used: the caller steps
 * through it itself or touches it). Prefetching changes no result. */
struct recur__ahead;
int recur__mm_ahead_bind(struct recur__ahead *ah);

/* dst[i][t] = src[t][i] for t < rows, i < cols; src row stride lds, dst row stride ldd. */
void recur__transpose(const float *src, ptrdiff_t lds, int rows, int cols, float *dst, ptrdiff_t ldd);

/* (I + A) U = R in place on U [c][V] (row stride V): A strictly lower (unit lower triangular
 * I + A), A[t][s] at B[t*ldb + s]; B's diagonal and upper triangle are never read. The WY/UT
 * solve of the delta rules' chunkwise forms (delta_rule.c, generalized_delta.c). */
void recur__solve_unit_lower(int c, int V, const float *B, ptrdiff_t ldb, float *U);

/* Read one float of every cache line of a[0, n), front to back; returns their sum (store it in a
 * volatile so the loads stay). A chunk's rows for all heads are one contiguous block; read this
 * way the hardware prefetcher streams it into L2 at full bandwidth, whereas the per-head reads
 * that follow (K floats every H K) stalled on every line: +12 % chunkwise tokens/s at T = 16k
 * (2026-11-29; software prefetch of the same lines, in one burst or spread over the step,
 * changed nothing on this machine).
 * Re-measured 2026-12-02 (issue 18; thread CPU time, T = 1k and the long T alternating in one
 * process, load 10-14, EPYC with AVX-512 and 1 MiB L2, retention unless named): at T = 16k the
 * chunkwise forms of all seven mixers run at 0.94-1.00x their T = 1k rate, so nothing is left to
 * stream there on this host. With inputs far beyond its L3 (T = 128k, 512 MB of q k v o) they
 * run at 0.86-0.91x (perf: the lost time is the touch itself and the first stores to o's rows
 * in recur__mm). None of these did better in the same runs: software prefetch of the next
 * chunk's q k v (and o with write intent) in one burst before each head, 0.80-0.87x; the same
 * drained 24 lines per 6 x 64 tile inside recur__mm, 0.84-0.85x (the touch shrank, the products
 * slowed by more, probably as the prefetches held the L1 miss buffers that the products' L2
 * reads need); touching o's rows as well, 0.85-0.87x.
 * Re-measured 2026-12-02 16:25-17:15 (issue 18, T = 1k vs 16k, thread CPU time, load 2-8): no
 * chunkwise call of the seven mixers takes a page fault at T = 16k (getrusage per call), so the
 * T = 16k gap is not first touch. Prefetching the next chunk's q k v (g) in place of this touch,
 * spread over six points of each head's step: prefetcht0 (also with o's rows, write intent) and
 * prefetcht2 ran 5-20 % slower at T = 16k in alternated runs, prefetcht1 within the noise. Ratios of T = 16k to T = 1k moved between
 * 0.76 and 1.31 from run to run at load 2-3 (the same build), so none of this is a quiet verdict.
 * What the gap was (17:30, load 4-6): the bench, not the kernels. With the chunkwise form run alone
 * (one call after another, as a prefill calls it) on operands in 2 MiB pages (as the server's
 * workspace), T = 16k / T = 1k was 0.93-1.01 for all seven; the same kernels gave 0.64-0.83 with the
 * forms alternated call by call (the parallel form's T x T scores between two chunkwise calls) and
 * 0.83-0.98 alone on 4 KiB pages (the TLB). section_kernels.py measures the target the first way.
 * 2026-12-03: the per-key forms (GLA per-key gate, RWKV-7) prefetch the next chunk in small steps
 * inside their diagonal loops instead (chunk_ahead.h: 16-24 lines a step, not bursts of hundreds);
 * this touch is left for the others and for what was not prefetched.
 * 2026-12-03 (later): on AVX-512 the products prefetch the next chunk (recur__mm_ahead_bind), one
 * line every second term of a tile's k loop rather than a burst per tile, with o's rows: the
 * seven chunkwise mixers faster at both lengths, most at T = 16k (chunk_ahead.h has the figures). */
static inline float recur__touch(const float *a, size_t n)
{
    float acc = 0.0f;
    for (size_t i = 0; i < n; i += 16)
        acc += a[i];
    return acc;
}

#endif /* RECUR_CHUNK_MM_H */
