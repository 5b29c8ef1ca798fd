/* config.c — defaults, config file and flags (config.h). */
#include "config.h"
#include "buf.h"
#include "errf.h"
#include "redis_conn.h"
#include "recur.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { OPT_STR, OPT_INT, OPT_U64, OPT_SIZE, OPT_BOOL } opt_type;

typedef struct {
    const char *key;  /* JSON key; the flag is "--" + key with '_' -> '-' */
    opt_type type;
    size_t off;
    size_t size;      /* OPT_STR: buffer size */
    double min, max;  /* numeric range */
    const char *help;
} opt;

#define F(field) offsetof(srv_config, field), sizeof(((srv_config *)0)->field)
#define H(field) offsetof(srv_config, http.field), sizeof(((srv_config *)0)->http.field)
#define BIG 9007199254740991.0

static const opt OPTS[] = {
    {"host", OPT_STR, F(host), 0, 0,
     "IP address or name to listen on (a name is resolved at start; every address it resolves to "
     "must be loopback unless api_key or allow_insecure_bind is set)"},
    {"port", OPT_INT, F(port), 0, 65535, "TCP port; 0 picks a free one (logged as \"port\")"},
    {"model", OPT_STR, F(model), 0, 0, "model directory (config.json + model.safetensors)"},
    {"model_config", OPT_STR, F(model_config), 0, 0,
     "architecture JSON: serve seeded random weights instead of --model (tests, benchmarks)"},
    {"model_seed", OPT_U64, F(model_seed), 0, BIG, "seed of the weights for --model-config"},
    {"state_dir", OPT_STR, F(state_dir), 0, 0, "persistence directory (\"\" = off)"},
    {"api_key", OPT_STR, F(api_key), 0, 0,
     "require Authorization: Bearer KEY on /v1/* (also env RECURD_API_KEY)"},
    {"allow_insecure_bind", OPT_BOOL, F(allow_insecure_bind), 0, 1,
     "allow a non-loopback host without api_key"},
    {"workers", OPT_INT, F(workers), 1, 64, "compute worker threads"},
    {"max_batch", OPT_INT, F(max_batch), 1, SRV_MAX_BATCH, "sessions per batched decode step"},
    {"decode_workers", OPT_INT, F(decode_workers), 1, 64,
     "workers that may run a decode batch at the same time, the second and later only while a whole batch of steps waits (the others take prefill slices)"},
    {"prefill_slice", OPT_INT, F(prefill_slice), 1, 65536,
     "tokens per prefill slice (interleaved with decode batches)"},
    {"worker_spin_us", OPT_INT, F(worker_spin_us), 0, 10000,
     "an idle worker polls for new work this long before it sleeps (0 = sleep at once)"},
    {"log_level", OPT_STR, F(log_level), 0, 0, "debug | info | warn | error"},
    {"access_log", OPT_STR, F(access_log), 0, 0,
     "one JSON line per request: a file (reopened on SIGHUP), \"-\" = stderr when log_level is "
     "info or debug, \"\" = off"},
    {"access_log_buffer_bytes", OPT_SIZE, F(access_log_buffer_bytes), 4096, 1073741824,
     "access log lines waiting to be written; a line that does not fit is dropped (counted)"},
    {"max_request_line", OPT_SIZE, H(max_request_line), 64, BIG, "bytes -> 414"},
    {"max_header_bytes", OPT_SIZE, H(max_header_bytes), 256, BIG, "request line + headers -> 431"},
    {"max_headers", OPT_INT, H(max_headers), 1, 100000, "header count -> 431"},
    {"max_body", OPT_SIZE, H(max_body), 0, BIG, "body bytes -> 413"},
    {"max_chunk_ext_bytes", OPT_SIZE, H(max_chunk_ext_bytes), 0, BIG, "per chunk -> 413"},
    {"header_timeout_ms", OPT_U64, H(header_timeout), 1, BIG, "first byte to end of headers -> 408"},
    {"body_idle_timeout_ms", OPT_U64, H(body_idle_timeout), 1, BIG, "between body reads -> 408"},
    {"request_timeout_ms", OPT_U64, H(request_timeout), 1, BIG, "whole request -> 408"},
    {"keepalive_idle_ms", OPT_U64, H(keepalive_idle), 1, BIG, "idle keep-alive -> close"},
    {"max_requests_per_conn", OPT_INT, H(max_requests_per_conn), 1, 1e9,
     "then Connection: close"},
    {"send_stall_timeout_ms", OPT_U64, H(send_stall_timeout), 1, BIG,
     "no write progress -> reset"},
    {"write_high_watermark", OPT_SIZE, H(write_high_watermark), 1024, BIG,
     "queued bytes per connection that pause a stream"},
    {"write_low_watermark", OPT_SIZE, H(write_low_watermark), 0, BIG,
     "queued bytes below which a paused stream resumes"},
    {"max_connections", OPT_INT, H(max_connections), 1, 1e7, "open connections"},
    {"cors_origin", OPT_STR, H(cors_origin), 0, 0,
     "CORS: \"\" = off, \"*\" = any origin, or a comma-separated list of exact origins allowed to "
     "call recurd from a browser page"},
    {"max_tokens_per_request", OPT_SIZE, F(max_tokens_per_request), 1, 1e8,
     "tokens folded or generated per request -> 422"},
    {"chat_template", OPT_STR, F(chat_template), 0, 0,
     "the OpenAI chat route's template: a built-in (chatml, llama2, llama3, rwkv, plain) or a "
     "Jinja file; \"\" = the model folder's tokenizer_config.json, else rwkv for an RWKV World vocabulary, else plain"},
    {"max_choices_per_request", OPT_INT, F(max_choices_per_request), 1, 1024,
     "OpenAI routes: prompts x n choices of one request -> 400"},
    {"max_sessions", OPT_INT, F(max_sessions), 1, 1e8,
     "sessions in total, in memory and (with state_dir) on disk -> 503"},
    {"idle_ttl_ms", OPT_U64, F(idle_ttl_ms), 0, BIG,
     "delete sessions idle this long, from memory and state_dir (0 = never)"},
    {"max_queued_ops_per_session", OPT_INT, F(max_queued_ops_per_session), 1, 1e6,
     "requests waiting on one session -> 429"},
    {"drain_timeout_ms", OPT_U64, F(drain_timeout_ms), 0, BIG,
     "SIGTERM: how long in-flight streams may finish"},
    {"max_resident_sessions", OPT_INT, F(max_resident_sessions), 0, 1e8,
     "sessions in memory; with state_dir the least recently used idle one is written to disk "
     "and dropped, without it creation -> 503 (0 = max_sessions)"},
    {"snapshot_interval_ms", OPT_U64, F(snapshot_interval_ms), 0, BIG,
     "with state_dir: write sessions changed since their last snapshot this often (0 = only on "
     "eviction and SIGTERM)"},
    {"evict_idle_ms", OPT_U64, F(evict_idle_ms), 0, BIG,
     "with state_dir: write and drop from memory sessions idle this long (0 = never)"},
    {"resume_cached_on_loop", OPT_BOOL, F(resume_cached_on_loop), 0, 1,
     "with state_dir: a resumed session's snapshot found in the page cache is read and checked on "
     "the loop thread (false: every resume is read by a reader thread)"},
    {"prefix_cache_bytes", OPT_SIZE, F(prefix_cache_bytes), 0, BIG,
     "memory of the exact prefix-state cache, entries and token ids counted (0 = cache off)"},
    {"prefix_cache_disk_bytes", OPT_SIZE, F(prefix_cache_disk_bytes), 0, BIG,
     "with state_dir: bytes of prefix-cache entries spilled to state_dir/prefix_cache (0 = none)"},
    {"prefix_checkpoint_interval", OPT_U64, F(prefix_checkpoint_interval), 0, BIG,
     "a cached prefill stores its state every this many tokens (0 = only at its end)"},
    {"max_checkpoints_per_session", OPT_INT, F(max_checkpoints_per_session), 0, 1e6,
     "checkpoints one session may hold -> 409"},
    {"redis", OPT_STR, F(redis), 0, 0,
     "the Redis tier: redis://HOST:PORT[/DB] shares sessions between nodes (\"\" = off; "
     "docs/SCALING.md)"},
    {"redis_sync", OPT_BOOL, F(redis_sync), 0, 1,
     "a request's response waits until Redis has its commit (else the commit follows the response)"},
    {"redis_timeout_ms", OPT_U64, F(redis_timeout_ms), 10, 60000,
     "commands pending and no reply from Redis for this long resets the connection (503 store_unavailable meanwhile)"},
    {"redis_key_prefix", OPT_STR, F(redis_key_prefix), 0, 0,
     "first part of every Redis key (letters, digits, '.', '_', '-')"},
    {"redis_lease_ms", OPT_U64, F(redis_lease_ms), 100, 3600000,
     "one writer per session: how long a node's lease on a session lasts without renewal"},
    {"redis_prefix_max_entries", OPT_U64, F(redis_prefix_max_entries), 0, 100000000,
     "prefix-cache entries of one model kept in Redis, the oldest stored evicted first (0 = the "
     "prefix cache stays per node)"},
    {"redis_prefix_ttl_ms", OPT_U64, F(redis_prefix_ttl_ms), 1000, BIG,
     "a prefix-cache entry in Redis expires this long after it was stored"},
    {"redis_prefix_inflight_bytes", OPT_SIZE, F(redis_prefix_inflight_bytes), 0, BIG,
     "prefix-cache entries on their way to Redis at once; a store past it is dropped (counted)"},
    {"max_idempotency_keys_per_session", OPT_INT, F(max_idempotency_keys_per_session), 1, 100000,
     "Idempotency-Key records a session keeps (the oldest is forgotten first)"},
    {"node_name", OPT_STR, F(node_name), 0, 0,
     "this node's name in leases and 409 session_leased (\"\" = hostname:port)"},
    {"weights_dtype", OPT_STR, F(weights_dtype), 0, 0,
     "auto | q8_0 | q4_0: the GEMM matrices as the weights file holds them (auto), or quantized at "
     "load to llama.cpp's Q8_0 / Q4_0 (an fp16 scale per 32 weights; docs/MODEL.md)"},
    {"weights_cache", OPT_STR, F(weights_cache), 0, 0,
     "with weights_dtype q8_0 | q4_0: a directory holding the quantized matrices as a file per model, "
     "dtype and layout, read instead of quantizing when valid, else written (\"\" = off; docs/MODEL.md)"},
    {"weights_cache_max_bytes", OPT_U64, F(weights_cache_max_bytes), 4096, BIG,
     "the largest quantized-weights cache file read or written (a larger model is quantized, not cached)"},
    {"state_dtype", OPT_STR, F(state_dtype), 0, 0,
     "f32 | bf16 | f16: how each session's recurrent state is stored (half: widened to fp32 for each "
     "step, rounded once to nearest even when stored; docs/MODEL.md \"State dtype\")"},
    {"prefill_dtype", OPT_STR, F(prefill_dtype), 0, 0,
     "f32 | bf16: prefill's GEMM inputs rounded to bf16, fp32 accumulation (vdpbf16ps; refused where the "
     "CPU lacks avx512_bf16; decode unchanged; docs/MODEL.md \"Prefill dtype\")"},
};
#define N_OPTS (sizeof OPTS / sizeof OPTS[0])

