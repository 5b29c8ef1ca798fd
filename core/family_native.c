/* family_native.c — the native model family (model_family.h): config.json of docs/MODEL.md
 * "Config" and weights holding exactly the tensors of docs/MODEL.md "Tensors" under their own
 * names (recur__weight's table), each of its exact shape, F32, F16 or BF16. When every matrix
 * tensor (docs/MODEL.md "Weights in memory") has the same half dtype, the matrices keep it
 * (their halves are copied as they are; the rest is widened to fp32); otherwise everything is
 * fp32. */
#include <stdio.h>
#include "hf_config.h"
#include "model_family.h"

/* The native names are recur__weight_meta's own: nothing to rename. */
static void native_name(const recur_config *c, int layer, int t, char *name, size_t cap, int64_t *file_shape,
                        int *file_ndim)
{
    *file_ndim = 0;
}

int recur__family_native(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                         recur_model **out, char *err, size_t errlen)
{
    recur_config c;
    int rc = recur__config_parse(config, config_len, &c);
    if (rc) {
        recur__errf(err, errlen, "config.json: not a valid native recurd config (docs/MODEL.md \"Config\": "
                    "known keys only, integer sizes in range, one mixer name per layer)");
        return rc;
    }
    return recur__load_roles(&c, ckpt, native_name, keep_half, out, err, errlen);
}
