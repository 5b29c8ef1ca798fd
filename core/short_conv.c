/* short_conv.c — the short causal depthwise convolution (short_conv.h). */
#include <string.h>
#include "exp_nonpos.h"
#include "short_conv.h"

void recur__short_conv_rows(int T, int C, int W, float *x, size_t ld, const float *w, const float *b,
                            int silu, float *state, float *tmp)
{
    const int M = W - 1; /* inputs kept per channel */
    float *next = tmp, *acc = tmp + (size_t)M * C;
    /* the new state: raw inputs of rows T-M .. T-1 (rows before 0 still in the old state) */
    for (int i = 0; i < M; i++) {
        int row = T - M + i;
        const float *src = row >= 0 ? x + (size_t)row * ld : state + (size_t)(M + row) * C;
        memcpy(next + (size_t)i * C, src, (size_t)C * sizeof(float));
    }
    /* last row first: every row still reads raw inputs */
    for (int t = T - 1; t >= 0; t--) {
        if (b) memcpy(acc, b, (size_t)C * sizeof(float));
        else memset(acc, 0, (size_t)C * sizeof(float));
        for (int j = 0; j < W; j++) {
            int row = t - M + j;
            const float *src = row >= 0 ? x + (size_t)row * ld : state + (size_t)(M + row) * C;
            const float *wj = w + (size_t)j * C;
            for (int c = 0; c < C; c++) acc[c] += wj[c] * src[c];
        }
        float *y = x + (size_t)t * ld;
        if (silu)
            for (int c = 0; c < C; c++) y[c] = recur__silu(acc[c]);
        else
            memcpy(y, acc, (size_t)C * sizeof(float));
    }
    memcpy(state, next, (size_t)M * C * sizeof(float));
}

void recur__short_conv_transpose(float *w, int C, int W, float *tmp)
{
    memcpy(tmp, w, (size_t)C * W * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int j = 0; j < W; j++) w[(size_t)j * C + c] = tmp[(size_t)c * W + j];
}
