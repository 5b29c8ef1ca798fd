/* recur.c — the command-line front end of librecur's model API (build/recur).
 *
 *   recur info     [MODEL]                     architecture, parameters, state bytes per session
 *   recur generate [MODEL] --prompt TEXT -n N [--temperature T] [--top-k K] [--top-p P] [--seed S]
 *   recur score    [MODEL] FILE                bits per byte of FILE (chunkwise prefill, in pieces)
 *   recur bench    [MODEL] [--batch B,...] [--steps N] [--prefill N]   decode and prefill tokens/s
 *   recur tokenize DIR_OR_FILE [--decode] [--special]   stdin text -> ids (or ids -> text): tokenize.c
 *
 * MODEL is a directory holding config.json and model.safetensors (default models/default), or
 * `--config CFG.json --seed N` for a seeded model of any size (tests, benchmarks); with
 * `--weights-dtype q8_0|q4_0` its matrices are quantized at load (recur_model_quantize), or read
 * from the cached quantized file in `--weights-cache DIR` (recur_model_quantize_cached).
 * With `--prefill-dtype bf16` prefill computes its GEMMs on bf16 inputs (recur_model_set_prefill_dtype).
 * Text goes through the model folder's tokenizer (tokenizer.json or the RWKV World vocabulary,
 * docs/API.md §Tokenizers); without one (and for seeded models) tokens are bytes, and the
 * model's vocabulary must cover them. Exit codes: 0 ok, 1 runtime error, 2 usage error. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "recur.h"

#define DEFAULT_MODEL "models/default"
#define SCORE_PIECE 4096            /* tokens per prefill call when scoring */
#define MAX_SCORE_BYTES (1L << 30)  /* a text file above 1 GiB is refused */

typedef struct {
    const char *model_dir;
    const char *config;
    uint64_t seed;
    int have_seed, have_sample_seed;
    const char *prompt;
    long n;
    float temperature, top_p;
    int top_k;
    uint64_t sample_seed;
    const char *batches;
    long steps, prefill;
    const char *pos[4];
    int npos;
    const char *weights_dtype; /* NULL / "auto": as the file; "q8_0" / "q4_0" */
    const char *weights_cache; /* NULL: quantize at every load; else the cache directory */
    uint64_t weights_cache_max_bytes; /* 0: RECUR_WEIGHTS_CACHE_MAX_BYTES */
    recur_state_dtype state_dtype; /* --state-dtype f32 (default) | bf16 | f16 */
    const char *prefill_dtype;     /* --prefill-dtype: NULL (f32) | "f32" | "bf16" */
} opts;

static const char *prog = "recur";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s info     [MODEL]\n"
            "       %s generate [MODEL] --prompt TEXT -n N [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
            "       %s score    [MODEL] FILE\n"
            "       %s bench    [MODEL] [--batch 1,8,64] [--steps N] [--prefill N]\n"
            "       %s tokenize DIR_OR_FILE [--decode] [--special]   (stdin -> stdout)\n"
            "MODEL: a directory with config.json + model.safetensors (default %s),\n"
            "       or --config CFG.json --init-seed N for seeded random weights\n"
            "       (outside generate, --seed N is the init seed).\n"
            "       --weights-dtype auto|q8_0|q4_0 quantizes its matrices at load (default auto: as the file).\n"
            "       --weights-cache DIR reads / writes the quantized matrices as a file in DIR\n"
            "       (--weights-cache-max-bytes N bounds that file, default 16 GiB).\n"
            "       --state-dtype f32|bf16|f16 stores session states in that type (default f32).\n"
            "       --prefill-dtype f32|bf16 computes prefill's GEMMs on bf16 inputs (bf16: CPUs with\n"
            "       avx512_bf16 only; default f32).\n",
            prog, prog, prog, prog, prog, DEFAULT_MODEL);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of this thread: on a shared machine, wall time measures the neighbours too */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        double v;
