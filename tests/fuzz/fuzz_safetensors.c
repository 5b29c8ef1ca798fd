/*
 * fuzz_safetensors.c — libFuzzer target: the model loader (recur_model_load_files: config JSON
 * + safetensors weights, core/model_load.c, core/family_native.c and core/safetensors.c).
 *
 * Input byte 0 picks one of the tiny configs of fuzz_configs.h (mod 3); the rest is written to
 * a safetensors file in /dev/shm (the loader mmaps a path; core has no in-memory entry point).
 * The loader must load or reject, never crash or leak. A loaded model must be usable: one
 * prefill step of two tokens runs (ASan/UBSan watch it), and it is freed.
 */
#include <assert.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recur.h"
#include "fuzz_configs.h"

static char g_cfg_path[FUZZ_N_CONFIGS][96];
static char g_st_path[96];

static void write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) abort();
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

static void cleanup(void)
{
    unlink(g_st_path);
    for (int i = 0; i < FUZZ_N_CONFIGS; i++) unlink(g_cfg_path[i]);
}

static void setup(void)
{
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    for (int i = 0; i < FUZZ_N_CONFIGS; i++) {
        snprintf(g_cfg_path[i], sizeof g_cfg_path[i], "%s/fuzz_st_%d_cfg%d.json", dir, (int)getpid(), i);
    }
    snprintf(g_st_path, sizeof g_st_path, "%s/fuzz_st_%d.safetensors", dir, (int)getpid());
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    if (size < 1) return 0;
    int which = data[0] % FUZZ_N_CONFIGS;
    /* both files exist only during the load: libFuzzer ends with _Exit (no atexit cleanup) */
    write_file(g_cfg_path[which], fuzz_configs[which], strlen(fuzz_configs[which]));
    write_file(g_st_path, data + 1, size - 1);

    recur_model *m = NULL;
    int rc = recur_model_load_files(g_cfg_path[which], g_st_path, &m);
    unlink(g_st_path);
    unlink(g_cfg_path[which]);
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "model_load: %s\n", rc ? recur_strerror(rc) : "ok");
    if (rc != 0) {
        assert(rc < 0 && rc >= RECUR_ECONTEXT && m == NULL);
        return 0;
    }
    assert(m);
    const recur_model_info *info = recur_model_get_info(m);
    recur_workspace *ws;
    recur_state *s;
    if (recur_workspace_create(m, 1, &ws) || recur_state_create(m, &s)) abort();
    float *logits = malloc(sizeof(float) * 2 * (size_t)info->vocab_size);
    int32_t toks[2] = {0, info->vocab_size - 1};
    if (!logits) abort();
    rc = recur_model_prefill(m, ws, s, toks, 2, logits);
    assert(rc == 0);
    free(logits);
    recur_state_destroy(s);
    recur_workspace_free(ws);
    recur_model_free(m);
    return 0;
}
