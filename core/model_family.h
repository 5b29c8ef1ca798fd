/*
 * model_family.h — the seam between a checkpoint on disk and the model stack (not public).
 *
 * A model family is one file that maps a checkpoint's config and tensors onto the model of
 * model_internal.h: a stack of blocks built from the shared pieces, each layer described by a
 * recur_block (RMSNorm with its eps, the fused input projection, an optional short causal
 * convolution (short_conv.h) whose inputs live in the session state, q/k activation and L2 norm,
 * grouped q/k heads, the mixer of recur_mixer_kind with its gate / beta form, the output RMSNorm
 * with or without the silu(g) gate, an optional SwiGLU MLP) and the tied or untied LM head.
 *
 * Interfaces:
 *   - model_load.c picks the family from config.json's "model_type" (absent: the native stack)
 *     in its table `families[]` — one row per family, e.g. {"gated_deltanet", recur__family_fla};
 *     a new family adds its row there and nothing else outside its own file;
 *   - the family is a recur__family_fn: it parses its config (hf_config.h for Hugging Face
 *     config.json: Python's JSON, declared keys, upstream defaults, refusals by name), fills a
 *     recur_config with one recur_block per layer, and calls recur__load_roles with a function
 *     that names each tensor role as its checkpoint spells it;
 *   - the checkpoint (checkpoint.h) is one safetensors file or a sharded index, opened by the
 *     loader; recur__load_roles finds every role's tensor, checks shapes, refuses missing and
 *     extra tensors by name, allocates the model and copies every tensor (recur__load_tensor);
 *   - errors: a RECUR_E* code and, for anything the user must fix, a message in err naming the
 *     file, key or tensor (recur_model_load_ex hands it out; recurd prints it).
 *
 * Families: the native stack (family_native.c, docs/MODEL.md); FLA's gated_deltanet, gla and
 * delta_net (family_fla.c, docs/MODELS.md); Mamba-2, model_type mamba2 (family_mamba2.c, block_mamba2.c);
 * RWKV-7, model_type rwkv7 (family_rwkv7.c, block_rwkv7.c).
 */
#ifndef RECUR_MODEL_FAMILY_H
#define RECUR_MODEL_FAMILY_H

#include "checkpoint.h"
#include "hf_config.h"
#include "model_internal.h"
#include "safetensors.h"

typedef int (*recur__family_fn)(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                                recur_model **out, char *err, size_t errlen);

/* The native stack: config.json of docs/MODEL.md "Config", tensors named as recur__weight. */
int recur__family_native(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                         recur_model **out, char *err, size_t errlen);
/* FLA's Hugging Face checkpoints: model_type gated_deltanet, gla, delta_net. */
int recur__family_fla(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                      recur_model **out, char *err, size_t errlen);

/* Hugging Face Mamba-2 checkpoints: model_type mamba2 (family_mamba2.c, block_mamba2.h). */
int recur__family_mamba2(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                         recur_model **out, char *err, size_t errlen);

/* RWKV-7 folders in FLA's layout: model_type rwkv7 (family_rwkv7.c, block_rwkv7.h). */
int recur__family_rwkv7(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                        recur_model **out, char *err, size_t errlen);

/* Name of role (layer, t) (recur__weight's enumeration; layer -1: globals) in the checkpoint:
 * writes name (NUL-terminated, < cap) and, when the file stores it in another shape of the same
 * elements (a Conv1d weight [C][1][W] for our [C][W]), that shape in file_shape / *file_ndim
 * (*file_ndim = 0: the role's own shape). */
typedef void (*recur__role_name_fn)(const recur_config *c, int layer, int t, char *name, size_t cap,
                                    int64_t *file_shape, int *file_ndim);

/* Every role of config c found in ck under its name, of its shape, and nothing else in ck; the
 * matrices kept in the file's half type when all of them have it and keep_half; then allocated
 * and filled: *out is ready for recur__model_finish. Errors name the tensor. */
int recur__load_roles(const recur_config *c, const recur__ckpt *ck, recur__role_name_fn name, int keep_half,
                      recur_model **out, char *err, size_t errlen);

/* A Hugging Face family's load (model_load.c), every such family's recur__family_fn body:
 * config.json parsed as Python's JSON, parse fills the recur_config from it (hf_config.h's typed
 * reads; errors name the key), recur__config_check's bounds, then recur__load_roles with the
 * family's names. */
typedef int (*recur__hf_parse_fn)(const recur__hfc *h, recur_config *c);
int recur__family_hf_load(const char *config, size_t config_len, const recur__ckpt *ckpt, int keep_half,
                          recur__hf_parse_fn parse, recur__role_name_fn name, recur_model **out, char *err,
                          size_t errlen);

/* A shared piece for every family (model_load.c): copy tensor src into its place(s) dst in a model
 * whose matrices are of type mwt: fp32 (widened exactly from a half file) and / or the model's half
 * type (only ever the file's own, copied as is). src->n == dst->n. A non-finite value is a corrupt
 * file (RECUR_EFORMAT). */
int recur__load_tensor(const recur__st_tensor *src, const recur_weight_ref *dst, recur_wtype mwt);

#endif /* RECUR_MODEL_FAMILY_H */
