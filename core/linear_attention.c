/* linear_attention.c — recur_linear_attention (recur.h): the gated-linear engine with no gate.
 *
 *   S_t = S_{t-1} + phi(k_t) v_t^T ;  z_t = z_{t-1} + phi(k_t)
 *   o_t = (scale phi(q_t))^T S_t / ((scale phi(q_t))^T z_t + RECUR_LINEAR_EPS)   (normalize)
 *   o_t = scale phi(q_t)^T S_t                                                   (otherwise)
 * The normaliser z is the same recurrence with v = 1; the engine runs it alongside S.
 */
#include "gated_linear.h"

int recur_linear_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                           int normalize, recur_feature_map fmap, float scale, recur_form form,
                           int64_t chunk_size, float *S, float *z, float *o)
{
    int rc = recur__check_dims(d);
    if (rc)
        return rc;
    /* Sequence arrays may be NULL only when there is no sequence. */
    if (!S || (normalize && !z) || (d->T > 0 && (!q || !k || !v || !o)))
        return RECUR_EINVAL;
    if (fmap != RECUR_FMAP_ELU1 && fmap != RECUR_FMAP_RELU && fmap != RECUR_FMAP_IDENTITY)
        return RECUR_EINVAL;
    float sc;
    if ((rc = gl_check_form_scale(form, chunk_size, scale, d->K, &sc)))
        return rc;
    const gl_problem p = {
        .T = d->T, .H = d->H, .K = d->K, .V = d->V, .q = q, .k = k, .v = v, .fmap = fmap,
        .gate = GL_GATE_NONE, .scale = sc, .normalize = normalize != 0, .S = S,
        .z = normalize ? z : NULL, /* without normalisation z is not touched */
        .o = o,
    };
    return gl_run(&p, form, chunk_size);
}
