/* family_mamba2.c — Hugging Face Mamba-2 folders (model_family.h): config.json with
 * "model_type": "mamba2" read as transformers' Mamba2Config defines it (its defaults for absent
 * keys; FLA's spelling of the same keys — norm_eps, dt_limit, rmsnorm, norm_before_gate,
 * D_has_hdim — read too), tensors under transformers' names (backbone.embeddings.weight,
 * backbone.layers.N.mixer.in_proj.weight, ...), onto layers of kind RECUR_MIXER_MAMBA2
 * (block_mamba2.h). docs/MODELS.md "Mamba-2" lists the keys, the defaults and what is refused. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "hf_config.h"
#include "model_family.h"

/* Keys recurd reads, and keys upstream accepts that change nothing recurd computes. */
static const recur__hfc_key keys[] = {
    {"model_type", HFC_READ}, {"vocab_size", HFC_READ}, {"hidden_size", HFC_READ},
    {"state_size", HFC_READ}, {"num_hidden_layers", HFC_READ}, {"layer_norm_epsilon", HFC_READ},
    {"norm_eps", HFC_READ}, {"expand", HFC_READ}, {"conv_kernel", HFC_READ}, {"n_groups", HFC_READ},
    {"use_bias", HFC_READ}, {"use_conv_bias", HFC_READ}, {"hidden_act", HFC_READ},
    {"num_heads", HFC_READ}, {"head_dim", HFC_READ}, {"time_step_limit", HFC_READ},
    {"dt_limit", HFC_READ}, {"tie_word_embeddings", HFC_READ}, {"rmsnorm", HFC_READ},
    {"norm_before_gate", HFC_READ}, {"D_has_hdim", HFC_READ}, {"pad_vocab_size_multiple", HFC_READ},
    {"layer_types", HFC_READ},
    /* initialisation, training, kernels and generation: no effect on the function computed */
    {"residual_in_fp32", HFC_IGNORE}, {"time_step_rank", HFC_IGNORE},
    {"time_step_min", HFC_IGNORE}, {"time_step_max", HFC_IGNORE}, {"time_step_floor", HFC_IGNORE},
    {"rescale_prenorm_residual", HFC_IGNORE}, {"rms_norm", HFC_IGNORE},
    {"chunk_size", HFC_IGNORE}, {"conv_init", HFC_IGNORE}, {"A_init_range", HFC_IGNORE},
    {"dt_min", HFC_IGNORE}, {"dt_max", HFC_IGNORE}, {"dt_init_floor", HFC_IGNORE},
    {"fuse_norm", HFC_IGNORE},
};

/* A key present under both spellings must say the same thing. */
static int same_spelling(const recur__hfc *h, const char *a, const char *b)
{
    const cJSON *x = recur__hfc_get(h, a), *y = recur__hfc_get(h, b);
    if (!x || !y) return RECUR_OK;
    char *px = cJSON_PrintUnformatted(x), *py = cJSON_PrintUnformatted(y);
    int same = px && py && !strcmp(px, py);
    if (px) cJSON_free(px);
    if (py) cJSON_free(py);
    if (same || (cJSON_IsNumber(x) && cJSON_IsNumber(y) && x->valuedouble == y->valuedouble)) return RECUR_OK;
    return recur__errf(h->err, h->errlen, "%s: \"%s\" and \"%s\" are the same setting and disagree", h->file, a, b);
}

