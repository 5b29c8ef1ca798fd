/*
 * model_internal.h — private structures of the model stack (model*.c, family_*.c, state.c,
 * snapshot.c). Not part of the public API: only librecur's own files include it.
 *
 * Weights live in one owned arena. Per layer, the mixer's input projections are laid out
 * back to back so that they form a single [P][d] matrix (one GEMM per layer over a batch or a
 * prefill piece):  q [H*K] | k [H*K] | v [H*V] | g_proj [H*V] | gk [H*K] (gla) | b [H] | a [H].
 * gate_proj and up_proj are likewise adjacent: one [2*d_ff][d] matrix.
 *
 * The GEMM matrices (w_in, wo, w_gate_up, w_down, lm_head) are row-major [N][K] while the weights
 * are filled (safetensors, seeded init) and fingerprinted; recur__model_finish then packs each in
 * place into the panel layout of packed_gemm.h (its region is sized for the padded packed form),
 * and from then on only recur__packed_gemm reads them. There is no second copy: the one extra is
 * the LM head of a tied model, a packed copy of embed (embed stays row-major for the lookup).
 *
 * Element type of the GEMM matrices (m->wtype): fp32, or — for a weights file whose matrices
 * (and embed, when tied) are all F16 or all BF16 — that half type, kept as read: the matrix
 * regions hold 16-bit halves (row-major while filling, then packed), half the bytes, and
 * recur__packed_gemm_t widens them exactly in the kernel (same results as fp32, bit for bit).
 * Everything else (embed for the lookup, norms, A_log, dt_bias) is fp32 whatever the file.
 */
#ifndef RECUR_MODEL_INTERNAL_H
#define RECUR_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "packed_gemm.h"
#include "recur.h"
#include "util.h"

/* ---------------------------------------------------------------- config */

#define RECUR_MAX_VOCAB (1 << 22)      /* token ids must stay exact in float scratch (sampling) */
#define RECUR_MAX_CONTEXT (1 << 24)
#define RECUR_MAX_CONFIG_BYTES (1 << 20)

/* Activations of the block description (recur_block). */
typedef enum { RECUR_ACT_NONE = 0, RECUR_ACT_SILU = 1, RECUR_ACT_RELU = 2, RECUR_ACT_ELU1 = 3 } recur_act;

#define RECUR_MAX_CONV 16 /* short convolution kernel, at most */

/* What one layer's block computes besides its mixer kind (docs/MODEL.md "Blocks"): the native
 * stack is one setting of it (recur__block_native), a checkpoint family sets its own.
 *   h = RMSNorm_eps(x); p = W_in h = [q | k | v | g | gk | b | a] (parts present as below)
 *   q | k | v <- short causal depthwise conv over time (conv_size taps, optional bias), if any
 *   q, k <- qk_act(.), L2-normalised per head if qk_l2; v <- v_act(v)
 *   q, k heads: qk_heads; mixer heads n_heads (a multiple): mixer head h reads q/k head
 *   h / (n_heads / qk_heads) (FLA's grouped value heads)
 *   beta = beta_scale * sigmoid(b) (beta_proj) or 1; gla: g = max(logsigmoid(gk) / gate_norm,
 *   gate_clamp), gk = W_gk2 (W_gk1 h) + bias when gate_rank > 0 (low rank), else gk_proj h
 *   o <- RMSNorm_eps(o) per head (weight o_norm, or ones without one); o <- o * silu(g) if out_gate
 *   x += o_proj o; then, if mlp: x += SwiGLU(RMSNorm_eps(x)). */
