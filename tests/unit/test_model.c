/* test_model.c — the model stack: config rejection, safetensors validation (corrupt files built
 * here), snapshot validation, sampling, and the forms agreeing (batch == single, prefill ==
 * step) on seeded models. Numeric parity with the PyTorch twin is tests/python/test_model_parity.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model_internal.h"

#define TINY(mixers, n) \
    "{\"name\":\"tiny\",\"vocab_size\":40,\"d_model\":24,\"n_layers\":" #n ",\"n_heads\":2," \
    "\"head_k\":8,\"head_v\":6,\"d_ff\":20,\"mixers\":[" mixers "],\"tied_embeddings\":false," \
    "\"max_context\":80,\"norm_eps\":1e-5}"

static const char *hybrid_cfg =
    TINY("\"linear\",\"retention\",\"gla\",\"deltanet\",\"gated_deltanet\",\"softmax\"", 6);

static double rel_rms(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* ---------------------------------------------------------------- config */

static int init(const char *json)
{
    recur_model *m = NULL;
    int rc = recur_model_init_seed(json, 1, &m);
    recur_model_free(m);
    return rc;
}

Test(config, accepts_minimal_and_defaults)
{
    recur_model *m;
    cr_assert_eq(recur_model_init_seed("{\"vocab_size\":256,\"d_model\":16,\"n_layers\":1,\"n_heads\":1,"
                                       "\"head_k\":4,\"head_v\":4,\"d_ff\":8,\"mixers\":[\"softmax\"]}", 1, &m), 0);
    const recur_model_info *i = recur_model_get_info(m);
    cr_assert_eq(i->tied_embeddings, 1);
    cr_assert_eq(i->max_context, 4096);
    cr_assert_eq(i->mixers[0], RECUR_MIXER_SOFTMAX);
    cr_assert_eq(i->state_bytes, (size_t)4096 * (4 + 4) * 4);
    recur_model_free(m);
}

Test(config, rejects_bad_configs)
{
    cr_assert_eq(init(TINY("\"gla\"", 1)), 0);
    /* unknown key (a typo), duplicate key, missing key */
    cr_assert_eq(init("{\"vocab_size\":40,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"],\"tied_embedding\":true}"), RECUR_EFORMAT);
    cr_assert_eq(init("{\"vocab_size\":40,\"vocab_size\":40,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,"
                      "\"head_k\":8,\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"]}"), RECUR_EFORMAT);
    cr_assert_eq(init("{\"vocab_size\":40,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"]}"), RECUR_EFORMAT);
    /* wrong types, non-integral, out of range */
    cr_assert_eq(init("{\"vocab_size\":\"40\",\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"]}"), RECUR_EFORMAT);
    cr_assert_eq(init("{\"vocab_size\":40.5,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"]}"), RECUR_EFORMAT);
    cr_assert_eq(init("{\"vocab_size\":1,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"]}"), RECUR_ESHAPE);
    cr_assert_eq(init("{\"vocab_size\":40,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":3e9,\"mixers\":[\"gla\"]}"), RECUR_ESHAPE);
    cr_assert_eq(init("{\"vocab_size\":40,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"],\"norm_eps\":-1}"), RECUR_ERANGE);
    cr_assert_eq(init("{\"vocab_size\":40,\"d_model\":24,\"n_layers\":1,\"n_heads\":2,\"head_k\":8,"
                      "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\"],\"tied_embeddings\":1}"), RECUR_EFORMAT);
    /* mixers: wrong count, unknown kind, not strings */
    cr_assert_eq(init(TINY("\"gla\",\"gla\"", 1)), RECUR_ESHAPE);
    cr_assert_eq(init(TINY("\"mamba\"", 1)), RECUR_EFORMAT);
    cr_assert_eq(init(TINY("3", 1)), RECUR_EFORMAT);
    /* not JSON, not an object, trailing garbage */
    cr_assert_eq(init("{\"vocab_size\":"), RECUR_EFORMAT);
    cr_assert_eq(init("[1,2]"), RECUR_EFORMAT);
    cr_assert_eq(init(TINY("\"gla\"", 1) " x"), RECUR_EFORMAT);
    cr_assert_eq(recur_model_init_seed(NULL, 1, NULL), RECUR_EINVAL);
}

/* ---------------------------------------------------------------- safetensors */

typedef struct {
    char name[64];
    char dtype[8];
    int64_t shape[2];
    int ndim;
    uint64_t begin, end;
} st_spec;

/* Write a safetensors file from specs[] (data bytes given); the header is built with snprintf. */
static void write_st(const char *path, const st_spec *sp, int n, const void *data, size_t data_len,
                     const char *extra_header_entry)
{
    size_t cap = 1 << 20;
    char *hdr = malloc(cap);
    size_t o = (size_t)snprintf(hdr, cap, "{");
    for (int i = 0; i < n; i++) {
        o += (size_t)snprintf(hdr + o, cap - o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", i ? "," : "",
                              sp[i].name, sp[i].dtype, (long long)sp[i].shape[0]);
        if (sp[i].ndim == 2) o += (size_t)snprintf(hdr + o, cap - o, ",%lld", (long long)sp[i].shape[1]);
        o += (size_t)snprintf(hdr + o, cap - o, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
    }
    if (extra_header_entry) o += (size_t)snprintf(hdr + o, cap - o, ",%s", extra_header_entry);
    o += (size_t)snprintf(hdr + o, cap - o, "}");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t hl = o;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, o, f);
    fwrite(data, 1, data_len, f);
    fclose(f);
    free(hdr);
}

static const char *cfg_text = TINY("\"gated_deltanet\",\"softmax\"", 2);

