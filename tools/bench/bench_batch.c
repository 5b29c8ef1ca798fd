/*
 * bench_batch.c — the in-process decode rate that recurd's HTTP throughput is compared with
 * (issue 5, scenario 2): recur_model_step_batch over B distinct sessions, timed at each batch
 * size, single-threaded OpenBLAS, no HTTP. Prints one JSON object per batch size on stdout.
 *
 *   bench_batch (--config FILE | --model DIR) [--seed N] [--batches 1,4,16,64,256] [--min-time S]
 *
 * tokens_per_s = B * steps / seconds. With B = 1 the unbatched recur_model_step is timed too.
 * Build: cc -O3 -Icore tools/bench/bench_batch.c build/librecur.a -lopenblas -lcjson -lm -lpthread
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recur.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p)
        p[n] = '\0';
    fclose(f);
    return p;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static int32_t rand_token(int vocab)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (int32_t)((rng * 0x2545F4914F6CDD1DULL) % (uint64_t)vocab);
}

int main(int argc, char **argv)
{
    const char *config = NULL, *model_dir = NULL, *batches = "1,4,16,64,256";
    uint64_t seed = 1;
    double min_time = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[++i];
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model_dir = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
            batches = argv[++i];
        else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc)
            min_time = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_batch (--config FILE | --model DIR) [--seed N] "
                            "[--batches 1,4,16] [--min-time S]\n");
            return 2;
        }
    }
    if (!config == !model_dir) {
        fprintf(stderr, "bench_batch: give exactly one of --config and --model\n");
        return 2;
    }
    int bs[64], nb = 0, maxb = 1;
    for (const char *p = batches; *p && nb < 64;) {
        int b = atoi(p);
        if (b < 1 || b > 100000) {
            fprintf(stderr, "bench_batch: bad batch size\n");
            return 2;
        }
        bs[nb++] = b;
        if (b > maxb)
            maxb = b;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }

    recur_model *m = NULL;
    int rc;
    if (config) {
        char *json = read_file(config);
        if (!json) {
            fprintf(stderr, "bench_batch: cannot read %s\n", config);
            return 1;
        }
        rc = recur_model_init_seed(json, seed, &m);
        free(json);
    } else {
        rc = recur_model_load(model_dir, &m);
    }
    if (rc) {
        fprintf(stderr, "bench_batch: model: %s\n", recur_strerror(rc));
        return 1;
    }
    const recur_model_info *info = recur_model_get_info(m);
    const int V = info->vocab_size;
    recur_workspace *ws = NULL;
    if ((rc = recur_workspace_create(m, maxb, &ws))) {
        fprintf(stderr, "bench_batch: workspace: %s\n", recur_strerror(rc));
        return 1;
    }
    recur_state **states = calloc((size_t)maxb, sizeof *states);
    int32_t *tokens = calloc((size_t)maxb, sizeof *tokens);
    float *logits = malloc((size_t)maxb * (size_t)V * sizeof *logits);
    if (!states || !tokens || !logits)
        return 1;
    for (int i = 0; i < maxb; i++)
        if ((rc = recur_state_create(m, &states[i]))) {
            fprintf(stderr, "bench_batch: state: %s\n", recur_strerror(rc));
            return 1;
        }

    for (int k = 0; k < nb; k++) {
        int B = bs[k];
        for (int i = 0; i < B; i++)
            recur_state_reset(states[i]);
        /* warm-up: first touch of the workspace and states */
        for (int w = 0; w < 3; w++) {
            for (int i = 0; i < B; i++)
                tokens[i] = rand_token(V);
            if ((rc = recur_model_step_batch(m, ws, states, tokens, B, logits))) {
                fprintf(stderr, "bench_batch: step_batch B=%d: %s\n", B, recur_strerror(rc));
                return 1;
            }
        }
        long steps = 0;
        double t0 = now_s(), t;
        do {
            for (int i = 0; i < B; i++)
                tokens[i] = rand_token(V);
            recur_model_step_batch(m, ws, states, tokens, B, logits);
            steps++;
            t = now_s() - t0;
        } while (t < min_time);
        printf("{\"batch\":%d,\"steps\":%ld,\"seconds\":%.6f,\"us_per_step\":%.3f,\"tokens_per_s\":%.1f",
               B, steps, t, t / (double)steps * 1e6, (double)B * (double)steps / t);
        if (B == 1) {
            long s1 = 0;
            double t1 = now_s(), u;
            do {
                recur_model_step(m, ws, states[0], rand_token(V), logits);
                s1++;
                u = now_s() - t1;
            } while (u < min_time);
            printf(",\"unbatched_tokens_per_s\":%.1f", (double)s1 / u);
        }
        printf(",\"model\":\"%s\",\"state_bytes\":%zu}\n", info->name, info->state_bytes);
        fflush(stdout);
    }
    for (int i = 0; i < maxb; i++)
        recur_state_destroy(states[i]);
    free(states);
    free(tokens);
    free(logits);
    recur_workspace_free(ws);
    recur_model_free(m);
    return 0;
}
