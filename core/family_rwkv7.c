/* family_rwkv7.c — RWKV-7 "Goose" Hugging Face folders in FLA's layout (model_family.h):
 * config.json with "model_type": "rwkv7" read as FLA's RWKV7Config defines it (its defaults for
 * absent keys), tensors under FLA's names (model.embeddings.weight, model.layers.N.attn.r_proj.weight,
 * model.layers.N.attn.w_lora.lora.0.weight, ...), onto layers of kind RECUR_MIXER_RWKV7
 * (block_rwkv7.h). tools/convert_rwkv7.py writes such a folder from BlinkDL's .pth.
 * docs/MODELS.md "RWKV-7" lists the keys, the defaults and what is refused. */
#include <stdio.h>
#include <string.h>
#include "hf_config.h"
#include "model_family.h"

#define MAX_D_MODEL 16384
#define MAX_D_FF 65536
#define MAX_RANK 16384

/* Keys recurd reads, and keys upstream accepts that change nothing recurd computes. */
static const recur__hfc_key keys[] = {
    {"model_type", HFC_READ}, {"vocab_size", HFC_READ}, {"hidden_size", HFC_READ},
    {"hidden_ratio", HFC_READ}, {"intermediate_size", HFC_READ}, {"num_hidden_layers", HFC_READ},
    {"head_dim", HFC_READ}, {"num_heads", HFC_READ}, {"decay_low_rank_dim", HFC_READ},
    {"gate_low_rank_dim", HFC_READ}, {"a_low_rank_dim", HFC_READ}, {"v_low_rank_dim", HFC_READ},
    {"hidden_act", HFC_READ}, {"norm_first", HFC_READ}, {"norm_bias", HFC_READ}, {"norm_eps", HFC_READ},
    {"attn", HFC_READ}, {"tie_word_embeddings", HFC_READ}, {"value_dim", HFC_READ},
    /* kernels (fuse_norm: FLA's fused kernels; recurd normalises kk as RWKV-LM does, x / max(|x|, 1e-12)),
     * training, generation and bookkeeping: no effect on the function computed */
    {"attn_mode", HFC_IGNORE}, {"fuse_norm", HFC_IGNORE},
    {"max_position_embeddings", HFC_IGNORE},
    {"auto_map", HFC_IGNORE}, {"tokenizer_class", HFC_IGNORE},
};

#define TRY(expr) do { if ((rc = (expr))) return rc; } while (0)

/* head size: head_dim decides where given (FLA's layer ignores num_heads then; FLA's converter
 * leaves a stale num_heads); head_dim null: hidden_size / num_heads; absent: 64 */
static int head_size(const recur__hfc *h, int64_t d, int64_t *N)
{
    int rc;
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(h->root, "head_dim");
    if (hd && cJSON_IsNull(hd)) {
        int64_t H;
        if (!recur__hfc_get(h, "num_heads")) return recur__hfc_refuse(h, "num_heads", "head_dim or num_heads must be given");
        TRY(recur__hfc_int(h, "num_heads", 1, 1, MAX_D_MODEL, &H));
        if (d % H) return recur__hfc_refuse(h, "num_heads", "must divide hidden_size");
        *N = d / H;
        return RECUR_OK;
    }
    TRY(recur__hfc_int(h, "head_dim", 64, 1, RECUR_MAX_DIM, N));
    if (d % *N) return recur__hfc_refuse(h, "head_dim", "must divide hidden_size");
    if (recur__hfc_get(h, "num_heads")) { /* read for its type and range only: head_dim decides */
        int64_t ignored;
        TRY(recur__hfc_int(h, "num_heads", 1, 1, MAX_D_MODEL, &ignored));
    }
    return RECUR_OK;
}

/* value_dim: absent, null, hidden_size, or a list of hidden_size per layer (FLA allows multiples) */
static int value_dim(const recur__hfc *h, int64_t d, int64_t L)
{
    const cJSON *v = recur__hfc_get(h, "value_dim");
    if (!v) return RECUR_OK;
    if (cJSON_IsNumber(v) && v->valuedouble == (double)d) return RECUR_OK;
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == (int)L) {
        int ok = 1;
        for (const cJSON *e = v->child; e; e = e->next) ok &= cJSON_IsNumber(e) && e->valuedouble == (double)d;
        if (ok) return RECUR_OK;
    }
    return recur__hfc_refuse(h, "value_dim", "hidden_size (or one hidden_size per layer) only: wider values are not implemented");
}