static void defaults(srv_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = 8080;
    snprintf(c->model, sizeof c->model, "models/default");
    c->workers = 2;
    c->max_batch = 64;
    c->decode_workers = 2;
    c->prefill_slice = 256;
    c->worker_spin_us = 0;
    c->resume_cached_on_loop = 1;
    snprintf(c->log_level, sizeof c->log_level, "info");
    snprintf(c->access_log, sizeof c->access_log, "-");
    c->access_log_buffer_bytes = (size_t)1 << 20;
    snprintf(c->weights_dtype, sizeof c->weights_dtype, "auto");
    snprintf(c->state_dtype, sizeof c->state_dtype, "f32");
    c->weights_cache_max_bytes = RECUR_WEIGHTS_CACHE_MAX_BYTES;
    snprintf(c->prefill_dtype, sizeof c->prefill_dtype, "f32");
    srv_http_limits_default(&c->http);
    c->max_tokens_per_request = 131072; /* a 128k prompt in one request (fits max_body as ids) */
    c->max_choices_per_request = 16;
    c->max_sessions = 10000;
    c->idle_ttl_ms = 3600000;
    c->max_queued_ops_per_session = 64;
    c->drain_timeout_ms = 30000;
    c->snapshot_interval_ms = 30000;
    c->prefix_cache_bytes = (size_t)256 << 20;
    c->prefix_cache_disk_bytes = (size_t)1 << 30;
    c->prefix_checkpoint_interval = 1024;
    c->max_checkpoints_per_session = 8;
    c->redis_timeout_ms = 1000;
    snprintf(c->redis_key_prefix, sizeof c->redis_key_prefix, "recurd");
    c->redis_lease_ms = 10000;
    c->redis_prefix_max_entries = 1000;
    c->redis_prefix_ttl_ms = 3600000;
    c->redis_prefix_inflight_bytes = (size_t)8 << 20;
    c->max_idempotency_keys_per_session = 64;
}

