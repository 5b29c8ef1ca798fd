/*
 * chunk_mm.c — recur__mm, the small dense products of the chunkwise kernels (chunk_mm.h).
 *
 *   C[i][j] = beta C[i][j] + alpha sum_p A(i,p) B[p][j]      (triangles per flags, see the header)
 *
 * AVX-512 path: C is cut into panels of 64 columns and blocks of MM_MR = 6 rows; each 6 x 64 tile
 * lives in 24 zmm accumulators while p runs over k (in blocks of MM_KB, so a B block of
 * MM_KB x 64 floats stays in L2 for every row block of a large product):
 *   acc[r][:] += A(i0 + r, p) * B[p][j0 : j0 + 64]      (one broadcast, four loads, 24 FMAs per p)
 * Column tails use masked loads and stores (never a byte past the matrix); row tails repeat row 0
 * in the unused accumulators and do not store them. Measured on 64 x 64 x 64 (Zen 4, 1 thread,
 * 2026-11-29): see docs/BENCHMARKS.md, Kernels.
 */
#include "chunk_mm.h"

#define MM_KB 256 /* k block: MM_KB x 64 floats of B (64 KiB) per panel */

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

#if defined(__AVX512F__) && !defined(RECUR_MM_PORTABLE)
#include <immintrin.h>

#define MM_MR 6

/* lanes l < keep, keep clamped to [0, 16] */
static inline __mmask16 lanes_below(int keep)
{
    return keep <= 0 ? 0 : keep >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << keep) - 1u);
}

/* One tile: rows [0, mr) of C (mr <= MM_MR), NV vectors of 16 columns (the last masked by mlast).
 * Terms p in [p0, pf) go to every row; p in [pf, pe) only to rows r with p <= tri + r. */
static inline __attribute__((always_inline)) void
mm_tile(const int NV, int mr, const float *A, ptrdiff_t ars, ptrdiff_t acs, int p0, int pf, int pe,
        int tri, const float *B, ptrdiff_t ldb, __mmask16 mlast, float *C, ptrdiff_t ldc,
        float alpha, int beta, int flags, int jt)
{
    __m512 acc[MM_MR][4];
    const float *a[MM_MR];
#pragma GCC unroll 6
    for (int r = 0; r < MM_MR; r++) {
        a[r] = A + (ptrdiff_t)(r < mr ? r : 0) * ars;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    }
    for (int p = p0; p < pf; p++) {
        const float *Bp = B + (ptrdiff_t)p * ldb;
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(mlast, Bp + 16 * v) : _mm512_loadu_ps(Bp + 16 * v);
        const ptrdiff_t pa = (ptrdiff_t)p * acs;
#pragma GCC unroll 6
        for (int r = 0; r < MM_MR; r++) {
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
        for (int r = 0; r < MM_MR; r++) {
            const __m512 x = _mm512_set1_ps(p <= tri + r ? a[r][pa] : 0.0f);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
        }
    }
    const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < MM_MR; r++) {
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

void recur__mm(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
               const float *B, ptrdiff_t ldb, float beta, float *C, ptrdiff_t ldc, int flags,
               int diag)
{
    for (int p0 = 0; p0 == 0 || p0 < k; p0 += MM_KB) {
        const int p1 = k - p0 < MM_KB ? k : p0 + MM_KB;
        const int first = p0 == 0, bt = first ? beta != 0.0f : 1;
        for (int j0 = 0; j0 < n; j0 += 64) {
            for (int i0 = 0; i0 < m; i0 += MM_MR) {
                const int mr = imin(MM_MR, m - i0), tri = i0 + diag;
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
                switch (nv) {
                case 1:
                    mm_tile(1, mr, Ai, ars, acs, p0, pf, pe, tri, Bj, ldb, ml, Cij, ldc, alpha, bt, flags, jlo);
                    break;
                case 2:
                    mm_tile(2, mr, Ai, ars, acs, p0, pf, pe, tri, Bj, ldb, ml, Cij, ldc, alpha, bt, flags, jlo);
                    break;
                case 3:
                    mm_tile(3, mr, Ai, ars, acs, p0, pf, pe, tri, Bj, ldb, ml, Cij, ldc, alpha, bt, flags, jlo);
                    break;
                default:
                    mm_tile(4, mr, Ai, ars, acs, p0, pf, pe, tri, Bj, ldb, ml, Cij, ldc, alpha, bt, flags, jlo);
                    break;
                }
            }
        }
    }
}

/* 16 x 16 in registers: r[t] (row t) in, r[i] (column i) out. Stage 1-2 gather, in every 128-bit
 * lane L of r[4g + j], column 4L + j of rows 4g..4g+3; stages 3-4 move the lanes into place. */
static inline void tr16(__m512 r[16])
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

void recur__transpose(const float *src, ptrdiff_t lds, int rows, int cols, float *dst, ptrdiff_t ldd)
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

#else /* portable: row by row, vectorisable over j */

void recur__mm(int m, int n, int k, float alpha, const float *A, ptrdiff_t ars, ptrdiff_t acs,
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

void recur__transpose(const float *src, ptrdiff_t lds, int rows, int cols, float *dst, ptrdiff_t ldd)
{
    for (int t0 = 0; t0 < rows; t0 += 16)
        for (int i0 = 0; i0 < cols; i0 += 16)
            for (int i = i0; i < imin(cols, i0 + 16); i++)
                for (int t = t0; t < imin(rows, t0 + 16); t++)
                    dst[(ptrdiff_t)i * ldd + t] = src[(ptrdiff_t)t * lds + i];
}

#endif
