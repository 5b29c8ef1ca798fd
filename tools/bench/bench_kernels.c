/*
 * bench_kernels.c — tokens/s of every librecur mixer in every form, and OpenBLAS sgemm's peak.
 *
 * Built by `make build/bench/bench_kernels` (`make bench-tools`) against build/librecur.a; run by
 * tools/bench/section_kernels.py with OPENBLAS_NUM_THREADS=1.
 *
 * Usage: bench_kernels [--reps N] [--budget SECONDS] [--mem-mb MB] [--T 1024,4096,16384]
 *                      [--mixers linear,retention,...] [--forms recurrent,parallel,chunkwise]
 *                      [--H 4] [--K 64] [--V 64] [--chunk 64] [--pages 2m|4k] [--paired]
 * --paired: instead of the tables below, rounds of side-by-side samples (run_paired).
 * The mixers' inputs and outputs live where the server's forward workspace keeps them
 * (core/model_forward.c): in mappings from recur__big_alloc, on 2 MiB pages where the kernel grants
 * them (MADV_HUGEPAGE). --pages 4k puts them in plain malloc memory (4 KiB pages) instead: at
 * T = 16k the operands (~80 MB at H = 4, K = V = 64) then span far more pages than the TLB maps,
 * at T = 1k (~5 MB) they fit (section_kernels.py reports both).
 * Prints one JSON object per line on stdout:
 *   {"kind":"blas","core":..}   OpenBLAS's kernel for this CPU (openblas_get_corename)
 *   {"kind":"sgemm","m":..,"n":..,"k":..,"median_s":..,"gflops":..,"cpu_median_s":..,"gflops_cpu":..}
 *   {"kind":"mm","m":..,"n":..,"k":..,"causal":0|1,"median_s":..,"gflops":..,"cpu_median_s":..,
 *    "gflops_cpu":..}   librecur's own
 *      product kernel (recur__mm, core/chunk_mm.h) that the chunkwise forms run on; causal = A
 *      lower-triangular (the O += A V of a chunk), its GFLOP/s on the useful half (m n (k + 1))
 *   {"kind":"mixer","mixer":..,"form":..,"T":..,"H":..,"K":..,"V":..,"chunk":..,"reps":..,
 *    "median_s":..,"min_s":..,"tokens_per_s":..,"flops":..,"gflops":..,"cpu_median_s":..,
 *    "cpu_min_s":..,"gflops_cpu":..,"status":"ok"}
 * *_s and gflops are wall time; cpu_* and gflops_cpu the calling thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID) over the same calls. On a loaded machine a call of ~1 ms often runs in
 * one time slice while one of ~100 ms is cut into many, so wall time penalises long sequences for
 * other work's share of the cores; CPU time does not (it still includes cache misses that other
 * work causes).
 * A run that fails with RECUR_ENOMEM under the --mem-mb address-space cap (setrlimit RLIMIT_AS,
 * on top of what the process already maps) is reported with "status":"skipped: ..." instead.
 *
 * FLOP counts are nominal (multiply-add = 2 flops, matmul work only, full c x c blocks even where
 * only the lower triangle is needed), per head, for a chunk of c tokens:
 *   gated-linear family  2c^2 K (Q K^T) + 2c^2 V (A V) + 2cKV (Q S) + 2cKV (K^T V)
 *   delta rule           the above + 2c^2 K (K K^T) + c^2 (K + V) (two triangular solves)
 *                        + 2cKV (W S)
 *   generalized delta    4 x 2c^2 K (four decayed score matrices) + 2 x 2c^2 V (A_ak V, M_qk V)
 *   (gdr)                + 2c^2 V (M_qb U) + c^2 V (solve) + 4 x 2cKV (a S, q S, B^T U, K^T V)
 * parallel uses c = T; recurrent counts 4KV per token (6KV for the delta rule, 10KV for gdr). The chunk kernels
 * skip the zero halves of the causal products, so they execute fewer flops than counted here:
 * per token and head 4KV + c (K + V) for the gated-linear family, 6KV + 2c (K + V) for the delta
 * rule (section_kernels.py uses these for the ceiling of chunkwise / recurrent).
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "chunk_mm.h"
#include "recur.h"

/* ---------------------------------------------------------------- options */