#define NEED_VALUE() do { if (i + 1 >= argc) { fprintf(stderr, "%s: %s needs a value\n", prog, a); return -1; } } while (0)
#define NUM(lo, hi) do { NEED_VALUE(); if (parse_num(argv[++i], lo, hi, &v)) { \
            fprintf(stderr, "%s: bad value for %s: %s\n", prog, a, argv[i]); return -1; } } while (0)
        if (!strcmp(a, "--prompt")) { NEED_VALUE(); o->prompt = argv[++i]; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { NUM(0, 1e9); o->n = (long)v; }
        else if (!strcmp(a, "--temperature")) { NUM(0, 1e6); o->temperature = (float)v; }
        else if (!strcmp(a, "--top-k")) { NUM(0, 1e9); o->top_k = (int)v; }
        else if (!strcmp(a, "--top-p")) { NUM(0, 1); o->top_p = (float)v; }
        else if (!strcmp(a, "--seed")) { NUM(0, 9007199254740992.0); o->sample_seed = (uint64_t)v; o->have_sample_seed = 1; }
        else if (!strcmp(a, "--config")) { NEED_VALUE(); o->config = argv[++i]; }
        else if (!strcmp(a, "--init-seed")) { NUM(0, 9007199254740992.0); o->seed = (uint64_t)v; o->have_seed = 1; }
        else if (!strcmp(a, "--batch")) { NEED_VALUE(); o->batches = argv[++i]; }
        else if (!strcmp(a, "--weights-dtype")) {
            NEED_VALUE();
            o->weights_dtype = argv[++i];
            if (strcasecmp(o->weights_dtype, "auto") && strcasecmp(o->weights_dtype, "q8_0") &&
                strcasecmp(o->weights_dtype, "q4_0")) {
                fprintf(stderr, "%s: bad value for --weights-dtype: %s (auto, q8_0 or q4_0)\n", prog, o->weights_dtype);
                return -1;
            }
        }
        else if (!strcmp(a, "--weights-cache")) { NEED_VALUE(); o->weights_cache = argv[++i]; }
        else if (!strcmp(a, "--weights-cache-max-bytes")) { NUM(1, 9007199254740992.0); o->weights_cache_max_bytes = (uint64_t)v; }
        else if (!strcmp(a, "--state-dtype")) {
            NEED_VALUE();
            if (recur_state_dtype_parse(argv[++i], &o->state_dtype)) {
                fprintf(stderr, "%s: bad value for --state-dtype: %s (f32, bf16 or f16)\n", prog, argv[i]);
                return -1;
            }
        }
        else if (!strcmp(a, "--prefill-dtype")) {
            NEED_VALUE();
            o->prefill_dtype = argv[++i];
            if (strcasecmp(o->prefill_dtype, "f32") && strcasecmp(o->prefill_dtype, "bf16")) {
                fprintf(stderr, "%s: bad value for --prefill-dtype: %s (f32 or bf16)\n", prog, o->prefill_dtype);
                return -1;
            }
        }
        else if (!strcmp(a, "--steps")) { NUM(1, 1e9); o->steps = (long)v; }
        else if (!strcmp(a, "--prefill")) { NUM(0, 1e9); o->prefill = (long)v; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "%s: unknown option %s\n", prog, a); return -1; }
        else if (o->npos < 4) o->pos[o->npos++] = a;
        else { fprintf(stderr, "%s: too many arguments\n", prog); return -1; }
#undef NUM
#undef NEED_VALUE
    }
    return 0;
}

static char *read_file(const char *path, long limit, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap) {
            if ((long)cap >= limit) {
                fprintf(stderr, "%s: %s is larger than %ld bytes\n", prog, path, limit);
                free(buf); fclose(f); return NULL;
            }
            cap *= 2;
            buf = realloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { fprintf(stderr, "%s: cannot read %s\n", prog, path); free(buf); return NULL; }
    *len = (long)n;
    return buf;
}