static int parse(const recur__hfc *h, recur_config *c)
{
    int rc;
    TRY(recur__hfc_check_keys(h, keys, (int)(sizeof keys / sizeof keys[0])));
    /* null LoRA ranks: FLA's layer derives them from hidden_size and head_dim; not implemented */
    static const char *const ranks[] = {"decay_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim"};
    for (int i = 0; i < 4; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(h->root, ranks[i]);
        if (it && cJSON_IsNull(it)) return recur__hfc_refuse(h, ranks[i], "null (a derived rank) is not implemented: give the rank");
    }
    int64_t vocab, d, L, N, ff, rk[4];
    double ratio, eps;
    int tied, ln0, bias;
    const char *act;
    TRY(recur__hfc_int(h, "vocab_size", 32000, 2, RECUR_MAX_VOCAB, &vocab));
    TRY(recur__hfc_int(h, "hidden_size", 2048, 1, MAX_D_MODEL, &d));
    TRY(recur__hfc_int(h, "num_hidden_layers", 24, 1, RECUR_MAX_LAYERS, &L));
    TRY(head_size(h, d, &N));
    TRY(value_dim(h, d, L));
    TRY(recur__hfc_int(h, "decay_low_rank_dim", 64, 1, MAX_RANK, &rk[0]));
    TRY(recur__hfc_int(h, "a_low_rank_dim", 64, 1, MAX_RANK, &rk[1]));
    TRY(recur__hfc_int(h, "v_low_rank_dim", 16, 1, MAX_RANK, &rk[2]));
    TRY(recur__hfc_int(h, "gate_low_rank_dim", 128, 1, MAX_RANK, &rk[3]));
    TRY(recur__hfc_double(h, "norm_eps", 1e-5, 0, &eps));
    if (!(eps >= 1e-30 && eps < 1.0)) return recur__hfc_refuse(h, "norm_eps", "must be in [1e-30, 1)");
    if (!(eps * (double)N <= 1.0)) return recur__hfc_refuse(h, "norm_eps", "head_dim * norm_eps (the GroupNorm's eps) must be <= 1");
    TRY(recur__hfc_bool(h, "tie_word_embeddings", 0, &tied));
    TRY(recur__hfc_bool(h, "norm_first", 1, &ln0));
    TRY(recur__hfc_bool(h, "norm_bias", 1, &bias));
    if (!bias) return recur__hfc_refuse(h, "norm_bias", "LayerNorms without bias are not implemented");
    TRY(recur__hfc_string(h, "hidden_act", "sqrelu", 0, &act));
    if (strcmp(act, "sqrelu")) return recur__hfc_refuse(h, "hidden_act", "sqrelu only (the channel mix's relu^2)");
    if (recur__hfc_get(h, "attn")) return recur__hfc_refuse(h, "attn", "hybrid softmax-attention layers are not implemented");
    /* RWKV7FeedForward: intermediate_size, else int(hidden_size * hidden_ratio) rounded up to 32 */
    TRY(recur__hfc_double(h, "hidden_ratio", 4, 0, &ratio));
    if (!(ratio > 0 && ratio <= 64)) return recur__hfc_refuse(h, "hidden_ratio", "must be in (0, 64]");
    int64_t dflt_ff = (int64_t)((double)d * ratio);
    dflt_ff = 32 * ((dflt_ff + 31) / 32);
    TRY(recur__hfc_int(h, "intermediate_size", dflt_ff, 1, MAX_D_FF, &ff));

    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "rwkv7");
    snprintf(c->family, sizeof c->family, "rwkv7");
    c->vocab_size = (int)vocab;
    c->d_model = (int)d;
    c->n_layers = (int)L;
    c->n_heads = (int)(d / N);
    c->head_k = c->head_v = (int)N;
    c->d_ff = (int)ff;
    c->tied_embeddings = tied;
    c->norm_bias = 1;
    c->max_context = 4096; /* unused: no softmax layer */
    c->norm_eps = eps;
    for (int l = 0; l < L; l++) {
        c->mixers[l] = RECUR_MIXER_RWKV7;
        recur_block *b = &c->block[l];
        b->qk_heads = c->n_heads;
        b->beta_scale = 1.0f; /* unused by this block; the shared checks want them in range */
        b->gate_norm = 1.0f;
        b->gate_clamp = -1e30f;
        b->eps = eps;
        for (int i = 0; i < 4; i++) b->rw_ranks[i] = (int)rk[i];
        b->rw_ln0 = ln0;
        b->rw_gn_eps = eps * (double)N;
    }
    return RECUR_OK;
}

