/*
 * bench_model.c — the C model's decode and prefill rates and the sgemm bound of batched decode
 * (issue 3, "Benchmarks"), for tools/bench/section_model.py. Prints one JSON object per line.
 *
 *   bench_model (--model DIR [--fp32-weights] | --config FILE [--seed N]) [--weights-dtype D] [--state-dtype S]
 *               [--batches 1,8,64]
 *               [--reps R] [--tokens-per-rep N] [--prefill N] [--prefill-reps R] [--sgemm-m M]
 *               [--prefill-sgemm-m M] [--gemm-shapes N:K,N:K,...] [--model-only]
 *
 * --model loads DIR as recurd does (an F16 / BF16 file keeps its matrices half in memory);
 * --weights-dtype q8_0|q4_0 then quantizes them (recur_model_quantize, as recurd --weights-dtype);
 * --fp32-weights widens them to fp32 at load instead (the same function, bit for bit: the
 * before/after of keeping half weights). --state-dtype f32|bf16|f16 stores the sessions' states so
 * (recur_model_set_state_dtype, as recurd --state-dtype); --prefill-dtype f32|bf16 sets how the
 * prefill computes its GEMMs (recur_model_set_prefill_dtype). The info line gives weight_bytes,
 * weights_dtype, state_bytes and state_dtype.
 *
 * decode:  recur_model_step_batch over B distinct sessions (B = 1 also recur_model_step); a rep
 *          is max(4, N/B) steps after 4 warm-up steps; tokens/s = B * steps / seconds.
 * prefill: recur_model_prefill of N tokens into a freshly reset session (logits not requested,
 *          as `recur bench`); a 256-token warm-up call, then reps.
 * sgemm:   the model's own sgemm sequence for one batched step at M = sgemm-m rows (default the
 *          largest batch): per layer C[M][n_in] = A W_in^T, [M][d] x [HV], [M][2 d_ff] x [d],
 *          [M][d] x [d_ff], then the LM head [M][vocab] x [d], every layer with its own weight
 *          buffer (so the weights stream through the caches as in the model). GFLOP/s = nominal
 *          2 M N K summed / seconds. Its reps alternate with the decode reps at B = M so that both
 *          see the same load on a shared machine (a rep runs the sequence as many times as the
 *          decode rep had steps). Each shape alone (cache-hot) is reported too,
 *          and the sequence at M = prefill-sgemm-m (default 256, the prefill's piece; 0 = off),
 *          the GEMM-only lower bound of prefill time. --gemm-shapes replaces that list by the
 *          given matrices (N rows of K, one buffer each, in order): a Hugging Face family's own
 *          projections, listed by tools/bench/section_families.py from its safetensors header.
 * packed:  the same sequence through librecur's own GEMM on weights packed once
 *          (core/packed_gemm.h, what the model runs, with the model's element type: F16 / BF16
 *          panels for a half model), timed after the sgemm reps with as many runs per rep;
 *          reported as kind "packed_seq" (and at M = prefill-sgemm-m).
 * stream:  cblas_sgemv over a [params/d][d] matrix (as many floats as the weights): batch-1
 *          decode streams every weight once per token through sgemv, so this is its bound.
 * --model-only: decode and prefill alone (no sgemm, packed, shape or stream measures; what
 *          tools/bench/section_portable.py compares between builds).
 * Times: wall (CLOCK_MONOTONIC) and process CPU time (CLOCK_PROCESS_CPUTIME_ID) per rep; the
 * caller takes medians.
 *
 * Build: cc -O2 -Icore tools/bench/bench_model.c build/librecur.a $(pkg-config --libs openblas)
 *        -lcjson -lm -lpthread
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recur.h"
#include "packed_gemm.h" /* librecur-internal: the model's own GEMM, timed beside sgemm */
#include "model_internal.h" /* librecur-internal: recur__model_load_dir_opt (--fp32-weights) */
#include "quant.h"          /* librecur-internal: quantized copies of the GEMM sequence */

static double clk(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double wall(void) { return clk(CLOCK_MONOTONIC); }
static double cpu(void) { return clk(CLOCK_PROCESS_CPUTIME_ID); }

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    if (p) p[n] = '\0';
    fclose(f);
    return p;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_model: %s: %s\n", what, recur_strerror(rc));
    exit(1);
}

