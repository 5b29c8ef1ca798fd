/*
 * short_conv.h — the short causal depthwise convolution over time (not public): FLA's
 * ShortConvolution on q / k / v, Mamba-2's conv1d on xBC. Per channel c, with W taps w[j][c]
 * (oldest input first) and an optional bias b[c]:
 *   y_t[c] = act( b[c] + sum_{j=0}^{W-1} w[j][c] x_{t-W+1+j}[c] )
 * where inputs before the first row come from the session's conv state: the last W-1 inputs of
 * each channel, oldest first, [W-1][C]. The sum is taken in that order for every row, so a
 * decode step (T = 1) and a prefill over rows give the same bits, and the state after a prefill
 * equals the state after stepping the same rows.
 */
#ifndef RECUR_SHORT_CONV_H
#define RECUR_SHORT_CONV_H

#include <stddef.h>

/* In place over T rows: x[t * ld + c] for c < C is the input of row t and becomes its output.
 * w [W][C] taps, b [C] or NULL, silu: act = silu (else none). state [W-1][C], updated to the last
 * W-1 inputs. tmp: (W-1) * C + C floats of scratch. 2 <= W <= RECUR_MAX_CONV. */
void recur__short_conv_rows(int T, int C, int W, float *x, size_t ld, const float *w, const float *b,
                            int silu, float *state, float *tmp);

/* [C][W] (PyTorch's Conv1d weight [C][1][W]) -> [W][C] in place; tmp holds C * W floats. */
void recur__short_conv_transpose(float *w, int C, int W, float *tmp);

#endif /* RECUR_SHORT_CONV_H */
