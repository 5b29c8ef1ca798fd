/* model_config.c — the model's JSON config (docs/MODEL.md "Config"), parsed strictly with cJSON:
 * unknown or duplicate keys, wrong types, non-integral or out-of-range numbers are rejected, so a
 * typo can never silently change the model. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cJSON.h>
#include "model_internal.h"

static const char *const mixer_names[] = {
    [RECUR_MIXER_LINEAR] = "linear",
    [RECUR_MIXER_RETENTION] = "retention",
    [RECUR_MIXER_GLA] = "gla",
    [RECUR_MIXER_DELTANET] = "deltanet",
    [RECUR_MIXER_GATED_DELTANET] = "gated_deltanet",
    [RECUR_MIXER_SOFTMAX] = "softmax",
    [RECUR_MIXER_MAMBA2] = "mamba2", /* named in info; Hugging Face folders only (family_mamba2.c) */
    [RECUR_MIXER_RWKV7] = "rwkv7",   /* likewise (family_rwkv7.c) */
};
#define N_MIXERS ((int)(sizeof mixer_names / sizeof mixer_names[0]))

/* bounds of docs/MODEL.md "Config" beyond recur.h's RECUR_MAX_* */
#define MAX_D_MODEL 16384
#define MAX_HEADS 1024
#define MAX_D_FF 65536
#define MAX_HEADS_DIM 65536 /* n_heads * head_k and n_heads * head_v */
#define DEFAULT_MAX_CONTEXT 4096

const char *recur_mixer_name(recur_mixer_kind kind)
{
    if ((int)kind < 0 || (int)kind >= N_MIXERS) return "unknown";
    return mixer_names[kind];
}

/* An integral JSON number in [lo, hi]. */
static int get_int(const cJSON *it, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(it)) return RECUR_EFORMAT;
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v)) return RECUR_EFORMAT;
    if (v < (double)lo || v > (double)hi) return RECUR_ESHAPE;
    *out = (int64_t)v;
    return RECUR_OK;
}

recur_block recur__block_native(const recur_config *c, recur_mixer_kind k)
{
    int delta = k == RECUR_MIXER_DELTANET || k == RECUR_MIXER_GATED_DELTANET;
    recur_block b = {
        .qk_heads = c->n_heads, .qk_act = delta ? RECUR_ACT_SILU : RECUR_ACT_NONE, .v_act = RECUR_ACT_NONE,
        .qk_l2 = delta, .beta_proj = delta, .beta_scale = 1.0f, .gate_norm = 16.0f, .gate_clamp = -1e30f,
        .out_gate = 1, .o_norm_weight = 1, .mlp = 1, .eps = c->norm_eps,
    };
    return b;
}

int recur__config_check(const recur_config *c)
{
    if (c->vocab_size < 2 || c->vocab_size > RECUR_MAX_VOCAB || c->d_model < 1 || c->d_model > MAX_D_MODEL ||
        c->n_layers < 1 || c->n_layers > RECUR_MAX_LAYERS || c->n_heads < 1 || c->n_heads > MAX_HEADS ||
        c->head_k < 1 || c->head_k > RECUR_MAX_DIM || c->head_v < 1 || c->head_v > RECUR_MAX_DIM ||
        c->d_ff < 0 || c->d_ff > MAX_D_FF || c->max_context < 1 || c->max_context > RECUR_MAX_CONTEXT)
        return RECUR_ESHAPE;
    if ((int64_t)c->n_heads * c->head_k > MAX_HEADS_DIM || (int64_t)c->n_heads * c->head_v > MAX_HEADS_DIM)
        return RECUR_ESHAPE;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_block *b = &c->block[l];
        if (b->qk_heads < 1 || c->n_heads % b->qk_heads) return RECUR_ESHAPE;
        if (b->mlp && c->d_ff < 1) return RECUR_ESHAPE;
        if (c->mixers[l] == RECUR_MIXER_MAMBA2 &&
            (b->ssm_groups < 1 || c->n_heads % b->ssm_groups || b->conv_size < 2 || b->mlp ||
             !(b->dt_min >= 0.0f && b->dt_max >= b->dt_min)))
            return RECUR_ESHAPE;
        if (c->mixers[l] == RECUR_MIXER_RWKV7 &&
            (c->head_k != c->head_v || (int64_t)c->n_heads * c->head_k != c->d_model || b->mlp || b->conv_size ||
             c->d_ff < 1 || b->rw_ranks[0] < 1 || b->rw_ranks[1] < 1 || b->rw_ranks[2] < 1 || b->rw_ranks[3] < 1 ||
             b->rw_ranks[0] > MAX_D_MODEL || b->rw_ranks[1] > MAX_D_MODEL || b->rw_ranks[2] > MAX_D_MODEL ||
             b->rw_ranks[3] > MAX_D_MODEL || !(b->rw_gn_eps > 0 && b->rw_gn_eps <= 1)))
            return RECUR_ESHAPE;
        if (b->conv_size && (b->conv_size < 2 || b->conv_size > RECUR_MAX_CONV)) return RECUR_ESHAPE;
        if (b->gate_rank < 0 || b->gate_rank > MAX_D_MODEL) return RECUR_ESHAPE;
        if (!(b->eps > 0 && b->eps <= 1) || !(c->norm_eps > 0 && c->norm_eps <= 1)) return RECUR_ERANGE;
        if (!(b->beta_scale > 0 && b->beta_scale <= 2) || !(b->gate_norm > 0) || !(b->gate_clamp <= 0))
            return RECUR_ERANGE;
    }
    return RECUR_OK;
}

