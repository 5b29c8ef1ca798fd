/*
 * recur.h — the one public header of librecur.
 *
 * librecur is pure computation: every mixer of docs/DESIGN.md §3 in every form, the model stack of
 * docs/DESIGN.md §4, sampling, and session-state snapshots (docs/DESIGN.md §6). No sockets, no printing,
 * no exit. Every fallible function returns 0 or a negative RECUR_E* code; recur_strerror()
 * names it.
 *
 * Layout conventions (all arrays fp32, row-major, sequence-first, no batch dimension):
 *   q, k      [T][H][K]
 *   v, o      [T][H][V]
 *   g scalar  [T][H]        natural-log decay, g <= 0
 *   g vector  [T][H][K]     natural-log decay per key dimension, g <= 0
 *   beta      [T][H]        in (0,2]  (> 1: negative eigenvalues of I - beta k k^T, FLA's allow_neg_eigval)
 *   S         [H][K][V]     key-major state; IN: the initial state, OUT: the final state
 *   z         [H][K]        linear-attention normaliser state, IN/OUT like S
 * T is int64_t; offsets are computed in int64_t/size_t. Every form includes the current token:
 * S_t absorbs (k_t, v_t) before o_t = scale * S_t^T q_t.
 */
#ifndef RECUR_H
#define RECUR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

#define RECUR_OK 0
#define RECUR_EINVAL -1     /* an argument is invalid (NULL pointer, unknown enum, ...) */
#define RECUR_ESHAPE -2     /* a dimension is out of range or sizes overflow */
#define RECUR_ENOMEM -3     /* an allocation failed */
#define RECUR_ENONFINITE -4 /* a gate, beta, gamma or scale is NaN or infinite */
#define RECUR_ERANGE -5     /* a finite value is out of its domain (g > 0, gamma outside (0,1], beta outside (0,2]) */
#define RECUR_EIO -6        /* a file could not be opened, read or mapped */
#define RECUR_EFORMAT -7    /* a file or buffer is malformed (config, safetensors, snapshot) */
#define RECUR_EMISMATCH -8  /* a snapshot or weights file belongs to another model */
#define RECUR_ECHECKSUM -9  /* a snapshot's checksum does not match */
#define RECUR_ETRUNCATED -10 /* a file or buffer is shorter than its header says */
#define RECUR_ETOKEN -11    /* a token id is outside [0, vocab_size) */
#define RECUR_ECONTEXT -12  /* a softmax layer's KV cache would exceed max_context */
#define RECUR_ENOENT -13    /* a looked-for item is absent (a model folder without a chat template) */
#define RECUR_EISA -14      /* RECUR_ISA names a kernel path this CPU lacks, or an unknown one */

/* A static English description of a RECUR_E* code ("unknown error" for anything else). */
const char *recur_strerror(int err);

/* The kernel path this process runs: "avx512", "avx2" or "portable", chosen once from what the
 * CPU reports, or forced by the environment variable RECUR_ISA (a path the CPU lacks, or an
 * unknown name, makes every model load fail with RECUR_EISA). Paths agree up to the last bits;
 * each is bit-identical across batch sizes (docs/DESIGN.md, kernel dispatch). */
const char *recur_isa_name(void);

/* ---------------------------------------------------------------- mixers */

typedef enum {
    RECUR_FORM_RECURRENT = 0, /* token by token; the decode step when T == 1 */
    RECUR_FORM_PARALLEL = 1,  /* masked T x T matmul (delta rule: chunkwise with one chunk) */
    RECUR_FORM_CHUNKWISE = 2  /* parallel inside chunks of chunk_size, recurrent across, on BLAS */
} recur_form;

typedef enum {
    RECUR_FMAP_ELU1 = 0,    /* phi(x) = elu(x) + 1 */
    RECUR_FMAP_RELU = 1,    /* phi(x) = max(x, 0) */
    RECUR_FMAP_IDENTITY = 2 /* phi(x) = x */
} recur_feature_map;

/* Dimensions shared by every mixer call. T >= 0 (T == 0 is a no-op that keeps the state),
 * 1 <= H, K, V <= RECUR_MAX_DIM. */
typedef struct {
    int64_t T;
    int H, K, V;
} recur_dims;

#define RECUR_MAX_DIM 4096
#define RECUR_LINEAR_EPS 1e-6f /* denominator guard of normalised linear attention */

