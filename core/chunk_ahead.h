/*
 * chunk_ahead.h — the next chunk's rows (inputs and the output o), brought in while the current
 * chunk computes (private to core/).
 *
 * The chunkwise forms go chunk by chunk, heads inner; a chunk's rows of all heads are one
 * contiguous block of each input and of o. Each chunk used to begin by touching its input rows
 * (recur__touch, chunk_mm.h): at T = 16k a pass that waited on DRAM, and even on cached rows one
 * that ran at its serial add chain (~3 cycles a line). Now, during a chunk, the next chunk's
 * lines are prefetched a few at a time, spread over the chunk's work, and the next chunk touches
 * only what was not prefetched (the first chunk: all of it):
 *   AVX-512 (isa.h): the products draw on the set (recur__mm_ahead_bind, chunk_mm.h): each
 *     6 x 64 tile prefetches up to one line every second term of its k loop, so the prefetches
 *     overlap the FMAs and never hold many of the L1 miss buffers at once. o is in the set: its
 *     lines come in before the products write them (beta 0), not on the first store.
 *   other paths (the products are sgemm calls): the mixers' own per-row loops step through it
 *     (gated_linear.c key_decays and diag_per_key, the feature map in chunk_step;
 *     generalized_delta.c gdr_diag), a few lines a step.
 * Prefetching only brings lines into cache: no arithmetic changes, results are bit-identical.
 * Measured (2026-12-03, one mixer called alone, thread CPU time, GFLOP/s at the median call,
 * load 3.2, alternated builds): retention T = 1k / 16k 104.1 / 96.0 -> 105.6 / 105.2, GLA
 * per-key 103.7 / 88.8 -> 107.5 / 105.7; bench_kernels, all seven chunkwise mixers, 8 alternated
 * rounds at load 3.4-3.7: after / before per round, median, 1.02-1.16 at T = 1k and 1.01-1.14 at
 * T = 16k. A line every term or every fourth term instead of every second: no better (retention
 * T = 16k, best call 99.8 / 106.7 / 102.7 GFLOP/s for 1 / 2 / 4). So handed out, the products
 * cover the whole next chunk (per-key GLA: all but 2 %, its scores run partly outside
 * recur__mm), and recur__ahead_rest reads only the first chunk. Bursts (one step per row of a
 * loop with little arithmetic, e.g. the scalar gate's row scaling: 16 lines a row) ran at DRAM
 * speed with the miss buffers full: slower than the touch at T = 16k; the per-key rows' steps at
 * T = 16k doubled key_decays' time (perf), which is why the products take over on AVX-512.
 *
 *   recur__ahead_set(ah, rows, n, na, points): the na <= RECUR_AHEAD_MAX arrays rows[j][0, n[j])
 *     (floats), handed out array by array, front to back: by `points` calls of recur__ahead_step
 *     (more calls: the rest do nothing; fewer: recur__ahead_rest reads what is left) or by
 *     recur__ahead_take.
 *   recur__ahead_chunk(ah, in, is_v, na, T, H, K, V, t0, C, points): recur__ahead_set for the
 *     rows of the chunk at t0 of na [T][H][K] (or [T][H][V]) arrays.
 *   recur__ahead_take(ah, &p, lines): the next up to `lines` lines, all of one array, from *p;
 *     returns how many (0: nothing left).
 *   recur__ahead_step(ah): prefetch the next points-th part of the lines; ah NULL: nothing.
 *   recur__ahead_rest(ah): read one float of every line not yet handed out, front to back
 *     (recur__touch); returns their sum (store it in a volatile so the loads stay).
 */
#ifndef RECUR_CHUNK_AHEAD_H
#define RECUR_CHUNK_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "chunk_mm.h" /* recur__touch */

#define RECUR_AHEAD_MAX 7 /* RWKV-7: q k v o g a b */
#define RECUR_AHEAD_LINE 16 /* floats per 64-byte line */

typedef struct recur__ahead {
    const float *rows[RECUR_AHEAD_MAX];
    size_t n[RECUR_AHEAD_MAX]; /* floats of each array */
    int na;
    int j;        /* the array being handed out */
    size_t pos;   /* floats of array j handed out (a multiple of a line) */
    size_t per;   /* lines per step */
} recur__ahead;

static inline void recur__ahead_set(recur__ahead *ah, const float *const *rows, const size_t *n,
                                    int na, size_t points)
{
    size_t lines = 0;
    ah->na = na;
    ah->j = 0;
    ah->pos = 0;
    for (int j = 0; j < na; j++) {
        ah->rows[j] = rows[j];
        ah->n[j] = n[j];
        lines += (n[j] + RECUR_AHEAD_LINE - 1) / RECUR_AHEAD_LINE;
    }
    ah->per = points ? (lines + points - 1) / points : lines;
}

/* recur__ahead_set for one chunk of a sequence: the rows [t0, t0 + C) (clipped to T, none when
 * t0 >= T) of the na arrays in[j], each [T][H][K] floats, or [T][H][V] where is_v[j]. */
static inline void recur__ahead_chunk(recur__ahead *ah, const float *const *in, const unsigned char *is_v,
                                      int na, int64_t T, int64_t H, int64_t K, int64_t V, int64_t t0,
                                      int64_t C, size_t points)
{
    const int64_t n = t0 < T ? (T - t0 < C ? T - t0 : C) : 0;
    const float *rows[RECUR_AHEAD_MAX];
    size_t len[RECUR_AHEAD_MAX];
    for (int j = 0; j < na; j++) {
        const int64_t width = is_v[j] ? H * V : H * K;
        rows[j] = n ? in[j] + (size_t)t0 * (size_t)width : in[j]; /* no pointer past the end */
        len[j] = (size_t)n * (size_t)width;
    }
    recur__ahead_set(ah, rows, len, n ? na : 0, points);
}

static inline int recur__ahead_take(recur__ahead *ah, const float **p, int lines)
{
    while (ah->j < ah->na && ah->pos >= ah->n[ah->j]) {
        ah->j++;
        ah->pos = 0;
    }
    if (ah->j >= ah->na || lines <= 0)
        return 0;
    const size_t left = (ah->n[ah->j] - ah->pos + RECUR_AHEAD_LINE - 1) / RECUR_AHEAD_LINE;
    const int got = left < (size_t)lines ? (int)left : lines;
    *p = ah->rows[ah->j] + ah->pos;
    ah->pos += (size_t)got * RECUR_AHEAD_LINE;
    return got;
}

static inline void recur__ahead_step(recur__ahead *ah)
{
    if (!ah)
        return;
    const float *p;
    for (size_t want = ah->per; want > 0;) {
        const int got = recur__ahead_take(ah, &p, want < 64 ? (int)want : 64);
        if (!got)
            return;
        for (int i = 0; i < got; i++)
            __builtin_prefetch(p + (size_t)i * RECUR_AHEAD_LINE, 0, 3);
        want -= (size_t)got;
    }
}

static inline float recur__ahead_rest(const recur__ahead *ah)
{
    float acc = 0.0f;
    for (int j = ah->j; j < ah->na; j++) {
        const size_t from = j == ah->j ? ah->pos : 0;
        if (from < ah->n[j])
            acc += recur__touch(ah->rows[j] + from, ah->n[j] - from);
    }
    return acc;
}

#endif /* RECUR_CHUNK_AHEAD_H */
