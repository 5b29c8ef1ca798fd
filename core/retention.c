/* retention.c — recur_retention and recur_multiscale_decays (recur.h).
 *
 *   S_t = gamma_h S_{t-1} + k_t v_t^T ;  o_t = scale S_t^T q_t
 * i.e. the gated-linear engine with the constant log gate g = log gamma_h <= 0.
 */
#include <math.h>

#include "gated_linear.h"

/* gamma_h = 1 - 2^(-5-h) (RetNet's multi-scale decays), rounded to float. */
void recur_multiscale_decays(int H, float *gamma)
{
    if (!gamma)
        return;
    for (int h = 0; h < H; h++)
        gamma[h] = (float)(1.0 - ldexp(1.0, -5 - h));
}

int recur_retention(const recur_dims *d, const float *q, const float *k, const float *v,
                    const float *gamma, float scale, recur_form form, int64_t chunk_size,
                    float *S, float *o)
{
    int rc = recur__check_dims(d);
    if (rc)
        return rc;
    if (!S || (d->T > 0 && (!q || !k || !v || !o)))
        return RECUR_EINVAL;
    float sc;
    if ((rc = gl_check_form_scale(form, chunk_size, scale, d->K, &sc)))
        return rc;
    float ms[RECUR_MAX_DIM];
    if (gamma) {
        /* gamma in (0,1]: finite first, then in range */
        for (int h = 0; h < d->H; h++)
            if (!isfinite(gamma[h]))
                return RECUR_ENONFINITE;
        for (int h = 0; h < d->H; h++)
            if (!(gamma[h] > 0.0f && gamma[h] <= 1.0f))
                return RECUR_ERANGE;
    } else {
        recur_multiscale_decays(d->H, ms);
        gamma = ms;
    }
    const gl_problem p = {
        .T = d->T, .H = d->H, .K = d->K, .V = d->V, .q = q, .k = k, .v = v,
        .fmap = RECUR_FMAP_IDENTITY, .gate = GL_GATE_HEAD, .gamma = gamma, .scale = sc,
        .S = S, .o = o,
    };
    return gl_run(&p, form, chunk_size);
}