static int opt_reps = 5;            /* timed runs per configuration (at least 3 unless over budget) */
static double opt_budget = 8.0;     /* seconds per configuration before stopping early */
static long opt_mem_mb = 2048;      /* address-space allowance beyond the start-up mapping */
static int opt_H = 4, opt_K = 64, opt_V = 64;
static int opt_small_pages = 0;     /* --pages 4k: operands in malloc memory, not recur__big_alloc */
static int64_t opt_chunk = 64;
static char opt_T[256] = "1024,4096,16384";
static char opt_mixers[256] = "linear,retention,gla_scalar,gla_vector,deltanet,gated_deltanet,gdr,softmax,block_topk";
static char opt_forms[128] = "recurrent,parallel,chunkwise";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: the time the kernel ran, not the time other work on these
 * shared cores held the CPU (the kernels are single-threaded with OPENBLAS_NUM_THREADS=1) */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* Virtual memory the process maps now (bytes), from /proc/self/statm. */
static long vm_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0;
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return pages * 4096L;
}

/* ---------------------------------------------------------------- data */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static float urand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

typedef struct {
    int64_t T;
    int H, K, V;
    float *q, *k, *v;   /* [T][H][K], [T][H][K] (unit rows), [T][H][V] */
    float *gs, *gv;     /* [T][H], [T][H][K] log gates in [-0.1, 0) */
    float *beta;        /* [T][H] in [0.25, 0.75] */
    float *ea, *eb;     /* [T][H][K] the generalized delta rule's erase: -kappa_hat, kappa_hat * [0.25, 0.75] */
    float *S, *z, *o;   /* [H][K][V], [H][K], [T][H][V] */
} bench_data;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* A mixer operand (--pages: see the header): recur__big_alloc (core/model_internal.h), as
 * the server's workspace, or malloc. Freed by xbig_free with the same n. */
