/* model_load.c — loading a model from files (recur.h): read the config, hand it and the weights
 * file to the model family it belongs to (model_family.h), finish the model (fingerprint, packed
 * matrices). Also the one tensor conversion every family shares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int read_small_file(const char *path, size_t limit, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return RECUR_EIO;
    char *buf = malloc(limit + 1);
    if (!buf) { fclose(f); return RECUR_ENOMEM; }
    size_t n = fread(buf, 1, limit + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return RECUR_EIO; }
    if (n > limit) { free(buf); return RECUR_EFORMAT; }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return RECUR_OK;
}

int recur__model_load_files_opt(const char *config_path, const char *weights_path, int keep_half,
                                recur_model **out)
{
    if (!config_path || !weights_path || !out) return RECUR_EINVAL;
    char *text;
    size_t len;
    int rc = read_small_file(config_path, RECUR_MAX_CONFIG_BYTES, &text, &len);
    if (rc) return rc;
    /* one family today; a second one is chosen here from the config (e.g. Hugging Face's
     * "model_type") */
    recur_model *m;
    rc = recur__family_native(text, len, weights_path, keep_half, &m);
    free(text);
    if (rc) return rc;
    rc = recur__model_finish(m);
    if (rc) { recur_model_free(m); return rc; }
    *out = m;
    return RECUR_OK;
}

int recur_model_load_files(const char *config_path, const char *weights_path, recur_model **out)
{
    return recur__model_load_files_opt(config_path, weights_path, 1, out);
}

int recur_model_load(const char *dir, recur_model **out)
{
    if (!dir || !out) return RECUR_EINVAL;
    if (strlen(dir) > MODEL_DIR_MAX) return RECUR_EINVAL;
    char cfg[MODEL_PATH_MAX], w[MODEL_PATH_MAX];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(w, sizeof w, "%s/model.safetensors", dir);
    return recur_model_load_files(cfg, w, out);
}
