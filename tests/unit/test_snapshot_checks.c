/* test_snapshot_checks.c — what a snapshot may hold and how a refusal is named (issue 10 items
 * 5, 6, 12, 13; issue 11 item 4): recur_snapshot_length, the order of recur_snapshot_check
 * (framing, checksum, model, tokens_seen, values), the value rule (finite, |x| <= 2^40, a linear
 * layer's z >= 0) on uploads and on live states, the checkpoint a failing op rolls back to, and
 * proto_state_load / proto_state_write: the PUT code and quarantine reason of every check, the
 * core checked before the trailer, and nothing written that the loader refuses; the lane checksum
 * (core/util.h, issue 16) against a reference written out here, and the old FNV-1a versions 1-3
 * still read. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h" /* s->rec: poison a live state as a runaway computation would */
#include "recur.h"
#include "state_blob.h"

#define CFG(name, mixers, extra)                                                                \
    "{\"name\":\"" name "\",\"vocab_size\":16,\"d_model\":8,\"n_layers\":2,\"n_heads\":2,"      \
    "\"head_k\":4,\"head_v\":4,\"d_ff\":8,\"mixers\":[" mixers "],\"tied_embeddings\":true" extra "}"

static const char *REC = CFG("rec", "\"linear\",\"gated_deltanet\"", "");
static const char *HYB = CFG("hyb", "\"gated_deltanet\",\"softmax\"", ",\"max_context\":8");
static const char *SMALL = "{\"name\":\"small\",\"vocab_size\":16,\"d_model\":4,\"n_layers\":1,"
                           "\"n_heads\":1,\"head_k\":2,\"head_v\":2,\"d_ff\":4,\"mixers\":[\"gla\"]}";

typedef struct {
    recur_model *m;
    recur_workspace *ws;
    recur_state *s, *t;
    uint8_t *buf; /* snapshot of s */
    size_t n;
} fixture;

static void fx_init(fixture *f, const char *cfg, int tokens)
{
    cr_assert_eq(recur_model_init_seed(cfg, 3, &f->m), 0);
    cr_assert_eq(recur_workspace_create(f->m, 1, &f->ws), 0);
    cr_assert_eq(recur_state_create(f->m, &f->s), 0);
    cr_assert_eq(recur_state_create(f->m, &f->t), 0);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_eq(recur_model_prefill(f->m, f->ws, f->s, tok, tokens, NULL), 0);
    f->n = recur_snapshot_size(f->s);
    f->buf = malloc(f->n);
    cr_assert_eq(recur_snapshot_write(f->s, f->buf, f->n, NULL), 0);
}

static void fx_free(fixture *f)
{
    free(f->buf);
    recur_state_destroy(f->s);
    recur_state_destroy(f->t);
    recur_workspace_free(f->ws);
    recur_model_free(f->m);
}

static uint64_t fnv_from(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t fnv(const uint8_t *p, size_t n) { return fnv_from(0xcbf29ce484222325ULL, p, n); }

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The lane checksum written out from its definition (core/util.h), one pass, no streaming:
 * lanes over the whole 32-byte blocks, then FNV-1a over the lanes' bytes, the tail, the length. */
static uint64_t ref_lanesum(const uint8_t *p, size_t n)
{
    uint64_t lane[4], h;
    for (int j = 0; j < 4; j++) lane[j] = 0xcbf29ce484222325ULL + (uint64_t)j;
    size_t whole = n - n % 32;
    for (size_t i = 0; i < whole / 8; i++) lane[i % 4] = (lane[i % 4] ^ le64(p + 8 * i)) * 0x100000001b3ULL;
    uint8_t fin[40];
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 8; k++) fin[8 * j + k] = (uint8_t)(lane[j] >> (8 * k));
    h = fnv(fin, 32);
    h = fnv_from(h, p + whole, n % 32);
    for (int k = 0; k < 8; k++) fin[k] = (uint8_t)((uint64_t)n >> (8 * k));
    return fnv_from(h, fin, 8);
}

static uint32_t version_of(const uint8_t *b) { return (uint32_t)(b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24); }

/* recompute the core checksum of a snapshot of n bytes by its version's rule (4, 5: lanes) */
static void fix_sum(uint8_t *b, size_t n)
{
    uint64_t h = version_of(b) >= 4 ? ref_lanesum(b, n - 8) : fnv(b, n - 8);
    memcpy(b + n - 8, &h, 8);
}

