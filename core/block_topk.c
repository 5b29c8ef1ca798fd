/*
 * block_topk.c — block top-k sparse attention (NSA / MoBA "select"; docs/DESIGN.md §3, and the seeds'
 * reference script block_topk_attention for causal == 0).
 *
 * Keys are cut into n_blocks = ceil(T / block) blocks. Per query t and head h:
 *   counted keys     J_b = block b's real keys              (causal: only those with j <= t)
 *   candidates       blocks with J_b non-empty              (non-causal: every block)
 *   block score      c_b = mean_{j in J_b} scale q_t.k_j  = scale q_t . mean_{j in J_b} k_j
 *   kept blocks      the top min(topk, #candidates) by c_b, ties to the lower block index
 *   output           o_t = sum_{j kept} softmax_j(scale q_t.k_j) v_j, over kept keys (causal: j <= t)
 * The block score uses the second form: the mean key of each block is computed once (float64 sum,
 * divided by the count, rounded to float), so equal blocks get bit-equal scores and the tie rule
 * decides; the causal current block uses the running mean of its keys so far, computed the same
 * way, so it equals the full block's mean key once the block is complete. Every block score is
 * the same sum, sum_i q_i kbar_i in order i = 0..K-1, then times scale: the full blocks' scores are
 * computed together (vectorised across blocks, mean keys stored transposed), the current block's
 * alone, with the same arithmetic. The kept keys' scores and the weighted sum of values are
 * sgemv calls, one per kept block.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "exp_nonpos.h"
#include "mixer.h"

/* ---------------------------------------------------------------- helpers */

/* Is block a (score sa) ranked before block b (score sb)? Higher score first, then lower index.
 * Scores are never NaN here (NaN is mapped to -inf before ranking). */
static int bt_before(float sa, int64_t a, float sb, int64_t b)
{
    return sa > sb || (sa == sb && a < b);
}

typedef struct {
    float s;
    int64_t b;
} bt_rank;

static int bt_rank_cmp(const void *pa, const void *pb)
{
    const bt_rank *x = pa, *y = pb;
    if (bt_before(x->s, x->b, y->s, y->b))
        return -1;
    if (bt_before(y->s, y->b, x->s, x->b))
        return 1;
    return 0;
}

/* One past the last key of block b [b*block, ...) that query t counts (causal: keys j <= t). */
static int64_t bt_block_end(int64_t b, int64_t block, int64_t T, int causal, int64_t t)
{
    const int64_t j0 = b * block, j1 = T - j0 < block ? T : j0 + block;
    return causal && j1 > t + 1 ? t + 1 : j1;
}

/* Mark the top nkeep of the first ncand blocks (scores sc) in sel[]; sel is cleared first. */
static void bt_select(const float *sc, int64_t ncand, int64_t nkeep, uint8_t *sel, bt_rank *rank)
{
    if (ncand < 1) /* never (a query has its own block at least) */
        return;
    memset(sel, 0, (size_t)ncand);
    if (nkeep >= ncand) {
        memset(sel, 1, (size_t)ncand);
        return;
    }
    if (nkeep <= 8) { /* a few linear scans beat sorting for the usual small top-k */
        for (int64_t r = 0; r < nkeep; r++) {
            int64_t best = -1;
            for (int64_t b = 0; b < ncand; b++)
                if (!sel[b] && (best < 0 || bt_before(sc[b], b, sc[best], best)))
                    best = b;
            sel[best] = 1;
        }
        return;
    }
    for (int64_t b = 0; b < ncand; b++) {
        rank[b].s = sc[b];
        rank[b].b = b;
    }
    qsort(rank, (size_t)ncand, sizeof *rank, bt_rank_cmp);
    for (int64_t r = 0; r < nkeep; r++)
        sel[rank[r].b] = 1;
}

/* mean = float(sum_{j in [j0, j1)} k_j / (j1 - j0)), sum in float64; k rows of K at stride ld;
 * mean[i * mstride] for i < K (mean keys are stored transposed: one row per key dimension). */
static void bt_mean_key(const float *k, size_t ld, int64_t j0, int64_t j1, int K, double *sum,
                        float *mean, size_t mstride)
{
    for (int i = 0; i < K; i++)
        sum[i] = 0.0;
    for (int64_t j = j0; j < j1; j++)
        for (int i = 0; i < K; i++)
            sum[i] += k[(size_t)j * ld + i];
    for (int i = 0; i < K; i++)
        mean[(size_t)i * mstride] = (float)(sum[i] / (double)(j1 - j0));
}

/* ---------------------------------------------------------------- entry point */