void *recur__big_alloc(size_t bytes);
void recur__big_free(void *p, size_t bytes);
static void *xbig(size_t n)
{
    if (opt_small_pages)
        return xmalloc(n);
    void *p = recur__big_alloc(n);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void data_init(bench_data *d, int64_t T, int H, int K, int V)
{
    d->T = T, d->H = H, d->K = K, d->V = V;
    size_t nk = (size_t)T * H * K, nv = (size_t)T * H * V, nh = (size_t)T * H;
    d->q = xbig(nk * 4), d->k = xbig(nk * 4), d->v = xbig(nv * 4);
    d->gs = xbig(nh * 4), d->gv = xbig(nk * 4), d->beta = xbig(nh * 4);
    d->ea = xbig(nk * 4), d->eb = xbig(nk * 4);
    d->S = xmalloc((size_t)H * K * V * 4), d->z = xmalloc((size_t)H * K * 4), d->o = xbig(nv * 4);
    for (size_t i = 0; i < nk; i++) {
        d->q[i] = urand();
        d->k[i] = urand();
        d->gv[i] = -0.05f * (urand() + 1.0f) - 1e-4f;
    }
    for (size_t r = 0; r < nh; r++) { /* keys L2-normalised (the delta rule expects it) */
        float *kr = d->k + r * K, s = 0;
        for (int i = 0; i < K; i++)
            s += kr[i] * kr[i];
        s = 1.0f / sqrtf(s);
        for (int i = 0; i < K; i++)
            kr[i] *= s;
        d->gs[r] = -0.05f * (urand() + 1.0f) - 1e-4f;
        d->beta[r] = 0.5f + 0.25f * urand();
        float *ar = d->ea + r * K, *br = d->eb + r * K, n = 0; /* RWKV-7: a = -kappa_hat, b = kappa_hat a_gate */
        for (int i = 0; i < K; i++) {
            ar[i] = urand();
            n += ar[i] * ar[i];
        }
        n = 1.0f / sqrtf(n);
        for (int i = 0; i < K; i++) {
            br[i] = ar[i] * n * (0.5f + 0.25f * urand());
            ar[i] *= -n;
        }
    }
    for (size_t i = 0; i < nv; i++)
        d->v[i] = urand();
}

static void xbig_free(void *p, size_t n)
{
    if (opt_small_pages)
        free(p);
    else
        recur__big_free(p, n);
}

static void data_free(bench_data *d)
{
    size_t nk = (size_t)d->T * d->H * d->K, nv = (size_t)d->T * d->H * d->V, nh = (size_t)d->T * d->H;
    xbig_free(d->q, nk * 4), xbig_free(d->k, nk * 4), xbig_free(d->v, nv * 4);
    xbig_free(d->gs, nh * 4), xbig_free(d->gv, nk * 4), xbig_free(d->beta, nh * 4);
    xbig_free(d->ea, nk * 4), xbig_free(d->eb, nk * 4), xbig_free(d->o, nv * 4);
    free(d->S), free(d->z);
}

/* ---------------------------------------------------------------- one call */

static int run_mixer(const char *mixer, recur_form form, bench_data *d)
{
    recur_dims dims = {d->T, d->H, d->K, d->V};
    memset(d->S, 0, (size_t)d->H * d->K * d->V * 4);
    memset(d->z, 0, (size_t)d->H * d->K * 4);
    if (!strcmp(mixer, "linear"))
        return recur_linear_attention(&dims, d->q, d->k, d->v, 1, RECUR_FMAP_ELU1, 0.0f, form,
                                      opt_chunk, d->S, d->z, d->o);
    if (!strcmp(mixer, "retention"))
        return recur_retention(&dims, d->q, d->k, d->v, NULL, 0.0f, form, opt_chunk, d->S, d->o);
    if (!strcmp(mixer, "gla_scalar"))
        return recur_gla(&dims, d->q, d->k, d->v, d->gs, 0, 0.0f, form, opt_chunk, d->S, d->o);
    if (!strcmp(mixer, "gla_vector"))
        return recur_gla(&dims, d->q, d->k, d->v, d->gv, 1, 0.0f, form, opt_chunk, d->S, d->o);
    if (!strcmp(mixer, "deltanet"))
        return recur_delta_rule(&dims, d->q, d->k, d->v, d->beta, NULL, 0.0f, form, opt_chunk,
                                d->S, d->o);
    if (!strcmp(mixer, "gated_deltanet"))
        return recur_delta_rule(&dims, d->q, d->k, d->v, d->beta, d->gs, 0.0f, form, opt_chunk,
                                d->S, d->o);
    if (!strcmp(mixer, "gdr"))
        return recur_generalized_delta(&dims, d->q, d->k, d->v, d->gv, d->ea, d->eb, 0.0f, form,
                                       opt_chunk, d->S, d->o);
    if (!strcmp(mixer, "softmax"))
        return recur_softmax_attention(&dims, d->q, d->k, d->v, 0.0f, d->o);
    if (!strcmp(mixer, "block_topk"))
        return recur_block_topk_attention(&dims, d->q, d->k, d->v, 64, 2, 1, 0.0f, d->o, NULL);
    return RECUR_EINVAL;
}

static double mixer_flops(const char *mixer, recur_form form, int64_t T, int H, int K, int V)
{
    int delta = !strncmp(mixer, "delta", 5) || !strncmp(mixer, "gated_delta", 11);
    double t = (double)T, k = K, v = V;
    if (!strcmp(mixer, "softmax")) /* causal: half of Q K^T and of P V */
        return H * (t * t * (k + v));
    if (!strcmp(mixer, "block_topk")) /* scores for all causal keys + 2 blocks of 64 for P V */
        return H * (t * t * k + 2.0 * t * 128.0 * v);
    if (!strcmp(mixer, "gdr")) { /* generalized delta rule, see the header comment */
        if (form == RECUR_FORM_RECURRENT)
            return H * t * 10.0 * k * v;
        double c = form == RECUR_FORM_PARALLEL ? t : (double)(opt_chunk < T ? opt_chunk : T);
        return H * ceil(t / c) * (8 * c * c * k + 7 * c * c * v + 8 * c * k * v);
    }
    if (form == RECUR_FORM_RECURRENT)
        return H * t * (delta ? 6.0 : 4.0) * k * v;
    double c = form == RECUR_FORM_PARALLEL ? t : (double)(opt_chunk < T ? opt_chunk : T);
    double nchunks = ceil(t / c);
    double per = 2 * c * c * k + 2 * c * c * v + 4 * c * k * v;
    if (delta)
        per += 2 * c * c * k + c * c * (k + v) + 2 * c * k * v;
    return H * nchunks * per;
}

/* ---------------------------------------------------------------- sgemm peak */

/* Operands of an m x n x k sgemm (row-major, random) and how many calls make one timed sample:
 * ~0.2 GFLOP, so a sample lasts a few ms at the peak */
typedef struct {
    int m, n, k, inner;
    float *A, *B, *C;
} sgemm_case;

static sgemm_case sgemm_init(int m, int n, int k)
{
    sgemm_case g = {m, n, k, (int)fmax(1.0, 2e8 / (2.0 * m * n * k)), xmalloc((size_t)m * k * 4),
                    xmalloc((size_t)k * n * 4), xmalloc((size_t)m * n * 4)};
    for (size_t i = 0; i < (size_t)m * k; i++)
        g.A[i] = urand();
    for (size_t i = 0; i < (size_t)k * n; i++)
        g.B[i] = urand();
    return g;
}

/* One timed sample: wall and thread-CPU seconds per sgemm call, averaged over g->inner calls. */
static void sgemm_sample(const sgemm_case *g, double *wall, double *cpu)
{
    double t0 = now(), c0 = cpu_now();
    for (int i = 0; i < g->inner; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k, 1.0f, g->A, g->k, g->B,
                    g->n, 0.0f, g->C, g->n);
    *wall = (now() - t0) / g->inner;
    *cpu = (cpu_now() - c0) / g->inner;
}

static void sgemm_free(sgemm_case *g)
{
    free(g->A), free(g->B), free(g->C);
}

static void bench_sgemm(int m, int n, int k)
{
    sgemm_case g = sgemm_init(m, n, k);
    double flop = 2.0 * m * n * k, t[7], tc[7];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, g.A, k, g.B, n, 0.0f, g.C, n);
    for (int r = 0; r < 7; r++)
        sgemm_sample(&g, &t[r], &tc[r]);
    qsort(t, 7, sizeof t[0], cmp_double);
    qsort(tc, 7, sizeof tc[0], cmp_double);
    printf("{\"kind\":\"sgemm\",\"m\":%d,\"n\":%d,\"k\":%d,\"median_s\":%.9g,\"gflops\":%.4g,"
           "\"cpu_median_s\":%.9g,\"gflops_cpu\":%.4g}\n",
           m, n, k, t[3], flop / t[3] * 1e-9, tc[3], flop / tc[3] * 1e-9);
    fflush(stdout);
    sgemm_free(&g);
}