/* the snapshot of n bytes at b as version v, its checksum by v's rule */
static void as_version(uint8_t *b, size_t n, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    memcpy(b + 8, le, 4);
    fix_sum(b, n);
}

static void set_f32(uint8_t *b, size_t at, float v) { memcpy(b + at, &v, 4); }

Test(snapshot_checks, length_from_the_header)
{
    fixture f;
    fx_init(&f, REC, 3);
    size_t len = 0;
    cr_assert_eq(recur_snapshot_length(f.buf, f.n, &len), 0);
    cr_assert_eq(len, f.n);
    cr_assert_eq(recur_snapshot_length(f.buf, 40, &len), 0); /* the header alone is enough */
    cr_assert_eq(len, f.n);
    cr_assert_eq(recur_snapshot_length(f.buf, 39, &len), RECUR_ETRUNCATED);
    uint8_t bad[40];
    memcpy(bad, f.buf, 40);
    bad[0] ^= 1;
    cr_assert_eq(recur_snapshot_length(bad, 40, &len), RECUR_EFORMAT);
    memset(bad + 32, 0xff, 8); /* P that would overflow */
    bad[0] ^= 1;
    cr_assert_eq(recur_snapshot_length(bad, 40, &len), RECUR_EFORMAT);
    fx_free(&f);
}

Test(snapshot_checks, a_flipped_bit_is_the_checksum_a_foreign_snapshot_the_model)
{
    fixture f, o, sm;
    fx_init(&f, REC, 3);
    fx_init(&o, CFG("rec", "\"linear\",\"gated_deltanet\"", ",\"norm_eps\":1e-6"), 3);
    fx_init(&sm, SMALL, 3);
    /* every bit past magic, version and length: the checksum, never "another model" */
    uint8_t *b = malloc(f.n);
    for (size_t at = 12; at < f.n; at++) {
        if (at >= 32 && at < 40) continue; /* the payload length: framing (below) */
        memcpy(b, f.buf, f.n);
        b[at] ^= 0x10;
        cr_assert_eq(recur_snapshot_check(f.m, b, f.n), RECUR_ECHECKSUM, "flip at %zu", at);
    }
    free(b);
    /* intact snapshots of other models; the header alone of a larger one (a file too large to read) */
    cr_assert_eq(recur_snapshot_check(f.m, o.buf, o.n), RECUR_EMISMATCH);
    cr_assert_eq(recur_snapshot_check(sm.m, f.buf, f.n), RECUR_EMISMATCH);
    cr_assert_eq(recur_snapshot_check(sm.m, f.buf, 40), RECUR_EMISMATCH);
    cr_assert_str_eq(proto_state_toolarge_reason(sm.m, f.buf, 64), "othermodel");
    cr_assert_str_eq(proto_state_toolarge_reason(f.m, f.buf, 64), "toolarge");
    cr_assert_eq(recur_snapshot_check(f.m, f.buf, 40), RECUR_ETRUNCATED);
    cr_assert_eq(recur_snapshot_check(f.m, f.buf, f.n), 0);
    fx_free(&f);
    fx_free(&o);
    fx_free(&sm);
}

Test(snapshot_checks, value_rule_on_uploads)
{
    fixture f;
    fx_init(&f, REC, 3);
    const recur_model *m = f.m;
    /* layer 0 is linear: S [2][4][4] (32 floats) then z [2][4]; layer 1 gated DeltaNet */
    size_t S0 = 40, Z0 = 40 + 32 * 4, L1 = 40 + m->layers[0].state_floats * 4;
    struct { size_t at; float v; int want; } cases[] = {
        {S0, 0x1p40f, 0},                    /* at the bound */
        {S0, -0x1p40f, 0},
        {L1 + 8, 0x1p41f, RECUR_ERANGE},     /* past it */
        {L1 + 8, -3e38f, RECUR_ERANGE},      /* the poison */
        {S0 + 4, NAN, RECUR_ENONFINITE},
        {L1, INFINITY, RECUR_ENONFINITE},
        {Z0 + 4, -1.0f, RECUR_ERANGE},       /* a negative normaliser */
        {Z0 + 4, -0.0f, 0},
        {S0 + 4, -1.0f, 0},                  /* S may be negative */
    };
    uint8_t *b = malloc(f.n);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, f.buf, f.n);
        set_f32(b, cases[i].at, cases[i].v);
        fix_sum(b, f.n);
        cr_assert_eq(recur_snapshot_check(m, b, f.n), cases[i].want, "case %zu", i);
        cr_assert_eq(recur_snapshot_read(f.t, b, f.n), cases[i].want, "case %zu", i);
    }
    free(b);
    fx_free(&f);
}

