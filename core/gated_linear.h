/*
 * gated_linear.h — internal engine shared by linear attention, retention and GLA (not public).
 *
 * One recurrence per head, in three forms (recurrent, parallel, chunkwise):
 *   S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T          S [K][V]
 *   z_t = z_{t-1} + k_t                              z [K]      (only when z != NULL; no gate:
 *                                                    gl_run rejects z with a gate, RECUR_EINVAL)
 *   o_t = scale S_t^T q_t ;  den_t = scale q_t^T z_t ;  o_t /= (den_t + RECUR_LINEAR_EPS) if normalize
 * where g_t is 0 (GL_GATE_NONE), log gamma_h (GL_GATE_HEAD), g[t][h] (GL_GATE_SCALAR) or
 * g[t][h][:] (GL_GATE_KEY), and the feature map phi is applied to q and k as they are read.
 *
 * The public wrappers validate everything first (recur__check_dims of mixer.h, gl_check_*), then
 * call gl_run, which writes S, z and o only after every allocation has succeeded: on any error
 * nothing is written.
 */
#ifndef RECUR_GATED_LINEAR_H
#define RECUR_GATED_LINEAR_H

#include <stdint.h>
#include <string.h>
#include "mixer.h"

typedef enum {
    GL_GATE_NONE = 0,   /* A_t = I                                */
    GL_GATE_HEAD = 1,   /* A_t = gamma_h I, gamma [H] in (0,1]      */
    GL_GATE_SCALAR = 2, /* A_t = exp(g[t][h]) I, g [T][H]           */
    GL_GATE_KEY = 3     /* A_t = Diag(exp g[t][h][:]), g [T][H][K]  */
} gl_gate_kind;

typedef struct {
    int64_t T;
    int H, K, V;
    const float *q;          /* [T][H][K] */
    const float *k;          /* [T][H][K] */
    const float *v;          /* [T][H][V] */
    recur_feature_map fmap;  /* applied to q and k on read; RECUR_FMAP_IDENTITY for none */
    gl_gate_kind gate;
    const float *g;          /* [T][H] (SCALAR) or [T][H][K] (KEY); else unused */
    const float *gamma;      /* [H] (HEAD); else unused */
    float scale;             /* > 0, already resolved */
    int normalize;           /* divide o_t by den_t + RECUR_LINEAR_EPS; needs z, and gate
                              * GL_GATE_NONE outside the recurrent form (chunk_step keeps z
                              * undecayed and folds scale into the rows of phi(Q)) */
    float *S;                /* [H][K][V]  IN/OUT */
    float *z;                /* [H][K]     IN/OUT, or NULL (not maintained) */
    float *o;                /* [T][H][V]  OUT */
} gl_problem;

/* recur__check_form, then recur__resolve_scale (mixer.h): the first non-zero code, else RECUR_OK
 * with *out set. */
int gl_check_form_scale(recur_form form, int64_t chunk_size, float scale, int K, float *out);

/* Every one of n log gates is finite (else RECUR_ENONFINITE) and <= 0 (else RECUR_ERANGE).
 * Read from the last gate back to the first: the chunkwise form then starts on the rows read
 * last, still in L2/L3, instead of streaming from DRAM what the check just streamed past (per-key
 * gates at T = 16k, H = 4, K = 64 are 16 MB: GLA per-key chunkwise at T = 16k 2-3 % less CPU time
 * per token than with the forward pass, T = 1k the same; 4 alternated runs, load 3-5,
 * 2026-12-03). The result is an OR over all gates: the same in any order. */
int gl_check_log_gates(const float *g, int64_t n);

/* The bit tests of those checks, on the bits so that a loop over them vectorises:
 * exponent all ones is Inf/NaN; a sign-clear value other than +0 is > 0. */
static inline uint32_t gl_bits_nonfinite(uint32_t x)
{
    return (x & 0x7f800000u) == 0x7f800000u;
}

static inline uint32_t gl_bits_positive(uint32_t x)
{
    return (int32_t)x > 0;
}

/* Log gates are floored here before they are summed (the chunkwise forms of GLA and of the
 * generalized delta rule): exp(-1000) is 0 even in double, so the floor changes no decay, but it
 * keeps the cumulative sums small enough that differences of them (b_t - b_s) stay exact to
 * ~1e-9 after a huge gate such as -3e38. */
#define GL_LOG_FLOOR (-1000.0)

/* max(g, GL_LOG_FLOOR) for a checked gate g <= 0, on the bits (for negative floats a larger
 * unsigned integer is a larger magnitude; +0 is 0): a float compare-and-select does not
 * vectorise under GCC's default -ftrapping-math, and these loops run per key and token. */
static inline float gl_floor_gate(float g)
{
    const uint32_t lim = 0xc47a0000u; /* the bits of -1000.0f */
    uint32_t x;
    memcpy(&x, &g, sizeof x);
    x = x > lim ? lim : x;
    memcpy(&g, &x, sizeof g);
    return g;
}

/* Run the recurrence in the given form (arguments already validated). Returns 0 or
 * RECUR_ENOMEM/RECUR_ESHAPE (workspace too large), in which case nothing was written. */
int gl_run(const gl_problem *p, recur_form form, int64_t chunk_size);

#endif /* RECUR_GATED_LINEAR_H */
