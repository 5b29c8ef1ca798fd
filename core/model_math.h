/*
 * model_math.h — the small per-row functions of the blocks (model_forward.c, block_mamba2.c, block_rwkv7.c):
 * activations and norms, one home (not public). silu is recur__silu (exp_nonpos.h).
 */
#ifndef RECUR_MODEL_MATH_H
#define RECUR_MODEL_MATH_H

#include <math.h>

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* softplus(x) = log(1 + e^x), without overflow */
static inline float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

/* sum(x^2): 16 independent float lanes (vectorisable without reassociation), added in double */
static inline double sumsq(const float *x, int n)
{
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j] * x[i + j];
    double ss = 0.0;
    for (int j = 0; j < 16; j++) ss += acc[j];
    for (; i < n; i++) ss += (double)x[i] * x[i];
    return ss;
}

/* y = x / sqrt(mean(x^2) + eps) * w */
static inline void rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    float r = (float)(1.0 / sqrt(sumsq(x, n) / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* L2norm(x) = x / sqrt(sum(x^2) + 1e-6) */
static inline void l2norm(float *x, int n)
{
    float r = (float)(1.0 / sqrt(sumsq(x, n) + 1e-6));
    for (int i = 0; i < n; i++) x[i] *= r;
}

/* y = (x - mean) / sqrt(var + eps) * w + b (biased variance; mean and variance in double, two
 * passes): nn.LayerNorm, and nn.GroupNorm on one group */
static inline void layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps)
{
    double s = 0.0, v = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    const double mean = s / n;
    for (int i = 0; i < n; i++) v += (x[i] - mean) * (x[i] - mean);
    const float r = (float)(1.0 / sqrt(v / n + eps)), mu = (float)mean;
    for (int i = 0; i < n; i++) y[i] = (x[i] - mu) * r * w[i] + b[i];
}

#endif /* RECUR_MODEL_MATH_H */