static void print_list(const char *key, const double *x, int n)
{
    printf(", \"%s\": [", key);
    for (int i = 0; i < n; i++) printf("%s%.6g", i ? ", " : "", x[i]);
    printf("]");
}

/* ---------------------------------------------------------------- the sgemm sequence */

typedef struct {
    int n, k;        /* C[M][n] = A[M][k] W[n][k]^T */
    float *w;        /* own buffer */
    void *wp;        /* w packed (recur__pack, or rounded to halves and recur__pack_half) */
    float beta;
} gemm_op;

typedef struct {
    int M, nops;
    recur_wtype wt;  /* element type of the packed copies */
    gemm_op *ops;
    float *a, *c;    /* [M][max k], [M][max n] */
    double flops;    /* 2 M n k summed */
} gemm_seq;

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xFFFFFF) / 16777216.0f * 0.04f - 0.02f;
}

/* --gemm-shapes: the matrices of the sequence when given (else the native layout below) */
#define MAX_SHAPES 4096
static int n_shapes, shape_n[MAX_SHAPES], shape_k[MAX_SHAPES];

static int parse_shapes(const char *v)
{
    for (const char *p = v; *p;) {
        char *e;
        long n = strtol(p, &e, 10), k;
        if (*e != ':' || n < 1 || n > (1L << 24) || n_shapes == MAX_SHAPES) return -1;
        k = strtol(e + 1, &e, 10);
        if ((*e && *e != ',') || k < 1 || k > (1L << 24)) return -1;
        shape_n[n_shapes] = (int)n;
        shape_k[n_shapes++] = (int)k;
        p = *e ? e + 1 : e;
    }
    return n_shapes ? 0 : -1;
}

static void seq_build(gemm_seq *g, const recur_model_info *in, int M)
{
    g->wt = RECUR_WT_F32;
    for (int t = RECUR_WT_F16; t <= RECUR_WT_Q4_0; t++)
        if (!strcmp(in->weights_dtype, recur__wtype_name((recur_wtype)t))) g->wt = (recur_wtype)t;
    int H = in->n_heads, K = in->head_k, V = in->head_v, d = in->d_model, ff = in->d_ff;
    g->M = M;
    g->nops = n_shapes ? n_shapes : 4 * in->n_layers + 1;
    g->ops = calloc((size_t)g->nops, sizeof *g->ops);
    int maxn = 0, maxk = 0, o = 0;
    for (int i = 0; i < n_shapes; i++)
        g->ops[o++] = (gemm_op){shape_n[i], shape_k[i], NULL, NULL, 0.0f};
    for (int l = 0; l < in->n_layers && !n_shapes; l++) {
        recur_mixer_kind kd = in->mixers[l];
        int n_in = 2 * H * K + 2 * H * V + (kd == RECUR_MIXER_GLA ? H * K : 0) +
                   (kd == RECUR_MIXER_DELTANET || kd == RECUR_MIXER_GATED_DELTANET ? H : 0) +
                   (kd == RECUR_MIXER_GATED_DELTANET ? H : 0);
        g->ops[o++] = (gemm_op){n_in, d, NULL, NULL, 0.0f};
        g->ops[o++] = (gemm_op){d, H * V, NULL, NULL, 1.0f};
        g->ops[o++] = (gemm_op){2 * ff, d, NULL, NULL, 0.0f};
        g->ops[o++] = (gemm_op){d, ff, NULL, NULL, 1.0f};
    }
    if (!n_shapes)
        g->ops[o++] = (gemm_op){in->vocab_size, d, NULL, NULL, 0.0f};
    uint64_t s = 12345;
    g->flops = 0;
    for (int i = 0; i < g->nops; i++) {
        gemm_op *op = &g->ops[i];
        op->w = malloc(sizeof(float) * (size_t)op->n * op->k);
        for (size_t j = 0; j < (size_t)op->n * op->k; j++) op->w[j] = frand(&s);
        size_t pn = recur__packed_floats(op->n, op->k);
        op->wp = aligned_alloc(64, (recur__packed_bytes(op->n, op->k, g->wt) + 63) / 64 * 64);
        if (g->wt == RECUR_WT_F32) {
            recur__pack(op->wp, op->w, op->n, op->k);
        } else if (recur__wtype_quant(g->wt)) {
            float *f = aligned_alloc(64, (pn * sizeof(float) + 63) / 64 * 64);
            recur__pack(f, op->w, op->n, op->k);
            recur__pack_quant(op->wp, g->wt, f, RECUR_WT_F32, op->n, op->k);
            free(f);
        } else {
            uint16_t *h = malloc(sizeof(uint16_t) * (size_t)op->n * op->k);
            for (size_t j = 0; j < (size_t)op->n * op->k; j++) h[j] = recur__float_to_half(op->w[j], g->wt);
            recur__pack_half(op->wp, h, op->n, op->k);
            free(h);
        }
        if (op->n > maxn) maxn = op->n;
        if (op->k > maxk) maxk = op->k;
        g->flops += 2.0 * M * op->n * op->k;
    }
    g->a = malloc(sizeof(float) * (size_t)M * maxk);
    g->c = calloc((size_t)M * maxn, sizeof(float));
    for (size_t j = 0; j < (size_t)M * maxk; j++) g->a[j] = frand(&s);
}

