/*
 * chunk_mm.c — recur__mm, the small dense products of the chunkwise kernels (chunk_mm.h).
 *
 *   C[i][j] = beta C[i][j] + alpha sum_p A(i,p) B[p][j]      (triangles per flags, see the header)
 *
 * AVX-512 path: C is cut into panels of 64 columns and blocks of MM_MR = 6 rows; each 6 x 64 tile
 * lives in 24 zmm accumulators while p runs over k (in blocks of MM_KB, so a B block of
 * MM_KB x 64 floats stays in L2 for every row block of a large product):
 *   acc[r][:] += A(i0 + r, p) * B[p][j0 : j0 + 64]      (one broadcast, four loads, 24 FMAs per p)
 * Column tails use masked loads and stores (never a byte past the matrix). A tile of mr < 6 rows
 * runs a kernel of 2 or 4 accumulator rows (mr rounded up; an odd row repeats row 0 and is not
 * stored). Causal products (any flag) cut their rows where a band of 16 diagonal indices
 * (i + diag = 16 q; C upper: i + diag + 1 = 16 q) starts, 6 + 6 + 4 rows per band: a tile's
 * columns then end (C lower) or start (C upper) at a whole vector, and no tile pays for rows
 * past the band. Per element the terms and their order
 * are those of any other tiling, so the results do not depend on it. 64 x 64 x 64 causal, work
 * over the triangle (rows x columns or rows x terms computed / 2080): scores (C lower, diag 0)
 * 2784 -> 2560, A V (A lower) 2364 -> 2224, C upper diag -1 2688 -> 2560; GFLOP/s on the
 * triangle, thread CPU time, alternated builds (2026-12-03, load 1.9): scores 77-80 -> 89,
 * A V 91-93 -> 97-98, dense 64^3 102-107 -> 108-110.
 * Measured on 64 x 64 x 64 (Zen 4, 1 thread, 2026-11-29): see docs/BENCHMARKS.md, Kernels.
 *
 * Portable path (no AVX-512, or RECUR_MM_PORTABLE): cblas_sgemm, which brings its own
 * register-blocked kernel for every CPU, on rectangles that keep the contract:
 *   A read in place as A (acs = 1) or A^T (ars = 1); any other strides: copied, contiguous;
 *   A lower: C = A[:, 0:pf] B[0:pf] in place (terms every row has) + the triangle of A copied
 *     into a scratch with zeros above its diagonal (A there is never read);
 *   C lower / upper: the rectangle every row writes, in place; the triangle's square computed
 *     into a scratch (beta 0) and only its triangle copied (beta 0) or added (beta 1) to C;
 *   triangles taller than MM_TRI_ROWS are cut in row halves first.
 * The scratch is thread-local and reserved before C is touched; if it cannot be allocated (or a
 * stride is one sgemm refuses) the call runs the plain loop instead, exact but 3-5x slower.
 */
#include "chunk_mm.h"
#include "chunk_ahead.h"
#include "isa.h"
#include "mixer.h"

#define MM_KB 256 /* k block: MM_KB x 64 floats of B (64 KiB) per panel */

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

#if (defined(__x86_64__) || defined(__i386__)) && !defined(RECUR_MM_PORTABLE)
#define MM_AVX512 1
#include <immintrin.h>

/* every function of this path is compiled for AVX-512 whatever the build's -march (isa.h) */
#define FN512 __attribute__((target(RECUR_TARGET_AVX512)))

#define MM_MR 6

/* the next chunk's lines the tiles prefetch (recur__mm_ahead_bind; chunk_ahead.h) */
static _Thread_local recur__ahead *mm_ahead;

/* lanes l < keep, keep clamped to [0, 16] */
static inline FN512 __mmask16 lanes_below(int keep)
{
    return keep <= 0 ? 0 : keep >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << keep) - 1u);
}

/* One tile: rows [0, mr) of C (mr <= MR <= MM_MR accumulator rows), NV vectors of 16 columns (the last masked by mlast).
 * Terms p in [p0, pf) go to every row; p in [pf, pe) only to rows r with p <= tri + r.
 * Every second term of the first loop also prefetches one line of the npl at pl (chunk_ahead.h). */