/* The model named by the options: --config/--init-seed, else the positional directory. */
static recur_model *open_model(const opts *o, const char *dir)
{
    recur_model *m = NULL;
    int rc;
    const char *what;
    char err[512] = ""; /* what recur_model_load_ex names (file, config key, tensor) */
    if (o->config) {
        long len;
        char *text = read_file(o->config, 1 << 20, &len);
        if (!text) return NULL;
        text = realloc(text, (size_t)len + 1);
        text[len] = '\0';
        rc = recur_model_init_seed(text, o->seed, &m);
        free(text);
        what = o->config;
    } else {
        rc = recur_model_load_ex(dir, &m, err, sizeof err);
        what = dir;
    }
    if (rc) {
        fprintf(stderr, "%s: cannot load model %s: %s%s%s\n", prog, what, recur_strerror(rc), err[0] ? ": " : "", err);
        if (rc == RECUR_EIO && !o->config)
            fprintf(stderr, "%s: (a model is a directory with config.json and model.safetensors)\n", prog);
        return NULL;
    }
    if (o->weights_dtype && strcasecmp(o->weights_dtype, "auto")) {
        recur_model *q = NULL;
        recur_wcache_report wc;
        rc = recur_model_quantize_cached(m, o->weights_dtype, o->weights_cache, o->weights_cache_max_bytes, &q, &wc,
                                         err, sizeof err);
        recur_model_free(m);
        if (rc) {
            fprintf(stderr, "%s: cannot quantize model %s: %s%s%s\n", prog, what, recur_strerror(rc), err[0] ? ": " : "", err);
            return NULL;
        }
        m = q;
        if (wc.outcome != RECUR_WCACHE_OFF) /* what the cache did, on stderr (stdout is the command's) */
            fprintf(stderr, "%s: weights cache %s: %s%s%s%s%s%s\n", prog, recur_wcache_outcome_name(wc.outcome), wc.path,
                    wc.rule[0] ? " (refused by rule " : "", wc.rule, wc.rule[0] ? ")" : "", wc.detail[0] ? ": " : "",
                    wc.detail);
    }
    recur_model_set_state_dtype(m, o->state_dtype); /* before any state or workspace */
    if (o->prefill_dtype && (rc = recur_model_set_prefill_dtype(m, o->prefill_dtype, err, sizeof err))) {
        fprintf(stderr, "%s: --prefill-dtype %s: %s\n", prog, o->prefill_dtype, err[0] ? err : recur_strerror(rc));
        recur_model_free(m);
        return NULL;
    }
    return m;
}

/* The tokenizer of the model named by the options: the folder's (tokenizer.json, RWKV World
 * vocabulary, else bytes); bytes for a seeded model. A real tokenizer must not have more ids
 * than the model (the model's vocabulary may be larger: padding). */
