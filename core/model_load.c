/* model_load.c — loading a model from files (recur.h): read the config, hand it and the weights
 * file to the model family it belongs to (model_family.h), finish the model (fingerprint, packed
 * matrices). Also the one tensor conversion every family shares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hf_config.h"
#include "isa.h"
#include "model_family.h"

/* config.json and model.safetensors inside a model directory; the directory path is bounded so
 * that both fit the path buffers */
#define MODEL_DIR_MAX 4000
#define MODEL_PATH_MAX (MODEL_DIR_MAX + 32)

int recur__load_tensor(const recur__st_tensor *src, const recur_weight_ref *dst, recur_wtype mwt)
{
    const unsigned char *p = src->data;
    const size_t n = src->n;
    if (n != dst->n) return RECUR_EFORMAT; /* cannot happen: the family matched the shapes */
    if (src->dtype == RECUR_WT_F32) {
        if (dst->half || !dst->ptr) return RECUR_EFORMAT; /* cannot happen: fp32 is never narrowed */
        memcpy(dst->ptr, p, n * 4);
        float acc = 0.0f; /* NaN/inf propagate into acc: one test at the end */
        for (size_t i = 0; i < n; i++) acc += dst->ptr[i] * 0.0f;
        return isfinite(acc) ? RECUR_OK : RECUR_EFORMAT;
    }
    if (dst->half && mwt != src->dtype) return RECUR_EFORMAT; /* cannot happen: halves stay the file's */
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        finite &= recur__half_finite(h, src->dtype);
        if (dst->ptr) dst->ptr[i] = recur__half_to_float(h, src->dtype);
    }
    if (dst->half) memcpy(dst->half, p, n * 2);
    return finite ? RECUR_OK : RECUR_EFORMAT;
}

/* ---------------------------------------------------------------- roles -> checkpoint tensors */

typedef struct {
    recur_weight_ref ref;         /* name and shape from the config */
    int layer, t;                 /* recur__weight's enumeration */
    const recur__st_tensor *src;  /* the checkpoint's tensor */
} role;

static void shape_text(char *buf, size_t cap, const int64_t *shape, int ndim)
{
    int n = snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n > 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

/* The matrices' type in memory: the file's half type when every matrix tensor has it. */
static recur_wtype choose_wtype(const role *rs, int n, int keep_half)
{
    recur_wtype wt = RECUR_WT_F32;
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (!rs[i].ref.is_matrix) continue;
        if (first) { wt = rs[i].src->dtype; first = 0; }
        else if (rs[i].src->dtype != wt) return RECUR_WT_F32;
    }
    return keep_half ? wt : RECUR_WT_F32;
}

int recur__load_roles(const recur_config *c, const recur__ckpt *ck, recur__role_name_fn name, int keep_half,
                      recur_model **out, char *err, size_t errlen)
{
    recur_weight_ref ref;
    int n = 0, rc = RECUR_OK;
    for (int l = -1; l < c->n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++) n += recur__weight_meta(c, l, t, &ref);
    role *rs = calloc((size_t)n, sizeof *rs);
    recur_model *m = NULL;
    if (!rs) return RECUR_ENOMEM;
    n = 0;
    for (int l = -1; l < c->n_layers && !rc; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS && !rc; t++) {
            role *r = &rs[n];
            if (!recur__weight_meta(c, l, t, &r->ref)) continue;
            int64_t fshape[RECUR__ST_MAX_DIMS] = {0};
            int fndim = 0;
            name(c, l, t, r->ref.name, sizeof r->ref.name, fshape, &fndim);
            if (!fndim) { fndim = r->ref.ndim; fshape[0] = r->ref.shape[0]; fshape[1] = r->ref.shape[1]; }
            r->layer = l;
            r->t = t;
            r->src = recur__ckpt_find(ck, r->ref.name);
            char want[96], have[96];
            shape_text(want, sizeof want, fshape, fndim);
            if (!r->src) {
                rc = recur__errf(err, errlen, "tensor \"%s\" %s is missing from the weights", r->ref.name, want);
                break;
            }
            int same = r->src->ndim == fndim;
            for (int i = 0; same && i < fndim; i++) same = r->src->shape[i] == fshape[i];
            if (!same) {
                shape_text(have, sizeof have, r->src->shape, r->src->ndim);
                rc = recur__errf(err, errlen, "tensor \"%s\" has shape %s; config.json implies %s", r->ref.name,
                                 have, want);
                break;
            }
            n++;
        }
    if (!rc && ck->n != n) {
        /* names are unique on both sides and every role was found: the rest are extra */
        for (int i = 0; i < ck->n && !rc; i++) {
            int used = 0;
            for (int j = 0; j < n && !used; j++) used = rs[j].src == ck->t[i];
            if (!used)
                rc = recur__errf(err, errlen, "tensor \"%.80s\" in the weights is not part of this model "
                                 "(config.json and weights disagree)", ck->t[i]->name);
        }
    }
    if (!rc) rc = recur__model_alloc(c, choose_wtype(rs, n, keep_half), &m);
    if (rc == RECUR_ESHAPE) recur__errf(err, errlen, "the model is too large (arena limit)");
    for (int i = 0; rc == RECUR_OK && i < n; i++) {
        recur__weight(m, rs[i].layer, rs[i].t, &ref);
        rc = recur__load_tensor(rs[i].src, &ref, m->wtype);
        if (rc) recur__errf(err, errlen, "tensor \"%s\" holds a NaN or an infinity", rs[i].ref.name);
    }
    free(rs);
    if (rc) recur_model_free(m);
    else *out = m;
    return rc;
}