static inline __attribute__((always_inline)) FN512 void
mm_tile(const int MR, const int NV, int mr, const float *A, ptrdiff_t ars, ptrdiff_t acs, int p0, int pf, int pe,
        int tri, const float *B, ptrdiff_t ldb, __mmask16 mlast, float *C, ptrdiff_t ldc,
        float alpha, int beta, int flags, int jt, const float *pl, int npl)
{
    __m512 acc[MM_MR][4]; /* fixed sizes (MR bounds the loops): a VLA would live in memory */
    const float *a[MM_MR];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        a[r] = A + (ptrdiff_t)(r < mr ? r : 0) * ars;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    }
    for (int p = p0; p < pf; p++) {
        if (npl > 0 && ((p - p0) & 1) == 0) {
            __builtin_prefetch(pl, 0, 3);
            pl += RECUR_AHEAD_LINE;
            npl--;
        }
        const float *Bp = B + (ptrdiff_t)p * ldb;
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(mlast, Bp + 16 * v) : _mm512_loadu_ps(Bp + 16 * v);
        const ptrdiff_t pa = (ptrdiff_t)p * acs;
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512 x = _mm512_set1_ps(a[r][pa]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
        }
    }
    for (int p = pf; p < pe; p++) { /* the diagonal of a lower-triangular A */
        const float *Bp = B + (ptrdiff_t)p * ldb;
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(mlast, Bp + 16 * v) : _mm512_loadu_ps(Bp + 16 * v);
        const ptrdiff_t pa = (ptrdiff_t)p * acs;
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512 x = _mm512_set1_ps(p <= tri + r ? a[r][pa] : 0.0f);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
        }
    }
    const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        if (r >= mr)
            break;
        float *Cr = C + (ptrdiff_t)r * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __mmask16 mk = v == NV - 1 ? mlast : (__mmask16)0xffff;
            const int below = tri + r - (jt + 16 * v) + 1; /* lanes with j <= i + diag */
            if (flags & RECUR_MM_C_LOWER)
                mk &= lanes_below(below);
            if (flags & RECUR_MM_C_UPPER)
                mk &= (__mmask16)~lanes_below(below);
            __m512 x = _mm512_mul_ps(al, acc[r][v]);
            if (beta)
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, Cr + 16 * v));
            _mm512_mask_storeu_ps(Cr + 16 * v, mk, x);
        }
    }
}

static FN512 void mm_avx512(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                           const float *B, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc, int flags,
                           int diag)
{
    const int causal = (flags & (RECUR_MM_A_LOWER | RECUR_MM_C_LOWER | RECUR_MM_C_UPPER)) != 0;
    for (int p0 = 0; p0 == 0 || p0 < k; p0 += MM_KB) {
        const int p1 = k - p0 < MM_KB ? k : p0 + MM_KB;
        const int first = p0 == 0, bt = first ? beta != 0.0f : 1;
        for (int j0 = 0; j0 < n; j0 += 64) {
            for (int i0 = 0, mr; i0 < m; i0 += mr) {
                const int tri = i0 + diag;
                mr = imin(MM_MR, m - i0);
                if (causal) /* tiles end where a band of 16 diagonal indices ends: 6, 6, 4 rows
                             * (C upper: where its first written column tri + 1 is a multiple of 16) */
                    mr = imin(mr, 16 - ((flags & RECUR_MM_C_UPPER ? tri + 1 : tri) & 15));
                int jlo = j0, jhi = imin(n, j0 + 64);
                if (flags & RECUR_MM_C_LOWER)
                    jhi = imin(jhi, tri + mr);
                if ((flags & RECUR_MM_C_UPPER) && tri + 1 - j0 > 0)
                    jlo = j0 + (tri + 1 - j0) / 16 * 16;
                if (jhi <= jlo)
                    continue;
                int pf = p1, pe = p1;
                if (flags & RECUR_MM_A_LOWER) {
                    pe = imax(p0, imin(p1, tri + mr));
                    pf = imax(p0, imin(pe, tri + 1));
                }
                if (pe == p0 && bt) /* nothing to add */
                    continue;
                const int w = jhi - jlo, nv = (w + 15) / 16;
                const __mmask16 ml = lanes_below(w - 16 * (nv - 1));
                const float *Ai = A + (ptrdiff_t)i0 * ars;
                const float *Bj = B + jlo;
                float *Cij = C + (ptrdiff_t)i0 * ldc + jlo;
                const int MR = (mr + 1) / 2; /* accumulator rows: mr rounded up to 2, 4 or 6 */
                const float *pl = NULL;
                const int npl = mm_ahead ? recur__ahead_take(mm_ahead, &pl, (pf - p0) / 2) : 0;
#define MM_TILE(R, V)                                                                                \
    mm_tile(R, V, mr, Ai, ars, acs, p0, pf, pe, tri, Bj, ldb, ml, Cij, ldc, alpha, bt, flags, jlo, pl, npl)
#define MM_TILES(V)                                                                                  \
    (MR == 3 ? MM_TILE(6, V) : MR == 2 ? MM_TILE(4, V) : MM_TILE(2, V))
                switch (nv) {
                case 1:
                    MM_TILES(1);
                    break;
                case 2:
                    MM_TILES(2);
                    break;
                case 3:
                    MM_TILES(3);
                    break;
                default:
                    MM_TILES(4);
                    break;
                }
#undef MM_TILES
#undef MM_TILE
            }
        }
    }
}

