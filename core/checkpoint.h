/*
 * checkpoint.h — a model's tensors across one or several safetensors files (not public).
 *
 * A Hugging Face folder holds either model.safetensors or model.safetensors.index.json
 * {"metadata": {...}, "weight_map": {tensor name: shard file name}} and the shards it names
 * (transformers' rule: model.safetensors is used when both exist). Each file goes through the
 * safetensors parser (safetensors.h). The index is accepted only when it describes the shards
 * exactly: every tensor it maps is in the shard it names, every tensor of every shard is mapped
 * to that shard (a tensor in two shards, or one the index does not list, is refused), shard
 * names are plain file names in the folder, and shards named "<stem>-NNNNN-of-MMMMM.safetensors"
 * are all present from 1 to MMMMM. Every error is a code plus a message naming the file and
 * tensor.
 */
#ifndef RECUR_CHECKPOINT_H
#define RECUR_CHECKPOINT_H

#include <stddef.h>
#include "safetensors.h"

#define RECUR_CKPT_MAX_SHARDS 4096
#define RECUR_CKPT_MAX_INDEX_BYTES ((size_t)64 << 20)

typedef struct {
    int n_files;
    recur__st_file *files;          /* [n_files], owned */
    int n;                          /* tensors over all files */
    const recur__st_tensor **t;     /* [n], sorted by name (names unique over all files) */
} recur__ckpt;

/* One safetensors file as a checkpoint. */
int recur__ckpt_open_file(const char *path, recur__ckpt *c, char *err, size_t errlen);
/* A folder's model.safetensors, else its model.safetensors.index.json and shards. RECUR_EIO when
 * neither exists or a file cannot be read; RECUR_EFORMAT / RECUR_ETRUNCATED for a corrupt one. */
int recur__ckpt_open_dir(const char *dir, recur__ckpt *c, char *err, size_t errlen);
/* Parse index JSON text (exposed for the fuzz target): the shard of every tensor, checked for
 * the rules above that need no file. On success *names / *shards are parallel arrays of n
 * pointers into *tree (free with cJSON_Delete(*tree) and free(*names), free(*shards)). */
int recur__ckpt_parse_index(const char *text, size_t len, void **tree, const char ***names,
                            const char ***shards, int *n, char *err, size_t errlen);
const recur__st_tensor *recur__ckpt_find(const recur__ckpt *c, const char *name);
void recur__ckpt_close(recur__ckpt *c);

#endif /* RECUR_CHECKPOINT_H */