/* recur__mm on m x n x k (row-major operands, beta 0), or its causal form (A lower-triangular) */
static void bench_mm(int m, int n, int k, int causal)
{
    float *A = xmalloc((size_t)m * k * 4), *B = xmalloc((size_t)k * n * 4), *C = xmalloc((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++)
        A[i] = urand();
    for (size_t i = 0; i < (size_t)k * n; i++)
        B[i] = urand();
    const int flags = causal ? RECUR_MM_A_LOWER : 0;
    double flop = causal ? (double)m * n * (k + 1) : 2.0 * m * n * k;
    int inner = (int)fmax(1.0, 2e8 / flop);
    double t[7], tc[7];
    recur__mm(m, n, k, 1.0f, A, k, 1, B, n, 0.0f, C, n, flags, 0);
    for (int r = 0; r < 7; r++) {
        double t0 = now(), c0 = cpu_now();
        for (int i = 0; i < inner; i++)
            recur__mm(m, n, k, 1.0f, A, k, 1, B, n, 0.0f, C, n, flags, 0);
        t[r] = (now() - t0) / inner;
        tc[r] = (cpu_now() - c0) / inner;
    }
    qsort(t, 7, sizeof t[0], cmp_double);
    qsort(tc, 7, sizeof tc[0], cmp_double);
    printf("{\"kind\":\"mm\",\"m\":%d,\"n\":%d,\"k\":%d,\"causal\":%d,\"median_s\":%.9g,\"gflops\":%.4g,"
           "\"cpu_median_s\":%.9g,\"gflops_cpu\":%.4g}\n",
           m, n, k, causal, t[3], flop / t[3] * 1e-9, tc[3], flop / tc[3] * 1e-9);
    fflush(stdout);
    free(A), free(B), free(C);
}

/* ---------------------------------------------------------------- shared by both modes */

/* What a failed run reports as its "status" (RECUR_ENOMEM under the --mem-mb cap: skipped). */
static void failure_text(char *why, size_t n, int rc)
{
    if (rc == RECUR_ENOMEM)
        snprintf(why, n, "skipped: needs more than %ld MB (out of memory under the cap)", opt_mem_mb);
    else
        snprintf(why, n, "error: %s", recur_strerror(rc));
}

/* Cap the address space at what is mapped now plus --mem-mb (the inputs are mapped, the kernels'
 * workspaces count); *old receives the limit to restore. */
static void cap_address_space(struct rlimit *old)
{
    struct rlimit rl = {(rlim_t)(vm_bytes() + opt_mem_mb * 1024L * 1024L), RLIM_INFINITY};
    getrlimit(RLIMIT_AS, old);
    rl.rlim_max = old->rlim_max;
    if (rl.rlim_cur > old->rlim_max) rl.rlim_cur = old->rlim_max;
    setrlimit(RLIMIT_AS, &rl);
}

static void print_samples(const char *key, const double *x, int n)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++)
        printf("%s%.9g", i ? "," : "", x[i]);
    printf("]");
}