/* 16 x 16 in registers: r[t] (row t) in, r[i] (column i) out. Stage 1-2 gather, in every 128-bit
 * lane L of r[4g + j], column 4L + j of rows 4g..4g+3; stages 3-4 move the lanes into place. */
static inline FN512 void tr16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
        r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

static FN512 void transpose_avx512(const float *src, ptrdiff_t lds, int rows, int cols, float *dst,
                                  ptrdiff_t ldd)
{
    for (int t0 = 0; t0 < rows; t0 += 16)
        for (int i0 = 0; i0 < cols; i0 += 16) {
            const int nt = imin(16, rows - t0), ni = imin(16, cols - i0);
            const __mmask16 mi = lanes_below(ni), mt = lanes_below(nt);
            __m512 r[16];
            for (int t = 0; t < 16; t++)
                r[t] = t < nt ? _mm512_maskz_loadu_ps(mi, src + (ptrdiff_t)(t0 + t) * lds + i0)
                              : _mm512_setzero_ps();
            tr16(r);
            for (int i = 0; i < ni; i++)
                _mm512_mask_storeu_ps(dst + (ptrdiff_t)(i0 + i) * ldd + t0, mt, r[i]);
        }
}

#endif /* MM_AVX512 */

/* ---------------------------------------------------------------- portable: OpenBLAS sgemm on
 * rectangles, triangles through a thread-local scratch (every path but AVX-512) */

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Triangles (of C, or of a lower A) taller than this are split in two row halves, recursively:
 * each half is a rectangle sgemm reads and writes in place plus a triangle half as tall, so less
 * of the zero / unwritten half is computed, at the price of more sgemm calls. 64 x 64 x 64 causal
 * (A lower, GFLOP/s on the useful half) at 64 / 32 / 16 / 8: 50 / 66 / 76 / 78; chunkwise at
 * T = 16k fastest at 16 (Zen 4, OpenBLAS 0.3.21, 1 thread, 2026-11-29). */
#define MM_TRI_ROWS 16

/* The plain loop, with recur__mm's contract: the fallback when the scratch cannot be allocated
 * or a stride is one cblas_sgemm does not accept (row by row, vectorisable over j). */