/* scale <= 0 means the default K^-1/2 in every call below. chunk_size is used by
 * RECUR_FORM_CHUNKWISE only and must be >= 1 (a chunk larger than T is one chunk). */

/* Linear attention (docs/DESIGN.md §3):
 *   S_t = S_{t-1} + phi(k_t) v_t^T ;  z_t = z_{t-1} + phi(k_t)
 *   normalize:  o_t = (scale phi(q_t))^T S_t / ((scale phi(q_t))^T z_t + RECUR_LINEAR_EPS)
 *   otherwise:  o_t = scale phi(q_t)^T S_t          (z may be NULL and is not touched)
 * phi is applied to q and k inside the op. */
int recur_linear_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                           int normalize, recur_feature_map fmap, float scale, recur_form form,
                           int64_t chunk_size, float *S, float *z, float *o);

/* Retention: S_t = gamma_h S_{t-1} + k_t v_t^T ; o_t = scale S_t^T q_t.
 * gamma [H] in (0,1]; NULL means recur_multiscale_decays(H). */
int recur_retention(const recur_dims *d, const float *q, const float *k, const float *v,
                    const float *gamma, float scale, recur_form form, int64_t chunk_size,
                    float *S, float *o);

/* Gated linear attention: S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T ; o_t = scale S_t^T q_t.
 * g_per_key == 0: g is [T][H] (one gate per head); otherwise g is [T][H][K]. All g <= 0. */
int recur_gla(const recur_dims *d, const float *q, const float *k, const float *v, const float *g,
              int g_per_key, float scale, recur_form form, int64_t chunk_size, float *S, float *o);

/* Delta rule: S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T ; o_t = scale S_t^T q_t.
 * g NULL is DeltaNet (g = 0), g [T][H] is gated DeltaNet. Keys are expected L2-normalised
 * (not checked); beta [T][H] in (0,2]. Chunkwise uses the WY/UT form with a unit-lower-
 * triangular solve (blocked forward substitution on the chunk product kernel, chunk_mm.h);
 * parallel is chunkwise with one chunk. */
int recur_delta_rule(const recur_dims *d, const float *q, const float *k, const float *v,
                     const float *beta, const float *g, float scale, recur_form form,
                     int64_t chunk_size, float *S, float *o);

/* Generalized (diagonal-plus-low-rank) delta rule, RWKV-7's time mix (docs/MODEL.md):
 *   S_t = Diag(exp g_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T ;  o_t = scale S_t^T q_t
 * (the rank-one erase reads the state before the decay). q, k, g, a, b [T][H][K]; g <= 0 per key
 * (RECUR_ERANGE above 0); a, b any finite vectors (RWKV-7: a = -kappa_hat, b = kappa_hat * a_gate,
 * scale 1.0f: pass it, since scale <= 0 is K^-1/2 as everywhere). Chunkwise is the DPLR chunk
 * algorithm (a unit-lower-triangular solve per chunk); parallel is chunkwise with one chunk
 * (4 T^2 floats of scratch). T == 1 is the decode step in every form. */
int recur_generalized_delta(const recur_dims *d, const float *q, const float *k, const float *v,
                            const float *g, const float *a, const float *b, float scale,
                            recur_form form, int64_t chunk_size, float *S, float *o);

/* Causal softmax attention over the whole sequence: o_t = sum_{j<=t} softmax_j(scale q_t.k_j) v_j. */
int recur_softmax_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                            float scale, float *o);

/* One decode step of causal softmax attention with a caller-owned KV cache.
 * k_cache [max_len][H][K], v_cache [max_len][H][V]; positions [0, pos) hold earlier tokens.
 * Writes k_t, v_t at position pos, then o [H][V] attends over [0, pos]. pos >= max_len is
 * RECUR_ECONTEXT and changes nothing. d->T is ignored (one token). */
int recur_softmax_attention_step(const recur_dims *d, const float *q, const float *k,
                                 const float *v, float scale, float *k_cache, float *v_cache,
                                 int64_t pos, int64_t max_len, float *o);

/* Block top-k sparse attention. Keys are cut into n_blocks = ceil(T/block) blocks. For each
 * query and head, a block's score is the mean of scale q.k_j over its real keys (causal: only
 * keys j <= t count, and blocks without any such key are not candidates); the top
 * min(topk, candidates) blocks are kept (ties: lower block index first); the output is softmax
 * over the kept keys (causal: kept keys j <= t). keep [T][H][n_blocks] (1 = kept) may be NULL.
 * causal == 0 has exactly the semantics of the seeds' reference script. */
