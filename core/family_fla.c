/* family_fla.c — FLA's Hugging Face checkpoints (model_family.h): model_type gated_deltanet, gla,
 * delta_net (flash-linear-attention's fla/models/<type>/configuration and modeling files,
 * fla/layers/), docs/MODELS.md.
 *
 * The block (docs/MODELS.md has the equations):
 *   h = RMSNorm(x); q, k, v = q_proj h, k_proj h, v_proj h
 *   with use_short_conv: q, k, v = conv_size-tap causal depthwise convs of each (no bias: FLA's
 *   models never pass conv_bias), then SiLU (delta_net: on q, k only when qk_activation = silu;
 *   v always); without: gated_deltanet silu(q, k, v), delta_net qk_activation(q, k) and silu(v),
 *   gla: SiLU on q, k, v after the conv, nothing without it.
 *   gated_deltanet: q, k L2-normalised; heads num_heads (q, k) and num_v_heads (v, state, gates);
 *     beta = sigmoid(b_proj h) (x2 with allow_neg_eigval); g = -exp(A_log) softplus(a_proj h + dt_bias)
 *   delta_net: q, k through qk_activation (silu / relu / elu+1 / identity) and L2-normalised;
 *     beta = sigmoid(b_proj h) or 1 (use_beta false), x2 with allow_neg_eigval
 *   gla: gk = gk_proj.1(gk_proj.0 h) + bias (rank 16), g = logsigmoid(gk) / 16, clamped below
 *     at clamp_min when set
 *   o = RMSNorm(o) per head [* silu(g_proj h) with the output gate]; x += o_proj o
 *   x += down(silu(gate h2) * up h2), h2 = RMSNorm(x); logits = lm_head RMSNorm(x)
 * Keys: every key of the config classes is read or declared ignored below; anything else is
 * refused by name, and so is a value recurd does not implement (hybrid attn layers, another
 * hidden_act, a feature map, qk_norm sum, grouped k/v heads in gla, attnres). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "hf_config.h"
#include "model_family.h"

#define FLA_GLA_GATE_RANK 16   /* GatedLinearAttention's gate_low_rank_dim: the models never set it */
#define FLA_GLA_GATE_NORM 16.0f /* gate_logit_normalizer: likewise */
#define MAX_D_MODEL 16384
#define MAX_D_FF 65536

enum { FLA_GDN, FLA_GLA, FLA_DELTA };
#define GLA_UNFUSED_NORM 1 /* family_variant: gla's output norm is "g_norm", not "g_norm_swish_gate" */

