/*
 * chunk_ahead.h — the next chunk's input rows, brought in while the current chunk computes
 * (private to core/).
 *
 * The chunkwise forms go chunk by chunk, heads inner; a chunk's rows of all heads are one
 * contiguous block of each input. Each chunk used to begin by touching its rows (recur__touch,
 * chunk_mm.h): at T = 16k a pass that waited on DRAM (~7 % of a GLA per-key chunk), and even on
 * cached rows one that ran at its serial add chain (~3 cycles a line, ~3 % at T = 1k). Now the
 * per-key kernels (gated_linear.c key_decays, once per token and head; generalized_delta.c
 * gdr_diag) prefetch the next chunk's lines a few at a time, spread over the chunk's work, and the
 * next chunk touches only what was not prefetched: the first chunk all of it, and the mixers
 * without such a loop (a scalar gate, the delta rule) all of it, as before. A feature map
 * (linear attention's elu+1 or relu, gated_linear.c chunk_step) steps once per row it maps, at
 * the start of each head's step: linear attention chunkwise at T = 16k +6 % GFLOP/s by CPU time
 * (median of 3 alternated bench runs, load 2, 2026-12-03).
 *
 *   recur__ahead_set(ah, rows, n, na, points): the na <= RECUR_AHEAD_MAX arrays rows[j][0, n[j])
 *     (floats), to be drained over `points` calls of recur__ahead_step (more calls: the rest do
 *     nothing; fewer: recur__ahead_rest reads what is left).
 *   recur__ahead_chunk(ah, in, is_v, na, T, H, K, V, t0, C, points): recur__ahead_set for the
 *     rows of the chunk at t0 of na [T][H][K] (or [T][H][V]) inputs.
 *   recur__ahead_step(ah): prefetch the next lines of every array; ah NULL: nothing.
 *   recur__ahead_rest(ah): read one float of every line not yet prefetched, array by array,
 *     front to back (recur__touch); returns their sum (store it in a volatile so the loads stay).
 */
#ifndef RECUR_CHUNK_AHEAD_H
#define RECUR_CHUNK_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "chunk_mm.h" /* recur__touch */

#define RECUR_AHEAD_MAX 6 /* RWKV-7: q k v g a b */
#define RECUR_AHEAD_LINE 16 /* floats per 64-byte line */

typedef struct {
    const float *rows[RECUR_AHEAD_MAX];
    size_t n[RECUR_AHEAD_MAX]; /* floats of each array */
    int na;
    size_t pos;   /* floats of every array prefetched so far (a multiple of a line) */
    size_t top;   /* the longest array */
    size_t per;   /* floats per step, a multiple of a line */
} recur__ahead;

static inline void recur__ahead_set(recur__ahead *ah, const float *const *rows, const size_t *n,
                                    int na, size_t points)
{
    ah->na = na;
    ah->pos = ah->top = 0;
    for (int j = 0; j < na; j++) {
        ah->rows[j] = rows[j];
        ah->n[j] = n[j];
        ah->top = n[j] > ah->top ? n[j] : ah->top;
    }
    const size_t lines = (ah->top + RECUR_AHEAD_LINE - 1) / RECUR_AHEAD_LINE;
    ah->per = (points ? (lines + points - 1) / points : lines) * RECUR_AHEAD_LINE;
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
        rows[j] = in[j] + (size_t)t0 * (size_t)width;
        len[j] = (size_t)n * (size_t)width;
    }
    recur__ahead_set(ah, rows, len, n ? na : 0, points);
}

static inline void recur__ahead_step(recur__ahead *ah)
{
    if (!ah || ah->pos >= ah->top)
        return;
    const size_t end = ah->pos + ah->per;
    for (size_t i = ah->pos; i < end; i += RECUR_AHEAD_LINE)
        for (int j = 0; j < ah->na; j++)
            if (i < ah->n[j])
                __builtin_prefetch(ah->rows[j] + i, 0, 3);
    ah->pos = end;
}

static inline float recur__ahead_rest(const recur__ahead *ah)
{
    float acc = 0.0f;
    for (int j = 0; j < ah->na; j++)
        if (ah->pos < ah->n[j])
            acc += recur__touch(ah->rows[j] + ah->pos, ah->n[j] - ah->pos);
    return acc;
}

#endif /* RECUR_CHUNK_AHEAD_H */