int recur_block_topk_attention(const recur_dims *d, const float *q, const float *k, const float *v,
                               int64_t block, int64_t topk, int causal, float scale, float *o,
                               uint8_t *keep);

/* gamma_h = 1 - 2^(-5-h), h = 0..H-1 (RetNet's multi-scale decays). gamma: [H]. */
void recur_multiscale_decays(int H, float *gamma);

/* ---------------------------------------------------------------- model (docs/DESIGN.md §4, docs/MODEL.md) */

typedef enum {
    RECUR_MIXER_LINEAR = 0,   /* "linear"       linear attention, elu+1, normalised */
    RECUR_MIXER_RETENTION = 1,/* "retention"    multi-scale retention */
    RECUR_MIXER_GLA = 2,      /* "gla"          gated linear attention, per-key-dim gate */
    RECUR_MIXER_DELTANET = 3, /* "deltanet"     delta rule */
    RECUR_MIXER_GATED_DELTANET = 4, /* "gated_deltanet" */
    RECUR_MIXER_SOFTMAX = 5,  /* "softmax"      causal softmax with a KV cache, max_context */
    RECUR_MIXER_MAMBA2 = 6,   /* "mamba2"       Mamba-2 block (Hugging Face folders only, docs/MODELS.md) */
    RECUR_MIXER_RWKV7 = 7     /* "rwkv7"        RWKV-7 block (Hugging Face folders only, docs/MODELS.md) */
} recur_mixer_kind;

#define RECUR_MAX_LAYERS 64

/* Read-only facts about a loaded model; owned by the model. */
typedef struct {
    char name[64];
    int vocab_size, d_model, n_layers, n_heads, head_k, head_v, d_ff;
    int tied_embeddings;
    int64_t max_context;                  /* softmax layers' KV-cache bound (tokens) */
    recur_mixer_kind mixers[RECUR_MAX_LAYERS];
    int64_t n_params;
    size_t state_bytes;                   /* a session's state at its largest (softmax at max_context) */
    uint64_t fingerprint;                 /* hash of config + weights; stamped into snapshots */
    size_t weight_bytes;                  /* bytes of weights held in memory (packed, padded) */
    char weights_dtype[8];                /* how the GEMM matrices are held: "F32", "F16" or "BF16"
                                           * (a half weights file stays half; results as fp32),
                                           * "Q8_0" or "Q4_0" (recur_model_quantize) */
    int softmax_layers;                   /* layers with a KV cache; when > 0, max_context bounds
                                           * a session (RECUR_ECONTEXT) and its state grows with it */
    char state_dtype[8];                  /* how sessions' recurrent state is stored: "F32", "BF16"
                                           * or "F16" (recur_model_set_state_dtype; state_bytes
                                           * counts it) */
    char weights_origin[12];              /* where the weights in memory came from: "file" (as the
                                           * weights file holds them), "seeded", "quantized"
                                           * (quantized at load) or "cache" (read from a cached
                                           * quantized file, recur_model_quantize_cached) */
    char prefill_dtype[8];                /* how prefill computes its GEMMs: "F32" (as decode) or
                                           * "BF16" (recur_model_set_prefill_dtype) */
    size_t prefill_bytes;                 /* bytes of the bf16 prefill panels (0 for F32), beyond
                                           * weight_bytes */
} recur_model_info;

/* How a session's recurrent state is stored (docs/MODEL.md "State dtype"): fp32, or a half
 * (bf16 / f16) widened to fp32 for each step's arithmetic and rounded once, to nearest even,
 * when the step stores it. Softmax layers' KV rows stay fp32. */
typedef enum { RECUR_STATE_F32 = 0, RECUR_STATE_F16 = 1, RECUR_STATE_BF16 = 2 } recur_state_dtype;

typedef struct recur_model recur_model;         /* immutable after load; shareable across threads */
typedef struct recur_state recur_state;         /* one session's recurrent state; one thread at a time */
typedef struct recur_workspace recur_workspace; /* scratch for one thread's model calls */

const char *recur_mixer_name(recur_mixer_kind kind);

/* Load a model directory holding config.json and model.safetensors (weights mmapped).
 * On success *out owns the model; free it with recur_model_free. */
int recur_model_load(const char *dir, recur_model **out);

/* Like recur_model_load, with the config and weights files named separately. */
int recur_model_load_files(const char *config_path, const char *weights_path, recur_model **out);

