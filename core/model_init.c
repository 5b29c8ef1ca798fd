/* model_init.c — a model from a config and a seed (docs/MODEL.md "Seeded initialisation"), for
 * tests and benchmarks of any size without a weights file.
 *
 * One splitmix64 stream, tensors in table order (embed, norm_f, lm_head if untied, then each
 * layer's tensors in the order of docs/MODEL.md): projections and embeddings uniform in
 * [-a, a], a = sqrt(3) * 0.02 (std 0.02); norm weights 1; A_log = log(u), u ~ U[1, 16];
 * dt_bias = log(expm1(u)), u ~ U[1e-3, 1e-1]. A model whose matrices are held as halves gets
 * each matrix value rounded to the half type (a seeded stand-in for an F16 / BF16 file). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "isa.h"
#include "model_internal.h"
#include "quant.h"

void recur__model_seed(recur_model *m, uint64_t seed)
{
    uint64_t s = seed;
    const double a = sqrt(3.0) * 0.02;
    recur_weight_ref ref;
    for (int l = -1; l < m->cfg.n_layers; l++)
        for (int t = 0; t < T_N_LAYER_TENSORS; t++) {
            if (!recur__weight(m, l, t, &ref)) continue;
            for (size_t i = 0; i < ref.n; i++) {
                double x;
                if (ref.is_norm) x = 1.0;
                else if (l >= 0 && t == T_A_LOG) x = log(1.0 + 15.0 * recur__uniform01(&s));
                else if (l >= 0 && t == T_DT_BIAS) x = log(expm1(1e-3 + (1e-1 - 1e-3) * recur__uniform01(&s)));
                else x = (2.0 * recur__uniform01(&s) - 1.0) * a;
                float f = (float)x;
                if (ref.half) {
                    ref.half[i] = recur__float_to_half(f, m->wtype);
                    f = recur__half_to_float(ref.half[i], m->wtype);
                }
                if (ref.ptr) ref.ptr[i] = f;
            }
        }
}

int recur_model_init_seed(const char *config_json, uint64_t seed, recur_model **out)
{
    return recur__model_init_seed_wtype(config_json, seed, RECUR_WT_F32, out);
}

int recur__model_init_seed_wtype(const char *config_json, uint64_t seed, recur_wtype wt, recur_model **out)
{
    if (!config_json || !out) return RECUR_EINVAL;
    if (recur__isa_check(NULL, 0)) return RECUR_EISA; /* a refused RECUR_ISA (isa.h) */
    if (recur__wtype_quant(wt)) { /* the fp32 seeded model, quantized */
        recur_model *f;
        int rc = recur__model_init_seed_wtype(config_json, seed, RECUR_WT_F32, &f);
        if (rc) return rc;
        rc = recur_model_quantize(f, recur__wtype_name(wt), out, NULL, 0);
        recur_model_free(f);
        return rc;
    }
    recur_config cfg;
    int rc = recur__config_parse(config_json, strlen(config_json), &cfg);
    if (rc) return rc;
    recur_model *m;
    rc = recur__model_alloc(&cfg, wt, &m);
    if (rc) return rc;
    recur__model_seed(m, seed);
    rc = recur__model_finish(m);
    if (rc) { recur_model_free(m); return rc; }
    snprintf(m->info.weights_origin, sizeof m->info.weights_origin, "seeded");
    *out = m;
    return RECUR_OK;
}