/* Keys of transformers' PretrainedConfig and of every FLA config that change nothing here. */
static const recur__hfc_key common_keys[] = {
    {"model_type", HFC_READ}, {"vocab_size", HFC_READ}, {"hidden_size", HFC_READ},
    {"num_hidden_layers", HFC_READ}, {"num_heads", HFC_READ}, {"hidden_ratio", HFC_READ},
    {"intermediate_size", HFC_READ}, {"hidden_act", HFC_READ}, {"norm_eps", HFC_READ},
    {"tie_word_embeddings", HFC_READ}, {"attn", HFC_READ}, {"attnres_block_size", HFC_READ},
    {"use_short_conv", HFC_READ}, {"conv_size", HFC_READ}, {"expand_v", HFC_READ},
    {"max_position_embeddings", HFC_IGNORE}, {"attn_mode", HFC_IGNORE},
    {"fuse_norm", HFC_READ}, {"fuse_swiglu", HFC_IGNORE},
    {"conv_bias", HFC_IGNORE}, /* the models never pass it to their layers */
    {"auto_map", HFC_IGNORE},
    {"return_dict", HFC_IGNORE}, {"output_hidden_states", HFC_IGNORE}, {"output_attentions", HFC_IGNORE},
    {"torchscript", HFC_IGNORE}, {"use_bfloat16", HFC_IGNORE}, {"is_encoder_decoder", HFC_IGNORE},
    {"is_decoder", HFC_IGNORE}, {"add_cross_attention", HFC_IGNORE}, {"tie_encoder_decoder", HFC_IGNORE},
    {"chunk_size_feed_forward", HFC_IGNORE}, {"pruned_heads", HFC_IGNORE}, {"problem_type", HFC_IGNORE},
    {"id2label", HFC_IGNORE}, {"label2id", HFC_IGNORE}, {"tokenizer_class", HFC_IGNORE},
    {"prefix", HFC_IGNORE}, {"sep_token_id", HFC_IGNORE}, {"decoder_start_token_id", HFC_IGNORE},
    {"task_specific_params", HFC_IGNORE}, {"finetuning_task", HFC_IGNORE}, {"tf_legacy_loss", HFC_IGNORE},
    {"cross_attention_hidden_size", HFC_IGNORE}, {"max_length", HFC_IGNORE}, {"min_length", HFC_IGNORE},
    {"do_sample", HFC_IGNORE}, {"early_stopping", HFC_IGNORE}, {"num_beams", HFC_IGNORE},
    {"temperature", HFC_IGNORE}, {"top_k", HFC_IGNORE}, {"top_p", HFC_IGNORE},
    {"repetition_penalty", HFC_IGNORE}, {"length_penalty", HFC_IGNORE}, {"no_repeat_ngram_size", HFC_IGNORE},
    {"bad_words_ids", HFC_IGNORE}, {"num_return_sequences", HFC_IGNORE}, {"output_scores", HFC_IGNORE},
    {"return_dict_in_generate", HFC_IGNORE}, {"forced_bos_token_id", HFC_IGNORE},
    {"forced_eos_token_id", HFC_IGNORE}, {"remove_invalid_values", HFC_IGNORE},
};
static const recur__hfc_key gdn_keys[] = {
    {"head_dim", HFC_READ}, {"num_v_heads", HFC_READ}, {"use_gate", HFC_READ}, {"allow_neg_eigval", HFC_READ},
};
static const recur__hfc_key gla_keys[] = {
    {"expand_k", HFC_READ}, {"num_kv_heads", HFC_READ}, {"feature_map", HFC_READ},
    {"use_output_gate", HFC_READ}, {"clamp_min", HFC_READ}, {"elementwise_affine", HFC_READ},
    {"use_gk", HFC_IGNORE}, {"use_gv", HFC_IGNORE}, /* stored by the config, never read by the layer */
};
static const recur__hfc_key delta_keys[] = {
    {"expand_k", HFC_READ}, {"use_gate", HFC_READ}, {"allow_neg_eigval", HFC_READ}, {"use_beta", HFC_READ},
    {"qk_norm", HFC_READ}, {"qk_activation", HFC_READ},
    {"use_output_norm", HFC_IGNORE}, /* passed to DeltaNet, which takes it into **kwargs */
};

static int check_keys(const recur__hfc *h, int fam)
{
    recur__hfc_key all[sizeof common_keys / sizeof common_keys[0] + 16];
    int n = 0;
    for (size_t i = 0; i < sizeof common_keys / sizeof common_keys[0]; i++) all[n++] = common_keys[i];
    const recur__hfc_key *own = fam == FLA_GDN ? gdn_keys : fam == FLA_GLA ? gla_keys : delta_keys;
    size_t k = fam == FLA_GDN ? sizeof gdn_keys / sizeof gdn_keys[0]
             : fam == FLA_GLA ? sizeof gla_keys / sizeof gla_keys[0] : sizeof delta_keys / sizeof delta_keys[0];
    for (size_t i = 0; i < k; i++) all[n++] = own[i];
    return recur__hfc_check_keys(h, all, n);
}

/* int(x) as Python truncates a float, when x is (within 1e-5 relative, math.isclose) integral;
 * -1 otherwise */
static int64_t exact_int(double x)
{
    double r = floor(x);
    return fabs(x - r) <= 1e-5 * fabs(x) && r >= 1 && r <= 1e9 ? (int64_t)r : -1;
}

#define TRY(expr) do { if ((rc = (expr))) return rc; } while (0)