/* recur_model_load of any folder recurd serves (docs/MODELS.md): the native stack, or a Hugging
 * Face checkpoint whose config.json "model_type" names a family recurd implements, with
 * model.safetensors or a sharded model.safetensors.index.json. err (may be NULL) receives a
 * message naming what is wrong (file, config key, tensor) on failure. */
int recur_model_load_ex(const char *dir, recur_model **out, char *err, size_t errlen);

/* A model from config JSON text with weights initialised from a seed (tests, benchmarks). */
int recur_model_init_seed(const char *config_json, uint64_t seed, recur_model **out);
void recur_model_free(recur_model *m);
const recur_model_info *recur_model_get_info(const recur_model *m);

/* A copy of src (any loaded or seeded model with F32 / F16 / BF16 matrices) whose GEMM matrices
 * are block-quantized at weights_dtype "q8_0" or "q4_0" (case-insensitive; llama.cpp's Q8_0 /
 * Q4_0: an fp16 scale per 32 weights, docs/MODEL.md "Quantized weights"); the activations are
 * quantized to Q8_0 per GEMM. Embeddings, norms and the other vectors stay fp32. src is not
 * changed (free it when no longer needed); *out owns the new model. Its info says the dtype
 * ("Q8_0" / "Q4_0") and bytes; its fingerprint differs from src's. RECUR_EINVAL (err names it)
 * for another dtype or an already quantized src. */
int recur_model_quantize(const recur_model *src, const char *weights_dtype, recur_model **out, char *err,
                         size_t errlen);

/* The quantized-weights cache (docs/MODEL.md "The quantized-weights cache"): recur_model_quantize
 * through a file in cache_dir named by the quantized model's fingerprint, its dtype and the panel
 * layout version (RECUR_QUANT_LAYOUT_VERSION), "<fingerprint>.<q8_0|q4_0>.p<layout>.qweights".
 * A valid file (magic, format and layout versions, header checksum, source fingerprint, dtype,
 * sizes, payload checksum, every check named by a rule) is read instead of quantizing; otherwise
 * the model is quantized and the file written atomically (a temporary file in cache_dir, fsync,
 * rename, fsync of the directory), replacing a refused one. A file is never read past
 * max_file_bytes (0: RECUR_WEIGHTS_CACHE_MAX_BYTES); a model whose file would be larger is
 * quantized and not cached. cache_dir NULL or "" is recur_model_quantize. Failing to write the
 * file is not an error (the report says it). report (may be NULL) says what happened. */
#define RECUR_WEIGHTS_CACHE_MAX_BYTES ((uint64_t)16 << 30)

typedef enum {
    RECUR_WCACHE_OFF = 0,        /* no cache_dir: quantized at load */
    RECUR_WCACHE_HIT = 1,        /* read from the cache file (weights_origin "cache") */
    RECUR_WCACHE_WRITTEN = 2,    /* no file: quantized, file written */
    RECUR_WCACHE_REPLACED = 3,   /* a file refused by `rule`: quantized, file replaced */
    RECUR_WCACHE_NOT_WRITTEN = 4 /* quantized; the file (refused by `rule`, or absent) could not be
                                  * written, or would exceed max_file_bytes: `detail` says why */
} recur_wcache_outcome;

typedef struct {
    recur_wcache_outcome outcome;
    char path[1024];  /* the cache file (outcome != OFF) */
    char rule[40];    /* the rule that refused the file found there ("" if none was refused) */
    char detail[256]; /* what the rule saw, or why the file was not written */
} recur_wcache_report;

int recur_model_quantize_cached(const recur_model *src, const char *weights_dtype, const char *cache_dir,
                                uint64_t max_file_bytes, recur_model **out, recur_wcache_report *report,
                                char *err, size_t errlen);
/* "off", "hit", "written", "replaced" or "not_written". */
const char *recur_wcache_outcome_name(recur_wcache_outcome o);

/* The state dtype of every state and workspace created from m from now on (default F32); set it
 * once, before creating any: a state or workspace of another dtype is RECUR_EMISMATCH to the
 * model calls. Updates recur_model_info.state_bytes / state_dtype. RECUR_EINVAL for another t. */
int recur_model_set_state_dtype(recur_model *m, recur_state_dtype t);
recur_state_dtype recur_model_state_dtype(const recur_model *m);
/* "f32" / "bf16" / "f16" (any case) -> *out; RECUR_EINVAL otherwise. */
int recur_state_dtype_parse(const char *name, recur_state_dtype *out);
/* "F32", "BF16" or "F16". */
const char *recur_state_dtype_name(recur_state_dtype t);