/* 1 when s is 1..max bytes of letters, digits and the characters of extra. */
static int name_ok(const char *s, const char *extra)
{
    if (!s[0])
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              strchr(extra, *p)))
            return 0;
    return 1;
}

/* The Redis tier's keys (redis_tier.h). */
static int redis_config_bad(const srv_config *c, char *err, size_t en)
{
    if (c->redis[0]) {
        srv_redis_url u;
        if (srv_redis_url_parse(c->redis, &u, err, en) != 0)
            return -1;
    }
    if (!name_ok(c->redis_key_prefix, "._-"))
        return srv_errf(err, en, "redis_key_prefix must be 1-64 letters, digits, '.', '_' or '-'");
    if (c->node_name[0] && !name_ok(c->node_name, "._:-"))
        return srv_errf(err, en, "node_name must be letters, digits, '.', '_', ':' or '-' (max 128)");
    if (c->redis_lease_ms < 2 * c->redis_timeout_ms)
        return srv_errf(err, en, "redis_lease_ms must be at least twice redis_timeout_ms");
    return 0;
}

static const opt *find_opt(const char *key)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (!strcmp(OPTS[i].key, key))
            return &OPTS[i];
    return NULL;
}

static void flag_name(const opt *o, char *out, size_t n)
{
    snprintf(out, n, "--%s", o->key);
    for (char *p = out + 2; *p; p++)
        if (*p == '_')
            *p = '-';
}