static int parse(const recur__hfc *h, recur_config *c)
{
    int rc;
    if ((rc = recur__hfc_check_keys(h, keys, (int)(sizeof keys / sizeof keys[0])))) return rc;
    if ((rc = same_spelling(h, "layer_norm_epsilon", "norm_eps"))) return rc;
    if ((rc = same_spelling(h, "time_step_limit", "dt_limit"))) return rc;

    int64_t vocab, d, N, L, expand, W, G, H, P, mult;
    int use_bias, conv_bias, tied, rmsnorm, nbg, d_hdim;
    double eps;
    const char *act;
    const char *eps_key = recur__hfc_get(h, "norm_eps") ? "norm_eps" : "layer_norm_epsilon";
    if ((rc = recur__hfc_int(h, "vocab_size", 32768, 2, RECUR_MAX_VOCAB, &vocab)) ||
        (rc = recur__hfc_int(h, "pad_vocab_size_multiple", 1, 1, 1 << 16, &mult)) ||
        (rc = recur__hfc_int(h, "hidden_size", 4096, 1, RECUR_MAX_DIM, &d)) ||
        (rc = recur__hfc_int(h, "state_size", 128, 1, RECUR_MAX_DIM, &N)) ||
        (rc = recur__hfc_int(h, "num_hidden_layers", 64, 1, RECUR_MAX_LAYERS, &L)) ||
        (rc = recur__hfc_int(h, "expand", 2, 1, 64, &expand)) ||
        (rc = recur__hfc_int(h, "conv_kernel", 4, 1, 1 << 20, &W)) ||
        (rc = recur__hfc_int(h, "n_groups", 8, 1, RECUR_MAX_DIM, &G)) ||
        (rc = recur__hfc_int(h, "num_heads", 128, 1, RECUR_MAX_DIM, &H)) ||
        (rc = recur__hfc_int(h, "head_dim", 64, 1, RECUR_MAX_DIM, &P)) ||
        (rc = recur__hfc_bool(h, "use_bias", 0, &use_bias)) ||
        (rc = recur__hfc_bool(h, "use_conv_bias", 1, &conv_bias)) ||
        (rc = recur__hfc_bool(h, "tie_word_embeddings", 0, &tied)) ||
        (rc = recur__hfc_bool(h, "rmsnorm", 1, &rmsnorm)) ||
        (rc = recur__hfc_bool(h, "norm_before_gate", 0, &nbg)) ||
        (rc = recur__hfc_bool(h, "D_has_hdim", 0, &d_hdim)) ||
        (rc = recur__hfc_double(h, eps_key, 1e-5, 0, &eps)) ||
        (rc = recur__hfc_string(h, "hidden_act", "silu", 0, &act)))
        return rc;
    if (strcmp(act, "silu") && strcmp(act, "swish"))
        return recur__hfc_refuse(h, "hidden_act", "silu only");
    if (!(eps >= 1e-30 && eps < 1.0)) /* a float: smaller would be 0 */
        return recur__hfc_refuse(h, eps_key, "the norms' eps must be in [1e-30, 1)");
    if (W < 2 || W > RECUR_MAX_CONV)
        return recur__hfc_refuse(h, "conv_kernel", "the causal conv needs 2 to RECUR_MAX_CONV (16) taps");
    if (H * P != expand * d)
        return recur__hfc_refuse(h, "num_heads",
                                 "num_heads * head_dim must equal expand * hidden_size (a gated MLP beside "
                                 "the SSM, state-spaces' d_ssm < d_inner, is not implemented)");
    if (H % G) return recur__hfc_refuse(h, "n_groups", "num_heads must be a multiple of n_groups");
    if ((vocab + mult - 1) / mult * mult > RECUR_MAX_VOCAB)
        return recur__hfc_refuse(h, "pad_vocab_size_multiple", "the padded vocabulary exceeds RECUR_MAX_VOCAB");

    /* dt limits: [lo, hi], 0 <= lo <= hi (hi may be Infinity) */
    const char *lim_key = recur__hfc_get(h, "dt_limit") ? "dt_limit" : "time_step_limit";
    double lim[2] = {0.0, INFINITY};
    int nlim;
    if ((rc = recur__hfc_numbers(h, lim_key, 2, 2, lim, &nlim))) return rc;
    if (nlim < 0) { lim[0] = 0.0; lim[1] = INFINITY; }
    if (isnan(lim[1]) || !(lim[0] >= 0.0 && lim[0] <= 1e30) || !(lim[1] >= lim[0]))
        return recur__hfc_refuse(h, lim_key, "the limits must be 0 <= min <= max, min <= 1e30 (max may be Infinity)");

    const cJSON *lt = recur__hfc_get(h, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)L)
            return recur__hfc_refuse(h, "layer_types", "a list with one entry per layer");
        for (const cJSON *e = lt->child; e; e = e->next)
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "mamba"))
                return recur__hfc_refuse(h, "layer_types", "every layer must be \"mamba\" (no attention layers)");
    }

    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "mamba2");
    snprintf(c->family, sizeof c->family, "mamba2");
    c->vocab_size = (int)((vocab + mult - 1) / mult * mult);
    c->d_model = (int)d;
    c->n_layers = (int)L;
    c->n_heads = (int)H;
    c->head_k = (int)N;
    c->head_v = (int)P;
    c->d_ff = 0;
    c->tied_embeddings = tied;
    c->max_context = 4096; /* unused: no softmax layer */
    c->norm_eps = eps;
    for (int l = 0; l < L; l++) {
        c->mixers[l] = RECUR_MIXER_MAMBA2;
        recur_block *b = &c->block[l];
        b->qk_heads = (int)H;
        b->beta_scale = 1.0f; /* unused by this block; the shared checks want them in range */
        b->gate_norm = 1.0f;
        b->gate_clamp = -1e30f;
        b->conv_size = (int)W;
        b->conv_bias = conv_bias;
        b->o_norm_weight = rmsnorm;
        b->eps = eps;
        b->ssm_groups = (int)G;
        b->norm_before_gate = nbg;
        b->D_per_channel = d_hdim;
        b->proj_bias = use_bias;
        b->dt_min = (float)lim[0];
        b->dt_max = (float)lim[1]; /* Infinity stays +inf: fminf(dt, inf) = dt */
    }
    return RECUR_OK;
}