/* How the prefill entry points (recur_model_prefill, recur_model_prefill_tail) compute their
 * GEMMs (docs/MODEL.md "Prefill dtype"): "f32" (default: the model's matrices, as decode) or
 * "bf16" (case-insensitive): every GEMM matrix but the LM head is also held as bfloat16 panels
 * (info.prefill_bytes more memory) and prefill rounds each GEMM input to bf16 and accumulates in
 * fp32 (vdpbf16ps). Decode (recur_model_step, recur_model_step_batch) and the LM head are
 * unchanged. Refused (RECUR_EINVAL, err names why) for another name, on a CPU or RECUR_ISA path
 * without avx512_bf16, and for quantized matrices; RECUR_ENOMEM when the panels do not fit. Set
 * it before sharing m between threads. Snapshots and fingerprints do not change. */
int recur_model_set_prefill_dtype(recur_model *m, const char *prefill_dtype, char *err, size_t errlen);

/* Scratch buffers for up to max_batch sessions per batched step and prefill of any length
 * (long prefills are processed in pieces of the workspace's size). One workspace per thread. */
int recur_workspace_create(const recur_model *m, int max_batch, recur_workspace **out);
void recur_workspace_free(recur_workspace *ws);

/* Session state: create (zeroed), destroy, reset to zero, copy (same model only). */
int recur_state_create(const recur_model *m, recur_state **out);
void recur_state_destroy(recur_state *s);
void recur_state_reset(recur_state *s);
int recur_state_copy(recur_state *dst, const recur_state *src);
uint64_t recur_state_tokens_seen(const recur_state *s);
/* Bytes of state this session holds now: the recurrent layers' fixed state plus the live rows
 * of every softmax layer's KV cache (<= recur_model_info.state_bytes). */
size_t recur_state_bytes_used(const recur_state *s);

/* Fold one token in, logits [vocab] for the next position. A bad token changes nothing. */
int recur_model_step(const recur_model *m, recur_workspace *ws, recur_state *s, int32_t token,
                     float *logits);

/* Fold n tokens with the chunkwise prefill. logits [n][vocab] for every position, or NULL
 * (then only the state advances). All tokens are validated before anything is folded. */
int recur_model_prefill(const recur_model *m, recur_workspace *ws, recur_state *s,
                        const int32_t *tokens, int64_t n, float *logits);
/* The same with logits for the last n_tail positions only, logits [n_tail][vocab] (0 <= n_tail
 * <= n; 0 = none): a long prompt does not pay the LM head at every position. Each row is
 * bit-identical to the same row of recur_model_prefill's. */
int recur_model_prefill_tail(const recur_model *m, recur_workspace *ws, recur_state *s,
                             const int32_t *tokens, int64_t n, int64_t n_tail, float *logits);

/* One decode step for B sessions at once (B <= the workspace's max_batch): projections, MLP and
 * LM head as one GEMM over the batch, per-session state updates. states must be distinct.
 * logits [B][vocab]. Each session's logits and new state are bit-identical to what
 * recur_model_step gives on that session alone, whatever B, its position and the other sessions. */
int recur_model_step_batch(const recur_model *m, recur_workspace *ws, recur_state *const *states,
                           const int32_t *tokens, int B, float *logits);

/* The byte helpers of the snapshot formats, one definition for the whole tree (core/util.h; proto/
 * writes the logits trailer with them): FNV-1a 64 of n bytes continuing from h (start from
 * RECUR_FNV_OFFSET), little-endian u32 / u64 loads and stores. */
#define RECUR_FNV_OFFSET 0xcbf29ce484222325ULL
uint64_t recur_fnv1a64(uint64_t h, const void *data, size_t n);
uint32_t recur_get_le32(const uint8_t *p);
uint64_t recur_get_le64(const uint8_t *p);
void recur_put_le32(uint8_t *p, uint32_t v);
void recur_put_le64(uint8_t *p, uint64_t v);

/* Snapshot (docs/DESIGN.md §6, docs/MODEL.md "Snapshot"). recur_snapshot_size is exact for the state
 * as it is now. What a state may hold (docs/MODEL.md "State values"): every value finite with
 * |x| <= RECUR_STATE_MAX_ABS, a linear layer's normaliser z >= 0, and tokens_seen <=
 * recur_max_tokens_seen. */