static void set_u16(uint8_t *b, size_t at, uint16_t v) { memcpy(b + at, &v, 2); }

/* A BF16 state's values are checked on their 16 bits (core/snapshot.c check_bf16): the same
 * rule, at the same boundaries, as on their fp32 widening; into an F16 state also the F16 range. */
Test(snapshot_checks, value_rule_on_bf16_uploads)
{
    recur_model *m, *m16;
    recur_workspace *ws;
    recur_state *s, *t;
    cr_assert_eq(recur_model_init_seed(REC, 3, &m), 0);
    cr_assert_eq(recur_model_init_seed(REC, 3, &m16), 0);
    cr_assert_eq(recur_model_set_state_dtype(m, RECUR_STATE_BF16), 0);
    cr_assert_eq(recur_model_set_state_dtype(m16, RECUR_STATE_F16), 0);
    cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
    cr_assert_eq(recur_state_create(m, &s), 0);
    cr_assert_eq(recur_state_create(m, &t), 0);
    int32_t tok[3] = {1, 2, 3};
    cr_assert_eq(recur_model_prefill(m, ws, s, tok, 3, NULL), 0);
    size_t n = recur_snapshot_size(s);
    uint8_t *snap = malloc(n), *b = malloc(n);
    cr_assert_eq(recur_snapshot_write(s, snap, n, NULL), 0);
    /* version 3: the dtype word (8 bytes), then layer 0 (linear: S 32 halves, z 8), layer 1 */
    size_t S0 = 48, Z0 = 48 + 32 * 2, L1 = 48 + m->layers[0].state_floats * 2;
    struct { size_t at; uint16_t v; int want, want16; } cases[] = {
        {S0, 0x5380, 0, RECUR_ERANGE},                       /* 2^40: at the bound */
        {S0, 0xd380, 0, RECUR_ERANGE},                       /* -2^40 */
        {L1 + 4, 0x5381, RECUR_ERANGE, RECUR_ERANGE},        /* the next value past it */
        {L1 + 4, 0xff7f, RECUR_ERANGE, RECUR_ERANGE},        /* -max finite */
        {S0 + 2, 0x7fc0, RECUR_ENONFINITE, RECUR_ENONFINITE}, /* NaN */
        {S0 + 2, 0x7f81, RECUR_ENONFINITE, RECUR_ENONFINITE}, /* a signalling NaN */
        {L1, 0x7f80, RECUR_ENONFINITE, RECUR_ENONFINITE},    /* +inf */
        {L1, 0xff80, RECUR_ENONFINITE, RECUR_ENONFINITE},    /* -inf */
        {Z0 + 2, 0xbf80, RECUR_ERANGE, RECUR_ERANGE},        /* a negative normaliser */
        {Z0 + 2, 0x8000, 0, 0},                              /* -0 */
        {Z0 + 2, 0x8001, RECUR_ERANGE, RECUR_ERANGE},        /* the smallest negative */
        {S0 + 2, 0xbf80, 0, 0},                              /* S may be negative */
        {S0 + 2, 0x477f, 0, 0},                              /* 65280: F16 holds it */
        {S0 + 2, 0x4780, 0, RECUR_ERANGE},                   /* 65536: F16 cannot */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, snap, n);
        set_u16(b, cases[i].at, cases[i].v);
        fix_sum(b, n);
        cr_assert_eq(recur_snapshot_check(m, b, n), cases[i].want, "case %zu", i);
        cr_assert_eq(recur_snapshot_read(t, b, n), cases[i].want, "case %zu", i);
        cr_assert_eq(recur_snapshot_check(m16, b, n), cases[i].want16, "case %zu (into F16)", i);
    }
    free(snap);
    free(b);
    recur_state_destroy(s);
    recur_state_destroy(t);
    recur_workspace_free(ws);
    recur_model_free(m);
    recur_model_free(m16);
}