static void seq_run(const gemm_seq *g)
{
    for (int i = 0; i < g->nops; i++) {
        const gemm_op *op = &g->ops[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->M, op->n, op->k, 1.0f, g->a, op->k, op->w,
                    op->k, op->beta, g->c, op->n);
    }
}

static void seq_run_packed(const gemm_seq *g)
{
    for (int i = 0; i < g->nops; i++) {
        const gemm_op *op = &g->ops[i];
        recur__packed_gemm_t(g->M, op->n, op->k, g->a, op->k, op->wp, g->wt, op->beta, g->c, op->n);
    }
}

/* reps of `runs` sequences through the packed GEMM; prints one "packed_seq" line */
static void time_packed(const gemm_seq *g, long runs, int reps)
{
    double w[64], c[64];
    int n = reps < 64 ? reps : 64;
    seq_run_packed(g);
    for (int r = 0; r < n; r++) {
        double w0 = wall(), c0 = cpu();
        for (long t = 0; t < runs; t++) seq_run_packed(g);
        w[r] = wall() - w0;
        c[r] = cpu() - c0;
    }
    printf("{\"kind\": \"packed_seq\", \"M\": %d, \"ops\": %d, \"flops\": %.6g, \"runs_per_rep\": %ld, "
           "\"wtype\": \"%s\"", g->M, g->nops, g->flops, runs,
           recur__wtype_name(g->wt));
    print_list("wall_s", w, n);
    print_list("cpu_s", c, n);
    printf("}\n");
    fflush(stdout);
}

/* ---------------------------------------------------------------- decode */

typedef struct {
    recur_workspace *ws;
    recur_state **st;
    int32_t *tok;
    float *logits;
    int B;
    long i;
} decoder;

static void dec_init(decoder *D, const recur_model *m, int B)
{
    int rc;
    D->B = B;
    D->i = 0;
    if ((rc = recur_workspace_create(m, B, &D->ws))) die("workspace", rc);
    D->st = calloc((size_t)B, sizeof *D->st);
    D->tok = calloc((size_t)B, sizeof *D->tok);
    D->logits = malloc(sizeof(float) * (size_t)B * recur_model_get_info(m)->vocab_size);
    for (int b = 0; b < B; b++)
        if ((rc = recur_state_create(m, &D->st[b]))) die("state", rc);
}

static void dec_free(decoder *D)
{
    for (int b = 0; b < D->B; b++) recur_state_destroy(D->st[b]);
    free(D->st); free(D->tok); free(D->logits);
    recur_workspace_free(D->ws);
}

/* steps batched steps (single: recur_model_step, B must be 1) */
static void dec_run(decoder *D, const recur_model *m, long steps, int single)
{
    int vocab = recur_model_get_info(m)->vocab_size, rc;
    for (long s = 0; s < steps; s++, D->i++) {
        for (int b = 0; b < D->B; b++) D->tok[b] = (int32_t)((D->i * 31 + b * 7 + 3) % vocab);
        rc = single ? recur_model_step(m, D->ws, D->st[0], D->tok[0], D->logits)
                    : recur_model_step_batch(m, D->ws, D->st, D->tok, D->B, D->logits);
        if (rc) die("step", rc);
    }
}