#define RECUR_STATE_MAX_ABS 0x1p40f                      /* 2^40 */
#define RECUR_MAX_TOKENS_SEEN (((uint64_t)1 << 53) - 1)  /* exact as a JSON number */
/* The value rule on n fp32 (any alignment): 0, RECUR_ENONFINITE (a NaN or infinity) or
 * RECUR_ERANGE (|x| > RECUR_STATE_MAX_ABS). Also what a session's logits must satisfy. */
int recur_values_check(const void *x, size_t n);
/* max_context for a model with softmax layers, else RECUR_MAX_TOKENS_SEEN. */
uint64_t recur_max_tokens_seen(const recur_model *m);
size_t recur_snapshot_size(const recur_state *s);
/* RECUR_ENONFINITE / RECUR_ERANGE (nothing useful written) for a state recur_snapshot_read
 * would refuse. */
int recur_snapshot_write(const recur_state *s, uint8_t *buf, size_t cap, size_t *written);
/* Bytes of the snapshot that starts at buf, from its magic and payload length alone (40 + P + 8;
 * may exceed len). RECUR_ETRUNCATED when len < 40, RECUR_EFORMAT when the magic is not there. */
int recur_snapshot_length(const uint8_t *buf, size_t len, size_t *out);
/* 1 when the snapshot at buf (len bytes, at least its first 12) has a version whose checksum is
 * the lane checksum (4, 5: the ones written), 0 for the FNV-1a ones (1, 2, 3) or anything else.
 * The logits trailer's checksum (proto/state_blob.h) follows its core's. */
int recur_snapshot_lane_checksum(const uint8_t *buf, size_t len);
/* Validate a snapshot for model m without applying it, in this order: framing (EFORMAT, or
 * ETRUNCATED; a too-short buffer whose header names another model is EMISMATCH), checksum
 * (ECHECKSUM), model (EMISMATCH), tokens_seen (ECONTEXT), values (ENONFINITE, ERANGE). */
int recur_snapshot_check(const recur_model *m, const uint8_t *buf, size_t len);
/* recur_snapshot_check, then apply; on any error s is unchanged. */
int recur_snapshot_read(recur_state *s, const uint8_t *buf, size_t len);
/* Apply a snapshot this process wrote (recur_snapshot_write) and kept in its own memory since:
 * only its framing, version, model and size are checked (O(1)); neither the checksum nor the
 * values are (recur_snapshot_write checked the values, and the bytes never left the process).
 * Bytes from anywhere else go through recur_snapshot_read. On any error s is unchanged. */
int recur_snapshot_read_own(recur_state *s, const uint8_t *buf, size_t len);
/* A checkpoint of what a fold or a generation changes in s: tokens_seen and the recurrent
 * layers' state (softmax KV rows are only appended; rows past the saved tokens_seen are dead).
 * buf holds recur_state_checkpoint_bytes(s) bytes; rollback puts s back exactly. */
size_t recur_state_checkpoint_bytes(const recur_state *s);
void recur_state_checkpoint(const recur_state *s, void *buf);
void recur_state_rollback(recur_state *s, const void *buf);
/* The value rule on a live state: the recurrent layers' state, softmax KV rows [from,
 * tokens_seen), and tokens_seen. 0, RECUR_ENONFINITE, RECUR_ERANGE or RECUR_ECONTEXT. */
int recur_state_check(const recur_state *s, uint64_t from);

/* ---------------------------------------------------------------- sampling */

typedef struct {
    float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1 or <= 0: off */
    int vocab_limit;   /* > 0: only ids < vocab_limit may be drawn (a model whose vocab_size is
                        * padded beyond its tokenizer's: the padding is never sampled, and greedy
                        * is the argmax over the allowed ids); <= 0 or >= vocab: off */
} recur_sampler_params;

/* Seeded, reproducible sampling. *rng is the caller's xorshift/splitmix state, advanced by one
 * draw per call. scratch [2*vocab] floats. Returns the token id (>= 0) or a negative error. */
int recur_sample(const float *logits, int vocab, const recur_sampler_params *p, uint64_t *rng,
                 float *scratch);

/* A state for recur_sample's *rng from any 64-bit seed (a request's seed, or entropy): one
 * splitmix64 draw, never zero (valid for xorshift as well as splitmix). */
uint64_t recur_sampler_seed(uint64_t seed);

