/*
 * config.h — recurd's configuration: defaults, then config/recurd.json (or --config FILE),
 * then command-line flags. Every key of the file is also a flag (key "max_body" is
 * "--max-body"); `recurd --help` lists them all with their defaults.
 */
#ifndef SRV_CONFIG_H
#define SRV_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "http.h"

#define SRV_PATH_MAX 1024
/* Sessions in one batched decode step at most (max_batch's upper bound; scheduler.c). */
#define SRV_MAX_BATCH 1024

typedef struct {
    char config_path[SRV_PATH_MAX]; /* "" = none */
    char host[256];
    int port;
    char model[SRV_PATH_MAX];        /* model directory */
    char model_config[SRV_PATH_MAX]; /* architecture JSON with seeded weights (tests/bench) */
    uint64_t model_seed;
    char state_dir[SRV_PATH_MAX];    /* persistence; "" = off */
    char api_key[256];               /* "" = no auth */
    int allow_insecure_bind;
    int workers;
    int max_batch;
    int decode_workers;              /* decode batches running at once (<= workers) */
    int prefill_slice;
    int worker_spin_us;              /* an idle worker spins this long before it sleeps */
    char log_level[16];              /* "debug", "info", "warn", "error" */
    char access_log[SRV_PATH_MAX];   /* access log: a file, "-" = stderr (at info), "" = off */
    size_t access_log_buffer_bytes;  /* lines waiting for the writer; more are dropped */

    srv_http_limits http;
    size_t max_tokens_per_request;
    char chat_template[SRV_PATH_MAX]; /* OpenAI chat: built-in name or Jinja file; "" = auto */
    int max_choices_per_request;      /* OpenAI routes: prompts x n */
    int max_sessions;
    uint64_t idle_ttl_ms;            /* 0 = never expire */
    int max_queued_ops_per_session;
    uint64_t drain_timeout_ms;
    /* persistence and the resident budget (residency.c) */
    int max_resident_sessions;       /* 0 = max_sessions */
    uint64_t snapshot_interval_ms;   /* changed sessions written this often (0 = never) */
    uint64_t evict_idle_ms;          /* idle resident sessions written and dropped (0 = never) */
    int resume_cached_on_loop;       /* page-cache resumes read on the loop (residency.h) */
    int check_only;                  /* --check-config: validate, print, exit (not a key) */
    /* prefix cache and checkpoints (prefix_cache.h, checkpoints.h) */
    size_t prefix_cache_bytes;       /* memory bound of the prefix cache (0 = off) */
    size_t prefix_cache_disk_bytes;  /* with state_dir: bound of its spill files (0 = no spill) */
    uint64_t prefix_checkpoint_interval; /* tokens between stores in a long prefill (0 = none) */
    int max_checkpoints_per_session;
    /* the Redis tier (redis_tier.h, docs/SCALING.md) */
    char redis[512];                 /* redis://HOST:PORT[/DB]; "" = off */
    int redis_sync;                  /* a response waits for its commit */
    uint64_t redis_timeout_ms;       /* a command unanswered this long resets the connection */
    char redis_key_prefix[65];
    uint64_t redis_lease_ms;         /* one writer per session: lease length */
    uint64_t redis_prefix_max_entries;  /* prefix-cache entries of one model in Redis (0 = none) */
    uint64_t redis_prefix_ttl_ms;       /* an entry in Redis expires this long after its store */
    size_t redis_prefix_inflight_bytes; /* entry stores on their way to Redis at once */
    char node_name[129];             /* lease holder name; "" = hostname:port */
    int max_idempotency_keys_per_session; /* Idempotency-Key records kept per session */
    char weights_dtype[16];          /* "auto" (as the file) | "q8_0" | "q4_0" (recur_model_quantize) */
    char state_dtype[16];            /* "f32" | "bf16" | "f16" (recur_model_set_state_dtype) */
    char weights_cache[SRV_PATH_MAX]; /* quantized-weights cache directory; "" = quantize every start */
    uint64_t weights_cache_max_bytes; /* the largest cache file read or written */
    char prefill_dtype[16];          /* "f32" | "bf16" (recur_model_set_prefill_dtype) */
} srv_config;

/* recurd's release (`recurd --version`, GET /v1/model, the startup log). */
#define SRV_VERSION "0.2.0"

/* Fill defaults, read the config file, apply flags. Returns 0 to run, 1 when --help or
 * --version was printed (exit 0), -1 on an error described in err. `--check-config` sets
 * check_only: main validates everything a start would (host rule, model, tokenizer), prints the
 * effective settings (srv_config_write_json) and exits 0, like `nginx -t`. */
int srv_config_load(srv_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* The effective settings as one JSON object, one key per setting (the api_key shown only as
 * "(set)" or ""), to out. */
void srv_config_write_json(const srv_config *cfg, FILE *out);

#endif /* SRV_CONFIG_H */