int main(int argc, char **argv)
{
    const char *config = NULL, *dir = NULL, *batches = "1,8,64", *wdtype = NULL, *sdtype = NULL, *pdtype = NULL;
    uint64_t seed = 1;
    int reps = 5, prefill_reps = 3, sgemm_m = 0, prefill_m = 256, fp32_weights = 0, model_only = 0;
    long tokens_per_rep = 512, prefill = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fp32-weights")) { fp32_weights = 1; continue; }
        if (!strcmp(a, "--model-only")) { model_only = 1; continue; }
        if (!v) goto usage;
        if (!strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--config")) config = v;
        else if (!strcmp(a, "--weights-dtype")) wdtype = v;
        else if (!strcmp(a, "--state-dtype")) sdtype = v;
        else if (!strcmp(a, "--prefill-dtype")) pdtype = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--batches")) batches = v;
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--tokens-per-rep")) tokens_per_rep = atol(v);
        else if (!strcmp(a, "--prefill")) prefill = atol(v);
        else if (!strcmp(a, "--prefill-reps")) prefill_reps = atoi(v);
        else if (!strcmp(a, "--sgemm-m")) sgemm_m = atoi(v);
        else if (!strcmp(a, "--prefill-sgemm-m")) prefill_m = atoi(v);
        else if (!strcmp(a, "--gemm-shapes")) { if (parse_shapes(v)) goto usage; }
        else goto usage;
        i++;
    }
    if (!config == !dir || reps < 1 || reps > 1000 || prefill_reps < 0 || tokens_per_rep < 1) goto usage;
    openblas_set_num_threads(1);

    recur_model *m;
    int rc;
    if (dir) {
        char err[512] = "";
        rc = recur__model_load_dir_opt(dir, !fp32_weights, &m, err, sizeof err);
        if (rc && err[0]) fprintf(stderr, "bench_model: %s\n", err);
    } else {
        char *text = read_text(config);
        if (!text) { fprintf(stderr, "bench_model: cannot read %s\n", config); return 1; }
        rc = recur_model_init_seed(text, seed, &m);
        free(text);
    }
    if (rc) die("model", rc);
    if (wdtype) {
        recur_model *q;
        char err[256] = "";
        rc = recur_model_quantize(m, wdtype, &q, err, sizeof err);
        if (rc) fprintf(stderr, "bench_model: %s\n", err);
        if (rc) die("quantize", rc);
        recur_model_free(m);
        m = q;
    }
    if (sdtype) {
        recur_state_dtype st;
        if (recur_state_dtype_parse(sdtype, &st)) goto usage;
        recur_model_set_state_dtype(m, st);
    }
    if (pdtype) {
        char err[512] = "";
        if ((rc = recur_model_set_prefill_dtype(m, pdtype, err, sizeof err))) {
            fprintf(stderr, "bench_model: %s\n", err);
            die("prefill_dtype", rc);
        }
    }
    const recur_model_info *in = recur_model_get_info(m);
    printf("{\"kind\": \"info\", \"name\": \"%s\", \"params\": %lld, \"d_model\": %d, \"n_layers\": %d, "
           "\"n_heads\": %d, \"head_k\": %d, \"head_v\": %d, \"d_ff\": %d, \"vocab\": %d, "
           "\"state_bytes\": %zu, \"source\": \"%s\", \"weight_bytes\": %zu, \"weights_dtype\": \"%s\", \"state_dtype\": \"%s\", "
           "\"prefill_dtype\": \"%s\", \"prefill_bytes\": %zu}\n",
           in->name, (long long)in->n_params, in->d_model, in->n_layers, in->n_heads, in->head_k, in->head_v,
           in->d_ff, in->vocab_size, in->state_bytes, dir ? "weights" : "seeded", in->weight_bytes,
           in->weights_dtype, in->state_dtype, in->prefill_dtype, in->prefill_bytes);
    fflush(stdout);

    int bs[32], nb = 0, maxb = 1;
    {
        char *copy = strdup(batches), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && nb < 32; t = strtok_r(NULL, ",", &save)) {
            bs[nb] = atoi(t);
            if (bs[nb] < 1 || bs[nb] > 4096) goto usage;
            if (bs[nb] > maxb) maxb = bs[nb];
            nb++;
        }
        free(copy);
    }
    if (sgemm_m <= 0) sgemm_m = maxb;

    /* the sgemm sequence at M = sgemm_m (built first: its reps interleave with that batch's) */
    gemm_seq g = {0};
    if (!model_only) seq_build(&g, in, sgemm_m);
    double *gw = calloc((size_t)reps, sizeof(double)), *gc = calloc((size_t)reps, sizeof(double));
    int greps = 0;
    long seq_runs = 1;
    if (!model_only) seq_run(&g); /* warm-up */

    double *w = calloc((size_t)reps, sizeof(double)), *c = calloc((size_t)reps, sizeof(double));
    for (int bi = 0; bi < nb; bi++) {
        int B = bs[bi];
        for (int single = 0; single <= (B == 1); single++) {
            decoder D;
            dec_init(&D, m, B);
            long steps = tokens_per_rep / B < 4 ? 4 : tokens_per_rep / B;
            dec_run(&D, m, 4, single); /* warm-up */
            int with_gemm = !model_only && !single && B == sgemm_m && greps == 0;
            if (with_gemm) seq_runs = steps;
            for (int r = 0; r < reps; r++) {
                double w0 = wall(), c0 = cpu();
                dec_run(&D, m, steps, single);
                w[r] = wall() - w0;
                c[r] = cpu() - c0;
                if (with_gemm) { /* as many sequences as the rep had steps */
                    w0 = wall(); c0 = cpu();
                    for (long t = 0; t < steps; t++) seq_run(&g);
                    gw[r] = wall() - w0;
                    gc[r] = cpu() - c0;
                    greps = r + 1;
                }
            }
            printf("{\"kind\": \"decode\", \"api\": \"%s\", \"B\": %d, \"steps\": %ld, \"tokens\": %ld",
                   single ? "step" : "step_batch", B, steps, steps * B);
            print_list("wall_s", w, reps);
            print_list("cpu_s", c, reps);
            printf("}\n");
            fflush(stdout);
            dec_free(&D);
        }
    }
    if (model_only) goto model_prefill;
    if (greps == 0) { /* no batch equal to sgemm_m: time the sequence on its own */
        for (int r = 0; r < reps; r++) {
            double w0 = wall(), c0 = cpu();
            for (long t = 0; t < seq_runs; t++) seq_run(&g);
            gw[r] = wall() - w0;
            gc[r] = cpu() - c0;
        }
        greps = reps;
    }
    printf("{\"kind\": \"sgemm_seq\", \"M\": %d, \"ops\": %d, \"flops\": %.6g, \"runs_per_rep\": %ld", g.M,
           g.nops, g.flops, seq_runs);
    print_list("wall_s", gw, greps);
    print_list("cpu_s", gc, greps);
    printf("}\n");
    fflush(stdout);
    time_packed(&g, seq_runs, reps);

    /* each distinct shape alone, cache-hot (information) */
    for (int i = 0; i < g.nops; i++) {
        const gemm_op *op = &g.ops[i];
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= g.ops[j].n == op->n && g.ops[j].k == op->k;
        if (seen) continue;
        gemm_seq one = {.M = g.M, .nops = 1, .ops = (gemm_op *)op, .a = g.a, .c = g.c,
                        .flops = 2.0 * g.M * op->n * op->k};
        int inner = (int)(2e8 / one.flops) + 1; /* ~0.2 GFLOP per rep */
        seq_run(&one);
        double bw = 1e30, sw[64];
        int n = reps < 64 ? reps : 64;
        for (int r = 0; r < n; r++) {
            double c0 = cpu();
            for (int t = 0; t < inner; t++) seq_run(&one);
            sw[r] = (cpu() - c0) / inner;
            if (sw[r] < bw) bw = sw[r];
        }
        printf("{\"kind\": \"sgemm_shape\", \"M\": %d, \"N\": %d, \"K\": %d, \"flops\": %.6g", g.M, op->n,
               op->k, one.flops);
        print_list("cpu_s", sw, n);
        printf("}\n");
        fflush(stdout);
    }

    /* batch-1 decode reads every weight once per token through sgemv: time cblas_sgemv over a
     * [params/d][d] matrix (as many floats as the weights), i.e. the weight-streaming rate */
    {
        int d = in->d_model;
        size_t rows = (size_t)in->n_params / (size_t)d, n = rows * (size_t)d;
        float *buf = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * d), *y = malloc(sizeof(float) * rows);
        uint64_t s = 7;
        for (size_t j = 0; j < n; j++) buf[j] = frand(&s);
        for (int j = 0; j < d; j++) x[j] = frand(&s);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)rows, d, 1.0f, buf, d, x, 1, 0.0f, y, 1);
        int inner = (int)(2e8 / (4.0 * (double)n)) + 1; /* ~200 MB per rep */
        double sw[64];
        int nr = reps < 64 ? reps : 64;
        for (int r = 0; r < nr; r++) {
            double c0 = cpu();
            for (int t = 0; t < inner; t++)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)rows, d, 1.0f, buf, d, x, 1, 0.0f, y, 1);
            sw[r] = (cpu() - c0) / inner;
        }
        printf("{\"kind\": \"stream\", \"bytes\": %zu, \"rows\": %zu, \"cols\": %d", n * sizeof(float), rows, d);
        print_list("cpu_s", sw, nr);
        printf("}\n");
        fflush(stdout);
        free(buf); free(x); free(y);
    }

    if (prefill > 0 && prefill_reps > 0 && prefill_m > 0) {
        /* the same sequence at the prefill's row count (a prefill piece is 256 tokens) */
        gemm_seq p;
        seq_build(&p, in, prefill_m);
        seq_run(&p);
        for (int r = 0; r < reps; r++) {
            double w0 = wall(), c0 = cpu();
            seq_run(&p);
            gw[r] = wall() - w0;
            gc[r] = cpu() - c0;
        }
        printf("{\"kind\": \"sgemm_seq_prefill\", \"M\": %d, \"ops\": %d, \"flops\": %.6g", p.M, p.nops, p.flops);
        print_list("wall_s", gw, reps);
        print_list("cpu_s", gc, reps);
        printf("}\n");
        fflush(stdout);
        time_packed(&p, 1, reps);
    }