static void mm_loop(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                    const float *B, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc, int flags,
                    int diag)
{
    for (int i = 0; i < m; i++) {
        const int tri = i + diag;
        int jlo = 0, jhi = n;
        if (flags & RECUR_MM_C_LOWER)
            jhi = imin(n, tri + 1);
        if (flags & RECUR_MM_C_UPPER)
            jlo = imax(0, tri + 1);
        if (jhi <= jlo)
            continue;
        const int pe = flags & RECUR_MM_A_LOWER ? imax(0, imin(k, tri + 1)) : k;
        float *restrict Ci = C + (ptrdiff_t)i * ldc;
        if (beta == 0.0f)
            for (int j = jlo; j < jhi; j++)
                Ci[j] = 0.0f;
        for (int p = 0; p < pe; p++) {
            const float a = alpha * A[(ptrdiff_t)i * ars + (ptrdiff_t)p * acs];
            const float *restrict Bp = B + (ptrdiff_t)p * ldb;
            for (int j = jlo; j < jhi; j++)
                Ci[j] += a * Bp[j];
        }
    }
}

/* ---- scratch: two buffers per thread, grown to the largest call seen, never shrunk.
 * Slot MM_SA holds a copy of (part of) A, slot MM_SC a block of C; one call needs each at most
 * once at a time. The thread owns them; a pthread key destructor frees them when the thread
 * exits (the main thread's stay until process exit). If the key cannot be created, a thread
 * that exits leaks its two buffers: no crash, no wrong result. Allocation may be a test hook. */
#ifndef MM_SCRATCH_ALLOC
#define MM_SCRATCH_ALLOC(bytes) aligned_alloc(64, (bytes))
#endif
enum { MM_SA, MM_SC };
typedef struct {
    float *p;
    size_t cap; /* floats */
} mm_slot;
static _Thread_local mm_slot mm_scratch[2];
static pthread_once_t mm_once = PTHREAD_ONCE_INIT;
static pthread_key_t mm_key;
static int mm_key_ok;

static void mm_scratch_free(void *arg)
{
    mm_slot *s = arg;
    for (int i = 0; i < 2; i++) {
        free(s[i].p);
        s[i].p = NULL;
        s[i].cap = 0;
    }
}

static void mm_key_create(void)
{
    mm_key_ok = pthread_key_create(&mm_key, mm_scratch_free) == 0;
}

/* slot's buffer with room for n floats, or NULL (the old buffer is kept then) */
static float *mm_reserve(int slot, size_t n)
{
    mm_slot *s = &mm_scratch[slot];
    if (n <= s->cap)
        return s->p;
    if (n > ((size_t)-1 >> 3))
        return NULL;
    const size_t cap = (n + 1023) & ~(size_t)1023; /* whole 4 KiB, a multiple of 64 bytes */
    float *p = MM_SCRATCH_ALLOC(cap * sizeof(float));
    if (!p)
        return NULL;
    free(s->p);
    s->p = p;
    s->cap = cap;
    pthread_once(&mm_once, mm_key_create);
    if (mm_key_ok)
        pthread_setspecific(mm_key, mm_scratch);
    return p;
}

/* ---- rectangles. A's layout, fixed per call: read in place as op(A) = A (row-major, lda = ars)
 * or A^T (lda = acs), or copied into slot MM_SA. */
enum { MM_NOTRANS, MM_TRANS, MM_COPY };

typedef struct {
    const float *A;
    ptrdiff_t ars, acs;
    const float *B;
    ptrdiff_t ldb;
    ptrdiff_t ldc;
    int k, mode;
    float alpha;
} mm_args;

static void mm_sgemm(const mm_args *x, int m, int n, int k, const float *A, int tr, ptrdiff_t lda,
                     const float *B, float beta, float *C, ptrdiff_t ldc)
{
    cblas_sgemm(CblasRowMajor, tr ? CblasTrans : CblasNoTrans, CblasNoTrans, m, n, k, x->alpha, A,
                (int)lda, B, (int)x->ldb, beta, C, (int)ldc);
}

/* dst[r][q] = A(i0 + r, p0 + q) for q <= i0 + r + diag - p0 when lower, else 0 (A unread there);
 * r < rows, q < w; dst row-major with row stride w */