int recur_block_topk_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                               int64_t block, int64_t topk, int causal, float scale, float *o,
                               uint8_t *keep)
{
    if (!d || !q || !k || !v || !o)
        return RECUR_EINVAL;
    if (block < 1 || topk < 1)
        return RECUR_EINVAL;
    int err = recur__check_dims(d);
    if (err)
        return err;
    const int64_t T = d->T;
    const int H = d->H, K = d->K, V = d->V;
    const int64_t nblk = T / block + (T % block != 0);
    if (nblk > 0 && T * H > INT64_MAX / nblk) /* keep [T][H][n_blocks] */
        return RECUR_ESHAPE;
    if ((err = recur__resolve_scale(scale, K, &scale)))
        return err;
    if (T == 0)
        return RECUR_OK;

    if (T > INT32_MAX) /* blasint is a 32-bit int */
        return RECUR_ESHAPE;

    const int64_t blen = block < T ? block : T;     /* keys in the longest block */
    const int64_t kmax = topk < nblk ? topk : nblk; /* blocks kept per query, at most */
    const size_t ldk = (size_t)H * K, ldv = (size_t)H * V;
    float *kbar = malloc((size_t)nblk * ldk * sizeof(float)); /* [H][K][n_blocks] mean keys^T */
    float *sc = malloc((size_t)nblk * sizeof(float));        /* [n_blocks] block scores */
    uint8_t *sel = malloc((size_t)nblk);                      /* [n_blocks] kept flags */
    bt_rank *rank = malloc((size_t)nblk * sizeof(bt_rank));
    float *w = malloc((size_t)kmax * (size_t)blen * sizeof(float)); /* kept keys' weights */
    double *sum = malloc((size_t)K * sizeof(double));
    float *cur = malloc((size_t)K * sizeof(float));         /* [K] causal running mean key */
    double *cursum = malloc(ldk * sizeof(double));          /* [H][K] its float64 sum */
    if (!kbar || !sc || !sel || !rank || !w || !sum || !cur || !cursum) {
        free(kbar), free(sc), free(sel), free(rank), free(w), free(sum), free(cur), free(cursum);
        return RECUR_ENOMEM;
    }

    /* kbar_b = mean of block b's real keys (the causal mask only matters for the current block) */
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t j0 = b * block, j1 = bt_block_end(b, block, T, 0, 0);
        for (int h = 0; h < H; h++)
            bt_mean_key(k + h * K, ldk, j0, j1, K, sum, kbar + (size_t)h * K * nblk + b,
                        (size_t)nblk);
    }

    for (int64_t t = 0; t < T; t++) {
        const int64_t tb = t / block; /* the block holding key t */
        if (causal) {
            /* running float64 sum of the current block's keys j in [tb*block, t] */
            if (t == tb * block)
                memset(cursum, 0, ldk * sizeof(double));
            for (size_t i = 0; i < ldk; i++)
                cursum[i] += k[(size_t)t * ldk + i];
        }
        for (int h = 0; h < H; h++) {
            const float *qt = q + ((size_t)t * H + h) * K;
            float *ot = o + ((size_t)t * H + h) * V;
            const float *kbh = kbar + (size_t)h * K * nblk; /* [K][n_blocks] */

            /* c_b = scale sum_i q_i kbar_b,i  for the complete candidate blocks ... */
            const int64_t ncand = causal ? tb + 1 : nblk;
            const int64_t nfull = causal ? tb : nblk;
            for (int64_t b = 0; b < nfull; b++)
                sc[b] = 0.0f;
            for (int i = 0; i < K; i++) {
                const float qi = qt[i];
                const float *kr = kbh + (size_t)i * nblk;
                for (int64_t b = 0; b < nfull; b++)
                    sc[b] = fmaf(qi, kr[b], sc[b]); /* fmaf in both paths: see below */
            }
            /* ... and the causal current block from the mean of its keys j <= t, same arithmetic */
            if (causal) {
                const double cnt = (double)(t - tb * block + 1);
                for (int i = 0; i < K; i++)
                    cur[i] = (float)(cursum[(size_t)h * K + i] / cnt);
                /* explicit fmaf, as above: with -ffp-contract=fast the compiler fused the
                 * vectorised loop and not this one, and equal blocks stopped tying */
                float acc = 0.0f;
                for (int i = 0; i < K; i++)
                    acc = fmaf(qt[i], cur[i], acc);
                sc[tb] = acc;
            }
            for (int64_t b = 0; b < ncand; b++) {
                const float s = scale * sc[b];
                sc[b] = isnan(s) ? -INFINITY : s;
            }

            /* keep the top min(topk, ncand), ties to the lower block index */
            const int64_t nkeep = topk < ncand ? topk : ncand;
            bt_select(sc, ncand, nkeep, sel, rank);
            if (keep) {
                uint8_t *kp = keep + ((size_t)t * H + h) * (size_t)nblk;
                memcpy(kp, sel, (size_t)ncand);
                memset(kp + ncand, 0, (size_t)(nblk - ncand));
            }

            /* s_j = scale q_t.k_j for the kept keys (causal: j <= t), block by block */
            int64_t n = 0;
            for (int64_t b = 0; b < ncand; b++) {
                if (!sel[b])
                    continue;
                const int64_t j0 = b * block, j1 = bt_block_end(b, block, T, causal, t);
                memset(w + n, 0, (size_t)(j1 - j0) * sizeof(float)); /* sgemv beta = 0 */
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(j1 - j0), K, scale,
                            k + (size_t)j0 * ldk + (size_t)h * K, (int)ldk, qt, 1, 0.0f, w + n, 1);
                n += j1 - j0;
            }
            /* o_t = sum_{j kept} exp(s_j - m) v_j / sum_{j kept} exp(s_j - m),  m = max kept s_j */
            float m = -INFINITY;
            for (int64_t i = 0; i < n; i++)
                m = w[i] > m ? w[i] : m;
            double l = 0.0;
            for (int64_t i = 0; i < n; i++) {
                w[i] = recur__exp_nonpos(w[i] - m);
                l += w[i];
            }
            const float inv = (float)(1.0 / l);
            for (int c = 0; c < V; c++)
                ot[c] = 0.0f;
            n = 0;
            for (int64_t b = 0; b < ncand; b++) {
                if (!sel[b])
                    continue;
                const int64_t j0 = b * block, j1 = bt_block_end(b, block, T, causal, t);
                cblas_sgemv(CblasRowMajor, CblasTrans, (int)(j1 - j0), V, inv,
                            v + (size_t)j0 * ldv + (size_t)h * V, (int)ldv, w + n, 1, 1.0f, ot, 1);
                n += j1 - j0;
            }
        }
    }
    free(kbar), free(sc), free(sel), free(rank), free(w), free(sum), free(cur), free(cursum);
    return RECUR_OK;
}
