/*
 * fuzz_weights_cache.c — libFuzzer target: the quantized-weights cache's reader
 * (recur_model_quantize_cached, core/weights_cache.c) on an arbitrary file in the place of a
 * tiny model's cache file.
 *
 * Input byte 0 (flags):
 *   bits 0-1  which tiny model of fuzz_configs.h (mod 3)
 *   bit 2     dtype Q4_0 (else Q8_0)
 *   bit 3     recompute the header checksum (bytes 56..63 over 0..55), so that the fuzzer gets
 *             past it to the field checks
 *   bit 4     recompute the payload checksum (bytes 48..55) too, so that it reaches the accept path
 * The rest is written as the model's cache file in a private directory in /dev/shm. Asserted:
 *   - the call succeeds (a bad file is never an error) and the model is usable;
 *   - a refused file names its rule, is never used (logits of a 2-token prefill bit-identical to
 *     the quantized model's) and is replaced by the valid file, byte for byte;
 *   - a hit without bit 4 is the valid file's weights (bit-identical logits); with bit 4 a hit may
 *     carry other codes (the checksums detect corruption, not tampering): it must still step.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recur.h"
#include "util.h"
#include "weights_cache.h"
#include "fuzz_configs.h"

typedef struct {
    recur_model *src, *ref;
    uint8_t *file;    /* the valid cache file */
    size_t file_len;
    char path[1100];  /* where the file goes */
    float *logits;    /* ref's logits of the 2-token prefill */
} target;

static target g_t[FUZZ_N_CONFIGS][2];
static char g_dir[64];

static void prefill_logits(recur_model *m, float *out)
{
    recur_workspace *ws;
    recur_state *s;
    int32_t toks[2] = {1, 2};
    if (recur_workspace_create(m, 1, &ws) || recur_state_create(m, &s)) abort();
    if (recur_model_prefill(m, ws, s, toks, 2, out)) abort();
    recur_state_destroy(s);
    recur_workspace_free(ws);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) abort();
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void cleanup(void)
{
    for (int c = 0; c < FUZZ_N_CONFIGS; c++)
        for (int q = 0; q < 2; q++)
            if (g_t[c][q].path[0]) unlink(g_t[c][q].path);
    rmdir(g_dir);
}

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/dev/shm/fuzz_wcache.XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    atexit(cleanup);
    for (int c = 0; c < FUZZ_N_CONFIGS; c++)
        for (int q = 0; q < 2; q++) {
            target *t = &g_t[c][q];
            const char *dt = q ? "q4_0" : "q8_0";
            recur_wcache_report r;
            if (recur_model_init_seed(fuzz_configs[c], 1, &t->src) ||
                recur_model_quantize(t->src, dt, &t->ref, NULL, 0))
                abort();
            recur_model *m;
            if (recur_model_quantize_cached(t->src, dt, g_dir, 0, &m, &r, NULL, 0) || r.outcome != RECUR_WCACHE_WRITTEN)
                abort();
            recur_model_free(m);
            snprintf(t->path, sizeof t->path, "%s", r.path);
            t->file = read_all(t->path, &t->file_len);
            t->logits = malloc(sizeof(float) * 2 * (size_t)recur_model_get_info(t->ref)->vocab_size);
            if (!t->file || !t->logits) abort();
            prefill_logits(t->ref, t->logits);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    if (size < 1) return 0;
    unsigned flags = data[0];
    target *t = &g_t[(flags & 3) % FUZZ_N_CONFIGS][(flags >> 2) & 1];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) abort();
    memcpy(buf, data + 1, len);
    if ((flags & 16) && len >= RECUR_WCACHE_HEADER)
        recur__put_le64(buf + 48, recur__lanesum(buf + RECUR_WCACHE_HEADER, len - RECUR_WCACHE_HEADER));
    if ((flags & 24) && len >= RECUR_WCACHE_HEADER)
        recur__put_le64(buf + 56, recur__fnv1a(RECUR_FNV_OFFSET, buf, 56));
    FILE *f = fopen(t->path, "wb");
    if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f)) abort();

    const char *dt = (flags & 4) ? "q4_0" : "q8_0";
    recur_model *m = NULL;
    recur_wcache_report r;
    assert(recur_model_quantize_cached(t->src, dt, g_dir, 0, &m, &r, NULL, 0) == RECUR_OK);
    const recur_model_info *info = recur_model_get_info(m);
    size_t nl = 2 * (size_t)info->vocab_size;
    float *lg = malloc(sizeof(float) * nl);
    if (!lg) abort();
    prefill_logits(m, lg);
    int same = memcmp(lg, t->logits, sizeof(float) * nl) == 0;
    if (r.outcome == RECUR_WCACHE_HIT) {
        assert(!strcmp(info->weights_origin, "cache") && !r.rule[0]);
        assert(same || (flags & 16));
    } else {
        assert(r.outcome == RECUR_WCACHE_REPLACED && r.rule[0] && !strcmp(info->weights_origin, "quantized") && same);
        size_t n;
        uint8_t *now = read_all(t->path, &n);
        assert(now && n == t->file_len && memcmp(now, t->file, n) == 0);
        free(now);
    }
    free(lg);
    free(buf);
    recur_model_free(m);
    return 0;
}
