/*
 * hf_config.h — Hugging Face JSON files as Python writes them (config.json,
 * model.safetensors.index.json), and typed reads of a config with upstream defaults (not public).
 *
 * JSON as Python's json module writes it: RFC 8259 plus the bare number tokens Infinity,
 * -Infinity and NaN (transformers writes "time_step_limit": [0.0, Infinity]). Strict otherwise:
 * no trailing commas, comments, single quotes, leading zeros, control characters in strings,
 * duplicate keys, or trailing text; depth <= HF_JSON_MAX_DEPTH, members per object / items per
 * array <= HF_JSON_MAX_ITEMS, text <= the caller's bound. The result is a cJSON tree (numbers
 * may be non-finite).
 *
 * Reading a config (recur__hfc): a family declares every key it knows, each with how it is
 * treated — HFC_READ (the family reads it with a getter below), HFC_IGNORE (upstream accepts it
 * and it changes nothing recurd computes: training switches, kernel choices, token ids read
 * elsewhere). recur__hfc_check_keys refuses any other key by name: a key recurd does not know
 * might change the math. A getter takes the upstream default for an absent key (and for null
 * where upstream's default is None); a wrong type or a value out of range is refused with a
 * message naming the key. A value that upstream accepts but recurd does not implement is the
 * family's to refuse (recur__hfc_refuse), naming key and value.
 *
 * Every error is RECUR_EFORMAT with a message in the caller's err buffer
 * ("config.json: \"hidden_act\": \"gelu\" is not implemented (swish only)").
 */
#ifndef RECUR_HF_CONFIG_H
#define RECUR_HF_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

#define HF_JSON_MAX_DEPTH 64
#define HF_JSON_MAX_ITEMS 1000000

/* Parse text[len] (see top). 0 and *out (free with cJSON_Delete), or RECUR_EFORMAT / RECUR_ENOMEM
 * with a message "<what>: <reason> at byte N" in err. */
int recur__hf_json_parse(const char *text, size_t len, const char *what, cJSON **out, char *err,
                         size_t errlen);

/* The whole file at path into a malloc'd NUL-terminated buffer (*out, *len): RECUR_EIO when it
 * cannot be read, RECUR_EFORMAT when it is longer than limit bytes. */
int recur__read_small_file(const char *path, size_t limit, char **out, size_t *len);

/* printf into err (NULL or errlen 0: nothing); returns RECUR_EFORMAT. */
int recur__errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef enum { HFC_READ = 1, HFC_IGNORE = 2 } recur__hfc_use;
typedef struct {
    const char *key;
    recur__hfc_use use;
} recur__hfc_key;

typedef struct {
    const cJSON *root; /* the config object */
    const char *file;  /* for messages: "config.json" */
    char *err;
    size_t errlen;
} recur__hfc;

/* Every key of the root is in keys[n] or is one of the bookkeeping keys every family ignores
 * (architectures, torch_dtype, dtype, transformers_version, _name_or_path, bos / eos / pad_token_id,
 * use_cache, initializer_range, fuse_cross_entropy, fuse_linear_cross_entropy, use_l2warp): else
 * RECUR_EFORMAT naming the first one that is not. */
int recur__hfc_check_keys(const recur__hfc *c, const recur__hfc_key *keys, int n);
/* The key's item, or NULL when absent (or JSON null). */
const cJSON *recur__hfc_get(const recur__hfc *c, const char *key);
/* An integral number in [lo, hi]; absent or null: dflt. */
int recur__hfc_int(const recur__hfc *c, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out);
/* A number (non-finite allowed only when allow_nonfinite); absent or null: dflt. */
int recur__hfc_double(const recur__hfc *c, const char *key, double dflt, int allow_nonfinite, double *out);
int recur__hfc_bool(const recur__hfc *c, const char *key, int dflt, int *out);
/* A string (owned by the tree); absent: dflt; null: NULL when null_ok, else an error. */
int recur__hfc_string(const recur__hfc *c, const char *key, const char *dflt, int null_ok, const char **out);
/* A list of numbers of length in [lo, hi] into out[]; absent or null: *n = -1. */
int recur__hfc_numbers(const recur__hfc *c, const char *key, int lo, int hi, double *out, int *n);
/* The message for a value recurd does not implement; returns RECUR_EFORMAT. */
int recur__hfc_refuse(const recur__hfc *c, const char *key, const char *why);

#endif /* RECUR_HF_CONFIG_H */