static void copy_a(const mm_args *x, int i0, int rows, int p0, int w, int lower, int diag, float *dst)
{
    for (int r = 0; r < rows; r++) {
        const int q1 = lower ? imax(0, imin(w, i0 + r + diag - p0 + 1)) : w;
        const float *a = x->A + (ptrdiff_t)(i0 + r) * x->ars + (ptrdiff_t)p0 * x->acs;
        float *d = dst + (size_t)r * (size_t)w;
        if (x->acs == 1)
            memcpy(d, a, (size_t)q1 * sizeof(float));
        else
            for (int q = 0; q < q1; q++)
                d[q] = a[(ptrdiff_t)q * x->acs];
        memset(d + q1, 0, (size_t)(w - q1) * sizeof(float));
    }
}

/* C[r][j] = beta C[r][j] + alpha sum_p A(i0 + r, p) B[p][j0 + j], r < m, j < n, with A lower
 * (p <= i0 + r + diag) when lower; beta 0 or 1, C not read when 0. Full rectangle of C. */
static void mm_rect(const mm_args *x, int i0, int m, int j0, int n, float beta, float *C,
                    ptrdiff_t ldc, int lower, int diag)
{
    if (m <= 0 || n <= 0)
        return;
    const int k = x->k;
    /* row i0 + r has terms p < i0 + r + diag + 1: all of [0, pf) for every row, none past pe */
    const int pe = lower ? imax(0, imin(k, i0 + m + diag)) : k;
    const int pf = lower ? imax(0, imin(pe, i0 + diag + 1)) : pe;
    if (pe - pf > MM_TRI_ROWS && m > 1) { /* a tall triangle of A: two row halves */
        const int h = m / 2;
        mm_rect(x, i0, h, j0, n, beta, C, ldc, lower, diag);
        mm_rect(x, i0 + h, m - h, j0, n, beta, C + (ptrdiff_t)h * ldc, ldc, lower, diag);
        return;
    }
    const float *B = x->B + j0;
    if (pf > 0) { /* C = beta C + alpha A[:, 0:pf] B[0:pf]   (every row has all these terms) */
        if (x->mode == MM_COPY) {
            float *a = mm_scratch[MM_SA].p;
            copy_a(x, i0, m, 0, pf, 0, 0, a);
            mm_sgemm(x, m, n, pf, a, 0, pf, B, beta, C, ldc);
        } else {
            const float *a = x->A + (ptrdiff_t)i0 * x->ars;
            mm_sgemm(x, m, n, pf, a, x->mode == MM_TRANS, x->mode == MM_TRANS ? x->acs : x->ars, B,
                     beta, C, ldc);
        }
        beta = 1.0f;
    }
    if (pe > pf) { /* the triangle of A: rows r >= it have terms in [pf, pe); A copied, zeros above */
        const int it = imax(0, pf - diag - i0), w = pe - pf;
        if (beta == 0.0f) /* rows with no term at all */
            for (int r = 0; r < it; r++)
                memset(C + (ptrdiff_t)r * ldc, 0, (size_t)n * sizeof(float));
        float *a = mm_scratch[MM_SA].p;
        copy_a(x, i0 + it, m - it, pf, w, 1, diag, a);
        mm_sgemm(x, m - it, n, w, a, 0, w, B + (ptrdiff_t)pf * x->ldb, beta,
                 C + (ptrdiff_t)it * ldc, ldc);
    } else if (pf == 0 && beta == 0.0f) { /* no term in any row */
        for (int r = 0; r < m; r++)
            memset(C + (ptrdiff_t)r * ldc, 0, (size_t)n * sizeof(float));
    }
}

/* C[r][j] = (beta C[r][j]) + S[r][j] where written(i0 + r, j0 + j): the triangle of a block */
static void put_tri(float *C, ptrdiff_t ldc, const float *S, int m, int n, int i0, int j0, int upper,
                    int diag, float beta)
{
    for (int r = 0; r < m; r++) {
        const int t = i0 + r + diag + 1 - j0; /* first column of the block past the diagonal */
        const int jlo = upper ? imax(0, t) : 0, jhi = upper ? n : imin(n, t);
        float *c = C + (ptrdiff_t)(i0 + r) * ldc + j0;
        const float *s = S + (size_t)r * (size_t)n;
        if (beta == 0.0f)
            for (int j = jlo; j < jhi; j++)
                c[j] = s[j];
        else
            for (int j = jlo; j < jhi; j++)
                c[j] += s[j];
    }
}