/* FLA's tensor names; the six token-shift mixes are stored [1][1][d] for our [d] */
static void role_name(const recur_config *c, int layer, int t, char *name, size_t cap, int64_t *file_shape,
                      int *file_ndim)
{
    static const char *const global[] = {"model.embeddings.weight", "model.norm.weight", "lm_head.weight",
                                         "model.norm.bias"};
    static const char *const roles[T_N_LAYER_TENSORS - T_RW_LN0_W] = {
        [T_RW_LN0_W - T_RW_LN0_W] = "pre_norm.weight", [T_RW_LN0_B - T_RW_LN0_W] = "pre_norm.bias",
        [T_RW_LN1_W - T_RW_LN0_W] = "attn_norm.weight", [T_RW_LN1_B - T_RW_LN0_W] = "attn_norm.bias",
        [T_RW_X_R - T_RW_LN0_W] = "attn.x_r", [T_RW_X_W - T_RW_LN0_W] = "attn.x_w",
        [T_RW_X_K - T_RW_LN0_W] = "attn.x_k", [T_RW_X_V - T_RW_LN0_W] = "attn.x_v",
        [T_RW_X_A - T_RW_LN0_W] = "attn.x_a", [T_RW_X_G - T_RW_LN0_W] = "attn.x_g",
        [T_RW_K_K - T_RW_LN0_W] = "attn.k_k", [T_RW_K_A - T_RW_LN0_W] = "attn.k_a",
        [T_RW_R_K - T_RW_LN0_W] = "attn.r_k", [T_RW_WR - T_RW_LN0_W] = "attn.r_proj.weight",
        [T_RW_WK - T_RW_LN0_W] = "attn.k_proj.weight", [T_RW_WV - T_RW_LN0_W] = "attn.v_proj.weight",
        [T_RW_WO - T_RW_LN0_W] = "attn.o_proj.weight", [T_RW_W1 - T_RW_LN0_W] = "attn.w_lora.lora.0.weight",
        [T_RW_W2 - T_RW_LN0_W] = "attn.w_lora.lora.2.weight", [T_RW_W0 - T_RW_LN0_W] = "attn.w_lora.lora.2.bias",
        [T_RW_V1 - T_RW_LN0_W] = "attn.v_lora.lora.0.weight", [T_RW_V2 - T_RW_LN0_W] = "attn.v_lora.lora.2.weight",
        [T_RW_V0 - T_RW_LN0_W] = "attn.v_lora.lora.2.bias", [T_RW_A1 - T_RW_LN0_W] = "attn.a_lora.lora.0.weight",
        [T_RW_A2 - T_RW_LN0_W] = "attn.a_lora.lora.2.weight", [T_RW_A0 - T_RW_LN0_W] = "attn.a_lora.lora.2.bias",
        [T_RW_G1 - T_RW_LN0_W] = "attn.g_lora.lora.0.weight", [T_RW_G2 - T_RW_LN0_W] = "attn.g_lora.lora.2.weight",
        [T_RW_GN_W - T_RW_LN0_W] = "attn.g_norm.weight", [T_RW_GN_B - T_RW_LN0_W] = "attn.g_norm.bias",
        [T_RW_LN2_W - T_RW_LN0_W] = "ffn_norm.weight", [T_RW_LN2_B - T_RW_LN0_W] = "ffn_norm.bias",
        [T_RW_FFN_X_K - T_RW_LN0_W] = "ffn.x_k", [T_RW_FFN_KEY - T_RW_LN0_W] = "ffn.key.weight",
        [T_RW_FFN_VALUE - T_RW_LN0_W] = "ffn.value.weight",
    };
    *file_ndim = 0;
    if (layer < 0) {
        snprintf(name, cap, "%s", t >= 0 && t < 4 ? global[t] : "?");
        return;
    }
    if (t >= T_RW_X_R && t <= T_RW_X_G) {
        file_shape[0] = file_shape[1] = 1;
        file_shape[2] = c->d_model;
        *file_ndim = 3;
    }
    const char *s = t >= T_RW_LN0_W && t < T_N_LAYER_TENSORS ? roles[t - T_RW_LN0_W] : NULL;
    snprintf(name, cap, "model.layers.%d.%s", layer, s ? s : "?");
}

int recur__family_rwkv7(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                        recur_model **out, char *err, size_t errlen)
{
    return recur__family_hf_load(config, config_len, ckpt, keep_half, parse, role_name, out, err, errlen);
}