static int set_number(srv_config *c, const opt *o, double v, const char *src, char *err, size_t en)
{
    if (!isfinite(v) || v != floor(v) || v < o->min || v > o->max)
        return srv_errf(err, en, "%s: %s must be an integer in [%.0f, %.0f]", src, o->key, o->min,
                        o->max);
    char *p = (char *)c + o->off;
    switch (o->type) {
    case OPT_INT: *(int *)p = (int)v; break;
    case OPT_BOOL: *(int *)p = (int)v; break;
    case OPT_U64: *(uint64_t *)p = (uint64_t)v; break;
    case OPT_SIZE: *(size_t *)p = (size_t)v; break;
    default: return -1;
    }
    return 0;
}

static int set_string(srv_config *c, const opt *o, const char *s, const char *src, char *err,
                      size_t en)
{
    size_t n = strlen(s);
    if (n >= o->size)
        return srv_errf(err, en, "%s: %s is too long (max %zu bytes)", src, o->key, o->size - 1);
    memcpy((char *)c + o->off, s, n + 1);
    return 0;
}

/* A flag's text value. Numbers: decimal integers only (no suffixes). Bools: true/false/1/0. */
static int set_from_text(srv_config *c, const opt *o, const char *s, char *err, size_t en)
{
    char fname[64];
    flag_name(o, fname, sizeof fname);
    if (o->type == OPT_STR)
        return set_string(c, o, s, fname, err, en);
    if (o->type == OPT_BOOL) {
        if (!strcmp(s, "true") || !strcmp(s, "1"))
            return set_number(c, o, 1, fname, err, en);
        if (!strcmp(s, "false") || !strcmp(s, "0"))
            return set_number(c, o, 0, fname, err, en);
        return srv_errf(err, en, "%s: expected true or false", fname);
    }
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0')
        return srv_errf(err, en, "%s: \"%s\" is not a number", fname, s);
    return set_number(c, o, v, fname, err, en);
}

