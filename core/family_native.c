/* family_native.c — the native model family (model_family.h): config.json of docs/MODEL.md
 * "Config" and a safetensors file holding exactly the tensors of docs/MODEL.md "Tensors" under
 * their own names (recur__weight's table), each of its exact shape, F32, F16 or BF16. When every
 * matrix tensor (docs/MODEL.md "Weights in memory") has the same half dtype, the matrices keep it
 * (their halves are copied as they are; the rest is widened to fp32); otherwise everything is
 * fp32. */
#include <stdlib.h>
#include <string.h>
#include "model_family.h"

typedef struct {
    recur_weight_ref ref;         /* name and shape from the config */
    int layer, t;                 /* recur__weight's enumeration */
    const recur__st_tensor *src;  /* the file's tensor of that name */
} native_tensor;

/* The matrices' type in memory: the file's half type when every matrix tensor has it. */
static recur_wtype choose_wtype(const native_tensor *ts, int n, int keep_half)
{
    recur_wtype wt = RECUR_WT_F32;
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (!ts[i].ref.is_matrix) continue;
        if (first) { wt = ts[i].src->dtype; first = 0; }
        else if (ts[i].src->dtype != wt) return RECUR_WT_F32;
    }
    return keep_half ? wt : RECUR_WT_F32;
}

/* Every role found in st with its exact shape, and nothing else in st. */
static int match_tensors(const recur__st_file *st, native_tensor *ts, int n)
{
    if (st->n != n) return RECUR_EFORMAT; /* an extra tensor (names are unique, roles counted) */
    for (int i = 0; i < n; i++) {
        const recur_weight_ref *r = &ts[i].ref;
        const recur__st_tensor *s = recur__st_find(st, r->name);
        if (!s || s->ndim != r->ndim || s->shape[0] != r->shape[0] || (r->ndim == 2 && s->shape[1] != r->shape[1]))
            return RECUR_EFORMAT; /* missing, or of another shape */
        ts[i].src = s;
    }
    return RECUR_OK;
}

int recur__family_native(const char *config, size_t config_len, const char *weights_path,
                         int keep_half, recur_model **out)
{
    recur_config c;
    int rc = recur__config_parse(config, config_len, &c);
    if (rc) return rc;
    recur__st_file st;
    if ((rc = recur__st_open(weights_path, &st))) return rc;

    /* the roles of the model's tensor table, in table order */
    recur_weight_ref ref;
    int n = 0;
    for (int l = -1; l < c.n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++) n += recur__weight_meta(&c, l, t, &ref);
    native_tensor *ts = calloc((size_t)n, sizeof *ts);
    recur_model *m = NULL;
    if (!ts) { rc = RECUR_ENOMEM; goto out; }
    n = 0;
    for (int l = -1; l < c.n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++)
            if (recur__weight_meta(&c, l, t, &ts[n].ref)) {
                ts[n].layer = l;
                ts[n].t = t;
                n++;
            }

    if ((rc = match_tensors(&st, ts, n))) goto out;
    if ((rc = recur__model_alloc(&c, choose_wtype(ts, n, keep_half), &m))) goto out;
    for (int i = 0; rc == RECUR_OK && i < n; i++) {
        recur__weight(m, ts[i].layer, ts[i].t, &ref);
        rc = recur__load_tensor(ts[i].src, &ref, m->wtype);
    }
out:
    free(ts);
    recur__st_close(&st);
    if (rc) recur_model_free(m);
    else *out = m;
    return rc;
}