static const char *const known_keys[] = {
    "name", "vocab_size", "d_model", "n_layers", "n_heads", "head_k", "head_v", "d_ff",
    "mixers", "tied_embeddings", "max_context", "norm_eps",
};
#define N_KEYS ((int)(sizeof known_keys / sizeof known_keys[0]))

static int parse_root(const cJSON *root, recur_config *c)
{
    if (!cJSON_IsObject(root)) return RECUR_EFORMAT;
    const cJSON *seen[N_KEYS] = {0};
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        int k = 0;
        while (k < N_KEYS && (it->string == NULL || strcmp(it->string, known_keys[k]) != 0)) k++;
        if (k == N_KEYS) return RECUR_EFORMAT; /* unknown key */
        if (seen[k]) return RECUR_EFORMAT;     /* duplicate key */
        seen[k] = it;
    }
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "recur");
    snprintf(c->family, sizeof c->family, "native");
    c->tied_embeddings = 1;
    c->max_context = DEFAULT_MAX_CONTEXT;
    c->norm_eps = 1e-5;

    /* required integers: vocab_size, d_model, n_layers, n_heads, head_k, head_v, d_ff */
    static const struct { int key; int64_t lo, hi; } ints[] = {
        {1, 2, RECUR_MAX_VOCAB}, {2, 1, MAX_D_MODEL}, {3, 1, RECUR_MAX_LAYERS}, {4, 1, MAX_HEADS},
        {5, 1, RECUR_MAX_DIM}, {6, 1, RECUR_MAX_DIM}, {7, 1, MAX_D_FF},
    };
    int *dst[] = {&c->vocab_size, &c->d_model, &c->n_layers, &c->n_heads, &c->head_k, &c->head_v, &c->d_ff};
    for (int i = 0; i < 7; i++) {
        int64_t v;
        if (!seen[ints[i].key]) return RECUR_EFORMAT;
        int rc = get_int(seen[ints[i].key], ints[i].lo, ints[i].hi, &v);
        if (rc) return rc;
        *dst[i] = (int)v;
    }
    if ((int64_t)c->n_heads * c->head_k > MAX_HEADS_DIM || (int64_t)c->n_heads * c->head_v > MAX_HEADS_DIM)
        return RECUR_ESHAPE;

    if (seen[0]) {
        if (!cJSON_IsString(seen[0]) || strlen(seen[0]->valuestring) >= sizeof c->name)
            return RECUR_EFORMAT;
        snprintf(c->name, sizeof c->name, "%s", seen[0]->valuestring);
    }
    const cJSON *mx = seen[8];
    if (!cJSON_IsArray(mx)) return RECUR_EFORMAT;
    if (cJSON_GetArraySize(mx) != c->n_layers) return RECUR_ESHAPE;
    int l = 0;
    cJSON_ArrayForEach(it, mx) {
        if (!cJSON_IsString(it)) return RECUR_EFORMAT;
        int k = 0;
        while (k < N_MIXERS && strcmp(it->valuestring, mixer_names[k]) != 0) k++;
        if (k == N_MIXERS || k == RECUR_MIXER_MAMBA2 || k == RECUR_MIXER_RWKV7) return RECUR_EFORMAT;
        c->mixers[l++] = (recur_mixer_kind)k;
    }
    if (seen[9]) {
        if (!cJSON_IsBool(seen[9])) return RECUR_EFORMAT;
        c->tied_embeddings = cJSON_IsTrue(seen[9]);
    }
    if (seen[10]) {
        int64_t v;
        int rc = get_int(seen[10], 1, RECUR_MAX_CONTEXT, &v);
        if (rc) return rc;
        c->max_context = v;
    }
    if (seen[11]) {
        if (!cJSON_IsNumber(seen[11])) return RECUR_EFORMAT;
        double e = seen[11]->valuedouble;
        if (!isfinite(e) || e <= 0 || e > 1) return RECUR_ERANGE;
        c->norm_eps = e;
    }
    for (int i = 0; i < c->n_layers; i++) c->block[i] = recur__block_native(c, c->mixers[i]);
    return RECUR_OK;
}