Test(snapshot_checks, tokens_seen_is_bounded)
{
    fixture r, h;
    fx_init(&r, REC, 3);
    fx_init(&h, HYB, 3);
    cr_assert_eq(recur_max_tokens_seen(r.m), RECUR_MAX_TOKENS_SEEN);
    cr_assert_eq(recur_max_tokens_seen(h.m), 8);
    uint8_t *b = malloc(r.n);
    uint64_t cases[][2] = {{UINT64_MAX, RECUR_ECONTEXT}, {RECUR_MAX_TOKENS_SEEN + 1, RECUR_ECONTEXT},
                           {RECUR_MAX_TOKENS_SEEN, 0}};
    for (size_t i = 0; i < 3; i++) {
        memcpy(b, r.buf, r.n);
        memcpy(b + 24, &cases[i][0], 8);
        fix_sum(b, r.n);
        cr_assert_eq(recur_snapshot_check(r.m, b, r.n), (int)cases[i][1], "case %zu", i);
    }
    free(b);
    /* with softmax layers: max_context (the payload length follows tokens_seen) */
    b = malloc(h.n);
    memcpy(b, h.buf, h.n);
    uint64_t nine = 9;
    memcpy(b + 24, &nine, 8);
    fix_sum(b, h.n);
    cr_assert_eq(recur_snapshot_check(h.m, b, h.n), RECUR_ECONTEXT);
    free(b);
    fx_free(&r);
    fx_free(&h);
}

Test(snapshot_checks, live_state_rule_and_checkpoint)
{
    fixture f;
    fx_init(&f, HYB, 3);
    cr_assert_eq(recur_state_check(f.s, 0), 0);
    size_t cb = recur_state_checkpoint_bytes(f.s);
    cr_assert_eq(cb, 8 + f.m->rec_floats * 4);
    uint8_t *ck = malloc(cb);
    recur_state_checkpoint(f.s, ck);
    float lg[16];
    cr_assert_eq(recur_model_step(f.m, f.ws, f.s, 4, lg), 0);
    cr_assert_eq(recur_state_tokens_seen(f.s), 4);
    f.s->rec[5] = NAN; /* as a runaway step would leave it */
    cr_assert_eq(recur_state_check(f.s, 3), RECUR_ENONFINITE);
    f.s->rec[5] = 0x1p41f;
    cr_assert_eq(recur_state_check(f.s, 3), RECUR_ERANGE);
    /* and snapshots of it are refused at the writer, never written for the loader to refuse */
    uint8_t *tmp = malloc(recur_snapshot_size(f.s));
    cr_assert_eq(recur_snapshot_write(f.s, tmp, recur_snapshot_size(f.s), NULL), RECUR_ERANGE);
    free(tmp);
    uint8_t *body;
    size_t blen;
    cr_assert_eq(proto_state_write(f.s, lg, 1, 16, &body, &blen), RECUR_ERANGE);
    recur_state_rollback(f.s, ck);
    cr_assert_eq(recur_state_tokens_seen(f.s), 3);
    uint8_t *back = malloc(f.n);
    cr_assert_eq(recur_snapshot_write(f.s, back, f.n, NULL), 0);
    cr_assert_eq(memcmp(back, f.buf, f.n), 0, "rollback is exact (the KV row at 3 is dead)");
    free(back);
    free(ck);
    fx_free(&f);
}