/* ---------------------------------------------------------------- --paired */

/* --paired: samples taken side by side, for ratios between configurations measured at the same
 * moment (section_kernels.py's long-sequence verdicts: T = 16k against T = 1k and against the
 * sgemm peak). The operands of every --T are allocated up front. Per mixer and form, one warm-up
 * round, then --reps rounds; a round is one sgemm 64x64x64 peak sample (bench_sgemm's sample) and
 * one timed call at each T, in that order on even rounds and reversed on odd ones. Each timed call
 * follows an untimed one at the same T, so it finds its operands as warm in the caches as in a
 * sequence of calls (the main mode's condition): without it the T = 1k call, right after the
 * T = 16k one swept ~80 MB through the 32 MB L3, started cold. The machine's speed
 * drifts from one minute to the next; within a round (tens of ms) it barely moves, so a ratio of
 * two samples of the same round cancels the drift. A mixer's rounds stop early (after at least 3)
 * once they have used --budget seconds. Prints the samples of every round, per T in --T order:
 *   {"kind":"paired","mixer":..,"form":..,"H":..,"K":..,"V":..,"chunk":..,"rounds":R,"T":[..],
 *    "flops":[..],"sgemm_flops":..,"sgemm_cpu_s":[R],"sgemm_wall_s":[R],
 *    "cpu_s_<T>":[R],"wall_s_<T>":[R] (one pair per T),"status":"ok"}
 * (flops: nominal, per call; *_s: seconds per call, thread CPU and wall as in the main mode, the
 * sgemm's averaged over its sample's calls), or "status":"skipped: ..."
 * / "error: ..." with the T that failed. */