/* log-softmax of logits [vocab] into out [vocab] (may alias). */
void recur_log_softmax(const float *logits, int vocab, float *out);
/* The same, keeping its two constants: out[i] = (logits[i] - c[0]) - c[1], c[0] = max logits,
 * c[1] = log sum exp(logits - max), so a later caller scores one token without the vocabulary
 * pass. The exponentials are taken in float by a vectorised e^x (rel. error < 1e-7; the sum
 * stays in double): results agree with recur_log_softmax to ~1e-7 at a fraction of its cost.
 * out must not alias logits. */
void recur_log_softmax_consts(const float *logits, int vocab, float *out, float c[2]);
/* The k highest of x [n] (k clamps to n): ids and values, highest first, lower id first on
 * ties; NaN never ranks. Returns how many were written (<= k). */
int recur_top_k(const float *x, int n, int k, int32_t *ids, float *vals);

/* Logit adjustment before sampling (core/logit_adjust.c; OpenAI's presence_penalty,
 * frequency_penalty and logit_bias): for each distinct generated id ids[i] seen counts[i] times,
 * logits[id] -= counts[i] * frequency + presence (when counts[i] > 0); then logits[bias_ids[j]]
 * += bias[j]. ids [n] distinct; bias_ids / bias [n_bias]. RECUR_EINVAL, or RECUR_ETOKEN for an
 * id outside [0, vocab) (nothing changed then). */
typedef struct {
    float presence, frequency;
    const int32_t *bias_ids; /* [n_bias] */
    const float *bias;       /* [n_bias] */
    size_t n_bias;
} recur_logit_adjust_params;
int recur_logit_adjust(float *logits, int vocab, const recur_logit_adjust_params *p,
                       const int32_t *ids, const uint32_t *counts, size_t n);

/* ---------------------------------------------------------------- tokenizer (docs/API.md §Tokenizers) */

/* A tokenizer is immutable after load and shareable across threads (encode keeps a small
 * internal cache behind a trylock). Three kinds: */
#define RECUR_TOKENIZER_BYTES 0 /* today's byte tokenizer: id = byte value, vocab 256 */
#define RECUR_TOKENIZER_HF 1    /* a Hugging Face tokenizer.json (BPE) */
#define RECUR_TOKENIZER_RWKV 2  /* an RWKV World vocabulary (greedy longest byte match) */

typedef struct recur_tokenizer recur_tokenizer;
typedef struct recur_detok recur_detok; /* one streaming decode */

/* path: a tokenizer.json, an RWKV vocab file (rwkv_vocab_*.txt), or a model folder holding
 * tokenizer.json or rwkv_vocab_v20230424.txt (a folder with neither gets the byte tokenizer).
 * Errors: RECUR_EIO (unreadable), RECUR_EFORMAT (malformed, or a construct not implemented),
 * RECUR_ENOMEM. err (may be NULL) receives a message naming the file's offending part. */
int recur_tokenizer_load(const char *path, recur_tokenizer **out, char *err, size_t errlen);
int recur_tokenizer_load_json(const char *json, size_t len, recur_tokenizer **out, char *err, size_t errlen);
int recur_tokenizer_load_rwkv(const char *text, size_t len, recur_tokenizer **out, char *err, size_t errlen);
int recur_tokenizer_bytes(recur_tokenizer **out);
void recur_tokenizer_free(recur_tokenizer *t);

int recur_tokenizer_kind(const recur_tokenizer *t);
/* The number of ids the tokenizer can produce or decode: highest id + 1, added tokens included. */
int32_t recur_tokenizer_vocab_size(const recur_tokenizer *t);
/* The i-th added token (tokenizer.json added_tokens, in file order): RECUR_ERANGE past the end. */
int recur_tokenizer_added_token(const recur_tokenizer *t, size_t i, int32_t *id, const char **content,
                                int *special);

/* text [len] (UTF-8; invalid sequences are read as U+FFFD) -> *ids [*n], malloc'd: release with
 * recur_tokenizer_release. add_special_tokens: apply the file's TemplateProcessing (BOS/EOS). */
int recur_tokenizer_encode(const recur_tokenizer *t, const char *text, size_t len, int add_special_tokens,
                           int32_t **ids, size_t *n);
/* ids -> *text [*len] (NUL-terminated, valid UTF-8, malloc'd: recur_tokenizer_release).
 * Ids >= vocab_size (a model's padded vocabulary) decode as empty text; a negative id is
 * RECUR_ETOKEN. Special tokens decode as their content. */