/* Specs and fp32 data of a seeded model: the golden file every corruption starts from. */
static int golden(recur_model **mout, st_spec **specs, unsigned char **data, size_t *len)
{
    /* the seeded model as recur_model_init_seed(cfg_text, 7) makes it, with its row-major
     * tensors read out before recur__model_finish packs the matrices */
    recur_model *m;
    recur_config cfg;
    cr_assert_eq(recur__config_parse(cfg_text, strlen(cfg_text), &cfg), 0);
    cr_assert_eq(recur__model_alloc(&cfg, RECUR_WT_F32, &m), 0);
    recur__model_seed(m, 7);
    st_spec *sp = calloc(256, sizeof *sp);
    unsigned char *d = malloc(1 << 22);
    size_t off = 0;
    int n = 0;
    recur_weight_ref ref;
    for (int l = -1; l < m->cfg.n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++)
            if (recur__weight(m, l, t, &ref)) {
                snprintf(sp[n].name, sizeof sp[n].name, "%s", ref.name);
                snprintf(sp[n].dtype, sizeof sp[n].dtype, "F32");
                sp[n].ndim = ref.ndim;
                sp[n].shape[0] = ref.shape[0];
                sp[n].shape[1] = ref.shape[1];
                sp[n].begin = off;
                memcpy(d + off, ref.ptr, ref.n * 4);
                off += ref.n * 4;
                sp[n].end = off;
                n++;
            }
    cr_assert_eq(recur__model_finish(m), 0);
    *mout = m;
    *specs = sp;
    *data = d;
    *len = off;
    return n;
}

static char tmpdir[64];
static char cfg_path[128], st_path[128];

static void setup_dir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/recur_test_model_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", tmpdir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", tmpdir);
    FILE *f = fopen(cfg_path, "w");
    fputs(cfg_text, f);
    fclose(f);
}

static void teardown_dir(void)
{
    unlink(cfg_path);
    unlink(st_path);
    rmdir(tmpdir);
}

static int load_rc(void)
{
    recur_model *m = NULL;
    int rc = recur_model_load(tmpdir, &m);
    recur_model_free(m);
    return rc;
}

TestSuite(safetensors, .init = setup_dir, .fini = teardown_dir);

Test(safetensors, golden_file_loads_with_same_fingerprint)
{
    recur_model *seeded, *loaded;
    st_spec *sp;
    unsigned char *d;
    size_t len;
    int n = golden(&seeded, &sp, &d, &len);
    write_st(st_path, sp, n, d, len, "\"__metadata__\":{\"format\":\"pt\"}");
    cr_assert_eq(recur_model_load(tmpdir, &loaded), 0);
    cr_assert_eq(recur_model_get_info(loaded)->fingerprint, recur_model_get_info(seeded)->fingerprint);
    cr_assert_eq(recur_model_get_info(loaded)->n_params, recur_model_get_info(seeded)->n_params);
    recur_model_free(loaded);
    recur_model_free(seeded);
    free(sp);
    free(d);
}

Test(safetensors, corruptions_are_rejected)
{
    recur_model *seeded;
    st_spec *sp;
    unsigned char *d;
    size_t len;
    int n = golden(&seeded, &sp, &d, &len);
    st_spec save;

    /* missing tensor, extra tensor, duplicate tensor */
    write_st(st_path, sp, n - 1, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    write_st(st_path, sp, n, d, len, "\"bogus.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}");
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    char dup[256];
    snprintf(dup, sizeof dup, "\"%s\":{\"dtype\":\"F32\",\"shape\":[24],\"data_offsets\":[%llu,%llu]}",
             sp[1].name, (unsigned long long)sp[1].begin, (unsigned long long)sp[1].end);
    write_st(st_path, sp, n, d, len, dup);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);

    /* wrong shape (same element count), wrong dtype */
    save = sp[0];
    sp[0].shape[0] = save.shape[1];
    sp[0].shape[1] = save.shape[0];
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    sp[0] = save;
    snprintf(sp[0].dtype, sizeof sp[0].dtype, "F64");
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    snprintf(sp[0].dtype, sizeof sp[0].dtype, "I32");
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    sp[0] = save;

    /* overlapping ranges: tensor 1 (norm_f, 24 floats) moved into tensor 0's bytes */
    save = sp[1];
    sp[1].begin = 8;
    sp[1].end = 8 + (save.end - save.begin);
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    /* byte range that does not match the shape */
    sp[1] = save;
    sp[1].end -= 4;
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    sp[1] = save;

    /* out of the file / truncated file */
    write_st(st_path, sp, n, d, len - 1, NULL);
    cr_assert_eq(load_rc(), RECUR_ETRUNCATED);
    sp[n - 1].begin += 1u << 30;
    sp[n - 1].end += 1u << 30;
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_ETRUNCATED);

    /* non-finite weight */
    recur_model_free(seeded);
    free(sp);
    free(d);
    golden(&seeded, &sp, &d, &len);
    float nan = NAN;
    memcpy(d + 4, &nan, 4);
    write_st(st_path, sp, n, d, len, NULL);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);

    /* header length: absurd, past the end, tiny file, garbage JSON, missing file */
    FILE *f = fopen(st_path, "wb");
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    fwrite(huge, 1, 16, f);
    fclose(f);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    f = fopen(st_path, "wb");
    unsigned char past[12] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    fwrite(past, 1, 12, f);
    fclose(f);
    cr_assert_eq(load_rc(), RECUR_ETRUNCATED);
    f = fopen(st_path, "wb");
    fwrite(past, 1, 5, f);
    fclose(f);
    cr_assert_eq(load_rc(), RECUR_ETRUNCATED);
    f = fopen(st_path, "wb");
    unsigned char junk[14] = {6, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '"', ':', '['};
    fwrite(junk, 1, 14, f);
    fclose(f);
    cr_assert_eq(load_rc(), RECUR_EFORMAT);
    unlink(st_path);
    cr_assert_eq(load_rc(), RECUR_EIO);
    recur_model_free(seeded);
    free(sp);
    free(d);
}