int recur__config_parse(const char *text, size_t len, recur_config *out)
{
    if (!text || !out) return RECUR_EINVAL;
    if (len > RECUR_MAX_CONFIG_BYTES) return RECUR_EFORMAT;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) return RECUR_EFORMAT;
    /* only whitespace (or a terminating NUL) may follow the object */
    while (end && end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    if (end && end < text + len && *end != '\0') {
        cJSON_Delete(root);
        return RECUR_EFORMAT;
    }
    recur_config c;
    int rc = parse_root(root, &c);
    cJSON_Delete(root);
    if (rc == RECUR_OK) *out = c;
    return rc;
}

int recur__config_canonical(const recur_config *c, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "recur-config-v1 vocab=%d d=%d layers=%d heads=%d k=%d v=%d ff=%d tied=%d "
                     "ctx=%lld eps=%.17g mixers=",
                     c->vocab_size, c->d_model, c->n_layers, c->n_heads, c->head_k, c->head_v, c->d_ff,
                     c->tied_embeddings, (long long)c->max_context, c->norm_eps);
    for (int l = 0; l < c->n_layers && n >= 0 && (size_t)n < cap; l++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%s", l ? "," : "", recur_mixer_name(c->mixers[l]));
    /* another family: its block descriptions too (a native model's text, and so its fingerprint,
     * is what it always was) */
    for (int l = 0; strcmp(c->family, "native") != 0 && l < c->n_layers && n >= 0 && (size_t)n < cap; l++) {
        const recur_block *b = &c->block[l];
        n += snprintf(buf + n, cap - (size_t)n, "%s%s:%d,%d,%d,%d,%d,%d,%d,%.9g,%d,%.9g,%.9g,%d,%d,%d,%.17g",
                      l ? ";" : " family=", l ? "" : c->family, b->qk_heads, b->conv_size, b->conv_bias,
                      (int)b->qk_act, (int)b->v_act, b->qk_l2, b->beta_proj, (double)b->beta_scale, b->gate_rank,
                      (double)b->gate_norm, (double)b->gate_clamp, b->out_gate, b->o_norm_weight, b->mlp, b->eps);
        if (c->mixers[l] == RECUR_MIXER_MAMBA2 && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, ",m2:%d,%d,%d,%d,%.9g,%.9g", b->ssm_groups, b->norm_before_gate,
                          b->D_per_channel, b->proj_bias, (double)b->dt_min, (double)b->dt_max);
        if (c->mixers[l] == RECUR_MIXER_RWKV7 && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, ",rw7:%d,%d,%d,%d,%d,%.17g,%d", b->rw_ranks[0], b->rw_ranks[1],
                          b->rw_ranks[2], b->rw_ranks[3], b->rw_ln0, b->rw_gn_eps, c->norm_bias);
    }
    if (n < 0 || (size_t)n >= cap) return RECUR_ESHAPE;
    return n;
}