static void run_paired(const char *const *mixers, size_t nmix, const char *const *form_names,
                       const int64_t *Ts, int nT)
{
    bench_data d[16];
    for (int ti = 0; ti < nT; ti++)
        data_init(&d[ti], Ts[ti], opt_H, opt_K, opt_V);
    sgemm_case g = sgemm_init(64, 64, 64);
    const double sg_flop = 2.0 * 64 * 64 * 64;
    struct rlimit old;
    cap_address_space(&old);
    double *cpu = xmalloc(sizeof(double) * (size_t)(nT + 1) * opt_reps);
    double *wall = xmalloc(sizeof(double) * (size_t)(nT + 1) * opt_reps);
    for (size_t mi = 0; mi < nmix; mi++) {
        const char *mx = mixers[mi];
        int single = !strcmp(mx, "softmax") || !strcmp(mx, "block_topk");
        for (int f = 0; f < 3; f++) {
            if (!in_list(opt_mixers, mx) || !in_list(opt_forms, form_names[f]) ||
                (single && f != RECUR_FORM_PARALLEL))
                continue;
            const char *fname = single ? "single" : form_names[f];
            int rc = RECUR_OK, n = 0, bad_T = 0;
            double used = 0;
            for (int r = 0; r <= opt_reps && rc == RECUR_OK && (r <= 3 || used <= opt_budget); r++) {
                double t_round = now();
                for (int j = 0; j <= nT && rc == RECUR_OK; j++) {
                    int it = r % 2 ? nT - j : j; /* item 0: the sgemm sample; item 1 + t: T[t] */
                    double w, c;
                    if (it == 0) {
                        sgemm_sample(&g, &w, &c);
                    } else { /* an untimed call first: the timed one finds its operands as warm
                              * in the caches as in a sequence of calls at this T */
                        rc = run_mixer(mx, (recur_form)f, &d[it - 1]);
                        double t0 = now(), c0 = cpu_now();
                        rc = rc != RECUR_OK ? rc : run_mixer(mx, (recur_form)f, &d[it - 1]);
                        w = now() - t0, c = cpu_now() - c0;
                        bad_T = it - 1;
                    }
                    if (r > 0) /* r == 0: the warm-up round */
                        wall[it * opt_reps + n] = w, cpu[it * opt_reps + n] = c;
                }
                used += now() - t_round;
                n += r > 0 && rc == RECUR_OK;
            }
            printf("{\"kind\":\"paired\",\"mixer\":\"%s\",\"form\":\"%s\",\"H\":%d,\"K\":%d,\"V\":%d,"
                   "\"chunk\":%lld,\"rounds\":%d,\"T\":[", mx, fname, opt_H, opt_K, opt_V,
                   (long long)opt_chunk, n);
            for (int t = 0; t < nT; t++)
                printf("%s%lld", t ? "," : "", (long long)Ts[t]);
            if (rc != RECUR_OK) {
                char why[160];
                failure_text(why, sizeof why, rc);
                printf("],\"failed_T\":%lld,\"status\":\"%s\"}\n", (long long)Ts[bad_T], why);
                fflush(stdout);
                continue;
            }
            printf("],\"flops\":[");
            for (int t = 0; t < nT; t++)
                printf("%s%.6g", t ? "," : "", mixer_flops(mx, (recur_form)f, Ts[t], opt_H, opt_K, opt_V));
            printf("],\"sgemm_flops\":%.6g", sg_flop);
            print_samples("sgemm_cpu_s", cpu, n);
            print_samples("sgemm_wall_s", wall, n);
            for (int t = 0; t < nT; t++) {
                char key[48];
                snprintf(key, sizeof key, "cpu_s_%lld", (long long)Ts[t]);
                print_samples(key, cpu + (t + 1) * opt_reps, n);
                snprintf(key, sizeof key, "wall_s_%lld", (long long)Ts[t]);
                print_samples(key, wall + (t + 1) * opt_reps, n);
            }
            printf(",\"status\":\"ok\"}\n");
            fflush(stdout);
        }
    }
    setrlimit(RLIMIT_AS, &old);
    free(cpu), free(wall);
    sgemm_free(&g);
    for (int ti = 0; ti < nT; ti++)
        data_free(&d[ti]);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    int paired = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *b = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--paired")) { paired = 1; i--; }
        else if (!strcmp(a, "--reps")) opt_reps = atoi(b);
        else if (!strcmp(a, "--budget")) opt_budget = atof(b);
        else if (!strcmp(a, "--mem-mb")) opt_mem_mb = atol(b);
        else if (!strcmp(a, "--T")) snprintf(opt_T, sizeof opt_T, "%s", b);
        else if (!strcmp(a, "--mixers")) snprintf(opt_mixers, sizeof opt_mixers, "%s", b);
        else if (!strcmp(a, "--forms")) snprintf(opt_forms, sizeof opt_forms, "%s", b);
        else if (!strcmp(a, "--H")) opt_H = atoi(b);
        else if (!strcmp(a, "--K")) opt_K = atoi(b);
        else if (!strcmp(a, "--V")) opt_V = atoi(b);
        else if (!strcmp(a, "--chunk")) opt_chunk = atoll(b);
        else if (!strcmp(a, "--pages") && (!strcmp(b, "2m") || !strcmp(b, "4k"))) opt_small_pages = !strcmp(b, "4k");
        else { fprintf(stderr, "bench_kernels: unknown option %s\n", a); return 2; }
    }
    if (opt_reps < 1)
        opt_reps = 1;

    /* which of OpenBLAS's kernels sgemm runs (DYNAMIC_ARCH picks one per CPU): the peak is that
     * kernel's, e.g. an AVX2 one ("Haswell") on some AVX-512 CPUs, an AVX-512 one on others */
    printf("{\"kind\":\"blas\",\"core\":\"%s\",\"pages\":\"%s\"}\n", openblas_get_corename(),
           opt_small_pages ? "4k" : "2m");
    static const char *mixers[] = {"linear", "retention", "gla_scalar", "gla_vector", "deltanet",
                                   "gated_deltanet", "gdr", "softmax", "block_topk"};
    static const char *form_names[] = {"recurrent", "parallel", "chunkwise"};
    int64_t Ts[16];
    int nT = 0;
    for (char *p = opt_T; *p && nT < 16;) {
        Ts[nT++] = strtoll(p, &p, 10);
        if (*p == ',') p++;
    }
    if (paired) {
        run_paired(mixers, sizeof mixers / sizeof mixers[0], form_names, Ts, nT);
        return 0;
    }
    bench_sgemm(64, 64, 64);
    bench_sgemm(64, 64, 256);
    bench_sgemm(256, 256, 256);
    bench_sgemm(1024, 1024, 1024);
    bench_mm(64, 64, 64, 0);
    bench_mm(64, 64, 64, 1);

    for (int ti = 0; ti < nT; ti++) {
        int64_t T = Ts[ti];
        bench_data d;
        data_init(&d, T, opt_H, opt_K, opt_V);
        struct rlimit old;
        cap_address_space(&old);
        for (size_t mi = 0; mi < sizeof mixers / sizeof mixers[0]; mi++) {
            const char *mx = mixers[mi];
            if (!in_list(opt_mixers, mx))
                continue;
            int single = !strcmp(mx, "softmax") || !strcmp(mx, "block_topk");
            /* The forms take turns, one timed call each per round, so that the load other work
             * puts on these shared cores falls on all of them alike and the ratios between forms
             * hold even when the absolute figures move. r == 0 is a warm-up; a warm-up slower
             * than half the budget counts as the form's only sample. */
            double times[3][64], cpu[3][64], t_used[3] = {0}, checksum[3] = {0};
            int n[3] = {0}, rc[3] = {0}, live[3] = {0};
            for (int f = 0; f < 3; f++)
                live[f] = in_list(opt_forms, form_names[f]) && (!single || f == RECUR_FORM_PARALLEL);
            for (int r = 0; r <= opt_reps; r++) {
                for (int f = 0; f < 3; f++) {
                    if (!live[f] || rc[f] != RECUR_OK || n[f] >= 64 ||
                        (r > 0 && (t_used[f] > opt_budget || (n[f] >= 1 && r == 1 && times[f][0] > opt_budget / 2))))
                        continue;
                    double t0 = now(), c0 = cpu_now();
                    rc[f] = run_mixer(mx, (recur_form)f, &d);
                    double dt = now() - t0, dc = cpu_now() - c0;
                    t_used[f] += dt;
                    if (rc[f] != RECUR_OK)
                        continue;
                    checksum[f] = (double)d.o[(size_t)(T - 1) * opt_H * opt_V];
                    if (r > 0 || dt > opt_budget / 2) {
                        cpu[f][n[f]] = dc;
                        times[f][n[f]++] = dt;
                    }
                }
            }
            for (int f = 0; f < 3; f++) {
                if (!live[f])
                    continue;
                const char *fname = single ? "single" : form_names[f];
                if (rc[f] != RECUR_OK) {
                    char why[160];
                    failure_text(why, sizeof why, rc[f]);
                    printf("{\"kind\":\"mixer\",\"mixer\":\"%s\",\"form\":\"%s\",\"T\":%lld,\"H\":%d,"
                           "\"K\":%d,\"V\":%d,\"chunk\":%lld,\"status\":\"%s\"}\n",
                           mx, fname, (long long)T, opt_H, opt_K, opt_V, (long long)opt_chunk, why);
                    fflush(stdout);
                    continue;
                }
                const int nf = n[f];
                qsort(times[f], (size_t)nf, sizeof times[f][0], cmp_double);
                qsort(cpu[f], (size_t)nf, sizeof cpu[f][0], cmp_double);
                double med = nf % 2 ? times[f][nf / 2] : 0.5 * (times[f][nf / 2 - 1] + times[f][nf / 2]);
                double cmed = nf % 2 ? cpu[f][nf / 2] : 0.5 * (cpu[f][nf / 2 - 1] + cpu[f][nf / 2]);
                double fl = mixer_flops(mx, (recur_form)f, T, opt_H, opt_K, opt_V);
                printf("{\"kind\":\"mixer\",\"mixer\":\"%s\",\"form\":\"%s\",\"T\":%lld,\"H\":%d,\"K\":%d,"
                       "\"V\":%d,\"chunk\":%lld,\"reps\":%d,\"median_s\":%.9g,\"min_s\":%.9g,"
                       "\"tokens_per_s\":%.6g,\"flops\":%.6g,\"gflops\":%.4g,\"cpu_median_s\":%.9g,"
                       "\"cpu_min_s\":%.9g,\"gflops_cpu\":%.4g,\"checksum\":%.6g,\"status\":\"ok\"}\n",
                       mx, fname, (long long)T, opt_H, opt_K, opt_V, (long long)opt_chunk, nf, med,
                       times[f][0], (double)T / med, fl, fl / med * 1e-9, cmed, cpu[f][0],
                       fl / cmed * 1e-9, checksum[f]);
                fflush(stdout);
            }
        }
        setrlimit(RLIMIT_AS, &old);
        data_free(&d);
    }
    return 0;
}