Test(safetensors, f16_and_bf16_convert)
{
    recur_model *seeded, *loaded;
    st_spec *sp;
    unsigned char *d;
    size_t len;
    int n = golden(&seeded, &sp, &d, &len);
    /* embed (tensor 0) as F16 and norm_f (tensor 1) as BF16: halve their byte ranges */
    unsigned char *d2 = malloc(len);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t count = (sp[i].end - sp[i].begin) / 4;
        const float *src = (const float *)(d + sp[i].begin);
        sp[i].begin = off;
        if (i == 0 || i == 1) {
            snprintf(sp[i].dtype, sizeof sp[i].dtype, i == 0 ? "F16" : "BF16");
            for (size_t j = 0; j < count; j++) {
                uint16_t h;
                if (i == 0) { _Float16 x = (_Float16)src[j]; memcpy(&h, &x, 2); }
                else { uint32_t b; memcpy(&b, &src[j], 4); h = (uint16_t)(b >> 16); }
                memcpy(d2 + off + 2 * j, &h, 2);
            }
            off += count * 2;
        } else {
            memcpy(d2 + off, src, count * 4);
            off += count * 4;
        }
        sp[i].end = off;
    }
    write_st(st_path, sp, n, d2, off, NULL);
    cr_assert_eq(recur_model_load(tmpdir, &loaded), 0);
    for (size_t j = 0; j < (size_t)40 * 24; j++)
        cr_assert_float_eq(loaded->embed[j], seeded->embed[j], 1e-4f + 1e-3f * fabsf(seeded->embed[j]));
    for (int j = 0; j < 24; j++) cr_assert_float_eq(loaded->norm_f[j], 1.0f, 0.0f); /* 1.0 is exact in bf16 */
    cr_assert_neq(recur_model_get_info(loaded)->fingerprint, recur_model_get_info(seeded)->fingerprint);
    recur_model_free(loaded);
    recur_model_free(seeded);
    free(sp);
    free(d);
    free(d2);
}

/* ---------------------------------------------------------------- half weights kept half */

/* Write config cfg and a weights file of the model seeded with `seed` into tmpdir, every tensor
 * in dtype ("F32", "F16", "BF16") except tensor number f32_index (-1: none), kept F32. */
static void write_model_files(const char *cfg, uint64_t seed, const char *dtype, int f32_index)
{
    FILE *f = fopen(cfg_path, "w");
    fputs(cfg, f);
    fclose(f);
    recur_model *m;
    recur_config c;
    cr_assert_eq(recur__config_parse(cfg, strlen(cfg), &c), 0);
    cr_assert_eq(recur__model_alloc(&c, RECUR_WT_F32, &m), 0);
    recur__model_seed(m, seed);
    st_spec *sp = calloc(512, sizeof *sp);
    unsigned char *d = malloc(m->arena_floats * 4);
    size_t off = 0;
    int n = 0;
    recur_weight_ref ref;
    const recur_wtype hwt = !strcmp(dtype, "BF16") ? RECUR_WT_BF16 : RECUR_WT_F16;
    for (int l = -1; l < m->cfg.n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++)
            if (recur__weight(m, l, t, &ref)) {
                int half = strcmp(dtype, "F32") != 0 && n != f32_index;
                snprintf(sp[n].name, sizeof sp[n].name, "%s", ref.name);
                snprintf(sp[n].dtype, sizeof sp[n].dtype, "%s", half ? dtype : "F32");
                sp[n].ndim = ref.ndim;
                sp[n].shape[0] = ref.shape[0];
                sp[n].shape[1] = ref.shape[1];
                sp[n].begin = off;
                for (size_t i = 0; i < ref.n; i++) {
                    if (half) {
                        uint16_t h = recur__float_to_half(ref.ptr[i], hwt);
                        memcpy(d + off + 2 * i, &h, 2);
                    } else {
                        memcpy(d + off + 4 * i, &ref.ptr[i], 4);
                    }
                }
                off += ref.n * (half ? 2 : 4);
                sp[n].end = off;
                n++;
            }
    write_st(st_path, sp, n, d, off, NULL);
    recur_model_free(m);
    free(sp);
    free(d);
}

/* The same file loaded with its matrices kept half (h) and widened to fp32 (w) computes the same
 * bits: prefill logits, step logits, batched step logits, and the states (snapshots) after. */
static void expect_same_bits(const recur_model *h, const recur_model *w)
{
    const int vocab = h->cfg.vocab_size, B = 3, T = 7;
    cr_assert_eq(recur_model_get_info(h)->fingerprint, recur_model_get_info(w)->fingerprint);
    recur_workspace *wsh, *wsw;
    cr_assert_eq(recur_workspace_create(h, B, &wsh), 0);
    cr_assert_eq(recur_workspace_create(w, B, &wsw), 0);
    recur_state *sh[3], *sw[3];
    for (int i = 0; i < B; i++) {
        cr_assert_eq(recur_state_create(h, &sh[i]), 0);
        cr_assert_eq(recur_state_create(w, &sw[i]), 0);
    }
    float *lh = malloc(sizeof(float) * T * vocab), *lw = malloc(sizeof(float) * T * vocab);
    int32_t tok[7] = {1, 5, 9, 2, 33, 0, 17};
    cr_assert_eq(recur_model_prefill(h, wsh, sh[0], tok, T, lh), 0);
    cr_assert_eq(recur_model_prefill(w, wsw, sw[0], tok, T, lw), 0);
    cr_assert_eq(memcmp(lh, lw, sizeof(float) * T * vocab), 0, "prefill logits differ");
    for (int t = 0; t < 4; t++) {
        cr_assert_eq(recur_model_step(h, wsh, sh[1], tok[t], lh), 0);
        cr_assert_eq(recur_model_step(w, wsw, sw[1], tok[t], lw), 0);
        cr_assert_eq(memcmp(lh, lw, sizeof(float) * vocab), 0, "step %d logits differ", t);
        cr_assert_eq(recur_model_step_batch(h, wsh, sh, tok + t, B, lh), 0);
        cr_assert_eq(recur_model_step_batch(w, wsw, sw, tok + t, B, lw), 0);
        cr_assert_eq(memcmp(lh, lw, sizeof(float) * B * vocab), 0, "batched step %d logits differ", t);
    }
    for (int i = 0; i < B; i++) {
        size_t n = recur_snapshot_size(sh[i]), k1, k2;
        cr_assert_eq(n, recur_snapshot_size(sw[i]));
        uint8_t *a = malloc(n), *b = malloc(n);
        cr_assert_eq(recur_snapshot_write(sh[i], a, n, &k1), 0);
        cr_assert_eq(recur_snapshot_write(sw[i], b, n, &k2), 0);
        cr_assert_eq(memcmp(a, b, n), 0, "state %d differs", i);
        free(a);
        free(b);
        recur_state_destroy(sh[i]);
        recur_state_destroy(sw[i]);
    }
    free(lh);
    free(lw);
    recur_workspace_free(wsh);
    recur_workspace_free(wsw);
}

