/* mixer_check.c — the argument checks every mixer entry point shares (mixer.h). */
#include <math.h>
#include <stdint.h>
#include "mixer.h"

int recur__check_dims(const recur_dims *d)
{
    if (!d)
        return RECUR_EINVAL;
    const int64_t T = d->T;
    if (T < 0 || d->H < 1 || d->K < 1 || d->V < 1 || d->H > RECUR_MAX_DIM ||
        d->K > RECUR_MAX_DIM || d->V > RECUR_MAX_DIM)
        return RECUR_ESHAPE;
    /* T*H*max(K,V) floats: the largest array of a call, in int64_t elements and size_t bytes */
    const uint64_t row = (uint64_t)d->H * (uint64_t)(d->K > d->V ? d->K : d->V); /* <= 2^24 */
    uint64_t max_elems = (uint64_t)INT64_MAX;
    if ((uint64_t)SIZE_MAX / sizeof(float) < max_elems)
        max_elems = (uint64_t)SIZE_MAX / sizeof(float);
    if ((uint64_t)T > max_elems / row)
        return RECUR_ESHAPE;
    return RECUR_OK;
}

int recur__check_form(recur_form form, int64_t chunk_size)
{
    if (form != RECUR_FORM_RECURRENT && form != RECUR_FORM_PARALLEL && form != RECUR_FORM_CHUNKWISE)
        return RECUR_EINVAL;
    if (form == RECUR_FORM_CHUNKWISE && chunk_size < 1)
        return RECUR_ESHAPE;
    return RECUR_OK;
}

int recur__resolve_scale(float scale, int K, float *out)
{
    if (!isfinite(scale))
        return RECUR_ENONFINITE;
    *out = scale > 0.0f ? scale : (float)(1.0 / sqrt((double)K)); /* K^-1/2 */
    return RECUR_OK;
}

int recur__check_form_dims(recur_form form, int64_t chunk_size, const recur_dims *d)
{
    if (!d)
        return RECUR_EINVAL;
    const int rc = recur__check_form(form, chunk_size);
    return rc ? rc : recur__check_dims(d);
}

const recur__v16 recur__lane16[16] = {
    {1}, {0, 1}, {0, 0, 1}, {0, 0, 0, 1}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 1},
    {0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 1},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
};