/* proto_state_load: the core before the trailer; each check's PUT code and quarantine reason */
Test(snapshot_checks, state_body_faults_are_named)
{
    fixture f;
    fx_init(&f, REC, 3);
    float lg[16];
    for (int i = 0; i < 16; i++) lg[i] = 0.25f * (float)i - 1.0f;
    uint8_t *body;
    size_t len;
    cr_assert_eq(proto_state_write(f.s, lg, 1, 16, &body, &len), 0);
    cr_assert_eq(len, f.n + proto_state_trailer_size(16));
    float got[16];
    int has = 0;
    proto_state_fault e;
    cr_assert_eq(proto_state_load(f.m, f.t, 16, body, len, got, &has, &e), 0);
    cr_assert_eq(has, 1);
    cr_assert_eq(memcmp(got, lg, sizeof lg), 0);

    uint8_t *b = malloc(len);
    struct { size_t at; uint8_t x; const char *code, *reason; } flips[] = {
        {44, 0x01, "snapshot_checksum", "checksum"},          /* core payload, under a trailer */
        {16, 0x01, "snapshot_checksum", "checksum"},          /* fingerprint */
        {f.n + 20, 0x01, "snapshot_checksum", "checksum"},    /* a logit */
        {len - 1, 0x01, "snapshot_checksum", "checksum"},     /* the trailer's checksum */
        {f.n, 0x01, "invalid_snapshot", "trailer"},           /* the trailer's magic */
        {0, 0x01, "invalid_snapshot", "format"},
    };
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(b, body, len);
        b[flips[i].at] ^= flips[i].x;
        cr_assert_eq(proto_state_load(f.m, f.t, 16, b, len, got, &has, &e), -1, "flip %zu", i);
        cr_assert_str_eq(e.code, flips[i].code, "flip %zu", i);
        cr_assert_str_eq(e.reason, flips[i].reason, "flip %zu", i);
    }
    cr_assert_eq(proto_state_load(f.m, f.t, 16, body, f.n - 1, got, &has, &e), -1);
    cr_assert_str_eq(e.code, "snapshot_truncated");
    cr_assert_str_eq(e.reason, "truncated");
    /* values: the state's and the logits' */
    float bad_lg[16];
    memcpy(bad_lg, lg, sizeof lg);
    bad_lg[2] = 3e38f;
    cr_assert_eq(proto_state_write(f.s, bad_lg, 1, 16, &b, &len), RECUR_ERANGE); /* b untouched */
    uint8_t *raw = malloc(f.n + proto_state_trailer_size(16));
    memcpy(raw, f.buf, f.n);
    proto_state_trailer_write(raw + f.n, raw, f.n, bad_lg, 16);
    size_t rlen = f.n + proto_state_trailer_size(16);
    cr_assert_eq(proto_state_load(f.m, f.t, 16, raw, rlen, got, &has, &e), -1);
    cr_assert_str_eq(e.code, "snapshot_range");
    bad_lg[2] = NAN;
    proto_state_trailer_write(raw + f.n, raw, f.n, bad_lg, 16);
    cr_assert_eq(proto_state_load(f.m, f.t, 16, raw, rlen, got, &has, &e), -1);
    cr_assert_str_eq(e.code, "snapshot_nonfinite");
    cr_assert_str_eq(e.reason, "nonfinite");
    set_f32(raw, 48, 3e38f);
    fix_sum(raw, f.n);
    cr_assert_eq(proto_state_load(f.m, f.t, 16, raw, f.n, got, &has, &e), -1);
    cr_assert_str_eq(e.code, "snapshot_range");
    cr_assert_str_eq(e.reason, "range");
    uint64_t huge = UINT64_MAX;
    memcpy(raw, f.buf, f.n);
    memcpy(raw + 24, &huge, 8);
    fix_sum(raw, f.n);
    cr_assert_eq(proto_state_load(f.m, f.t, 16, raw, f.n, got, &has, &e), -1);
    cr_assert_str_eq(e.code, "snapshot_tokens_seen");
    cr_assert_str_eq(e.reason, "tokens");
    /* nothing above touched t: it still holds the valid upload */
    cr_assert_eq(recur_state_tokens_seen(f.t), 3);
    free(raw);
    free(b);
    free(body);
    fx_free(&f);
}

/* ---------------------------------------------------------------- the lane checksum (issue 16) */

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (uint8_t)(seed >> 56);
    }
}

Test(lanesum, the_reference_however_the_input_is_split)
{
    enum { N = 300 };
    uint8_t buf[N];
    fill(buf, N, 7);
    for (size_t n = 0; n <= N; n++) {
        uint64_t want = ref_lanesum(buf, n);
        cr_assert_eq(recur__lanesum(buf, n), want, "n=%zu", n);
        /* two pieces at every cut, and byte by byte */
        for (size_t cut = 0; cut <= n; cut += n < 80 ? 1 : 7) {
            recur__lanesum_state s;
            recur__lanesum_init(&s);
            recur__lanesum_update(&s, buf, cut);
            recur__lanesum_update(&s, buf + cut, n - cut);
            cr_assert_eq(recur__lanesum_final(&s), want, "n=%zu cut=%zu", n, cut);
        }
        recur__lanesum_state s;
        recur__lanesum_init(&s);
        for (size_t i = 0; i < n; i++) recur__lanesum_update(&s, buf + i, 1);
        cr_assert_eq(recur__lanesum_final(&s), want, "n=%zu bytewise", n);
    }
    /* fixed values (tests/python/checksums.py gives the same): empty, one block, 33 bytes */
    uint8_t seq[64];
    for (int i = 0; i < 64; i++) seq[i] = (uint8_t)i;
    cr_assert_eq(recur__lanesum(seq, 0), ref_lanesum(seq, 0));
    cr_assert_eq(recur__lanesum(seq, 32), ref_lanesum(seq, 32));
    cr_assert_eq(recur__lanesum(seq, 33), ref_lanesum(seq, 33));
}