static const char *tied_cfg =
    "{\"name\":\"tied\",\"vocab_size\":40,\"d_model\":24,\"n_layers\":2,\"n_heads\":2,\"head_k\":8,"
    "\"head_v\":6,\"d_ff\":20,\"mixers\":[\"gla\",\"gated_deltanet\"],\"tied_embeddings\":true,"
    "\"max_context\":80,\"norm_eps\":1e-5}";

Test(safetensors, half_files_stay_half_and_compute_the_fp32_bits)
{
    const char *cfgs[] = {hybrid_cfg, tied_cfg};
    const char *dts[] = {"F16", "BF16"};
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 2; k++) {
            write_model_files(cfgs[c], 11 + c, dts[k], -1);
            recur_model *h, *w;
            cr_assert_eq(recur__model_load_files_opt(cfg_path, st_path, 1, &h), 0);
            cr_assert_eq(recur__model_load_files_opt(cfg_path, st_path, 0, &w), 0);
            /* recur_model_load keeps half too */
            recur_model *d;
            cr_assert_eq(recur_model_load(tmpdir, &d), 0);
            cr_assert_str_eq(recur_model_get_info(d)->weights_dtype, dts[k]);
            recur_model_free(d);
            const recur_model_info *ih = recur_model_get_info(h), *iw = recur_model_get_info(w);
            cr_assert_eq(h->wtype, k == 0 ? RECUR_WT_F16 : RECUR_WT_BF16);
            cr_assert_eq(w->wtype, RECUR_WT_F32);
            cr_assert_str_eq(ih->weights_dtype, dts[k]);
            cr_assert_str_eq(iw->weights_dtype, "F32");
            cr_assert_eq(ih->n_params, iw->n_params);
            /* the matrices are nearly all of the weights here: well under 3/4 of the fp32 bytes */
            cr_assert_lt(ih->weight_bytes * 4, iw->weight_bytes * 3, "%zu vs %zu", ih->weight_bytes,
                         iw->weight_bytes);
            expect_same_bits(h, w);
            recur_model_free(h);
            recur_model_free(w);
        }
}

Test(safetensors, mixed_dtype_matrices_fall_back_to_fp32)
{
    /* tensors: 0 embed, 1 norm_f, 2 lm_head, 3 layers.0.attn_norm, 4 layers.0.mixer.q_proj, ...
     * q_proj F32, every other tensor F16: one matrix type cannot hold both, so everything is
     * widened; an F32 norm alone keeps the matrices half */
    recur_model *h, *w;
    write_model_files(hybrid_cfg, 5, "F16", 4);
    cr_assert_eq(recur_model_load(tmpdir, &h), 0);
    cr_assert_str_eq(recur_model_get_info(h)->weights_dtype, "F32");
    recur_model_free(h);
    write_model_files(hybrid_cfg, 5, "F16", 3);
    cr_assert_eq(recur__model_load_files_opt(cfg_path, st_path, 1, &h), 0);
    cr_assert_eq(recur__model_load_files_opt(cfg_path, st_path, 0, &w), 0);
    cr_assert_str_eq(recur_model_get_info(h)->weights_dtype, "F16");
    expect_same_bits(h, w);
    recur_model_free(h);
    recur_model_free(w);
}

Test(safetensors, corrupt_half_files_are_rejected)
{
    /* a half file whose matrices would stay half is validated like any other: a non-finite
     * half (inf, NaN) in a matrix or elsewhere, a short file, a byte range of the wrong size */
    write_model_files(hybrid_cfg, 5, "F16", -1);
    FILE *f = fopen(st_path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size);
    cr_assert_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
    size_t data0 = 8 + (size_t)hl;
    const uint16_t bad[] = {0x7c00 /* +inf */, 0xfe01 /* NaN */};
    /* the last bytes of the file are the last tensor's (down_proj of the last layer); tensors
     * 0 embed [40][24], 1 norm_f [24], 2 lm_head [40][24] come first */
    size_t where[] = {(size_t)size - 2, data0 + 2 * 40 * 24 + 2 * 24 + 2 * 10}; /* down_proj, lm_head */
    for (int b = 0; b < 2; b++)
        for (int w = 0; w < 2; w++) {
            unsigned char *c = malloc((size_t)size);
            memcpy(c, buf, (size_t)size);
            memcpy(c + where[w], &bad[b], 2);
            f = fopen(st_path, "wb");
            fwrite(c, 1, (size_t)size, f);
            fclose(f);
            cr_assert_eq(load_rc(), RECUR_EFORMAT, "bad half %04x at %zu", bad[b], where[w]);
            free(c);
        }
    f = fopen(st_path, "wb");
    fwrite(buf, 1, (size_t)size - 1, f); /* one byte short */
    fclose(f);
    cr_assert_eq(load_rc(), RECUR_ETRUNCATED);
    f = fopen(st_path, "wb");
    fwrite(buf, 1, data0 + 100, f); /* cut inside the data */
    fclose(f);
    cr_assert_eq(load_rc(), RECUR_ETRUNCATED);
    free(buf);
}


