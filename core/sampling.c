/* sampling.c — next-token choice from logits: greedy, temperature, top-k, top-p (nucleus),
 * seeded and reproducible. One splitmix64 draw per call (also when greedy), so a caller's
 * stream of draws does not depend on the parameters it used earlier. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exp_nonpos.h"
#include "recur.h"
#include "util.h"

/* ids are held in float scratch (see cmp_desc): exact for integers up to 2^24 */
#define SAMPLE_MAX_VOCAB (1 << 24)

uint64_t recur_sampler_seed(uint64_t seed)
{
    return recur__splitmix64(&seed) | 1;
}

void recur_log_softmax(const float *logits, int vocab, float *out)
{
    if (!logits || !out || vocab <= 0) return;
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    float ls = (float)log(sum);
    for (int i = 0; i < vocab; i++) out[i] = (logits[i] - mx) - ls;
}

/* Insert candidate i (value v) into the sorted top list of n <= k entries. */
static int top_insert(float v, int i, int n, int k, int32_t *ids, float *vals)
{
    if (v != v) /* NaN never ranks */
        return n;
    if (n == k && !(v > vals[k - 1]))
        return n;
    int j = n < k ? n++ : k - 1;
    while (j > 0 && v > vals[j - 1]) { /* strictly greater: earlier ids win ties */
        vals[j] = vals[j - 1];
        ids[j] = ids[j - 1];
        j--;
    }
    vals[j] = v;
    ids[j] = i;
    return n;
}

int recur_top_k(const float *lp, int vocab, int k, int32_t *ids, float *vals)
{
    if (k > vocab)
        k = vocab;
    if (k <= 0)
        return 0;
    int n = 0, i = 0;
    /* Once the list is full, a block of 16 whose largest value does not beat the k-th is
     * skipped with one vectorised max (NaN loses every comparison, as it must). Runs once per
     * folded token (recurd's /tokens with top_k) over the whole vocabulary. */
    for (; i < vocab && n < k; i++)
        n = top_insert(lp[i], i, n, k, ids, vals);
    for (; i + 16 <= vocab; i += 16) {
        float m = -INFINITY;
        for (int j = 0; j < 16; j++)
            m = lp[i + j] > m ? lp[i + j] : m;
        if (!(m > vals[k - 1]))
            continue;
        for (int j = 0; j < 16; j++)
            n = top_insert(lp[i + j], i + j, n, k, ids, vals);
    }
    for (; i < vocab; i++)
        n = top_insert(lp[i], i, n, k, ids, vals);
    return n;
}

/* recur_log_softmax's formula with the exponentials in float (recur__exp_nonpos, which
 * vectorises): recurd runs this once per folded token, and libm's exp over the vocabulary cost
 * more than the rest of a request's bookkeeping together. Every logprob recurd reports comes
 * from here (one function: a restored session's logprobs are the bits of the original's). */
void recur_log_softmax_consts(const float *x, int vocab, float *out, float c[2])
{
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (x[i] > mx)
            mx = x[i];
    for (int i = 0; i < vocab; i++)
        out[i] = recur__exp_nonpos(x[i] - mx); /* scratch: e^(x - max) */
    double sum = 0.0;
    for (int i = 0; i < vocab; i++)
        sum += out[i];
    float ls = (float)log(sum);
    for (int i = 0; i < vocab; i++)
        out[i] = (x[i] - mx) - ls;
    c[0] = mx;
    c[1] = ls;
}

/* descending probability, lower id first on ties; ids are stored as exact floats */
static int cmp_desc(const void *a, const void *b, void *ctx)
{
    const float *prob = ctx;
    int i = (int)*(const float *)a, j = (int)*(const float *)b;
    if (prob[i] > prob[j]) return -1;
    if (prob[i] < prob[j]) return 1;
    return (i > j) - (i < j);
}

int recur_sample(const float *logits, int vocab, const recur_sampler_params *p, uint64_t *rng,
                 float *scratch)
{
    if (!logits || !p || !rng || vocab <= 0 || vocab > SAMPLE_MAX_VOCAB) return RECUR_EINVAL;
    if (isnan(p->temperature) || isnan(p->top_p)) return RECUR_ENONFINITE;
    double u = recur__uniform01(rng);

    for (int i = 0; i < vocab; i++)
        if (isnan(logits[i])) return RECUR_ENONFINITE;
    /* ids at or past vocab_limit do not exist for the sampler: everything below sees the
     * first vocab_limit logits only */
    if (p->vocab_limit > 0 && p->vocab_limit < vocab) vocab = p->vocab_limit;
    int best = 0;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (p->temperature <= 0.0f || !isfinite(logits[best])) return best;
    if (!scratch) return RECUR_EINVAL;

    /* probabilities of logits / T, max-subtracted (exp of non-positive numbers only) */
    float *prob = scratch, *ids = scratch + vocab;
    double inv_t = 1.0 / p->temperature, sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        double e = exp(((double)logits[i] - logits[best]) * inv_t);
        prob[i] = (float)e;
        sum += e;
    }
    int use_k = p->top_k > 0 && p->top_k < vocab;
    int use_p = p->top_p > 0.0f && p->top_p < 1.0f;
    if (!use_k && !use_p) {
        double target = u * sum, acc = 0.0;
        for (int i = 0; i < vocab; i++) {
            acc += prob[i];
            if (acc > target && prob[i] > 0.0f) return i;
        }
        return best; /* rounding at the very end of the cumulative sum */
    }

    for (int i = 0; i < vocab; i++) ids[i] = (float)i;
    qsort_r(ids, (size_t)vocab, sizeof(float), cmp_desc, prob);
    int n = use_k ? p->top_k : vocab;
    if (use_p) {
        /* smallest prefix whose mass reaches top_p of the (top-k) mass */
        double mass = 0.0, acc = 0.0;
        for (int i = 0; i < n; i++) mass += prob[(int)ids[i]];
        int keep = 0;
        while (keep < n) {
            acc += prob[(int)ids[keep++]];
            if (acc >= p->top_p * mass) break;
        }
        n = keep;
    }
    double mass = 0.0, acc = 0.0;
    for (int i = 0; i < n; i++) mass += prob[(int)ids[i]];
    double target = u * mass;
    for (int i = 0; i < n; i++) {
        acc += prob[(int)ids[i]];
        if (acc > target) return (int)ids[i];
    }
    return (int)ids[0];
}
