/*
 * fuzz_hf_config.c — libFuzzer target: Hugging Face JSON as Python writes it (core/hf_config.c),
 * model.safetensors.index.json (core/checkpoint.c) and the FLA, Mamba-2 and RWKV-7 families' config
 * reading (core/family_fla.c, core/family_mamba2.c, core/family_rwkv7.c) on a checkpoint without
 * tensors.
 *
 * Input byte 0 selects (mod 4), the rest is the file:
 *   0  recur__hf_json_parse: accepted -> a tree (freed); refused -> a message
 *   1  recur__ckpt_parse_index: accepted -> n >= 1 names and plain shard names (no '/', not
 *      "." or ".."); refused -> a message
 *   2  recur__family_fla with an empty checkpoint: never succeeds (a tensor is missing or the
 *      config is refused), always with a message, never allocating the model's arena
 *   3  recur__family_mamba2 (byte 0 < 128) or recur__family_rwkv7 (>= 128), the same way
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "hf_config.h"
#include "model_family.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[512] = "";
    switch (data[0] % 4) {
    case 0: {
        cJSON *root = NULL;
        int rc = recur__hf_json_parse(text, len, "fuzz.json", &root, err, sizeof err);
        if (rc == 0) cJSON_Delete(root);
        else assert(err[0]);
        break;
    }
    case 1: {
        void *tree;
        const char **names, **shards;
        int n;
        int rc = recur__ckpt_parse_index(text, len, &tree, &names, &shards, &n, err, sizeof err);
        if (rc == 0) {
            assert(n >= 1);
            for (int i = 0; i < n; i++) {
                assert(names[i] && shards[i] && shards[i][0]);
                assert(!strchr(shards[i], '/') && strcmp(shards[i], ".") && strcmp(shards[i], ".."));
            }
            free(names);
            free(shards);
            cJSON_Delete(tree);
        } else {
            assert(err[0] || rc == RECUR_ENOMEM);
        }
        break;
    }
    default: {
        recur__ckpt empty;
        memset(&empty, 0, sizeof empty);
        recur_model *m = NULL;
        recur__family_fn family = data[0] % 4 != 3 ? recur__family_fla
                                : data[0] < 128   ? recur__family_mamba2
                                                  : recur__family_rwkv7;
        int rc = family(text, len, &empty, 1, &m, err, sizeof err);
        assert(rc != 0 && m == NULL && err[0]);
        break;
    }
    }
    return 0;
}