/* ---------------------------------------------------------------- forms agree */

static void batch_equals_single(const char *cfg)
{
    enum { B = 12, STEPS = 12 }; /* bit-identity itself: tests/unit/test_batch_identity.c */
    recur_model *m;
    recur_workspace *ws;
    cr_assert_eq(recur_model_init_seed(cfg, 11, &m), 0);
    cr_assert_eq(recur_workspace_create(m, 16, &ws), 0);
    int vocab = m->cfg.vocab_size;
    recur_state *a[B], *b[B];
    for (int i = 0; i < B; i++) {
        cr_assert_eq(recur_state_create(m, &a[i]), 0);
        cr_assert_eq(recur_state_create(m, &b[i]), 0);
    }
    float *lb = malloc(sizeof(float) * B * vocab), *ls = malloc(sizeof(float) * vocab);
    /* sessions at different positions: session i starts after i prefilled tokens */
    for (int i = 0; i < B; i++) {
        int32_t pre[B];
        for (int j = 0; j < i; j++) pre[j] = (7 * i + 3 * j) % vocab;
        cr_assert_eq(recur_model_prefill(m, ws, a[i], pre, i, NULL), 0);
        cr_assert_eq(recur_state_copy(b[i], a[i]), 0);
    }
    double worst = 0;
    for (int t = 0; t < STEPS; t++) {
        int32_t tok[B];
        for (int i = 0; i < B; i++) tok[i] = (5 * t + 11 * i + 1) % vocab;
        cr_assert_eq(recur_model_step_batch(m, ws, a, tok, B, lb), 0);
        for (int i = 0; i < B; i++) {
            cr_assert_eq(recur_model_step(m, ws, b[i], tok[i], ls), 0);
            double e = rel_rms(lb + (size_t)i * vocab, ls, (size_t)vocab);
            if (e > worst) worst = e;
            cr_assert_eq(recur_state_tokens_seen(a[i]), recur_state_tokens_seen(b[i]));
        }
    }
    cr_assert_lt(worst, 1e-5, "batch vs single rel rms %g", worst);
    /* a batch with a bad token or a repeated state changes nothing */
    int32_t bad[B] = {0, 1, vocab, 2, 3};
    uint64_t seen = recur_state_tokens_seen(a[0]);
    cr_assert_eq(recur_model_step_batch(m, ws, a, bad, B, lb), RECUR_ETOKEN);
    recur_state *dup[2] = {a[0], a[0]};
    cr_assert_eq(recur_model_step_batch(m, ws, dup, bad, 2, lb), RECUR_EINVAL);
    cr_assert_eq(recur_model_step_batch(m, ws, a, bad, 17, lb), RECUR_ESHAPE);
    cr_assert_eq(recur_state_tokens_seen(a[0]), seen);
    for (int i = 0; i < B; i++) {
        recur_state_destroy(a[i]);
        recur_state_destroy(b[i]);
    }
    free(lb);
    free(ls);
    recur_workspace_free(ws);
    recur_model_free(m);
}

Test(forms, batch_equals_single_every_mixer) { batch_equals_single(hybrid_cfg); }

Test(forms, prefill_then_step_equals_steps)
{
    recur_model *m;
    recur_workspace *ws;
    recur_state *a, *b;
    cr_assert_eq(recur_model_init_seed(hybrid_cfg, 5, &m), 0);
    cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
    cr_assert_eq(recur_state_create(m, &a), 0);
    cr_assert_eq(recur_state_create(m, &b), 0);
    int vocab = m->cfg.vocab_size;
    enum { N = 70 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 13 + 5) % vocab;
    float *lp = malloc(sizeof(float) * N * vocab), *ls = malloc(sizeof(float) * N * vocab);
    cr_assert_eq(recur_model_prefill(m, ws, a, tok, 30, lp), 0);
    cr_assert_eq(recur_model_prefill(m, ws, a, tok + 30, N - 31, lp + 30 * vocab), 0);
    cr_assert_eq(recur_model_step(m, ws, a, tok[N - 1], lp + (N - 1) * vocab), 0);
    for (int i = 0; i < N; i++) cr_assert_eq(recur_model_step(m, ws, b, tok[i], ls + (size_t)i * vocab), 0);
    double e = rel_rms(lp, ls, (size_t)N * vocab);
    cr_assert_lt(e, 1e-5, "prefill vs steps rel rms %g", e);
    cr_assert_eq(recur_state_tokens_seen(a), N);
    /* context bound of the softmax layer: 80 tokens */
    int32_t more[20] = {0};
    cr_assert_eq(recur_model_prefill(m, ws, a, more, 11, NULL), RECUR_ECONTEXT);
    cr_assert_eq(recur_model_prefill(m, ws, a, more, 10, NULL), 0);
    cr_assert_eq(recur_model_step(m, ws, a, 0, ls), RECUR_ECONTEXT);
    int32_t badtok[3] = {1, -1, 2};
    cr_assert_eq(recur_model_prefill(m, ws, b, badtok, 3, NULL), RECUR_ETOKEN);
    cr_assert_eq(recur_state_tokens_seen(b), N);
    recur_state_destroy(a);
    recur_state_destroy(b);
    free(lp);
    free(ls);
    recur_workspace_free(ws);
    recur_model_free(m);
}

/* recur_model_prefill_tail: the LM head on the last n_tail positions only; those rows, the
 * state (a following step's logits) the same bits as a full prefill's, across prefill pieces. */