typedef struct {
    int qk_heads;        /* heads of the q and k projections (n_heads when not grouped) */
    int conv_size;       /* 0: no short convolution; else 2 .. RECUR_MAX_CONV taps */
    int conv_bias;
    recur_act qk_act, v_act;
    int qk_l2;
    int beta_proj;       /* beta from b_proj (delta kinds); 0: beta = 1 */
    float beta_scale;    /* 1, or 2 (negative eigenvalues allowed) */
    int gate_rank;       /* gla: 0 full gk_proj [H*K][d]; r > 0 low rank [r][d] then [H*K][r] + bias */
    float gate_norm;     /* gla: logsigmoid divisor */
    float gate_clamp;    /* gla: lower clamp of the log gate */
    int out_gate;        /* g_proj and o * silu(g) */
    int o_norm_weight;   /* o_norm has a weight tensor */
    int mlp;             /* SwiGLU sub-block present */
    double eps;          /* the layer's RMSNorms (attn_norm, o_norm, mlp_norm) */
    /* Mamba-2 layers (kind RECUR_MIXER_MAMBA2, block_mamba2.h; conv_size, conv_bias, o_norm_weight
     * and eps above apply too): */
    int ssm_groups;       /* n_groups: head h reads B / C of group h / (n_heads / ssm_groups) */
    int norm_before_gate; /* RMSNorm(y) * silu(z) instead of RMSNorm(y * silu(z)) */
    int D_per_channel;    /* D [H * head_v] instead of [H] */
    int proj_bias;        /* in_proj.bias and out_proj.bias */
    float dt_min, dt_max; /* time-step limits after softplus ([0, inf]: none) */
    /* RWKV-7 layers (kind RECUR_MIXER_RWKV7, block_rwkv7.h; eps above is the LayerNorms'): */
    int rw_ranks[4];      /* LoRA ranks of the decay, a (in-context rate), value residual, gate */
    int rw_ln0;           /* layer 0 normalises the embedding first (ln0 / pre_norm) */
    double rw_gn_eps;     /* the output GroupNorm's eps (head_dim * norm_eps) */
} recur_block;

typedef struct {
    char name[64];
    char family[24];    /* "native", or the Hugging Face model_type the checkpoint came from */
    int family_variant; /* the family's own detail that changes no math (e.g. a tensor's name) */
    int vocab_size, d_model, n_layers, n_heads, head_k, head_v, d_ff;
    int tied_embeddings;
    int norm_bias;      /* norm_f is a LayerNorm with a bias (rwkv7), else an RMSNorm */
    int64_t max_context;
    double norm_eps;    /* the final norm (norm_f); each block has its own (recur_block.eps) */
    recur_mixer_kind mixers[RECUR_MAX_LAYERS];
    recur_block block[RECUR_MAX_LAYERS];
} recur_config;

/* The native stack's block for mixer kind k (docs/MODEL.md "Mixer"). */
recur_block recur__block_native(const recur_config *c, recur_mixer_kind k);
/* Bounds shared by every family's config (RECUR_ESHAPE naming nothing: the caller names it). */
int recur__config_check(const recur_config *c);

/* Parse and validate config JSON text of len bytes (strict: unknown keys, duplicates, wrong
 * types and out-of-range values are RECUR_EFORMAT / RECUR_ESHAPE). */
int recur__config_parse(const char *text, size_t len, recur_config *out);

/* The canonical text hashed into the fingerprint (every field but the name, fixed order). */
int recur__config_canonical(const recur_config *c, char *buf, size_t cap);

/* ---------------------------------------------------------------- weights */

/* Tensor roles in the order of docs/MODEL.md's table (the fingerprint and seeded init follow it). */
typedef enum {
    T_ATTN_NORM, T_Q, T_K, T_V, T_GK, T_B, T_A, T_A_LOG, T_DT_BIAS, T_G, T_O_NORM, T_O,
    T_MLP_NORM, T_GATE, T_UP, T_DOWN,
    /* beyond the native table (absent from native models, so their order and fingerprint stay):
     * the short convolution's taps [C][W] of q, k, v and their biases [C]; GLA's low-rank gate */
    T_CONV_Q, T_CONV_K, T_CONV_V, T_CONV_QB, T_CONV_KB, T_CONV_VB, T_GK_DOWN, T_GK_UP, T_GK_BIAS,
    /* Mamba-2 (block_mamba2.h): in_proj [n_in][d] as one matrix (w_in) and its bias, the conv over
     * xBC [conv_ch][W] and its bias, D, out_proj's bias */
    T_IN_PROJ, T_IN_BIAS, T_CONV, T_CONV_BIAS, T_D, T_O_BIAS,
    /* RWKV-7 (block_rwkv7.h), held in recur_layer.rw[t - T_RW_LN0_W]: LayerNorms ln0 (layer 0),
     * ln1, ln2 with biases; the six token-shift mixes; k_k, k_a, r_k; receptance / key / value /
     * output; the LoRAs (down [rank][d], up [d][rank], bias [d]) of decay w, value residual v, in-context
     * rate a, gate g (no bias); the GroupNorm ln_x; the channel mix's shift mix and key / value */
    T_RW_LN0_W, T_RW_LN0_B, T_RW_LN1_W, T_RW_LN1_B,
    T_RW_X_R, T_RW_X_W, T_RW_X_K, T_RW_X_V, T_RW_X_A, T_RW_X_G, T_RW_K_K, T_RW_K_A, T_RW_R_K,
    T_RW_WR, T_RW_WK, T_RW_WV, T_RW_WO,
    T_RW_W1, T_RW_W2, T_RW_W0, T_RW_V1, T_RW_V2, T_RW_V0, T_RW_A1, T_RW_A2, T_RW_A0, T_RW_G1, T_RW_G2,
    T_RW_GN_W, T_RW_GN_B, T_RW_LN2_W, T_RW_LN2_B, T_RW_FFN_X_K, T_RW_FFN_KEY, T_RW_FFN_VALUE,
    T_N_LAYER_TENSORS
} recur_layer_tensor;