/* Rows [r0, r1) of a product whose C is a triangle (C_LOWER, or C_UPPER when upper):
 *   lower: row i writes j <= i + diag, so columns [0, r0 + diag + 1) are written by every row
 *          (in place) and [r0 + diag + 1, r1 + diag) form a square of which the rows write a part;
 *   upper: row i writes j > i + diag: columns [r1 + diag, n) by every row, [r0 + diag + 1,
 *          r1 + diag) in part.
 * The square is computed whole into slot MM_SC (beta 0) and only its triangle copied (beta 0)
 * or added (beta 1) to C: the other part of C is neither read nor written. */
static void mm_tri(const mm_args *x, int n, int r0, int r1, float beta, float *C, int upper,
                   int lower, int diag)
{
    if (upper)
        r1 = imin(r1, n - diag - 1); /* rows past it write nothing */
    else
        r0 = imax(r0, -diag);
    if (r1 <= r0)
        return;
    if (r1 - r0 > MM_TRI_ROWS) {
        const int mid = r0 + (r1 - r0) / 2;
        mm_tri(x, n, r0, mid, beta, C, upper, lower, diag);
        mm_tri(x, n, mid, r1, beta, C, upper, lower, diag);
        return;
    }
    const int j0 = imax(0, imin(n, r0 + diag + 1)), j1 = imax(j0, imin(n, r1 + diag));
    if (upper)
        mm_rect(x, r0, r1 - r0, j1, n - j1, beta, C + (ptrdiff_t)r0 * x->ldc + j1, x->ldc, lower, diag);
    else
        mm_rect(x, r0, r1 - r0, 0, j0, beta, C + (ptrdiff_t)r0 * x->ldc, x->ldc, lower, diag);
    /* the square: rows that write at least one of its columns */
    const int s0 = upper ? r0 : imax(r0, j0 - diag), s1 = upper ? imin(r1, j1 - diag - 1) : r1;
    if (j1 <= j0 || s1 <= s0)
        return;
    float *S = mm_scratch[MM_SC].p;
    mm_rect(x, s0, s1 - s0, j0, j1 - j0, 0.0f, S, j1 - j0, lower, diag);
    put_tri(C, x->ldc, S, s1 - s0, j1 - j0, s0, j0, upper, diag, beta);
}

static int stride_ok(ptrdiff_t ld, int need)
{
    return ld >= (need > 1 ? need : 1) && ld <= INT_MAX;
}

static void mm_blas(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                    const float *B, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc, int flags, int diag)
{
    if (m <= 0 || n <= 0)
        return;
    const int lower = (flags & RECUR_MM_A_LOWER) != 0;
    const int cl = (flags & RECUR_MM_C_LOWER) != 0, cu = (flags & RECUR_MM_C_UPPER) != 0;
    if (cl && cu) /* no entry is both */
        return;
    beta = beta != 0.0f ? 1.0f : 0.0f;
    /* a single row or a single term: that stride is never stepped, any value serves */
    if (m == 1)
        ars = acs == 1 ? k : ars, ldc = n;
    if (k == 1)
        acs = ars == 1 ? m : acs, ldb = n;
    if (k <= 0)
        ldb = n;
    mm_args x = {A, ars, acs, B, ldb, ldc, k, MM_COPY, alpha};
    if (acs == 1 && stride_ok(ars, k))
        x.mode = MM_NOTRANS;
    else if (ars == 1 && stride_ok(acs, m))
        x.mode = MM_TRANS;
    /* Reserve all the scratch first: once a part of C is written the call cannot start over. */
    size_t na = 0, nc = 0;
    if (x.mode == MM_COPY)
        na = (size_t)m * (size_t)imax(k, 0);
    else if (lower)
        na = (size_t)m * (size_t)imin(imax(k, 0), m);
    if (cl || cu)
        nc = (size_t)imin(m, MM_TRI_ROWS) * (size_t)imin(n, MM_TRI_ROWS);
    if (!stride_ok(ldb, n) || !stride_ok(ldc, n) || (na && !mm_reserve(MM_SA, na)) ||
        (nc && !mm_reserve(MM_SC, nc))) {
        mm_loop(m, n, k, alpha, A, ars, acs, B, ldb, beta, C, ldc, flags, diag);
        return;
    }
    if (cl || cu)
        mm_tri(&x, n, 0, m, beta, C, cu, lower, diag);
    else
        mm_rect(&x, 0, m, 0, n, beta, C, ldc, lower, diag);
}