static int load_file(srv_config *c, const char *path, char *err, size_t en)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return srv_errf(err, en, "config %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (1u << 20)) {
                fclose(f);
                free(text);
                return srv_errf(err, en, "config %s: larger than 1 MiB", path);
            }
            char *t = realloc(text, cap);
            if (!t)
                abort();
            text = t;
        }
        size_t r = fread(text + len, 1, 4096, f);
        len += r;
        if (r < 4096)
            break;
    }
    int ioerr = ferror(f);
    fclose(f);
    if (ioerr) {
        free(text);
        return srv_errf(err, en, "config %s: read error", path);
    }
    text[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root || !cJSON_IsObject(root)) {
        size_t off = end ? (size_t)(end - text) : 0;
        cJSON_Delete(root);
        free(text);
        return srv_errf(err, en, "config %s: not a JSON object (near byte %zu)", path, off);
    }
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        const opt *o = find_opt(it->string);
        if (!o) {
            rc = srv_errf(err, en, "config %s: unknown key \"%.64s\"", path, it->string);
            break;
        }
        if (o->type == OPT_STR) {
            if (!cJSON_IsString(it)) {
                rc = srv_errf(err, en, "config %s: %s must be a string", path, o->key);
                break;
            }
            rc = set_string(c, o, it->valuestring, path, err, en);
        } else if (o->type == OPT_BOOL) {
            if (!cJSON_IsBool(it)) {
                rc = srv_errf(err, en, "config %s: %s must be true or false", path, o->key);
                break;
            }
            rc = set_number(c, o, cJSON_IsTrue(it) ? 1 : 0, path, err, en);
        } else {
            if (!cJSON_IsNumber(it)) {
                rc = srv_errf(err, en, "config %s: %s must be a number", path, o->key);
                break;
            }
            rc = set_number(c, o, it->valuedouble, path, err, en);
        }
        if (rc)
            break;
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

static void srv_config_usage(FILE *out)
{
    srv_config d;
    defaults(&d);
    fprintf(out,
            "usage: recurd [--config FILE] [--KEY VALUE | --KEY=VALUE]...\n\n"
            "Settings come from the defaults, then the config file (JSON object, same keys\n"
            "with underscores), then the flags. Default config file: config/recurd.json when\n"
            "it exists.\n\n"
            "  --config FILE                        config file (\"\" = none)\n"
            "  --check-config                       check the settings, model and tokenizer, print\n"
            "                                       the effective settings as JSON, exit\n"
            "  --version                            print the version, exit\n"
            "  --help                               this text\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        const opt *o = &OPTS[i];
        char fname[64], def[96];
        flag_name(o, fname, sizeof fname);
        static const char *const meta[] = {[OPT_STR] = " STR", [OPT_INT] = " N", [OPT_U64] = " N",
                                           [OPT_SIZE] = " BYTES", [OPT_BOOL] = " [true|false]"};
        strncat(fname, meta[o->type], sizeof fname - strlen(fname) - 1);
        const char *p = (const char *)&d + o->off;
        switch (o->type) {
        case OPT_STR: snprintf(def, sizeof def, "\"%s\"", p); break;
        case OPT_INT: snprintf(def, sizeof def, "%d", *(const int *)p); break;
        case OPT_BOOL: snprintf(def, sizeof def, "%s", *(const int *)p ? "true" : "false"); break;
        case OPT_U64: snprintf(def, sizeof def, "%llu", (unsigned long long)*(const uint64_t *)p); break;
        case OPT_SIZE: snprintf(def, sizeof def, "%zu", *(const size_t *)p); break;
        }
        fprintf(out, "  %-36s %s\n  %-36s (default %s; config key \"%s\")\n", fname, o->help, "",
                def, o->key);
    }
}

/* cors_origin goes into a response header as is: only "", "*", or non-empty entries of
 * printable ASCII without spaces (no CR / LF: no header can be injected). */
static int cors_origin_bad(const char *s)
{
    if (!s[0] || !strcmp(s, "*"))
        return 0;
    size_t entry = 0;
    for (const char *p = s;; p++) {
        if (*p == ',' || *p == '\0') {
            if (entry == 0)
                return 1;
            if (*p == '\0')
                return 0;
            entry = 0;
        } else if (*p <= 0x20 || *p >= 0x7f || *p == '*') {
            return 1;
        } else {
            entry++;
        }
    }
}