typedef struct {
    recur_mixer_kind kind;
    float *attn_norm;           /* [d] */
    /* matrices (void *): elements of the model's wtype (float or uint16_t halves) */
    void *w_in;                 /* [P][d]: q | k | v | g_proj | gk | b | a (see top); packed */
    /* wq .. wa: rows of w_in, row-major; valid only until recur__model_finish packs w_in */
    void *wq, *wk, *wv;         /* [H*K][d], [H*K][d], [H*V][d] */
    void *wg;                   /* [H*V][d]  output gate */
    void *wgk;                  /* [H*K][d]  gla only; low rank: [r][d] (gk_proj.0) */
    void *w_gk_up;              /* [H*K][r]  gla low rank (gk_proj.1), packed */
    float *gk_bias;             /* [H*K]     gla low rank */
    float *conv_w;              /* [C][W] taps while loading, [W][C] after finish; C = conv_ch */
    float *conv_b;              /* [C] or NULL */
    void *wb;                   /* [H][d]    deltanet, gated_deltanet */
    void *wa;                   /* [H][d]    gated_deltanet */
    float *A_log, *dt_bias;     /* [H]       gated_deltanet, mamba2 */
    float *D;                   /* [H] or [H*V] mamba2 */
    float *in_bias, *out_bias;  /* [n_in], [d] mamba2 with proj_bias, else NULL */
    float *o_norm;              /* [V] */
    void *wo;                   /* [d][H*V]  packed */
    float *mlp_norm;            /* [d] */
    void *w_gate_up;            /* [2*d_ff][d]: gate_proj rows then up_proj rows; packed */
    void *w_down;               /* [d][d_ff]  packed */
    int n_in;                   /* P: rows of w_in */
    int off_k, off_v, off_g, off_gk, off_b, off_a; /* column offsets inside one projected [P] row (-1: absent) */
    int conv_in, conv_ch;       /* the convolved columns [conv_in, conv_in + conv_ch) of a projected row */
    size_t state_off;           /* recurrent layers: float offset in the state block */
    size_t state_floats;        /* recurrent layers: floats of this layer's state (core + conv) */
    size_t conv_state_off;      /* conv: float offset of its state [W-1][C] inside the layer's state */
    void *rw[T_N_LAYER_TENSORS - T_RW_LN0_W]; /* rwkv7: role t at rw[t - T_RW_LN0_W] (float *, or a
                                                 packed matrix of the model's wtype), NULL if absent */
} recur_layer;

