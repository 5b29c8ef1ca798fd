/* gla.c — recur_gla (recur.h): gated linear attention on the gated-linear engine.
 *
 *   S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T ;  o_t = scale S_t^T q_t
 * g [T][H] (one log gate per head, Mamba-2 / simple GLA) or [T][H][K] (per key dim, GLA); g <= 0.
 */
#include "gated_linear.h"

int recur_gla(const recur_dims *d, const float *q, const float *k, const float *v, const float *g,
              int g_per_key, float scale, recur_form form, int64_t chunk_size, float *S, float *o)
{
    int rc = recur__check_dims(d);
    if (rc)
        return rc;
    if (!S || (d->T > 0 && (!q || !k || !v || !g || !o)))
        return RECUR_EINVAL;
    float sc;
    if ((rc = gl_check_form_scale(form, chunk_size, scale, d->K, &sc)))
        return rc;
    const int64_t n_gates = d->T * d->H * (g_per_key ? (int64_t)d->K : 1);
    if (d->T > 0 && (rc = gl_check_log_gates(g, n_gates)))
        return rc;
    const gl_problem p = {
        .T = d->T, .H = d->H, .K = d->K, .V = d->V, .q = q, .k = k, .v = v,
        .fmap = RECUR_FMAP_IDENTITY, .gate = g_per_key ? GL_GATE_KEY : GL_GATE_SCALAR, .g = g,
        .scale = sc, .S = S, .o = o,
    };
    return gl_run(&p, form, chunk_size);
}