static recur_tokenizer *open_tokenizer(const opts *o, const char *dir, const recur_model_info *info)
{
    recur_tokenizer *t = NULL;
    char err[256] = "";
    int rc = o->config ? recur_tokenizer_bytes(&t) : recur_tokenizer_load(dir, &t, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s: cannot load the tokenizer of %s: %s\n", prog, dir, err[0] ? err : recur_strerror(rc));
        return NULL;
    }
    if (recur_tokenizer_kind(t) != RECUR_TOKENIZER_BYTES && recur_tokenizer_vocab_size(t) > info->vocab_size) {
        fprintf(stderr, "%s: the tokenizer of %s has %d ids, more than the model's vocab_size %d\n", prog, dir,
                (int)recur_tokenizer_vocab_size(t), info->vocab_size);
        recur_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* text [len] -> ids [*n] (malloc'd): the real tokenizer's encoding (no special tokens added), or
 * one id per byte. Every id must be below vocab. NULL after printing why. */
static int32_t *encode_text(const recur_tokenizer *t, const char *text, size_t len, int vocab, int64_t *n)
{
    int32_t *ids;
    size_t m = len;
    if (recur_tokenizer_kind(t) != RECUR_TOKENIZER_BYTES) {
        int32_t *enc;
        int rc = recur_tokenizer_encode(t, text, len, 0, &enc, &m);
        if (rc) { fprintf(stderr, "%s: cannot tokenize: %s\n", prog, recur_strerror(rc)); return NULL; }
        ids = malloc(sizeof *ids * (m ? m : 1));
        if (m) memcpy(ids, enc, sizeof *ids * m);
        recur_tokenizer_release(enc);
    } else {
        ids = malloc(sizeof *ids * (m ? m : 1));
        for (size_t i = 0; i < m; i++) ids[i] = (unsigned char)text[i];
    }
    for (size_t i = 0; i < m; i++)
        if (ids[i] >= vocab) {
            fprintf(stderr, "%s: token %d at %zu is outside the vocabulary (%d)\n", prog, (int)ids[i], i, vocab);
            free(ids);
            return NULL;
        }
    *n = (int64_t)m;
    return ids;
}

/* The ids sampling may draw (recur_sampler_params.vocab_limit): a real tokenizer's when the
 * model's vocabulary is padded beyond it, else all. */
static int sample_limit(const recur_tokenizer *t, int vocab)
{
    int32_t tv = recur_tokenizer_vocab_size(t);
    return recur_tokenizer_kind(t) != RECUR_TOKENIZER_BYTES && tv < vocab ? (int)tv : 0;
}

/* ---------------------------------------------------------------- info */

static int cmd_info(const opts *o)
{
    if (o->npos > 1 || (o->config && o->npos)) { usage(stderr); return 2; }
    recur_model *m = open_model(o, o->npos ? o->pos[0] : DEFAULT_MODEL);
    if (!m) return 1;
    const recur_model_info *i = recur_model_get_info(m);
    printf("name            %s\n", i->name);
    printf("vocab_size      %d\n", i->vocab_size);
    printf("d_model         %d\n", i->d_model);
    printf("layers          %d\n", i->n_layers);
    printf("heads           %d x (K %d, V %d)\n", i->n_heads, i->head_k, i->head_v);
    printf("d_ff            %d\n", i->d_ff);
    printf("mixers         ");
    for (int l = 0; l < i->n_layers; l++) printf(" %s", recur_mixer_name(i->mixers[l]));
    printf("\n");
    printf("tied_embeddings %s\n", i->tied_embeddings ? "yes" : "no");
    int soft = i->softmax_layers > 0;
    if (soft) printf("max_context     %lld tokens\n", (long long)i->max_context);
    printf("parameters      %lld (%.2f M)\n", (long long)i->n_params, i->n_params / 1e6);
    printf("state_bytes     %zu per session (%.1f KiB)%s\n", i->state_bytes, i->state_bytes / 1024.0,
           soft ? ", softmax KV cache at max_context" : ", fixed for any context length");
    printf("state_dtype     %s (recurrent state as stored; --state-dtype)\n", i->state_dtype);
    printf("weights         %s in memory, %.2f MiB\n", i->weights_dtype, i->weight_bytes / 1048576.0);
    printf("weights_origin  %s\n", i->weights_origin);
    printf("prefill_dtype   %s (prefill's GEMM inputs; --prefill-dtype), %.2f MiB of bf16 panels\n", i->prefill_dtype,
           i->prefill_bytes / 1048576.0);
    printf("fingerprint     %016llx\n", (unsigned long long)i->fingerprint);
    printf("isa             %s (kernel path; RECUR_ISA forces one)\n", recur_isa_name());
    recur_model_free(m);
    return 0;
}

/* ---------------------------------------------------------------- generate */

static int cmd_generate(const opts *o)
{
    if (o->npos > 1 || (o->config && o->npos)) { usage(stderr); return 2; }
    if (o->n < 0) { fprintf(stderr, "%s: generate needs -n N\n", prog); return 2; }
    const char *dir = o->npos ? o->pos[0] : DEFAULT_MODEL;
    recur_model *m = open_model(o, dir);
    if (!m) return 1;
    const recur_model_info *info = recur_model_get_info(m);
    int vocab = info->vocab_size, rc = 0, ret = 1;
    recur_tokenizer *tok = open_tokenizer(o, dir, info);
    int real = tok && recur_tokenizer_kind(tok) != RECUR_TOKENIZER_BYTES;
    /* an empty prompt starts from a newline, the separator the byte models are trained on */
    const char *prompt = o->prompt && *o->prompt ? o->prompt : "\n";
    int64_t plen = 0;
    int32_t *tokens = tok ? encode_text(tok, prompt, strlen(prompt), vocab, &plen) : NULL;
    float *logits = malloc(sizeof(float) * (size_t)vocab), *scratch = malloc(sizeof(float) * 2 * (size_t)vocab);
    recur_workspace *ws = NULL;
    recur_state *s = NULL;
    recur_detok *dt = NULL;
    const char *piece;
    size_t piece_len;
    if (!tokens) goto out;
    if (plen == 0) { fprintf(stderr, "%s: the prompt encodes to no tokens\n", prog); goto out; }
    if ((rc = recur_workspace_create(m, 1, &ws)) || (rc = recur_state_create(m, &s))) goto fail;
    if (real && (rc = recur_detok_new(tok, &dt))) goto fail;
    /* fold the prompt: all but the last token with the chunkwise prefill, the last one stepped */
    if ((rc = recur_model_prefill(m, ws, s, tokens, plen - 1, NULL))) goto fail;
    if ((rc = recur_model_step(m, ws, s, tokens[plen - 1], logits))) goto fail;
    recur_sampler_params sp = {.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                               .vocab_limit = sample_limit(tok, vocab)};
    uint64_t rng = o->sample_seed;
    if (o->prompt) { fputs(o->prompt, stdout); fflush(stdout); }
    for (long t = 0; t < o->n; t++) {
        int id = recur_sample(logits, vocab, &sp, &rng, scratch);
        if (id < 0) { rc = id; goto fail; }
        if (dt) { /* the text this token completes: never half a UTF-8 sequence */
            if ((rc = recur_detok_push(dt, id, &piece, &piece_len))) goto fail;
            fwrite(piece, 1, piece_len, stdout);
        } else if (id < 256) {
            putchar(id); /* bytes as they are (the byte tokenizer) */
        }
        fflush(stdout);
        if (t + 1 < o->n && (rc = recur_model_step(m, ws, s, id, logits))) {
            if (rc == RECUR_ECONTEXT) {
                fprintf(stderr, "\n%s: stopped at max_context (%lld tokens)\n", prog, (long long)info->max_context);
                rc = 0;
                break;
            }
            goto fail;
        }
    }
    if (dt) {
        if ((rc = recur_detok_finish(dt, &piece, &piece_len))) goto fail;
        fwrite(piece, 1, piece_len, stdout);
    }
    putchar('\n');
    ret = 0;
    goto out;
fail:
    fprintf(stderr, "%s: generate: %s\n", prog, recur_strerror(rc));
out:
    recur_detok_free(dt);
    recur_state_destroy(s);
    recur_workspace_free(ws);
    free(tokens);
    free(logits);
    free(scratch);
    recur_tokenizer_free(tok);
    recur_model_free(m);
    return ret;
}

/* ---------------------------------------------------------------- score */

/* Scoring with a real tokenizer: the text is encoded once; token i + 1 is predicted by the
 * logits after token i, the first token by nothing. Bits per byte are the predicted tokens'
 * bits over the bytes they cover: the text's bytes minus those of the first token's text. With
 * the byte tokenizer that is one byte per token, as before. Log-probabilities are the model's
 * over its whole vocabulary (padding included), the numbers recurd reports. */
static int cmd_score(const opts *o)
{
    const char *dir = DEFAULT_MODEL, *file;
    if (o->npos == 2 && !o->config) { dir = o->pos[0]; file = o->pos[1]; }
    else if (o->npos == 1) file = o->pos[0];
    else { usage(stderr); return 2; }
    long len;
    char *text = read_file(file, MAX_SCORE_BYTES, &len);
    if (!text) return 1;
    recur_model *m = open_model(o, dir);
    if (!m) { free(text); return 1; }
    const recur_model_info *info = recur_model_get_info(m);
    int vocab = info->vocab_size, rc = 0, ret = 1, soft = info->softmax_layers > 0;
    recur_tokenizer *tk = open_tokenizer(o, dir, info);
    int real = tk && recur_tokenizer_kind(tk) != RECUR_TOKENIZER_BYTES;
    /* the ids: the real tokenizer's encoding, or the bytes themselves (read in place) */
    int32_t *ids = NULL;
    int64_t n_ids = len;
    /* a softmax layer bounds the context: the text is then scored in windows of max_context */
    int64_t window = soft ? info->max_context : INT64_MAX;
    int64_t piece_max = SCORE_PIECE < window ? SCORE_PIECE : window;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)piece_max);
    float *logits = malloc(sizeof(float) * (size_t)piece_max * (size_t)vocab);
    float *lsm = malloc(sizeof(float) * (size_t)vocab);
    recur_workspace *ws = NULL;
    recur_state *s = NULL;
    int64_t first_bytes = 1; /* bytes of the first token's text: predicted by nothing */
    if (!tk) goto out;
    if (real) {
        if (!(ids = encode_text(tk, text, (size_t)len, vocab, &n_ids))) goto out;
        recur_detok *dt;
        const char *piece;
        size_t piece_len;
        if ((rc = recur_detok_new(tk, &dt))) goto fail;
        rc = n_ids ? recur_detok_push(dt, ids[0], &piece, &piece_len) : 0;
        first_bytes = n_ids && !rc ? (int64_t)piece_len : 0;
        recur_detok_free(dt);
        if (rc) goto fail;
    }
    if ((rc = recur_workspace_create(m, 1, &ws)) || (rc = recur_state_create(m, &s))) goto fail;
    double nats = 0.0;
    int64_t predicted = 0;
    double t0 = now();
    /* logits at position i predict token i+1; the last token predicts nothing */
    for (int64_t off = 0; off + 1 < n_ids;) {
        if ((int64_t)recur_state_tokens_seen(s) >= window) recur_state_reset(s);
        int64_t room = window - (int64_t)recur_state_tokens_seen(s);
        int64_t n = n_ids - 1 - off;
        if (n > piece_max) n = piece_max;
        if (n > room) n = room;
        for (int64_t i = 0; i <= n; i++) { /* n tokens folded, n + 1 read (the last is predicted) */
            int32_t id = ids ? ids[off + i] : (unsigned char)text[off + i];
            if (id >= vocab) { fprintf(stderr, "%s: byte %d at offset %lld is outside the vocabulary\n",
                                       prog, id, (long long)(off + i)); goto out; }
            if (i < n) tok[i] = id;
        }
        if ((rc = recur_model_prefill(m, ws, s, tok, n, logits))) goto fail;
        for (int64_t i = 0; i < n; i++) {
            int next = ids ? ids[off + i + 1] : (unsigned char)text[off + i + 1];
            recur_log_softmax(logits + (size_t)i * vocab, vocab, lsm);
            nats -= lsm[next];
        }
        predicted += n;
        off += n;
    }
    double dt = now() - t0;
    if (predicted == 0) {
        fprintf(stderr, "%s: %s has fewer than 2 %s\n", prog, file, real ? "tokens" : "bytes");
        goto out;
    }
    double bits = nats / log(2.0);
    if (real) {
        int64_t pbytes = len - first_bytes > 0 ? len - first_bytes : 1;
        printf("%.4f bits/byte over %lld bytes (%lld predicted; %lld tokens, %lld predicted, %.4f bits/token)\n",
               bits / pbytes, (long long)len, (long long)pbytes, (long long)n_ids, (long long)predicted,
               bits / predicted);
    } else {
        printf("%.4f bits/byte over %lld bytes (%lld predicted)\n", bits / predicted, (long long)len,
               (long long)predicted);
    }
    fprintf(stderr, "%s: %.0f tokens/s prefill with logits%s\n", prog, predicted / dt,
            soft ? " (softmax: windows of max_context)" : "");
    ret = 0;
    goto out;
fail:
    fprintf(stderr, "%s: score: %s\n", prog, recur_strerror(rc));
out:
    recur_state_destroy(s);
    recur_workspace_free(ws);
    free(tok);
    free(logits);
    free(lsm);
    free(ids);
    free(text);
    recur_tokenizer_free(tk);
    recur_model_free(m);
    return ret;
}

/* ---------------------------------------------------------------- bench */

static int cmd_bench(const opts *o)
{
    if (o->npos > 1 || (o->config && o->npos)) { usage(stderr); return 2; }
    recur_model *m = open_model(o, o->npos ? o->pos[0] : DEFAULT_MODEL);
    if (!m) return 1;
    const recur_model_info *info = recur_model_get_info(m);
    int vocab = info->vocab_size, ret = 1, rc = 0;
    const char *list = o->batches ? o->batches : "1,8,64";
    long steps = o->steps > 0 ? o->steps : 64;
    long P = o->prefill > 0 ? o->prefill : 4096;
    int soft = info->softmax_layers > 0;
    if (soft && steps + 4 > info->max_context) {
        steps = info->max_context > 5 ? (long)info->max_context - 4 : 1;
        fprintf(stderr, "%s: bench: decode steps capped at %ld by max_context\n", prog, steps);
    }
    if (soft && P > info->max_context) {
        P = (long)info->max_context;
        fprintf(stderr, "%s: bench: prefill capped at max_context (%ld tokens)\n", prog, P);
    }
    printf("model %s: %lld params, d %d, %d layers\n", info->name, (long long)info->n_params, info->d_model,
           info->n_layers);
    char *copy = strdup(list), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int B = atoi(t);
        if (B < 1 || B > 4096) { fprintf(stderr, "%s: bad batch %s\n", prog, t); free(copy); goto out; }
        recur_workspace *ws;
        if ((rc = recur_workspace_create(m, B, &ws))) break;
        recur_state **st = calloc((size_t)B, sizeof *st);
        int32_t *tok = calloc((size_t)B, sizeof *tok);
        float *logits = malloc(sizeof(float) * (size_t)B * vocab);
        for (int b = 0; b < B && !rc; b++) rc = recur_state_create(m, &st[b]);
        long done = 0;
        double t0 = 0, c0 = 0;
        for (long i = 0; i < steps + 4 && !rc; i++) { /* 4 warm-up steps */
            if (i == 4) { t0 = now(); c0 = cpu_now(); }
            for (int b = 0; b < B; b++) tok[b] = (int32_t)((i * 31 + b * 7) % vocab);
            rc = recur_model_step_batch(m, ws, st, tok, B, logits);
            if (i >= 4) done += B;
        }
        double dt = now() - t0, dc = cpu_now() - c0;
        if (!rc)
            printf("decode  batch %4d: %10.0f tokens/s  (%.1f us per step; per CPU second: %.0f tokens/s)\n", B,
                   done / dt, dt / steps * 1e6, done / dc);
        for (int b = 0; b < B; b++) recur_state_destroy(st[b]);
        free(st); free(tok); free(logits);
        recur_workspace_free(ws);
        if (rc == RECUR_ECONTEXT) { printf("decode  batch %4d: stopped at max_context\n", B); rc = 0; }
        if (rc) break;
    }
    free(copy);
    if (rc) goto fail;
    if (P > 0) {
        recur_workspace *ws;
        recur_state *s;
        if ((rc = recur_workspace_create(m, 1, &ws))) goto fail;
        if ((rc = recur_state_create(m, &s))) { recur_workspace_free(ws); goto fail; }
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)P);
        for (long i = 0; i < P; i++) tok[i] = (int32_t)((i * 131 + 7) % vocab);
        double t0 = now(), c0 = cpu_now();
        rc = recur_model_prefill(m, ws, s, tok, P, NULL);
        double dt = now() - t0, dc = cpu_now() - c0;
        if (!rc)
            printf("prefill %ld tokens: %10.0f tokens/s  (%.1f ms; per CPU second: %.0f tokens/s)\n", P, P / dt,
                   dt * 1e3, P / dc);
        free(tok);
        recur_state_destroy(s);
        recur_workspace_free(ws);
        if (rc) goto fail;
    }
    ret = 0;
    goto out;