/* On whole 32-byte blocks the weights cache's payload checksum as it was before the lane checksum
 * moved to util.h (no tail: FNV-1a over the lanes' bytes and the length only), so cache files
 * written before stay valid. */
Test(lanesum, whole_blocks_are_the_weights_cache_checksum)
{
    uint8_t buf[32 * 17];
    fill(buf, sizeof buf, 11);
    for (size_t blocks = 0; blocks <= 17; blocks++) {
        uint64_t lane[4];
        for (int j = 0; j < 4; j++) lane[j] = 0xcbf29ce484222325ULL + (uint64_t)j;
        for (size_t i = 0; i < blocks * 4; i++) lane[i % 4] = (lane[i % 4] ^ le64(buf + 8 * i)) * 0x100000001b3ULL;
        uint8_t b[40];
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++) b[8 * j + k] = (uint8_t)(lane[j] >> (8 * k));
        for (int k = 0; k < 8; k++) b[32 + k] = (uint8_t)((uint64_t)(blocks * 32) >> (8 * k));
        cr_assert_eq(recur__lanesum(buf, blocks * 32), fnv(b, 40), "%zu blocks", blocks);
    }
}

/* Every bit of the last 80 bytes, for every tail length 0..31: the sum changes (a tail byte
 * always shows, FNV-1a's steps being bijections; a block byte changes its lane, which the final
 * FNV-1a could in principle map to the same sum, ~2^-64: these flips are checked, not proven). */
Test(lanesum, a_flipped_bit_near_the_end_changes_it_for_every_tail)
{
    uint8_t buf[256 + 32];
    for (size_t tail = 0; tail < 32; tail++) {
        size_t n = 256 + tail;
        fill(buf, n, 100 + tail);
        uint64_t want = recur__lanesum(buf, n);
        for (size_t at = n - 80; at < n; at++)
            for (int bit = 0; bit < 8; bit++) {
                buf[at] ^= (uint8_t)(1u << bit);
                cr_assert_neq(recur__lanesum(buf, n), want, "tail %zu byte %zu bit %d", tail, at, bit);
                buf[at] ^= (uint8_t)(1u << bit);
            }
        cr_assert_neq(recur__lanesum(buf, n - 1), recur__lanesum(buf, n), "tail %zu: the length", tail);
    }
}

/* gla models of one head of k x v: snapshots whose checksummed bytes (40 + P) end in tails of
 * every even length a snapshot can have (P is a multiple of 2), f32 and bf16; every bit of the
 * last 80 bytes flipped is a checksum error (every length 0..31 on raw bytes: lanesum above). */
Test(snapshot_checks, a_flipped_bit_near_the_end_is_the_checksum_for_every_tail)
{
    int tails[32] = {0};
    for (int k = 1; k <= 9; k++)
        for (int v = 1; v <= 9; v++)
        for (int half = 0; half < 2; half++) {
            char cfg[400];
            snprintf(cfg, sizeof cfg,
                     "{\"name\":\"t\",\"vocab_size\":16,\"d_model\":4,\"n_layers\":1,\"n_heads\":1,"
                     "\"head_k\":%d,\"head_v\":%d,\"d_ff\":4,\"mixers\":[\"gla\"]}", k, v);
            recur_model *m;
            recur_workspace *ws;
            recur_state *s;
            cr_assert_eq(recur_model_init_seed(cfg, 3, &m), 0, "k=%d v=%d", k, v);
            if (half) cr_assert_eq(recur_model_set_state_dtype(m, RECUR_STATE_BF16), 0);
            cr_assert_eq(recur_workspace_create(m, 1, &ws), 0);
            cr_assert_eq(recur_state_create(m, &s), 0);
            int32_t tok[3] = {1, 2, 3};
            cr_assert_eq(recur_model_prefill(m, ws, s, tok, 3, NULL), 0);
            size_t n = recur_snapshot_size(s);
            uint8_t *b = malloc(n);
            cr_assert_eq(recur_snapshot_write(s, b, n, NULL), 0);
            cr_assert_eq(version_of(b), half ? 5u : 4u);
            cr_assert_eq(le64(b + n - 8), ref_lanesum(b, n - 8), "k=%d v=%d half=%d", k, v, half);
            cr_assert_eq(recur_snapshot_lane_checksum(b, n), 1);
            tails[(n - 8) % 32] = 1;
            size_t first = half ? 48 : 40; /* past version 5's dtype word (framing) */
            size_t from = n > 80 + first ? n - 80 : first;
            for (size_t at = from; at < n; at++)
                for (int bit = 0; bit < 8; bit++) {
                    b[at] ^= (uint8_t)(1u << bit);
                    cr_assert_eq(recur_snapshot_check(m, b, n), RECUR_ECHECKSUM, "k=%d v=%d half=%d at %zu", k, v,
                                 half, at);
                    b[at] ^= (uint8_t)(1u << bit);
                }
            cr_assert_eq(recur_snapshot_check(m, b, n), 0);
            free(b);
            recur_state_destroy(s);
            recur_workspace_free(ws);
            recur_model_free(m);
        }
    int distinct = 0;
    for (int i = 0; i < 32; i++) distinct += tails[i];
    cr_assert_geq(distinct, 16, "only %d tail lengths covered", distinct);
}