/* config.json -> recur_config (docs/MODELS.md "Gated DeltaNet / GLA / DeltaNet"). */
static int parse(const recur__hfc *h, int fam, recur_config *c)
{
    int rc;
    TRY(check_keys(h, fam));
    memset(c, 0, sizeof *c);
    const char *mt;
    TRY(recur__hfc_string(h, "model_type", "", 0, &mt));
    snprintf(c->family, sizeof c->family, "%s", mt);
    snprintf(c->name, sizeof c->name, "fla-%s", mt);
    int64_t d, L, V, H, conv, ff;
    double ratio, eps, ev;
    int tied, use_conv;
    const char *act;
    TRY(recur__hfc_int(h, "hidden_size", 2048, 1, MAX_D_MODEL, &d));
    TRY(recur__hfc_int(h, "num_hidden_layers", fam == FLA_GDN ? 21 : 24, 1, RECUR_MAX_LAYERS, &L));
    TRY(recur__hfc_int(h, "vocab_size", 32000, 2, RECUR_MAX_VOCAB, &V));
    TRY(recur__hfc_int(h, "num_heads", fam == FLA_GDN ? 6 : fam == FLA_GLA ? 4 : 16, 1, 1024, &H));
    TRY(recur__hfc_double(h, "norm_eps", 1e-6, 0, &eps));
    if (!(eps >= 1e-30 && eps <= 1)) return recur__hfc_refuse(h, "norm_eps", "must be in [1e-30, 1]");
    TRY(recur__hfc_bool(h, "tie_word_embeddings", 0, &tied));
    TRY(recur__hfc_bool(h, "use_short_conv", fam != FLA_GLA, &use_conv));
    TRY(recur__hfc_int(h, "conv_size", 4, 2, RECUR_MAX_CONV, &conv));
    TRY(recur__hfc_string(h, "hidden_act", "swish", 0, &act));
    if (strcmp(act, "swish") != 0) return recur__hfc_refuse(h, "hidden_act", "swish only");
    if (recur__hfc_get(h, "attn")) return recur__hfc_refuse(h, "attn", "hybrid softmax-attention layers");
    if (recur__hfc_get(h, "attnres_block_size"))
        return recur__hfc_refuse(h, "attnres_block_size", "attention residuals");
    /* GatedMLP: intermediate_size, else int(hidden_size * hidden_ratio * 2 / 3) rounded up to 256 */
    TRY(recur__hfc_double(h, "hidden_ratio", 4, 0, &ratio));
    if (!(ratio > 0 && ratio <= 64)) return recur__hfc_refuse(h, "hidden_ratio", "must be in (0, 64]");
    int64_t dflt_ff = (int64_t)((double)d * ratio * 2.0 / 3.0);
    dflt_ff = 256 * ((dflt_ff + 255) / 256);
    TRY(recur__hfc_int(h, "intermediate_size", dflt_ff, 1, MAX_D_FF, &ff));
    TRY(recur__hfc_double(h, "expand_v", fam == FLA_GDN ? 2.0 : 1.0, 0, &ev));
    if (!(ev > 0 && ev <= 64)) return recur__hfc_refuse(h, "expand_v", "must be in (0, 64]");

    recur_block b = {.conv_size = use_conv ? (int)conv : 0, .beta_scale = 1.0f, .gate_norm = FLA_GLA_GATE_NORM,
                     .gate_clamp = -1e30f, .o_norm_weight = 1, .mlp = 1, .eps = eps};
    int64_t qk_heads = H, heads = H, K, Vd;
    recur_mixer_kind kind;
    if (fam == FLA_GDN) {
        int64_t hd, hv;
        int gate, neg;
        TRY(recur__hfc_int(h, "head_dim", 256, 1, RECUR_MAX_DIM, &hd));
        TRY(recur__hfc_int(h, "num_v_heads", H, 1, 1024, &hv));
        if (hv < H || hv % H) return recur__hfc_refuse(h, "num_v_heads", "must be a multiple of num_heads");
        TRY(recur__hfc_bool(h, "use_gate", 1, &gate));
        TRY(recur__hfc_bool(h, "allow_neg_eigval", 0, &neg));
        K = hd;
        Vd = exact_int((double)hd * ev);
        if (Vd < 1) return recur__hfc_refuse(h, "expand_v", "head_dim * expand_v must be an integer");
        heads = hv;
        kind = RECUR_MIXER_GATED_DELTANET;
        b.qk_act = b.v_act = RECUR_ACT_SILU; /* conv's SiLU, or F.silu without the conv */
        b.qk_l2 = 1;
        b.beta_proj = 1;
        b.beta_scale = neg ? 2.0f : 1.0f;
        b.out_gate = gate;
    } else {
        double ek;
        TRY(recur__hfc_double(h, "expand_k", fam == FLA_GLA ? 0.5 : 1.0, 0, &ek));
        if (!(ek > 0 && ek <= 64)) return recur__hfc_refuse(h, "expand_k", "must be in (0, 64]");
        int64_t kd = (int64_t)((double)d * ek), vd = (int64_t)((double)d * ev); /* int(hidden * expand) */
        if (kd < 1 || kd % H) return recur__hfc_refuse(h, "expand_k", "hidden_size * expand_k must be a positive multiple of num_heads");
        if (vd < 1 || vd % H) return recur__hfc_refuse(h, "expand_v", "hidden_size * expand_v must be a positive multiple of num_heads");
        K = kd / H;
        Vd = vd / H;
        if (fam == FLA_GLA) {
            int64_t kvh;
            int gate, affine, fuse;
            const char *fm;
            double clamp;
            TRY(recur__hfc_int(h, "num_kv_heads", H, 1, 1024, &kvh));
            if (kvh != H) return recur__hfc_refuse(h, "num_kv_heads", "grouped key/value heads in gla");
            TRY(recur__hfc_string(h, "feature_map", NULL, 1, &fm));
            if (fm) return recur__hfc_refuse(h, "feature_map", "gla feature maps");
            TRY(recur__hfc_bool(h, "use_output_gate", 1, &gate));
            TRY(recur__hfc_bool(h, "elementwise_affine", 1, &affine));
            TRY(recur__hfc_bool(h, "fuse_norm", 1, &fuse));
            TRY(recur__hfc_double(h, "clamp_min", -1e30, 0, &clamp));
            if (clamp > 0) return recur__hfc_refuse(h, "clamp_min", "a positive clamp of a log gate");
            kind = RECUR_MIXER_GLA;
            b.qk_act = b.v_act = use_conv ? RECUR_ACT_SILU : RECUR_ACT_NONE;
            b.gate_rank = FLA_GLA_GATE_RANK;
            b.gate_clamp = (float)fmax(clamp, -1e30);
            b.out_gate = gate;
            b.o_norm_weight = affine;
            c->family_variant = fuse && gate ? 0 : GLA_UNFUSED_NORM;
        } else {
            int gate, neg, beta;
            const char *qn, *qa;
            TRY(recur__hfc_bool(h, "use_gate", 0, &gate));
            TRY(recur__hfc_bool(h, "allow_neg_eigval", 0, &neg));
            TRY(recur__hfc_bool(h, "use_beta", 1, &beta));
            TRY(recur__hfc_string(h, "qk_norm", "l2", 0, &qn));
            if (strcmp(qn, "l2") != 0) return recur__hfc_refuse(h, "qk_norm", "l2 only");
            TRY(recur__hfc_string(h, "qk_activation", "silu", 0, &qa));
            if (!strcmp(qa, "silu")) b.qk_act = RECUR_ACT_SILU;
            else if (!strcmp(qa, "relu")) b.qk_act = RECUR_ACT_RELU;
            else if (!strcmp(qa, "elu")) b.qk_act = RECUR_ACT_ELU1;
            else if (!strcmp(qa, "identity")) b.qk_act = RECUR_ACT_NONE;
            else return recur__hfc_refuse(h, "qk_activation", "silu, relu, elu or identity");
            kind = RECUR_MIXER_DELTANET;
            b.v_act = RECUR_ACT_SILU;
            b.qk_l2 = 1;
            b.beta_proj = beta;
            b.beta_scale = neg ? 2.0f : 1.0f;
            b.out_gate = gate;
        }
    }
    if (K > RECUR_MAX_DIM || Vd > RECUR_MAX_DIM)
        return recur__errf(h->err, h->errlen, "%s: head dimensions %lld x %lld exceed RECUR_MAX_DIM (%d)", h->file,
                           (long long)K, (long long)Vd, RECUR_MAX_DIM);
    b.qk_heads = (int)qk_heads;
    c->vocab_size = (int)V;
    c->d_model = (int)d;
    c->n_layers = (int)L;
    c->n_heads = (int)heads;
    c->head_k = (int)K;
    c->head_v = (int)Vd;
    c->d_ff = (int)ff;
    c->tied_embeddings = tied;
    c->max_context = 4096; /* no softmax layer: unused */
    c->norm_eps = eps;
    for (int l = 0; l < c->n_layers; l++) {
        c->mixers[l] = kind;
        c->block[l] = b;
    }
    return RECUR_OK;
}

