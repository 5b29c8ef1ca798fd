/*
 * fuzz_configs.h — the tiny model configs shared by the model-level fuzz targets and by
 * make_corpus.py (which writes seeds for exactly these configs: keep the two in step).
 */
#ifndef FUZZ_CONFIGS_H
#define FUZZ_CONFIGS_H

/* 0: tied embeddings, gated DeltaNet + softmax (KV cache, variable-size snapshots) */
#define FUZZ_CONFIG_0 \
    "{\"name\":\"fuzz0\",\"vocab_size\":16,\"d_model\":8,\"n_layers\":2,\"n_heads\":2," \
    "\"head_k\":4,\"head_v\":4,\"d_ff\":8,\"mixers\":[\"gated_deltanet\",\"softmax\"]," \
    "\"tied_embeddings\":true,\"max_context\":6}"
/* 1: untied, linear (S and z) + gla (gk_proj) + deltanet (b_proj) */
#define FUZZ_CONFIG_1 \
    "{\"name\":\"fuzz1\",\"vocab_size\":12,\"d_model\":4,\"n_layers\":3,\"n_heads\":1," \
    "\"head_k\":4,\"head_v\":2,\"d_ff\":4,\"mixers\":[\"linear\",\"gla\",\"deltanet\"]," \
    "\"tied_embeddings\":false}"
/* 2: retention only, one layer */
#define FUZZ_CONFIG_2 \
    "{\"name\":\"fuzz2\",\"vocab_size\":8,\"d_model\":4,\"n_layers\":1,\"n_heads\":2," \
    "\"head_k\":2,\"head_v\":2,\"d_ff\":4,\"mixers\":[\"retention\"]}"

#define FUZZ_N_CONFIGS 3
static const char *const fuzz_configs[FUZZ_N_CONFIGS] = {FUZZ_CONFIG_0, FUZZ_CONFIG_1, FUZZ_CONFIG_2};

#endif /* FUZZ_CONFIGS_H */