/* Versions 1-3 (FNV-1a 64) are still read: snapshots on disk, in Redis and in clients' hands from
 * before the lane checksum; the reader of this process's own bytes takes only what it writes. */
Test(snapshot_checks, old_fnv_versions_still_read)
{
    fixture f;
    fx_init(&f, REC, 3); /* no short convolution: version 1 is its version 2 */
    cr_assert_eq(version_of(f.buf), 4u);
    uint8_t *b = malloc(f.n);
    for (uint32_t v = 1; v <= 2; v++) {
        memcpy(b, f.buf, f.n);
        as_version(b, f.n, v);
        cr_assert_eq(recur_snapshot_lane_checksum(b, f.n), 0);
        cr_assert_eq(recur_snapshot_check(f.m, b, f.n), 0, "version %u", v);
        cr_assert_eq(recur_snapshot_read(f.t, b, f.n), 0, "version %u", v);
        cr_assert_eq(recur_snapshot_read_own(f.t, b, f.n), RECUR_EFORMAT, "version %u", v);
        b[f.n - 20] ^= 4;
        cr_assert_eq(recur_snapshot_check(f.m, b, f.n), RECUR_ECHECKSUM, "version %u", v);
        b[f.n - 20] ^= 4;
        /* the lane checksum under an old version number (or FNV under a new one) is refused */
        uint64_t lanes = ref_lanesum(b, f.n - 8);
        memcpy(b + f.n - 8, &lanes, 8);
        cr_assert_eq(recur_snapshot_check(f.m, b, f.n), RECUR_ECHECKSUM, "version %u", v);
    }
    memcpy(b, f.buf, f.n);
    uint64_t old = fnv(b, f.n - 8);
    memcpy(b + f.n - 8, &old, 8);
    cr_assert_eq(recur_snapshot_check(f.m, b, f.n), RECUR_ECHECKSUM);
    /* written back as version 4: the same bytes as the state's own snapshot */
    memcpy(b, f.buf, f.n);
    as_version(b, f.n, 2);
    cr_assert_eq(recur_snapshot_read(f.t, b, f.n), 0);
    uint8_t *back = malloc(f.n);
    cr_assert_eq(recur_snapshot_write(f.t, back, f.n, NULL), 0);
    cr_assert_eq(memcmp(back, f.buf, f.n), 0);
    cr_assert_eq(recur_snapshot_read_own(f.t, f.buf, f.n), 0);
    /* version 3 (a half state, FNV-1a) into an f32 state and a bf16 one; 6 is unknown */
    recur_model *mb;
    recur_state *sb, *tb;
    cr_assert_eq(recur_model_init_seed(REC, 3, &mb), 0);
    cr_assert_eq(recur_model_set_state_dtype(mb, RECUR_STATE_BF16), 0);
    cr_assert_eq(recur_state_create(mb, &sb), 0);
    cr_assert_eq(recur_state_create(mb, &tb), 0);
    cr_assert_eq(recur_snapshot_read(sb, f.buf, f.n), 0); /* f32 -> bf16 */
    size_t hn = recur_snapshot_size(sb);
    uint8_t *h = malloc(hn), *h2 = malloc(hn);
    cr_assert_eq(recur_snapshot_write(sb, h, hn, NULL), 0);
    cr_assert_eq(version_of(h), 5u);
    memcpy(h2, h, hn);
    as_version(h2, hn, 3);
    cr_assert_eq(recur_snapshot_read(tb, h2, hn), 0);
    cr_assert_eq(recur_snapshot_read_own(tb, h2, hn), RECUR_EFORMAT);
    cr_assert_eq(recur_snapshot_read(f.t, h2, hn), 0, "version 3 into an f32 state");
    uint8_t *back2 = malloc(hn);
    cr_assert_eq(recur_snapshot_write(tb, back2, hn, NULL), 0);
    cr_assert_eq(memcmp(back2, h, hn), 0, "version 3 read, version 5 written, the same values");
    as_version(h2, hn, 6);
    cr_assert_eq(recur_snapshot_check(mb, h2, hn), RECUR_EFORMAT);
    as_version(h2, hn, 4); /* a half payload under the f32 version: its length is wrong */
    cr_assert_eq(recur_snapshot_check(mb, h2, hn), RECUR_EFORMAT);
    free(h), free(h2), free(back), free(back2), free(b);
    recur_state_destroy(sb);
    recur_state_destroy(tb);
    recur_model_free(mb);
    fx_free(&f);
}

