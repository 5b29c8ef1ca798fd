/*
 * generalized_delta.h — the generalized delta rule's per-head decode step (not public).
 *
 * The generalized (diagonal-plus-low-rank, "DPLR") delta rule of RWKV-7, per head, written for
 * our key-major state S [K][V] (the layout of every other mixer, recur.h; RWKV and FLA write the
 * same matrix as its V x K transpose, S_vk = S^T):
 *
 *   S_t = Diag(w_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T        w_t = exp(g_t), g_t <= 0
 *   o_t = scale S_t^T q_t
 *
 * i.e. in the V x K writing S_t = S_{t-1} (Diag(w_t) + a_t b_t^T) + v_t k_t^T. The rank-one term
 * reads the state BEFORE the decay (a_t^T S_{t-1}), as RWKV-7 and FLA's dplr do. a and b are
 * general vectors; RWKV-7 uses a = -kappa_hat and b = kappa_hat * a_gate (kappa_hat the
 * L2-normalised erase key, a_gate the in-context learning rate in (0, 1)) and scale = 1. DeltaNet
 * is the special case g = 0, a = -k, b = beta k, written key beta k.
 *
 * recur__gdr_step is the recurrent form of recur_generalized_delta (generalized_delta.c), one
 * home per recurrence (mixer.h): the model's decode calls it per head, or calls the public entry
 * with T = 1, which runs exactly this step. No validation, no allocation; g must be <= 0 (it is
 * exponentiated by recur__exp_nonpos, which maps g > 0 to 1).
 */
#ifndef RECUR_GENERALIZED_DELTA_H
#define RECUR_GENERALIZED_DELTA_H

/* One token of one head. S [K][V] in/out; q, k, g, a, b [K]; v, o [V]; scale > 0 as used (no
 * default applied here). S must not alias the vectors; o must not alias anything. */
void recur__gdr_step(float *restrict S, const float *restrict q, const float *restrict k,
                     const float *restrict v, const float *restrict g, const float *restrict a,
                     const float *restrict b, float scale, int K, int V, float *restrict o);

#endif /* RECUR_GENERALIZED_DELTA_H */