model_prefill:
    if (prefill > 0 && prefill_reps > 0) {
        recur_workspace *ws;
        recur_state *s;
        if ((rc = recur_workspace_create(m, 1, &ws))) die("workspace", rc);
        if ((rc = recur_state_create(m, &s))) die("state", rc);
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)prefill);
        for (long i = 0; i < prefill; i++) tok[i] = (int32_t)((i * 131 + 7) % in->vocab_size);
        double *pw = calloc((size_t)prefill_reps, sizeof(double)), *pc = calloc((size_t)prefill_reps, sizeof(double));
        for (int r = -1; r < prefill_reps; r++) { /* r = -1: a short warm-up (one piece) */
            recur_state_reset(s);
            long n = r < 0 && prefill > 256 ? 256 : prefill;
            double w0 = wall(), c0 = cpu();
            if ((rc = recur_model_prefill(m, ws, s, tok, n, NULL))) die("prefill", rc);
            if (r >= 0) { pw[r] = wall() - w0; pc[r] = cpu() - c0; }
        }
        printf("{\"kind\": \"prefill\", \"tokens\": %ld", prefill);
        print_list("wall_s", pw, prefill_reps);
        print_list("cpu_s", pc, prefill_reps);
        printf("}\n");
        free(pw); free(pc); free(tok);
        recur_state_destroy(s);
        recur_workspace_free(ws);
    }
    recur_model_free(m);
    return 0;
usage:
    fprintf(stderr, "usage: bench_model (--model DIR [--fp32-weights] | --config FILE [--seed N]) [--weights-dtype q8_0|q4_0] [--state-dtype f32|bf16|f16]\n"
                    "                   [--prefill-dtype f32|bf16]\n"
                    "                   [--batches 1,8,64] [--reps R]\n"
                    "                   [--tokens-per-rep N] [--prefill N] [--prefill-reps R] [--sgemm-m M]\n"
                    "                   [--prefill-sgemm-m M] [--gemm-shapes N:K,N:K,...] [--model-only]\n");
    return 2;
}