/* transformers' tensor names; conv1d.weight is stored [conv_dim][1][W] for our [conv_dim][W] */
static void role_name(const recur_config *c, int layer, int t, char *name, size_t cap, int64_t *file_shape,
                      int *file_ndim)
{
    *file_ndim = 0;
    if (layer < 0) {
        snprintf(name, cap, "%s", t == 0 ? "backbone.embeddings.weight" : t == 1 ? "backbone.norm_f.weight" : "lm_head.weight");
        return;
    }
    static const char *const names[T_N_LAYER_TENSORS] = {
        [T_ATTN_NORM] = "norm.weight", [T_IN_PROJ] = "mixer.in_proj.weight", [T_IN_BIAS] = "mixer.in_proj.bias",
        [T_CONV] = "mixer.conv1d.weight", [T_CONV_BIAS] = "mixer.conv1d.bias", [T_DT_BIAS] = "mixer.dt_bias",
        [T_A_LOG] = "mixer.A_log", [T_D] = "mixer.D", [T_O_NORM] = "mixer.norm.weight",
        [T_O] = "mixer.out_proj.weight", [T_O_BIAS] = "mixer.out_proj.bias",
    };
    const char *s = t >= 0 && t < T_N_LAYER_TENSORS && names[t] ? names[t] : "?";
    if (t == T_CONV) {
        file_shape[0] = (int64_t)c->n_heads * c->head_v + 2 * (int64_t)c->block[layer].ssm_groups * c->head_k;
        file_shape[1] = 1;
        file_shape[2] = c->block[layer].conv_size;
        *file_ndim = 3;
    }
    snprintf(name, cap, "backbone.layers.%d.%s", layer, s);
}

int recur__family_mamba2(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                         recur_model **out, char *err, size_t errlen)
{
    return recur__family_hf_load(config, config_len, ckpt, keep_half, parse, role_name, out, err, errlen);
}
