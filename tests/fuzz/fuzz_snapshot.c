/*
 * fuzz_snapshot.c — libFuzzer target: recur_snapshot_read (core/snapshot.c), and
 * proto_state_load (the PUT /v1/sessions/{id}/state body: snapshot + optional logits trailer).
 *
 * Input byte 0 (flags):
 *   bits 0-1  which tiny model of fuzz_configs.h (mod 3) owns the state
 *   bit 2     recompute the snapshot's checksum where the header says it is, by its version's rule
 *             (4, 5: the lane checksum; else FNV-1a), so that the fuzzer gets past the checksum to
 *             the payload checks (finite floats, lengths)
 *   bit 3     the rest is a state body: proto_state_split, then proto_state_load (vocab of the model)
 *   bit 4     recompute the trailer's checksum too (with bit 3), by its core's version's rule
 *   bits 5-6  the state's dtype: 0 or 3 f32, 1 f16, 2 bf16 (recur_state_dtype)
 * The state holds a few folded tokens before every read. Invariants asserted:
 *   - a rejected snapshot leaves the state byte-identical (its snapshot is unchanged);
 *   - an accepted snapshot of the state's dtype re-serialises byte-identically (an old version as
 *     the new one of the same bytes); one of another dtype (converted) re-serialises as a
 *     snapshot the reader accepts; the model can take a step from it (RECUR_ECONTEXT allowed when
 *     a softmax cache is full);
 *   - proto_state_load agrees with split + read, and what it accepts proto_state_write writes
 *     back (byte for byte as above: nothing recur writes is refused by its own loader).
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#include "state_blob.h"
#include "util.h" /* recur__lanesum */
#include "fuzz_configs.h"

typedef struct {
    recur_model *m;
    recur_workspace *ws;
    recur_state *pristine, *s;
    uint8_t *ref;       /* snapshot of pristine */
    size_t ref_len;
    float *logits;
} target;

static target g_t[FUZZ_N_CONFIGS][3]; /* [config][state dtype] */

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}
static uint64_t get_u64(const uint8_t *p) { uint64_t v = 0; for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i); return v; }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

static void setup(void)
{
    for (int i = 0; i < FUZZ_N_CONFIGS * 3; i++) {
        target *t = &g_t[i / 3][i % 3];
        if (recur_model_init_seed(fuzz_configs[i / 3], 1, &t->m) ||
            recur_model_set_state_dtype(t->m, (recur_state_dtype)(i % 3)) || recur_workspace_create(t->m, 1, &t->ws) ||
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

static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* got (n bytes, as recur writes a state) is want read back: identical, except that an old
 * snapshot (versions 1, 2, 3: FNV-1a) is written as version 4 (from 1, 2) or 5 (from 3), so its
 * version field and the checksums over it (the core's 8 bytes at core_len - 8, a logits
 * trailer's last 8) differ. */
static int written_back(const uint8_t *got, const uint8_t *want, size_t n, size_t core_len)
{
    uint32_t v = n >= 48 ? get_u32(want + 8) : 0;
    if (n < 48 || core_len < 48 || core_len > n || v < 1 || v > 3)
        return memcmp(got, want, n) == 0;
    return memcmp(got, want, 8) == 0 && get_u32(got + 8) == (v == 3 ? 5u : 4u) &&
           memcmp(got + 12, want + 12, core_len - 20) == 0 &&
           (n == core_len || memcmp(got + core_len, want + core_len, n - core_len - 8) == 0);
}

/* the dtype of an accepted snapshot's values: its dtype word (versions 3, 5), else F32 */
static recur_state_dtype snap_dtype(const uint8_t *b, size_t n)
{
    uint32_t v = n >= 48 ? get_u32(b + 8) : 0;
    return (v == 3 || v == 5) ? (recur_state_dtype)get_u32(b + 40) : RECUR_STATE_F32;
}

/* s's snapshot is one its own reader accepts (after a read that converted) */
static int state_valid(const recur_state *s, const recur_model *m)
{
    size_t n = recur_snapshot_size(s);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || recur_snapshot_write(s, buf, n, NULL)) abort();
    int ok = recur_snapshot_check(m, buf, n) == 0;
    free(buf);
    return ok;
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
    target *t = &g_t[(flags & 3) % FUZZ_N_CONFIGS][((flags >> 5) & 3) % 3];
    const recur_state_dtype sdt = (recur_state_dtype)(((flags >> 5) & 3) % 3);
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1); /* exact size: overreads are ASan reports */
    if (!buf) abort();
    memcpy(buf, data + 1, len);

    uint64_t P = len >= 40 ? get_u64(buf + 32) : UINT64_MAX;
    int core_whole = P <= len && 48 + P <= len; /* the header's length fits in the input */
    int lanes = core_whole && recur_snapshot_lane_checksum(buf, len);
    if ((flags & 4) && core_whole)
        put_u64(buf + 40 + P, lanes ? recur__lanesum(buf, 40 + P) : fnv1a(0xcbf29ce484222325ULL, buf, 40 + P));

    const recur_model_info *info = recur_model_get_info(t->m);
    size_t core_len = len;
    const uint8_t *logits = NULL;
    if (flags & 8) {
        size_t tlen = proto_state_trailer_size(info->vocab_size);
        if ((flags & 16) && core_whole && len == 48 + P + tlen) /* state_blob.h: by the core's version */
            put_u64(buf + len - 8, lanes ? fnv1a(0xcbf29ce484222325ULL, buf + 40 + P, tlen)
                                         : fnv1a(0xcbf29ce484222325ULL, buf, len - 8));
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
            if (snap_dtype(buf, core_len) == sdt) {
                assert(blen == len && written_back(back, buf, len, core_len));
            } else {
                proto_state_fault f2;
                int has2 = 0;
                assert(proto_state_load(t->m, t->s, info->vocab_size, back, blen, t->logits, &has2, &f2) == 0);
                assert(has2 == has);
            }
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
        if (snap_dtype(buf, core_len) == sdt)
            assert(state_equals(t->s, buf, core_len)); /* byte-identical round trip */
        else
            assert(state_valid(t->s, t->m));           /* converted: still a valid state */
        int r2 = recur_model_step(t->m, t->ws, t->s, 5, t->logits);
        assert(r2 == 0 || r2 == RECUR_ECONTEXT);
        if (recur_state_copy(t->s, t->pristine)) abort();
    }
    free(buf);
    return 0;
}
