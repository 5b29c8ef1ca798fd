/*
 * model_family.h — the seam between a checkpoint on disk and the model stack (not public).
 *
 * A model family is one file that maps a checkpoint's config and tensors onto the model of
 * model_internal.h: a stack of blocks built from the shared pieces (RMSNorm, the fused input
 * projections, a mixer of recur_mixer_kind, the gated output projection, the SwiGLU MLP, the
 * tied or untied LM head). A family is one plain function:
 *
 *   int recur__family_NAME(const char *config, size_t config_len, const char *weights_path,
 *                          int keep_half, recur_model **out);
 *
 * It parses its own config format into a recur_config (RECUR_EFORMAT / RECUR_ESHAPE when it is
 * not one of its configs), opens the weights with the safetensors parser (safetensors.h: a list of
 * validated tensors, no model), checks that the file holds exactly the tensors it maps (names,
 * shapes), allocates the model (recur__model_alloc) and fills every tensor role of recur__weight
 * through recur__load_tensor (a checkpoint's layout differing from ours — a split, a transpose,
 * a fused tensor — is the family's to undo), leaving *out ready for recur__model_finish.
 * The loader (model_load.c) reads the files, calls the family the config belongs to and
 * finishes the model; nothing outside core/ knows families.
 *
 * Families: the native stack (family_native.c, docs/MODEL.md). Next: Hugging Face checkpoints of
 * FLA's Gated DeltaNet / GLA / DeltaNet and of Mamba-2, each its own family_*.c.
 */
#ifndef RECUR_MODEL_FAMILY_H
#define RECUR_MODEL_FAMILY_H

#include "model_internal.h"
#include "safetensors.h"

/* The native stack: config.json of docs/MODEL.md "Config", tensors named as recur__weight. */
int recur__family_native(const char *config, size_t config_len, const char *weights_path,
                         int keep_half, recur_model **out);

/* A shared piece for every family (model_load.c): copy tensor src into its place(s) dst in a model
 * whose matrices are of type mwt: fp32 (widened exactly from a half file) and / or the model's half
 * type (only ever the file's own, copied as is). src->n == dst->n. A non-finite value is a corrupt
 * file (RECUR_EFORMAT). */
int recur__load_tensor(const recur__st_tensor *src, const recur_weight_ref *dst, recur_wtype mwt);

#endif /* RECUR_MODEL_FAMILY_H */