fail:
    fprintf(stderr, "%s: bench: %s\n", prog, recur_strerror(rc));
out:
    recur_model_free(m);
    return ret;
}

int cmd_tokenize(int argc, char **argv); /* tokenize.c */

int main(int argc, char **argv)
{
    openblas_set_num_threads(1); /* parallelism, if any, belongs to the caller (docs/DESIGN.md §12) */
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) { usage(stdout); return 0; }
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc, argv);
    opts o = {.n = -1, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
    if (parse_args(argc, argv, &o)) { usage(stderr); return 2; }
    /* outside generate there is nothing to sample: --seed then names the model's init seed */
    if (strcmp(cmd, "generate") != 0 && o.have_sample_seed && !o.have_seed) { o.seed = o.sample_seed; o.have_seed = 1; }
    if (o.have_seed && !o.config) { fprintf(stderr, "%s: --init-seed needs --config\n", prog); return 2; }
    if (!strcmp(cmd, "info")) return cmd_info(&o);
    if (!strcmp(cmd, "generate")) return cmd_generate(&o);
    if (!strcmp(cmd, "score")) return cmd_score(&o);
    if (!strcmp(cmd, "bench")) return cmd_bench(&o);
    fprintf(stderr, "%s: unknown command %s\n", prog, cmd);
    usage(stderr);
    return 2;
}