Test(forms, prefill_tail_rows_are_the_full_prefills_bits)
{
    recur_model *m;
    recur_workspace *ws;
    cr_assert_eq(recur_model_init_seed(TINY("\"gated_deltanet\",\"gla\",\"linear\"", 3), 3, &m), 0);
    cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
    const int vocab = m->cfg.vocab_size;
    enum { N = 600 }; /* three prefill pieces: 256, 256, 88 */
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7 + 3) % vocab;
    float *full = malloc(sizeof(float) * N * vocab), *tail = malloc(sizeof(float) * N * vocab);
    float next_full[64], next_tail[64];
    recur_state *a;
    cr_assert_eq(recur_state_create(m, &a), 0);
    cr_assert_eq(recur_model_prefill(m, ws, a, tok, N, full), 0);
    cr_assert_eq(recur_model_step(m, ws, a, 1, next_full), 0);
    const int64_t tails[] = {0, 1, 2, 88, 89, 300, N};
    for (size_t t = 0; t < sizeof tails / sizeof *tails; t++) {
        int64_t k = tails[t];
        recur_state *b;
        cr_assert_eq(recur_state_create(m, &b), 0);
        cr_assert_eq(recur_model_prefill_tail(m, ws, b, tok, N, k, k ? tail : NULL), 0);
        cr_assert_eq(memcmp(tail, full + (size_t)(N - k) * vocab, sizeof(float) * (size_t)k * vocab), 0,
                     "tail %lld", (long long)k);
        cr_assert_eq(recur_state_tokens_seen(b), N);
        cr_assert_eq(recur_model_step(m, ws, b, 1, next_tail), 0);
        cr_assert_eq(memcmp(next_tail, next_full, sizeof(float) * (size_t)vocab), 0, "tail %lld", (long long)k);
        recur_state_destroy(b);
    }
    cr_assert_eq(recur_model_prefill_tail(m, ws, a, tok, 3, 4, tail), RECUR_EINVAL);
    cr_assert_eq(recur_model_prefill_tail(m, ws, a, tok, 3, 1, NULL), RECUR_EINVAL);
    cr_assert_eq(recur_state_tokens_seen(a), N + 1);
    recur_state_destroy(a);
    free(full);
    free(tail);
    recur_workspace_free(ws);
    recur_model_free(m);
}

/* ---------------------------------------------------------------- snapshots */

Test(snapshot, round_trip_and_corruption)
{
    recur_model *m, *other;
    recur_workspace *ws;
    recur_state *s, *t, *o;
    cr_assert_eq(recur_model_init_seed(hybrid_cfg, 5, &m), 0);
    cr_assert_eq(recur_model_init_seed(hybrid_cfg, 6, &other), 0);
    cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
    cr_assert_eq(recur_state_create(m, &s), 0);
    cr_assert_eq(recur_state_create(m, &t), 0);
    cr_assert_eq(recur_state_create(other, &o), 0);
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    cr_assert_eq(recur_model_prefill(m, ws, s, tok, 9, NULL), 0);
    size_t n = recur_snapshot_size(s), w;
    uint8_t *buf = malloc(n + 8), *buf2 = malloc(n + 8);
    cr_assert_eq(recur_snapshot_write(s, buf, n - 1, &w), RECUR_ESHAPE);
    cr_assert_eq(recur_snapshot_write(s, buf, n, &w), 0);
    cr_assert_eq(w, n);
    cr_assert_eq(memcmp(buf, "RECURST1", 8), 0);

    /* t holds a different state; every bad snapshot leaves it exactly as it was */
    cr_assert_eq(recur_model_prefill(m, ws, t, tok, 4, NULL), 0);
    size_t tn = recur_snapshot_size(t);
    uint8_t *before = malloc(tn), *after = malloc(tn);
    cr_assert_eq(recur_snapshot_write(t, before, tn, &w), 0);
    struct { size_t at; uint8_t x; int want; } flips[] = {
        {0, 1, RECUR_EFORMAT},           /* magic */
        {8, 1, RECUR_EFORMAT},           /* version */
        /* a flipped bit past the framing is the checksum's, whichever field it hits (a foreign
         * model's intact snapshot is EMISMATCH below; test_snapshot_checks.c has the rest) */
        {12, 1, RECUR_ECHECKSUM},        /* n_layers */
        {16, 1, RECUR_ECHECKSUM},        /* fingerprint */
        {24, 1, RECUR_ECHECKSUM},        /* tokens_seen */
        {32, 4, RECUR_ETRUNCATED},       /* payload length: says more than there is */
        {45, 0x40, RECUR_ECHECKSUM},     /* payload */
        {n - 1, 1, RECUR_ECHECKSUM},     /* checksum */
    };
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(buf2, buf, n);
        buf2[flips[i].at] ^= flips[i].x;
        cr_assert_eq(recur_snapshot_read(t, buf2, n), flips[i].want, "flip at %zu", flips[i].at);
    }
    cr_assert_eq(recur_snapshot_read(t, buf, n - 1), RECUR_ETRUNCATED);
    cr_assert_eq(recur_snapshot_read(t, buf, 20), RECUR_ETRUNCATED);
    memcpy(buf2, buf, n);
    buf2[n] = 0;
    cr_assert_eq(recur_snapshot_read(t, buf2, n + 1), RECUR_EFORMAT);
    cr_assert_eq(recur_snapshot_read(o, buf, n), RECUR_EMISMATCH); /* foreign model */
    cr_assert_eq(recur_snapshot_write(t, after, tn, &w), 0);
    cr_assert_eq(memcmp(before, after, tn), 0, "a rejected snapshot changed the state");
    cr_assert_eq(recur_state_tokens_seen(t), 4);

    /* round trip: same bytes, same next logits */
    cr_assert_eq(recur_snapshot_read(t, buf, n), 0);
    cr_assert_eq(recur_state_tokens_seen(t), 9);
    cr_assert_eq(recur_snapshot_write(t, buf2, n, &w), 0);
    cr_assert_eq(memcmp(buf, buf2, n), 0);
    float l1[40], l2[40];
    cr_assert_eq(recur_model_step(m, ws, s, 3, l1), 0);
    cr_assert_eq(recur_model_step(m, ws, t, 3, l2), 0);
    cr_assert_eq(memcmp(l1, l2, sizeof l1), 0);
    /* reset and copy */
    recur_state_reset(t);
    cr_assert_eq(recur_state_tokens_seen(t), 0);
    cr_assert_eq(recur_snapshot_size(t), 40 + m->rec_floats * 4 + 8);
    cr_assert_eq(recur_state_copy(o, s), RECUR_EMISMATCH);
    free(buf); free(buf2); free(before); free(after);
    recur_state_destroy(s);
    recur_state_destroy(t);
    recur_state_destroy(o);
    recur_workspace_free(ws);
    recur_model_free(m);
    recur_model_free(other);
}

