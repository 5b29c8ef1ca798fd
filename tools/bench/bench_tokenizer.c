/* bench_tokenizer.c — librecur's tokenizer, one thread: load time, RSS of the loaded tokenizer,
 * encode throughput on a corpus.
 *
 *   bench_tokenizer TOKENIZER CORPUS [REPEATS]
 *
 * CORPUS holds items separated by NUL bytes (each item is encoded on its own, as the reference
 * bench does). One warm-up pass, then REPEATS timed passes (default 3); the best pass is kept.
 * Prints one JSON object: load_ms (wall), load_cpu_ms (CPU of the loading thread), rss_mb (VmRSS growth across the load, after
 * malloc_trim), rss_total_mb, bytes, tokens, encode_cpu_s and encode_wall_s of the best pass. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recur.h"

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb / 1024.0;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: %s TOKENIZER CORPUS [REPEATS]\n", argv[0]); return 2; }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { perror("read"); return 1; }
    fclose(f);
    buf[n] = 0;
    malloc_trim(0);
    double r0 = rss_mb();
    double t0 = clock_s(CLOCK_MONOTONIC), tc0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    recur_tokenizer *t;
    char err[512];
    int rc = recur_tokenizer_load(argv[1], &t, err, sizeof err);
    double load_ms = (clock_s(CLOCK_MONOTONIC) - t0) * 1e3;
    double load_cpu_ms = (clock_s(CLOCK_THREAD_CPUTIME_ID) - tc0) * 1e3;
    if (rc) { fprintf(stderr, "%s: %s\n", recur_strerror(rc), err); return 1; }
    malloc_trim(0);
    double r1 = rss_mb();
    double best_cpu = 1e30, best_wall = 0;
    size_t tokens = 0, bytes = 0;
    for (int pass = 0; pass <= repeats; pass++) {
        double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC);
        size_t ntok = 0;
        bytes = 0;
        for (char *p = buf; p < buf + n;) {
            size_t len = strlen(p);
            int32_t *ids;
            size_t k;
            if (recur_tokenizer_encode(t, p, len, 0, &ids, &k)) { fprintf(stderr, "encode failed\n"); return 1; }
            ntok += k;
            bytes += len;
            recur_tokenizer_release(ids);
            p += len + 1;
        }
        double c = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0, w = clock_s(CLOCK_MONOTONIC) - w0;
        if (pass > 0 && c < best_cpu) { best_cpu = c; best_wall = w; }
        tokens = ntok;
    }
    printf("{\"load_ms\": %.2f, \"load_cpu_ms\": %.2f, \"rss_mb\": %.2f, \"rss_total_mb\": %.2f, \"bytes\": %zu, \"tokens\": %zu, "
           "\"encode_cpu_s\": %.4f, \"encode_wall_s\": %.4f}\n",
           load_ms, load_cpu_ms, r1 - r0, r1, bytes, tokens, best_cpu, best_wall);
    recur_tokenizer_free(t);
    free(buf);
    return 0;
}
