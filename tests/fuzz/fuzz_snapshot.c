/*
 * fuzz_snapshot.c — libFuzzer target: recur_snapshot_read (core/snapshot.c), and
 * proto_state_load (the PUT /v1/sessions/{id}/state body: snapshot + optional logits trailer).
 *
 * Input byte 0 (flags):
 *   bits 0-1  which tiny model of fuzz_configs.h (mod 3) owns the state
 *   bit 2     recompute the snapshot's FNV-1a checksum where the header says it is, so that the
 *             fuzzer gets past the checksum to the payload checks (finite floats, lengths)
 *   bit 3     the rest is a state body: proto_state_split, then proto_state_load (vocab of the model)
 *   bit 4     recompute the trailer's checksum too (with bit 3)
 * The state holds a few folded tokens before every read. Invariants asserted:
 *   - a rejected snapshot leaves the state byte-identical (its snapshot is unchanged);
 *   - an accepted snapshot re-serialises byte-identically, and the model can take a step from it
 *     (RECUR_ECONTEXT allowed when a softmax cache is full);
 *   - proto_state_load agrees with split + read, and what it accepts proto_state_write writes
 *     back byte for byte (nothing recur writes is refused by its own loader).
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "state_blob.h"
#include "fuzz_configs.h"

typedef struct {
    recur_model *m;
    recur_workspace *ws;
    recur_state *pristine, *s;
    uint8_t *ref;       /* snapshot of pristine */
    size_t ref_len;
    float *logits;
} target;

static target g_t[FUZZ_N_CONFIGS];

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}
static uint64_t get_u64(const uint8_t *p) { uint64_t v = 0; for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i); return v; }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

static void setup(void)
{
    for (int i = 0; i < FUZZ_N_CONFIGS; i++) {
        target *t = &g_t[i];
        if (recur_model_init_seed(fuzz_configs[i], 1, &t->m) || recur_workspace_create(t->m, 1, &t->ws) ||
            recur_state_create(t->m, &t->pristine) || recur_state_create(t->m, &t->s))
            abort();
        const recur_model_info *info = recur_model_get_info(t->m);
        t->logits = malloc(sizeof(float) * (size_t)info->vocab_size);
        int32_t toks[3] = {1, 2, 3};
        if (recur_model_prefill(t->m, t->ws, t->pristine, toks, 3, NULL)) abort();
        t->ref_len = recur_snapshot_size(t->pristine);
        t->ref = malloc(t->ref_len);
        if (!t->logits || !t->ref || recur_snapshot_write(t->pristine, t->ref, t->ref_len, NULL)) abort();
        if (recur_state_copy(t->s, t->pristine)) abort();
    }
}

/* the state's snapshot compared with an expected byte string */
/* got (n bytes, as recur writes a state) is want read back: identical, except that a version-1
 * snapshot (u32 1 at byte 8) is written as version 2, so its version field and the checksums
 * over it (the core's 8 bytes at core_len - 8, a logits trailer's last 8) differ. */
static int written_back(const uint8_t *got, const uint8_t *want, size_t n, size_t core_len)
{
    static const uint8_t v1[4] = {1, 0, 0, 0}, v2[4] = {2, 0, 0, 0};
    if (n < 48 || core_len < 48 || core_len > n || memcmp(want + 8, v1, 4) != 0)
        return memcmp(got, want, n) == 0;
    return memcmp(got, want, 8) == 0 && memcmp(got + 8, v2, 4) == 0 &&
           memcmp(got + 12, want + 12, core_len - 20) == 0 &&
           (n == core_len || memcmp(got + core_len, want + core_len, n - core_len - 8) == 0);
}

static int state_equals(const recur_state *s, const uint8_t *want, size_t want_len)
{
    size_t n = recur_snapshot_size(s);
    if (n != want_len) return 0;
    uint8_t *buf = malloc(n);
    if (!buf || recur_snapshot_write(s, buf, n, NULL)) abort();
    int eq = written_back(buf, want, n, n);
    free(buf);
    return eq;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    if (size < 1) return 0;
    unsigned flags = data[0];
    target *t = &g_t[(flags & 3) % FUZZ_N_CONFIGS];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1); /* exact size: overreads are ASan reports */
    if (!buf) abort();
    memcpy(buf, data + 1, len);

    uint64_t P = len >= 40 ? get_u64(buf + 32) : UINT64_MAX;
    int core_whole = P <= len && 48 + P <= len; /* the header's length fits in the input */
    if ((flags & 4) && core_whole) put_u64(buf + 40 + P, fnv1a(0xcbf29ce484222325ULL, buf, 40 + P));

    const recur_model_info *info = recur_model_get_info(t->m);
    size_t core_len = len;
    const uint8_t *logits = NULL;
    if (flags & 8) {
        size_t tlen = proto_state_trailer_size(info->vocab_size);
        if ((flags & 16) && core_whole && len == 48 + P + tlen)
            put_u64(buf + len - 8, fnv1a(0xcbf29ce484222325ULL, buf, len - 8));
        proto_error err;
        if (proto_state_split(buf, len, info->vocab_size, &core_len, &logits, &err) != 0) {
            assert(err.status == 400 && logits == NULL);
            free(buf);
            return 0;
        }
        assert(core_len <= len);
        if (logits) {
            assert(logits >= buf && logits + 4 * (size_t)info->vocab_size + 8 == buf + len);
            memcpy(t->logits, logits, 4 * (size_t)info->vocab_size);
        }
    }

    if (flags & 8) { /* the PUT path as a whole: the same verdict, the same bytes back */
        int has = 0;
        proto_state_fault f;
        int lrc = proto_state_load(t->m, t->s, info->vocab_size, buf, len, t->logits, &has, &f);
        int crc = recur_snapshot_check(t->m, buf, core_len);
        assert((lrc == 0) == (crc == 0) && (lrc != 0 || has == (logits != NULL)));
        if (lrc == 0) {
            uint8_t *back;
            size_t blen;
            assert(proto_state_write(t->s, t->logits, has, info->vocab_size, &back, &blen) == 0);
            assert(blen == len && written_back(back, buf, len, core_len));
            free(back);
            if (recur_state_copy(t->s, t->pristine)) abort();
        } else {
            assert(f.code && f.reason && state_equals(t->s, t->ref, t->ref_len));
        }
    }

    int rc = recur_snapshot_read(t->s, buf, core_len);
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "snapshot_read: %s\n", recur_strerror(rc));
    if (rc != 0) {
        assert(rc < 0 && rc >= RECUR_ECONTEXT);
        assert(state_equals(t->s, t->ref, t->ref_len)); /* unchanged on error */
    } else {
        assert(state_equals(t->s, buf, core_len));      /* byte-identical round trip */
        int r2 = recur_model_step(t->m, t->ws, t->s, 5, t->logits);
        assert(r2 == 0 || r2 == RECUR_ECONTEXT);
        if (recur_state_copy(t->s, t->pristine)) abort();
    }
    free(buf);
    return 0;
}