int recur_tokenizer_decode(const recur_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len);
void recur_tokenizer_release(void *p);

/* Streaming decode: push ids one at a time; each push returns the text that is now complete
 * (*text valid until the next call on d). Bytes of an unfinished UTF-8 sequence are held until it
 * completes or is proven invalid (then U+FFFD, WHATWG rule); finish flushes what is held. The
 * concatenation of all pushes and the finish equals recur_tokenizer_decode of all the ids. */
int recur_detok_new(const recur_tokenizer *t, recur_detok **out);
int recur_detok_push(recur_detok *d, int32_t id, const char **text, size_t *len);
int recur_detok_finish(recur_detok *d, const char **text, size_t *len);
void recur_detok_free(recur_detok *d);

/* ---------------------------------------------------------------- chat templates (docs/API.md §Chat templates) */

/* A chat template turns a conversation into the prompt text, as Hugging Face's
 * apply_chat_template renders it: a Jinja template (tokenizer_config.json's chat_template) run
 * by librecur's own interpreter of the Jinja subset real templates use, or a built-in. Immutable
 * after parse; shareable across threads (render keeps its state on the caller's side).
 * Anything the interpreter does not implement is refused when the template is parsed
 * (RECUR_EFORMAT, err naming the construct), never rendered differently. Bounds on untrusted
 * input, each named in its error: */
#define RECUR_CHAT_MAX_TEMPLATE_BYTES (1u << 20) /* template source */
#define RECUR_CHAT_MAX_OUTPUT_BYTES (64u << 20)  /* one rendered prompt */
#define RECUR_CHAT_MAX_LOOP_ITERATIONS 1000000   /* for-loop bodies run, summed over a render */
#define RECUR_CHAT_MAX_DEPTH 64                  /* nesting of blocks / expressions / macro calls */

typedef struct recur_chat_template recur_chat_template;
/* One message; strings need not be NUL-terminated (lengths given). */
typedef struct {
    const char *role;
    size_t role_len;
    const char *content;
    size_t content_len;
} recur_chat_message;

/* Parse Jinja source [len]; bos_token / eos_token may be NULL (then ""). Errors: RECUR_EFORMAT
 * (syntax, or an unsupported construct, named in err), RECUR_ESHAPE (len over
 * RECUR_CHAT_MAX_TEMPLATE_BYTES), RECUR_ENOMEM. err (may be NULL) gets the message. */
int recur_chat_template_parse(const char *src, size_t len, const char *bos_token, const char *eos_token,
                              recur_chat_template **out, char *err, size_t errlen);
/* A built-in: "chatml", "llama2", "llama3", "rwkv", "plain" (docs/API.md lists their text and
 * tokens). RECUR_EINVAL for another name. */
int recur_chat_template_builtin(const char *name, recur_chat_template **out, char *err, size_t errlen);
/* The eos_token the template was parsed with ("" when none): the end-of-turn token a server stops
 * generating at. Valid while t lives. */
const char *recur_chat_template_eos_token(const recur_chat_template *t);
/* A built-in's Jinja source and its bos / eos tokens (static strings), or NULL for another name. */
const char *recur_chat_template_builtin_source(const char *name, const char **bos_token, const char **eos_token);
/* A model folder: tokenizer_config.json's chat_template (a string, or the list-of-{name,template}
 * form, whose "default" entry is used) with its bos_token / eos_token (strings or
 * {"content": ...} objects). RECUR_ENOENT when the folder has no tokenizer_config.json or it has
 * no chat_template; RECUR_EIO unreadable; RECUR_EFORMAT malformed or unsupported. */
int recur_chat_template_load_dir(const char *dir, recur_chat_template **out, char *err, size_t errlen);
/* Render msgs [n] with add_generation_prompt (0/1). *text is malloc'd, NUL-terminated, *len
 * bytes without the NUL: free it with recur_chat_release. A template that raises
 * (raise_exception) returns RECUR_EINVAL with err = its message; a bound exceeded returns
 * RECUR_ESHAPE naming it; a runtime type error (e.g. a filter on the wrong type) RECUR_EINVAL. */
int recur_chat_render(const recur_chat_template *t, const recur_chat_message *msgs, size_t n,
                      int add_generation_prompt, char **text, size_t *len, char *err, size_t errlen);
void recur_chat_release(void *p);
void recur_chat_template_free(recur_chat_template *t);

#ifdef __cplusplus
}
#endif

#endif /* RECUR_H */