struct recur_model {
    recur_config cfg;
    recur_model_info info;
    recur_wtype wtype;          /* element type of the matrices (w_in, wo, w_gate_up, w_down, lm_head) */
    float *arena;               /* every weight, owned (recur__big_alloc); sized in 4-byte units */
    size_t arena_floats;
    float *embed;               /* [vocab][d] fp32 */
    float *norm_f;              /* [d] */
    float *norm_f_bias;         /* [d] when cfg.norm_bias, else NULL */
    void *lm_head;              /* [vocab][d] packed; tied: a packed copy of embed made at finish */
    recur_layer layers[RECUR_MAX_LAYERS];
    size_t rec_floats;          /* values of every recurrent layer's state (one block) */
    size_t max_layer_floats;    /* max state_floats over layers */
    recur_state_dtype sdtype;   /* how states store those values (recur_model_set_state_dtype) */
    int n_softmax;              /* layers with a KV cache */
    int max_in;                 /* max n_in over layers */
    int max_conv;               /* max conv_ch * conv_size over layers (0: no conv) */
    /* the bf16 prefill (recur_model_set_prefill_dtype, model_prefill.c): every GEMM matrix but the
     * LM head also held as bf16 panels (bf16_gemm.h), read only by the prefill entry points */
    struct recur_prefill_panels *pf; /* [pf_n] sorted by matrix address; NULL: prefill in fp32 */
    int pf_n;
    void *pf_block;             /* every bf16 panel (recur__big_alloc), pf_bytes */
    size_t pf_bytes;
};

/* A packed GEMM matrix of a model: W [N][K] at w (elements of the model's wtype). */
typedef struct {
    void *w;
    int N, K;
} recur_matrix;
#define RECUR_MAX_MATRICES (RECUR_MAX_LAYERS * (T_N_LAYER_TENSORS - T_RW_LN0_W) + 1)

/* The GEMM of model matrix W [N][K] over R rows, y = beta*y + x W^T: through W's bf16 panels
 * when prefill and the model has them (bf16_gemm.h), else the model's own path (packed_gemm.h,
 * quant.h). The one home of this choice for the forward pass and the blocks. */
void recur__model_gemm(const recur_model *m, int prefill, int R, int N, int K, const float *x, int ldx,
                       const void *W, float beta, float *y, int ldy);
/* Free m's bf16 panels (recur_model_free; prefill dtype f32). */
void recur__prefill_panels_free(recur_model *m);

/* One tensor of the model: its safetensors name, shape and place(s) in the arena. A tensor is
 * held as fp32 (ptr), as halves of the model's wtype (half), or both (embed of a tied half
 * model: fp32 for the lookup, halves for the LM head); the unused pointer is NULL. */
typedef struct {
    char name[64];
    float *ptr;      /* fp32 row-major, or NULL */
    uint16_t *half;  /* halves of m->wtype, row-major (until packed), or NULL */
    int ndim;
    int64_t shape[2];
    size_t n;        /* elements */
    int is_norm;     /* RMSNorm weight (seeded init: ones) */
    int is_matrix;   /* feeds a packed GEMM (all 2-D layer tensors, lm_head, embed when tied) */
} recur_weight_ref;

/* Enumerate tensors: layer -1 with t = 0 (embed), 1 (norm_f), 2 (lm_head); layer >= 0 with
 * t a recur_layer_tensor. Returns 0 when that tensor does not exist for this model.
 * recur__weight_meta fills everything but ptr / half (NULL) from the config alone. */
int recur__weight(recur_model *m, int layer, int t, recur_weight_ref *ref);
int recur__weight_meta(const recur_config *c, int layer, int t, recur_weight_ref *ref);

/* Allocate the arena and set every weight pointer (weights zero, matrices row-major), the
 * matrices with elements of type wt. */
int recur__model_alloc(const recur_config *c, recur_wtype wt, recur_model **out);
/* Fill the weights of a freshly allocated model from a seed (docs/MODEL.md "Seeded
 * initialisation"), row-major; recur__model_finish still has to run. Half matrices get each
 * value rounded to the half type (nearest even); embed's fp32 copy of a tied half model gets
 * the rounded value too, so the lookup and the LM head see one tensor. */
void recur__model_seed(recur_model *m, uint64_t seed);
/* recur_model_init_seed with the matrices kept as wt (F16 / BF16: the seeded values rounded;
 * Q8_0 / Q4_0: the fp32 seeded model quantized, recur_model_quantize). */
int recur__model_init_seed_wtype(const char *config_json, uint64_t seed, recur_wtype wt, recur_model **out);
/* recur_model_load_files; keep_half == 0 widens a half file to fp32 matrices (the path before
 * half weights were kept; tests compare the two bit for bit). */