int srv_config_load(srv_config *cfg, int argc, char **argv, char *err, size_t en)
{
    defaults(cfg);
    const char *path = NULL;
    int explicit_path = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            srv_config_usage(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("recurd %s\n", SRV_VERSION);
            return 1;
        }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc)
                return srv_errf(err, en, "--config needs a value");
            path = argv[++i];
            explicit_path = 1;
        } else if (!strncmp(argv[i], "--config=", 9)) {
            path = argv[i] + 9;
            explicit_path = 1;
        }
    }
    if (!path) {
        FILE *f = fopen("config/recurd.json", "rb");
        if (f) {
            fclose(f);
            path = "config/recurd.json";
        }
    }
    if (path && *path) {
        if (load_file(cfg, path, err, en))
            return -1;
        snprintf(cfg->config_path, sizeof cfg->config_path, "%s", path);
    }
    (void)explicit_path;
    /* The API key's precedence: --api-key, then the config file's api_key, then the environment.
     * A key too long for the buffer is refused (as the flag and the file are), never truncated. */
    const opt *key_opt = find_opt("api_key");
    const char *env_key = getenv("RECURD_API_KEY");
    int env_key_used = env_key && *env_key && !cfg->api_key[0], key_from_flag = 0;
    char env_err[128] = "";
    if (env_key_used && set_string(cfg, key_opt, env_key, "RECURD_API_KEY", env_err, sizeof env_err))
        cfg->api_key[0] = '\0'; /* refused below unless --api-key replaces it */

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9))
            continue;
        if (!strcmp(a, "--check-config")) {
            cfg->check_only = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            return srv_errf(err, en, "unexpected argument \"%.64s\" (see --help)", a);
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const opt *o = NULL;
        for (size_t k = 0; k < N_OPTS; k++) {
            char fname[64];
            flag_name(&OPTS[k], fname, sizeof fname);
            if (strlen(fname) == nlen && !strncmp(fname, a, nlen))
                o = &OPTS[k];
        }
        if (!o)
            return srv_errf(err, en, "unknown flag \"%.*s\" (see --help)",
                            (int)(nlen > 64 ? 64 : nlen), a);
        const char *val;
        if (eq)
            val = eq + 1;
        else if (o->type == OPT_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0))
            val = "true"; /* a bare boolean flag */
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return srv_errf(err, en, "%.64s needs a value", a);
        if (set_from_text(cfg, o, val, err, en))
            return -1;
        key_from_flag |= o == key_opt;
    }
    if (env_err[0] && !key_from_flag)
        return srv_errf(err, en, "%s", env_err);
    if (cors_origin_bad(cfg->http.cors_origin))
        return srv_errf(err, en, "cors_origin must be \"\", \"*\" or a comma-separated list of origins "
                                 "(printable ASCII, no spaces, no empty entry)");
    if (cfg->http.write_low_watermark >= cfg->http.write_high_watermark)
        return srv_errf(err, en, "write_low_watermark must be below write_high_watermark");
    if (redis_config_bad(cfg, err, en))
        return -1;
    if (!strcmp(cfg->log_level, "debug") + !strcmp(cfg->log_level, "info") +
            !strcmp(cfg->log_level, "warn") + !strcmp(cfg->log_level, "error") != 1)
        return srv_errf(err, en, "log_level must be debug, info, warn or error");
    if (strcasecmp(cfg->weights_dtype, "auto") && strcasecmp(cfg->weights_dtype, "q8_0") &&
        strcasecmp(cfg->weights_dtype, "q4_0"))
        return srv_errf(err, en, "weights_dtype must be auto, q8_0 or q4_0");
    recur_state_dtype sdt;
    if (recur_state_dtype_parse(cfg->state_dtype, &sdt))
        return srv_errf(err, en, "state_dtype must be f32, bf16 or f16");
    if (strcasecmp(cfg->prefill_dtype, "f32") && strcasecmp(cfg->prefill_dtype, "bf16"))
        return srv_errf(err, en, "prefill_dtype must be f32 or bf16");
    return 0;
}

void srv_config_write_json(const srv_config *c, FILE *out)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_buf_puts(&b, "{\"config_path\":");
    proto_buf_json_str(&b, c->config_path, strlen(c->config_path));
    for (size_t i = 0; i < N_OPTS; i++) {
        const opt *o = &OPTS[i];
        const char *p = (const char *)c + o->off;
        proto_buf_printf(&b, ",\"%s\":", o->key);
        switch (o->type) {
        case OPT_STR:
            if (o == find_opt("api_key"))
                proto_buf_puts(&b, p[0] ? "\"(set)\"" : "\"\""); /* never the key itself */
            else
                proto_buf_json_str(&b, p, strlen(p));
            break;
        case OPT_INT: proto_buf_printf(&b, "%d", *(const int *)p); break;
        case OPT_BOOL: proto_buf_puts(&b, *(const int *)p ? "true" : "false"); break;
        case OPT_U64: proto_buf_printf(&b, "%llu", (unsigned long long)*(const uint64_t *)p); break;
        case OPT_SIZE: proto_buf_printf(&b, "%zu", *(const size_t *)p); break;
        }
    }
    proto_buf_puts(&b, "}\n");
    fwrite(b.data, 1, b.len, out);
    proto_buf_free(&b);
}