/* ---------------------------------------------------------------- sampling */

Test(sampling, greedy_ties_and_errors)
{
    float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f}, scratch[10];
    recur_sampler_params p = {.temperature = 0.0f};
    uint64_t rng = 1;
    cr_assert_eq(recur_sample(l, 5, &p, &rng, scratch), 1);
    cr_assert_neq(rng, 1u, "one draw per call, also when greedy");
    l[2] = NAN;
    cr_assert_eq(recur_sample(l, 5, &p, &rng, scratch), RECUR_ENONFINITE);
    cr_assert_eq(recur_sample(l, 0, &p, &rng, scratch), RECUR_EINVAL);
    cr_assert_eq(recur_sample(NULL, 5, &p, &rng, scratch), RECUR_EINVAL);
}

Test(sampling, sampler_seed_is_one_splitmix64_draw_never_zero)
{
    /* splitmix64's first output from state 0 (Vigna's reference), already odd */
    cr_assert_eq(recur_sampler_seed(0), 0xe220a8397b1dcdafULL);
    for (uint64_t s = 0; s < 1000; s++) {
        uint64_t x = s * 0x9e3779b97f4a7c15ULL; /* about half of the raw draws are even */
        cr_assert_eq(recur_sampler_seed(x) & 1u, 1u);
    }
}

Test(sampling, seeded_top_k_top_p)
{
    enum { NV = 8, DRAWS = 4000 };
    float l[NV], scratch[2 * NV];
    for (int i = 0; i < NV; i++) l[i] = (float)(NV - i) * 0.5f; /* token 0 most likely */
    recur_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
    /* same seed, same sequence; a different seed differs */
    uint64_t r1 = 42, r2 = 42, r3 = 43;
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) {
        int a = recur_sample(l, NV, &p, &r1, scratch), b = recur_sample(l, NV, &p, &r2, scratch);
        int c = recur_sample(l, NV, &p, &r3, scratch);
        same &= a == b;
        diff |= a != c;
    }
    cr_assert(same);
    cr_assert(diff);
    /* plain temperature: frequencies follow softmax(l) */
    int count[NV] = {0};
    uint64_t r = 7;
    for (int i = 0; i < DRAWS; i++) count[recur_sample(l, NV, &p, &r, scratch)]++;
    double z = 0;
    for (int i = 0; i < NV; i++) z += exp(l[i]);
    for (int i = 0; i < NV; i++) {
        double want = exp(l[i]) / z * DRAWS;
        cr_assert(fabs(count[i] - want) < 5 * sqrt(want) + 5, "token %d: %d vs %.1f", i, count[i], want);
    }
    /* top-k 3: only the three most likely */
    p.top_k = 3;
    for (int i = 0; i < DRAWS; i++) cr_assert_lt(recur_sample(l, NV, &p, &r, scratch), 3);
    /* top-p: mass of token 0 is ~0.39 and 0+1 ~0.63, so p=0.5 keeps exactly tokens 0 and 1 */
    p.top_k = 0;
    p.top_p = 0.5f;
    int seen[NV] = {0};
    for (int i = 0; i < DRAWS; i++) seen[recur_sample(l, NV, &p, &r, scratch)]++;
    cr_assert(seen[0] > 0 && seen[1] > 0);
    for (int i = 2; i < NV; i++) cr_assert_eq(seen[i], 0);
    /* top_k 1 is greedy at any temperature */
    p.top_k = 1;
    p.top_p = 1.0f;
    p.temperature = 5.0f;
    for (int i = 0; i < 100; i++) cr_assert_eq(recur_sample(l, NV, &p, &r, scratch), 0);
}

Test(sampling, vocab_limit_never_draws_padded_ids)
{
    /* the padding (ids 6, 7) holds the largest logits: without the limit it would win */
    enum { NV = 8, NL = 6, DRAWS = 4000 };
    float l[NV] = {0.5f, 1.0f, -0.5f, 0.25f, 0.75f, 0.0f, 9.0f, 8.0f}, scratch[2 * NV];
    recur_sampler_params p = {.temperature = 0.0f, .vocab_limit = NL};
    uint64_t r = 5;
    cr_assert_eq(recur_sample(l, NV, &p, &r, scratch), 1, "greedy: the argmax of the allowed ids");
    /* every parameter set draws what sampling the first NL logits alone draws, draw for draw */
    const recur_sampler_params sets[] = {{1.0f, 0, 1.0f, NL}, {3.0f, 4, 1.0f, NL}, {2.0f, 0, 0.8f, NL},
                                         {50.0f, 0, 1.0f, NL}};
    for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
        recur_sampler_params q = sets[k];
        q.vocab_limit = 0;
        uint64_t ra = 11 + k, rb = 11 + k;
        for (int i = 0; i < DRAWS; i++) {
            int a = recur_sample(l, NV, &sets[k], &ra, scratch), b = recur_sample(l, NL, &q, &rb, scratch);
            cr_assert_eq(a, b, "set %zu draw %d", k, i);
            cr_assert_lt(a, NL);
        }
        cr_assert_eq(ra, rb);
    }
    /* a limit at or past the vocabulary, or <= 0, is off */
    p.vocab_limit = NV;
    cr_assert_eq(recur_sample(l, NV, &p, &r, scratch), 6);
    p.vocab_limit = -1;
    cr_assert_eq(recur_sample(l, NV, &p, &r, scratch), 6);
    /* a NaN in the padding is still an error: the logits are the model's, all of them */
    l[7] = NAN;
    p.vocab_limit = NL;
    cr_assert_eq(recur_sample(l, NV, &p, &r, scratch), RECUR_ENONFINITE);
}