int recur__model_load_files_opt(const char *config_path, const char *weights_path, int keep_half,
                                recur_model **out);
/* recur_model_load_ex with keep_half (any folder: native, a family's, sharded). */
int recur__model_load_dir_opt(const char *dir, int keep_half, recur_model **out, char *err, size_t errlen);
/* "q8_0" / "q4_0" (any case) -> RECUR_WT_Q8_0 / Q4_0; RECUR_EINVAL otherwise. */
int recur__parse_weights_dtype(const char *s, recur_wtype *out);
/* A quantized copy of src without its matrices (model_quant.c): allocated for weights_dtype, every
 * tensor that is not a packed matrix copied from src, info set (dtype, bytes, fingerprint, origin
 * "quantized"); the packed matrices are zero until filled. recur_model_quantize's errors. */
int recur__quant_shell(const recur_model *src, const char *weights_dtype, recur_model **out, char *err,
                       size_t errlen);
/* Every packed matrix of m (a quant shell of src) with its counterpart in src and its shape
 * [N][K], in one fixed order (layers in order, then the LM head): quantizing and the weights
 * cache (weights_cache.c) both walk this list. */
typedef void (*recur__quant_matrix_fn)(void *ctx, void *dst, const void *src, int N, int K);
void recur__quant_each_matrix(recur_model *m, const recur_model *src, recur__quant_matrix_fn fn, void *ctx);
/* Once the weights are in place (row-major): fill info (params, state bytes, fingerprint of the
 * row-major data), then pack the GEMM matrices in place. 0 or RECUR_ENOMEM (m unusable then:
 * free it). After this, recur__weight's pointers to matrices point at packed data. */
int recur__model_finish(recur_model *m);

/* Large long-lived buffers (weights, workspaces): anonymous mappings with transparent huge
 * pages requested (first touch and TLB reach, docs/DESIGN.md §7); one of 2 MiB or more starts on
 * a 2 MiB boundary and spans whole 2 MiB pages. Zero-filled. NULL on failure. recur__big_free
 * takes the same bytes. */
void *recur__big_alloc(size_t bytes);
void recur__big_free(void *p, size_t bytes);

/* ---------------------------------------------------------------- state */

struct recur_state {
    const recur_model *m;
    uint64_t tokens_seen;
    recur_state_dtype dtype;             /* the model's sdtype when the state was created */
    float *rec;                          /* [rec_floats]: recurrent layers' S (and z), in layer order
                                          * (fp32 states; NULL for a half state) */
    uint16_t *hrec;                      /* [rec_floats] the same as halves (half states; else NULL) */
    float *work;                         /* half states, inside a forward: the current layer's state
                                          * widened to fp32 in the workspace (recur__lstate); else NULL */
    float *kcache[RECUR_MAX_LAYERS];     /* softmax layers: [max_context][H][K], calloc'd lazily-touched */
    float *vcache[RECUR_MAX_LAYERS];     /* softmax layers: [max_context][H][V] */
    size_t kbytes, vbytes;               /* mapping size of each cache (destroy needs no model) */
};

/* The fp32 state of layer L of s that a step reads and writes: the stored one (fp32 states), or
 * the workspace's widened copy the forward set up (half states, model_forward.c). */
static inline float *recur__lstate(const recur_state *s, const recur_layer *L)
{
    return s->work ? s->work : s->rec + L->state_off;
}

/* Bytes of the stored recurrent block of a state of m (of m's state dtype). */
static inline size_t recur__rec_bytes(const recur_model *m)
{
    return m->rec_floats * (m->sdtype == RECUR_STATE_F32 ? 4 : 2);
}

/* s's stored recurrent block (rec or hrec) and its bytes (s's own dtype). */
static inline void *recur__state_rec(const recur_state *s)
{
    return s->dtype == RECUR_STATE_F32 ? (void *)s->rec : (void *)s->hrec;
}

static inline size_t recur__state_rec_bytes(const recur_state *s)
{
    return s->m->rec_floats * (s->dtype == RECUR_STATE_F32 ? 4 : 2);
}

#endif /* RECUR_MODEL_INTERNAL_H */