static void transpose_plain(const float *src, ptrdiff_t lds, int rows, int cols, float *dst, ptrdiff_t ldd)
{
    for (int t0 = 0; t0 < rows; t0 += 16)
        for (int i0 = 0; i0 < cols; i0 += 16)
            for (int i = i0; i < imin(cols, i0 + 16); i++)
                for (int t = t0; t < imin(rows, t0 + 16); t++)
                    dst[(ptrdiff_t)i * ldd + t] = src[(ptrdiff_t)t * lds + i];
}

/* ---------------------------------------------------------------- dispatch (isa.h) */

void recur__mm(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
               const float *B, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc, int flags,
               int diag)
{
#ifdef MM_AVX512
    if (recur__isa() == RECUR_ISA_AVX512) {
        mm_avx512(m, n, k, alpha, A, ars, acs, B, ldb, beta, C, ldc, flags, diag);
        return;
    }
#endif
    mm_blas(m, n, k, alpha, A, ars, acs, B, ldb, beta, C, ldc, flags, diag);
}

int recur__mm_ahead_bind(recur__ahead *ah)
{
#ifdef MM_AVX512
    if (recur__isa() == RECUR_ISA_AVX512) {
        mm_ahead = ah;
        return ah != NULL;
    }
#endif
    (void)ah;
    return 0;
}

void recur__transpose(const float *src, ptrdiff_t lds, int rows, int cols, float *dst, ptrdiff_t ldd)
{
#ifdef MM_AVX512
    if (recur__isa() == RECUR_ISA_AVX512) {
        transpose_avx512(src, lds, rows, cols, dst, ldd);
        return;
    }
#endif
    transpose_plain(src, lds, rows, cols, dst, ldd);
}

/* Rows of the diagonal blocks of the forward substitution; the blocks below them are one
 * recur__mm each. */
#define SOLVE_NB 16

/* Blocked forward substitution:  U_J -= A[J, 0:J0] U[0:J0]  (one product), then inside J
 *   u_t -= sum_{J0 <= s < t} A[t][s] u_s,   t = J0+1 .. J1-1
 * with 16 columns of u_t held in a register while s runs. */
void recur__solve_unit_lower(int c, int V, const float *B, ptrdiff_t ldb, float *U)
{
    for (int J0 = 0; J0 < c; J0 += SOLVE_NB) {
        const int J1 = J0 + SOLVE_NB < c ? J0 + SOLVE_NB : c;
        if (J0 > 0)
            recur__mm(J1 - J0, V, J0, -1.0f, B + (size_t)J0 * ldb, ldb, 1, U, V, 1.0f,
                      U + (size_t)J0 * V, V, 0, 0);
        for (int t = J0 + 1; t < J1; t++) {
            const float *At = B + (size_t)t * ldb;
            float *Ut = U + (size_t)t * V;
            int j = 0;
            for (; j + 16 <= V; j += 16) {
                recur__v16 acc = recur__v16_load(Ut + j);
                for (int s = J0; s < t; s++)
                    acc -= At[s] * recur__v16_load(U + (size_t)s * V + j);
                recur__v16_store(Ut + j, acc);
            }
            for (; j < V; j++) {
                float x = Ut[j];
                for (int s = J0; s < t; s++)
                    x -= At[s] * U[(size_t)s * V + j];
                Ut[j] = x;
            }
        }
    }
}