Test(sampling, log_softmax_normalises)
{
    float l[4] = {1000.0f, 1000.0f, -1000.0f, 0.0f}, o[4];
    recur_log_softmax(l, 4, o);
    cr_assert_float_eq(o[0], -logf(2.0f), 1e-6f);
    cr_assert_float_eq(o[1], -logf(2.0f), 1e-6f);
    cr_assert(o[2] < -1000.0f && isfinite(o[2]));
}

/* ---------------------------------------------------------------- memory and threads */

#include <pthread.h>
#include <sys/mman.h>

static size_t resident_pages(const void *p, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (bytes + page - 1) / page, r = 0;
    unsigned char *vec = malloc(n);
    cr_assert_eq(mincore((void *)p, bytes, vec), 0);
    for (size_t i = 0; i < n; i++) r += vec[i] & 1;
    free(vec);
    return r;
}

Test(state, kv_cache_pages_touched_only_as_used)
{
    const char *cfg = "{\"vocab_size\":50,\"d_model\":32,\"n_layers\":1,\"n_heads\":4,\"head_k\":64,"
                      "\"head_v\":64,\"d_ff\":32,\"mixers\":[\"softmax\"],\"max_context\":8192}";
    recur_model *m;
    recur_workspace *ws;
    recur_state *s;
    cr_assert_eq(recur_model_init_seed(cfg, 1, &m), 0);
    cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
    cr_assert_eq(recur_state_create(m, &s), 0);
    size_t bytes = (size_t)8192 * 4 * 64 * sizeof(float); /* 8 MiB per cache */
    cr_assert_eq(resident_pages(s->kcache[0], bytes), 0);
    int32_t tok[40] = {0};
    cr_assert_eq(recur_model_prefill(m, ws, s, tok, 40, NULL), 0); /* 40 rows of 1 KiB */
    size_t r = resident_pages(s->kcache[0], bytes);
    cr_assert(r >= 1 && r <= 11, "%zu pages resident after 40 tokens", r);
    recur_state_reset(s);
    cr_assert_eq(resident_pages(s->kcache[0], bytes), 0, "reset gives the pages back");
    recur_state_destroy(s);
    recur_workspace_free(ws);
    recur_model_free(m);
}

typedef struct {
    const recur_model *m;
    float *logits; /* [20][vocab] */
    int rc;
} thread_job;

static void *run_job(void *arg)
{
    thread_job *j = arg;
    recur_workspace *ws;
    recur_state *s;
    int32_t tok[20];
    for (int i = 0; i < 20; i++) tok[i] = (i * 7 + 1) % j->m->cfg.vocab_size;
    j->rc = recur_workspace_create(j->m, 4, &ws);
    if (j->rc) return NULL;
    j->rc = recur_state_create(j->m, &s);
    for (int rep = 0; rep < 5 && !j->rc; rep++) {
        recur_state_reset(s);
        j->rc = recur_model_prefill(j->m, ws, s, tok, 10, j->logits);
        for (int i = 10; i < 20 && !j->rc; i++)
            j->rc = recur_model_step(j->m, ws, s, tok[i], j->logits + (size_t)i * j->m->cfg.vocab_size);
    }
    recur_state_destroy(s);
    recur_workspace_free(ws);
    return NULL;
}

Test(model, threads_share_one_model)
{
    recur_model *m;
    cr_assert_eq(recur_model_init_seed(hybrid_cfg, 3, &m), 0);
    size_t n = (size_t)20 * m->cfg.vocab_size;
    thread_job jobs[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (thread_job){.m = m, .logits = calloc(n, sizeof(float))};
        cr_assert_eq(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(jobs[i].rc, 0);
        cr_assert_eq(memcmp(jobs[i].logits, jobs[0].logits, n * sizeof(float)), 0);
    }
    for (int i = 0; i < 3; i++) free(jobs[i].logits);
    recur_model_free(m);
}

Test(state, destroy_after_model_free)
{
    /* a binding's garbage collector may free the model first: destroy must not need it */
    recur_model *m;
    recur_state *s;
    cr_assert_eq(recur_model_init_seed(hybrid_cfg, 1, &m), 0);
    cr_assert_eq(recur_state_create(m, &s), 0);
    recur_model_free(m);
    recur_state_destroy(s);
}

Test(forms, overflowing_weights_fail_no_more_in_prefill_than_in_step)
{
    /* fuzz finding: finite but absurd weights overflow the activations; the gates handed to the
     * chunkwise kernels stay finite, so prefill (like step) folds and returns garbage logits
     * instead of failing half-way */
    recur_model *m;
    recur_workspace *ws;
    recur_state *a, *b;
    cr_assert_eq(recur_model_init_seed(hybrid_cfg, 2, &m), 0);
    for (size_t i = 0; i < m->arena_floats; i++) m->arena[i] *= 1e30f; /* seeded: all fp32 */
    cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
    cr_assert_eq(recur_state_create(m, &a), 0);
    cr_assert_eq(recur_state_create(m, &b), 0);
    int32_t tok[4] = {1, 2, 3, 4};
    float *l = malloc(sizeof(float) * 4 * m->cfg.vocab_size);
    cr_assert_eq(recur_model_prefill(m, ws, a, tok, 4, l), 0);
    for (int i = 0; i < 4; i++) cr_assert_eq(recur_model_step(m, ws, b, tok[i], l), 0);
    cr_assert_eq(recur_state_tokens_seen(a), 4);
    free(l);
    recur_state_destroy(a);
    recur_state_destroy(b);
    recur_workspace_free(ws);
    recur_model_free(m);
}