/* The logits trailer's checksum follows its core's version (proto/state_blob.h): after a v4/v5
 * core FNV-1a over the core's 8 checksum bytes then the trailer's; after a v1-3 core FNV-1a over
 * the core and the trailer. Both load; each one's flipped bits are its checksum's. */
Test(snapshot_checks, trailer_checksum_by_core_version)
{
    fixture f;
    fx_init(&f, REC, 3);
    float lg[16], got[16];
    for (int i = 0; i < 16; i++) lg[i] = 0.5f * (float)i - 2.0f;
    uint8_t *body;
    size_t len;
    cr_assert_eq(proto_state_write(f.s, lg, 1, 16, &body, &len), 0);
    size_t tl = proto_state_trailer_size(16);
    cr_assert_eq(le64(body + len - 8), fnv(body + f.n - 8, 8 + tl - 8), "v4: from the core's sum");
    uint8_t *b = malloc(len);
    memcpy(b, body, len);
    proto_state_trailer_write(b + f.n, b, f.n, lg, 16);
    cr_assert_eq(memcmp(b, body, len), 0, "proto_state_trailer_write = proto_state_write's");
    int has = 0;
    proto_state_fault e;
    size_t core;
    const uint8_t *lgp;
    proto_error pe;
    for (uint32_t v = 2; v <= 4; v += 2) {
        memcpy(b, body, len);
        if (v == 2) {
            as_version(b, f.n, 2);
            uint64_t h = fnv(b, len - 8); /* the old rule */
            memcpy(b + len - 8, &h, 8);
            uint8_t *w = malloc(len);
            memcpy(w, b, f.n);
            proto_state_trailer_write(w + f.n, w, f.n, lg, 16);
            cr_assert_eq(memcmp(w, b, len), 0, "v2 trailer as written by proto_state_trailer_write");
            free(w);
        }
        cr_assert_eq(proto_state_split(b, len, 16, &core, &lgp, &pe), 0, "v%u", v);
        cr_assert_eq(core, f.n);
        cr_assert_eq(proto_state_load(f.m, f.t, 16, b, len, got, &has, &e), 0, "v%u", v);
        cr_assert_eq(has, 1);
        cr_assert_eq(memcmp(got, lg, sizeof lg), 0);
        for (size_t at = f.n; at < len; at++) {
            if (at < f.n + 16) continue; /* magic, vocab: framing */
            b[at] ^= 0x20;
            cr_assert_eq(proto_state_load(f.m, f.t, 16, b, len, got, &has, &e), -1, "v%u at %zu", v, at);
            cr_assert_str_eq(e.code, "snapshot_checksum", "v%u at %zu", v, at);
            cr_assert_eq(proto_state_split(b, len, 16, &core, &lgp, &pe), -1, "v%u at %zu", v, at);
            b[at] ^= 0x20;
        }
        /* a core byte: the core's own checksum (it outranks the trailer) */
        b[f.n - 20] ^= 1;
        cr_assert_eq(proto_state_load(f.m, f.t, 16, b, len, got, &has, &e), -1);
        cr_assert_str_eq(e.code, "snapshot_checksum");
        b[f.n - 20] ^= 1;
    }
    free(b);
    free(body);
    fx_free(&f);
}