int recur__family_hf_load(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                          recur__hf_parse_fn parse, recur__role_name_fn name, recur_model **out, char *err,
                          size_t errlen)
{
    cJSON *root;
    int rc = recur__hf_json_parse(config, config_len, "config.json", &root, err, errlen);
    if (rc) return rc;
    recur__hfc h = {.root = root, .file = "config.json", .err = err, .errlen = errlen};
    recur_config c;
    rc = parse(&h, &c);
    cJSON_Delete(root);
    if (rc) return rc;
    if ((rc = recur__config_check(&c)))
        return recur__errf(err, errlen, "config.json: the model's sizes are out of recurd's range (heads x head dims "
                           "at most 65536, head dims at most RECUR_MAX_DIM %d, ...)", RECUR_MAX_DIM), rc;
    return recur__load_roles(&c, ckpt, name, keep_half, out, err, errlen);
}

/* ---------------------------------------------------------------- the family table */

/* config.json's "model_type" -> family; NULL: no model_type (the native stack). A family's
 * file adds its row here. */
static const struct {
    const char *model_type;
    recur__family_fn load;
} families[] = {
    {NULL, recur__family_native},
    {"gated_deltanet", recur__family_fla},
    {"gla", recur__family_fla},
    {"delta_net", recur__family_fla},
    {"mamba2", recur__family_mamba2},
    {"rwkv7", recur__family_rwkv7},
};

/* The family of config text (Python's JSON: a Hugging Face config.json may hold Infinity). */
static int pick_family(const char *text, size_t len, recur__family_fn *out, char *err, size_t errlen)
{
    cJSON *root;
    int rc = recur__hf_json_parse(text, len, "config.json", &root, err, errlen);
    if (rc) return rc;
    const cJSON *mt = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    rc = RECUR_OK;
    if (mt && !cJSON_IsString(mt)) rc = recur__errf(err, errlen, "config.json: \"model_type\" must be a string");
    size_t i = 0, n = sizeof families / sizeof families[0];
    while (!rc && i < n && !(mt ? families[i].model_type && !strcmp(families[i].model_type, mt->valuestring)
                                : !families[i].model_type))
        i++;
    if (!rc && i == n)
        rc = recur__errf(err, errlen, "config.json: \"model_type\": \"%.64s\" is not a model family recurd "
                         "implements (gated_deltanet, gla, delta_net, mamba2, rwkv7, or no model_type for the native stack)",
                         mt->valuestring);
    if (!rc) *out = families[i].load;
    cJSON_Delete(root);
    return rc;
}

static int load(const char *config_path, const char *dir, const char *weights_path, int keep_half, recur_model **out,
                char *err, size_t errlen)
{
    char *text;
    size_t len;
    if (recur__isa_check(err, errlen)) return RECUR_EISA; /* a refused RECUR_ISA (isa.h) */
    int rc = recur__read_small_file(config_path, RECUR_MAX_CONFIG_BYTES, &text, &len);
    if (rc == RECUR_EIO) return recur__errf(err, errlen, "%s cannot be read", config_path), RECUR_EIO;
    if (rc == RECUR_EFORMAT)
        return recur__errf(err, errlen, "%s is larger than RECUR_MAX_CONFIG_BYTES (%d)", config_path,
                           RECUR_MAX_CONFIG_BYTES);
    if (rc) return rc;
    recur__family_fn family;
    rc = pick_family(text, len, &family, err, errlen);
    recur__ckpt ck;
    if (!rc) rc = dir ? recur__ckpt_open_dir(dir, &ck, err, errlen) : recur__ckpt_open_file(weights_path, &ck, err, errlen);
    if (rc) { free(text); return rc; }
    recur_model *m = NULL;
    rc = family(text, len, &ck, keep_half, &m, err, errlen);
    free(text);
    recur__ckpt_close(&ck);
    if (rc) return rc;
    rc = recur__model_finish(m);
    if (rc) { recur_model_free(m); return rc; }
    *out = m;
    return RECUR_OK;
}

int recur__model_load_files_opt(const char *config_path, const char *weights_path, int keep_half,
                                recur_model **out)
{
    if (!config_path || !weights_path || !out) return RECUR_EINVAL;
    return load(config_path, NULL, weights_path, keep_half, out, NULL, 0);
}

int recur_model_load_files(const char *config_path, const char *weights_path, recur_model **out)
{
    return recur__model_load_files_opt(config_path, weights_path, 1, out);
}

int recur_model_load_ex(const char *dir, recur_model **out, char *err, size_t errlen)
{
    return recur__model_load_dir_opt(dir, 1, out, err, errlen);
}

int recur__model_load_dir_opt(const char *dir, int keep_half, recur_model **out, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!dir || !out) return RECUR_EINVAL;
    if (strlen(dir) > MODEL_DIR_MAX) return recur__errf(err, errlen, "model folder path too long"), RECUR_EINVAL;
    char cfg[MODEL_PATH_MAX];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    int rc = load(cfg, dir, NULL, keep_half, out, err, errlen);
    if (rc && err && errlen && !err[0]) recur__errf(err, errlen, "%s", recur_strerror(rc));
    return rc;
}

int recur_model_load(const char *dir, recur_model **out)
{
    return recur_model_load_ex(dir, out, NULL, 0);
}