/* FLA's tensor names (the modeling and layer files). */
static void fla_name(const recur_config *c, int layer, int t, char *name, size_t cap, int64_t *fs, int *fn)
{
    const recur_block *b = layer >= 0 ? &c->block[layer] : NULL;
    *fn = 0;
    if (layer < 0) {
        snprintf(name, cap, "%s", t == 0 ? "model.embeddings.weight" : t == 1 ? "model.norm.weight" : "lm_head.weight");
        return;
    }
    const char *s = "?";
    int conv = 0;
    switch ((recur_layer_tensor)t) {
    case T_ATTN_NORM: s = "attn_norm.weight"; break;
    case T_Q: s = "attn.q_proj.weight"; break;
    case T_K: s = "attn.k_proj.weight"; break;
    case T_V: s = "attn.v_proj.weight"; break;
    case T_G: s = "attn.g_proj.weight"; break;
    case T_B: s = "attn.b_proj.weight"; break;
    case T_A: s = "attn.a_proj.weight"; break;
    case T_A_LOG: s = "attn.A_log"; break;
    case T_DT_BIAS: s = "attn.dt_bias"; break;
    case T_GK_DOWN: s = "attn.gk_proj.0.weight"; break;
    case T_GK_UP: s = "attn.gk_proj.1.weight"; break;
    case T_GK_BIAS: s = "attn.gk_proj.1.bias"; break;
    case T_O_NORM:
        s = c->mixers[layer] != RECUR_MIXER_GLA ? "attn.o_norm.weight"
          : c->family_variant == GLA_UNFUSED_NORM ? "attn.g_norm.weight" : "attn.g_norm_swish_gate.weight";
        break;
    case T_O: s = "attn.o_proj.weight"; break;
    case T_MLP_NORM: s = "mlp_norm.weight"; break;
    case T_GATE: s = "mlp.gate_proj.weight"; break;
    case T_UP: s = "mlp.up_proj.weight"; break;
    case T_DOWN: s = "mlp.down_proj.weight"; break;
    case T_CONV_Q: s = "attn.q_conv1d.weight"; conv = 1; break;
    case T_CONV_K: s = "attn.k_conv1d.weight"; conv = 1; break;
    case T_CONV_V: s = "attn.v_conv1d.weight"; conv = 1; break;
    case T_CONV_QB: s = "attn.q_conv1d.bias"; break;
    case T_CONV_KB: s = "attn.k_conv1d.bias"; break;
    case T_CONV_VB: s = "attn.v_conv1d.bias"; break;
    default: break;
    }
    snprintf(name, cap, "model.layers.%d.%s", layer, s);
    if (conv) { /* nn.Conv1d(C, C, W, groups=C).weight: [C][1][W] */
        recur_weight_ref ref;
        recur__weight_meta(c, layer, t, &ref);
        fs[0] = ref.shape[0];
        fs[1] = 1;
        fs[2] = b->conv_size;
        *fn = 3;
    }
}

/* parse for whichever of the three model_type says */
static int parse_any(const recur__hfc *h, recur_config *c)
{
    const char *mt = "";
    recur__hfc_string(h, "model_type", "", 0, &mt);
    return parse(h, !strcmp(mt, "gated_deltanet") ? FLA_GDN : !strcmp(mt, "gla") ? FLA_GLA : FLA_DELTA, c);
}

int recur__family_fla(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                      recur_model **out, char *err, size_t errlen)
{
    return recur__family_hf_load(config, config_len, ckpt, keep_half, parse_any, fla_name, out, err, errlen);
}
