/* snapshot.c — a session state as bytes (docs/DESIGN.md §6, docs/MODEL.md "Snapshot"), little-endian:
 *
 *   0  "RECURST1"   8  u32 version (4 or 5)   12 u32 n_layers   16 u64 model fingerprint
 *   24 u64 tokens_seen   32 u64 payload bytes P   40 P bytes of state, layer by layer
 *   (linear: S then z; other recurrent kinds: S; then, for a layer with a short convolution, its
 *   last W-1 inputs [W-1][C]; softmax: K rows [n][H][K] then V rows [n][H][V], n = tokens_seen)
 *   40+P  u64 checksum of bytes [0, 40+P): the lane checksum (core/util.h recur__lanesum).
 * Version 4: every value fp32 (a state of dtype F32 is written so). Version 5 (a half state,
 * docs/MODEL.md "State dtype"): the payload starts with u32 state dtype (1 F16, 2 BF16) and u32 0,
 * then the recurrent layers' values as 16-bit halves of that dtype and the softmax KV rows fp32.
 * Read too, never written: versions 2 and 3, exactly 4 and 5 but with FNV-1a 64 of bytes [0,
 * 40+P) as the checksum (byte-wise FNV-1a was a fifth of a resume from Redis: under 1 GB/s, the
 * lanes several), and version 1 (before short convolutions, FNV-1a) for models without a
 * convolution: its bytes are exactly version 2's for them.
 *
 * Reading into a state of another dtype converts (the rule of docs/API.md "State dtype"): a
 * half widens to fp32 exactly; fp32 or the other half rounds to the state's half, to nearest
 * even, once. A value that F16 cannot hold (|x| >= 65520, which would round to infinity) is
 * refused (RECUR_ERANGE) before anything is written, like every other value fault.
 *
 * Reading validates everything before the state is touched, in an order that names the real
 * fault: framing (magic, version, length, version 3's / 5's dtype word), then the checksum (so a
 * flipped bit anywhere is a checksum error, not "another model" or "bad length"), then the model
 * (n_layers, fingerprint), then tokens_seen and the values (docs/MODEL.md "State values":
 * finite, |x| <= 2^40, a linear layer's normaliser z >= 0). A buffer too short for its own length
 * field is "another model" when its header says so, else truncated: a header alone identifies a
 * snapshot. Writing refuses a state its reader would refuse, so nothing recur writes is ever
 * rejected by recur. */
#include <math.h>
#include <string.h>
#include "model_internal.h"
#include "state_dtype.h"

#define SNAP_MAGIC "RECURST1"
#define SNAP_VERSION 4u      /* 4: a layer's state may end with its short convolution's inputs */
#define SNAP_VERSION_HALF 5u /* 5: version 4 with the recurrent values as halves (payload: dtype first) */
#define SNAP_VERSION_FNV 2u      /* 2, 3: versions 4, 5 with the FNV-1a checksum (read, not written) */
#define SNAP_VERSION_HALF_FNV 3u
#define SNAP_DTYPE_BYTES 8   /* versions 3, 5: u32 state dtype, u32 0 */
#define F16_MAX_BITS 0x477fefffu /* the largest fp32 that rounds to a finite F16 (65519.996) */
#define CHUNK 256              /* values converted at a time, on the stack */
#define SNAP_VERSION_V1 1u /* before short convolutions: version 2's bytes for a model without one */
#define SNAP_HEADER 40
#define VALUE_MAX_BITS 0x53800000u /* 2^40 as fp32 bits: |x| <= 2^40 <=> (bits & 0x7fffffff) <= this */

#define put_u32 recur__put_le32 /* util.h */
#define put_u64 recur__put_le64
#define get_u32 recur__get_le32
#define get_u64 recur__get_le64

/* The checksum of a snapshot's first n bytes (its bytes before the checksum) by its version's rule:
 * 4, 5 the lane checksum, 1, 2, 3 FNV-1a 64. */
static uint64_t snap_sum(uint32_t version, const uint8_t *buf, size_t n)
{
    return version >= SNAP_VERSION ? recur__lanesum(buf, n) : recur__fnv1a(RECUR_FNV_OFFSET, buf, n);
}

int recur_snapshot_lane_checksum(const uint8_t *buf, size_t len)
{
    if (!buf || len < 12) return 0;
    uint32_t version = get_u32(buf + 8);
    return version == SNAP_VERSION || version == SNAP_VERSION_HALF;
}

uint64_t recur_max_tokens_seen(const recur_model *m)
{
    if (!m) return 0;
    return m->n_softmax ? (uint64_t)m->cfg.max_context : RECUR_MAX_TOKENS_SEEN;
}

/* Payload bytes for a state of model m having seen n tokens; RECUR_ECONTEXT when n is beyond
 * what a session of m may have seen (recur_max_tokens_seen). */
static int payload_bytes(const recur_model *m, uint64_t n, recur_state_dtype t, uint64_t *out)
{
    const recur_config *c = &m->cfg;
    uint64_t HK = (uint64_t)c->n_heads * c->head_k, HV = (uint64_t)c->n_heads * c->head_v;
    if (n > recur_max_tokens_seen(m)) return RECUR_ECONTEXT;
    uint64_t p = t == RECUR_STATE_F32 ? (uint64_t)m->rec_floats * 4 : SNAP_DTYPE_BYTES + (uint64_t)m->rec_floats * 2;
    if (m->n_softmax) p += (uint64_t)m->n_softmax * n * (HK + HV) * 4;
    *out = p;
    return RECUR_OK;
}

size_t recur_snapshot_size(const recur_state *s)
{
    if (!s) return 0;
    uint64_t p;
    if (payload_bytes(s->m, s->tokens_seen, s->dtype, &p)) return 0;
    return SNAP_HEADER + (size_t)p + 8;
}

/* The values of one layer's state, n little-endian fp32 at p: RECUR_ENONFINITE, RECUR_ERANGE
 * (|x| > 2^40, or nonneg and a negative value), or 0. One pass of integer compares, which
 * vectorises (NaN and infinities have the largest magnitude bits): each value's magnitude bits
 * a = bits & 0x7fffffff compared as a signed 32-bit integer (a and max_bits < 2^31), so the
 * baseline x86-64 build (SSE2: pcmpgtd, no unsigned max) vectorises it too (29 -> 9 us for the
 * default model's 49,408 values, 2026-12-02; the unsigned running maximum it replaces gave the
 * same answers on 8M random and boundary vectors). */
static int check_bits(const uint8_t *p, size_t n, int nonneg, uint32_t max_bits)
{
    int32_t inf = 0, over = 0, neg = 0;
    const int32_t mb = (int32_t)max_bits;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, p + 4 * i, 4);
        int32_t a = (int32_t)(b & 0x7fffffffu);
        inf |= a > 0x7f7fffff;             /* >= +inf's bits: infinite or NaN */
        over |= a > mb;
        neg |= ((int32_t)b < 0) & (a != 0); /* -0.0 is zero */
    }
    if (inf) return RECUR_ENONFINITE;
    if (over || (nonneg && neg)) return RECUR_ERANGE;
    return RECUR_OK;
}

static int check_values(const uint8_t *p, size_t n, int nonneg)
{
    return check_bits(p, n, nonneg, VALUE_MAX_BITS);
}

/* n values of dtype t at p (any alignment) -> fp32 dst, n <= CHUNK */
static void load_values(float *dst, const uint8_t *p, size_t n, recur_state_dtype t)
{
    if (t == RECUR_STATE_F32) { memcpy(dst, p, n * 4); return; }
    uint16_t h[CHUNK];
    memcpy(h, p, n * 2);
    recur__state_widen(dst, h, n, t);
}

/* check_bits on n BF16 values at p without widening them: a BF16 value is the top half of its
 * fp32 (widened: bits << 16, exactly), so with a = its 16 magnitude bits, the widened magnitude
 * a << 16 is >= +inf's bits <=> a >= 0x7f80, and > max_bits <=> a > max_bits >> 16 (its low
 * half is 0); the sign as there. 16-bit signed compares: vectorised in the portable build too
 * (the widen-then-check pass it replaces was a fifth of the loop thread's time per resume from
 * disk of a bf16 state, perf 2026-12-02). */
static int check_bf16(const uint8_t *p, size_t n, int nonneg, uint32_t max_bits)
{
    int16_t inf = 0, over = 0, neg = 0;
    const int16_t mb = (int16_t)(max_bits >> 16);
    for (size_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, p + 2 * i, 2);
        int16_t a = (int16_t)(b & 0x7fffu);
        inf |= a > 0x7f7f;
        over |= a > mb;
        neg |= ((int16_t)b < 0) & (a != 0);
    }
    if (inf) return RECUR_ENONFINITE;
    if (over || (nonneg && neg)) return RECUR_ERANGE;
    return RECUR_OK;
}

/* check_bits on n values of dtype t, each widened to fp32; max_bits as there. */
static int check_typed(const uint8_t *p, size_t n, int nonneg, recur_state_dtype t, uint32_t max_bits)
{
    if (t == RECUR_STATE_F32) return check_bits(p, n, nonneg, max_bits);
    if (t == RECUR_STATE_BF16) return check_bf16(p, n, nonneg, max_bits);
    float f[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        load_values(f, p + 2 * i, k, t);
        int rc = check_bits((const uint8_t *)f, k, nonneg, max_bits);
        if (rc) return rc;
    }
    return RECUR_OK;
}

int recur_values_check(const void *x, size_t n)
{
    return x || !n ? check_values(x, n, 0) : RECUR_EINVAL;
}

/* Every value of a payload laid out for model m and n tokens (the order of the header comment),
 * the recurrent values of dtype t at p (past version 3's dtype word); into a state of dtype to:
 * converting to F16 from another dtype also needs every recurrent value to stay finite in F16. */
static int check_payload(const recur_model *m, const uint8_t *p, uint64_t n, recur_state_dtype t,
                         recur_state_dtype to)
{
    const recur_config *c = &m->cfg;
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    const size_t e = recur__state_elem(t);
    const uint32_t mb = to == RECUR_STATE_F16 && t != RECUR_STATE_F16 ? F16_MAX_BITS : VALUE_MAX_BITS;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        int rc;
        if (L->kind == RECUR_MIXER_SOFTMAX) { /* KV rows: fp32 whatever the dtype */
            size_t f = (size_t)n * (HK + HV);
            rc = check_values(p, f, 0);
            p += f * 4;
        } else if (L->kind == RECUR_MIXER_LINEAR) { /* S [H][K][V], z [H][K] (a sum of elu+1 > 0), conv */
            size_t fs = L->conv_state_off - HK;
            rc = check_typed(p, fs, 0, t, mb);
            if (!rc) rc = check_typed(p + fs * e, HK, 1, t, mb);
            if (!rc) rc = check_typed(p + L->conv_state_off * e, L->state_floats - L->conv_state_off, 0, t, mb);
            p += L->state_floats * e;
        } else {
            rc = check_typed(p, L->state_floats, 0, t, mb);
            p += L->state_floats * e;
        }
        if (rc) return rc;
    }
    return RECUR_OK;
}

int recur_snapshot_write(const recur_state *s, uint8_t *buf, size_t cap, size_t *written)
{
    if (!s || !buf) return RECUR_EINVAL;
    size_t need = recur_snapshot_size(s);
    if (need == 0) return RECUR_EINVAL;
    if (cap < need) return RECUR_ESHAPE;
    const recur_model *m = s->m;
    const recur_config *c = &m->cfg;
    const int half = s->dtype != RECUR_STATE_F32;
    const size_t e = recur__state_elem(s->dtype);
    memcpy(buf, SNAP_MAGIC, 8);
    put_u32(buf + 8, half ? SNAP_VERSION_HALF : SNAP_VERSION);
    put_u32(buf + 12, (uint32_t)c->n_layers);
    put_u64(buf + 16, m->info.fingerprint);
    put_u64(buf + 24, s->tokens_seen);
    put_u64(buf + 32, (uint64_t)(need - SNAP_HEADER - 8));
    /* values as held: this host is little-endian (x86-64 / aarch64), so they go as they are */
    uint8_t *p = buf + SNAP_HEADER;
    if (half) {
        put_u32(p, (uint32_t)s->dtype);
        put_u32(p + 4, 0);
        p += SNAP_DTYPE_BYTES;
    }
    uint8_t *values = p;
    const uint8_t *rec = recur__state_rec(s);
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        if (L->kind == RECUR_MIXER_SOFTMAX) {
            size_t kb = (size_t)s->tokens_seen * HK * 4, vb = (size_t)s->tokens_seen * HV * 4;
            memcpy(p, s->kcache[l], kb); p += kb;
            memcpy(p, s->vcache[l], vb); p += vb;
        } else {
            memcpy(p, rec + L->state_off * e, L->state_floats * e);
            p += L->state_floats * e;
        }
    }
    /* never write what recur_snapshot_read refuses (into a state of this dtype) */
    int rc = check_payload(m, values, s->tokens_seen, s->dtype, s->dtype);
    if (rc) return rc;
    put_u64(p, snap_sum(get_u32(buf + 8), buf, (size_t)(p - buf)));
    if (written) *written = need;
    return RECUR_OK;
}

int recur_snapshot_length(const uint8_t *buf, size_t len, size_t *out)
{
    if (!out || (!buf && len)) return RECUR_EINVAL;
    if (len < SNAP_HEADER) return len >= 8 && memcmp(buf, SNAP_MAGIC, 8) != 0 ? RECUR_EFORMAT : RECUR_ETRUNCATED;
    if (memcmp(buf, SNAP_MAGIC, 8) != 0) return RECUR_EFORMAT;
    uint64_t P = get_u64(buf + 32);
    if (P > (uint64_t)SIZE_MAX - SNAP_HEADER - 8) return RECUR_EFORMAT;
    *out = SNAP_HEADER + (size_t)P + 8;
    return RECUR_OK;
}

static int same_model(const recur_model *m, const uint8_t *buf)
{
    return get_u32(buf + 12) == (uint32_t)m->cfg.n_layers && get_u64(buf + 16) == m->info.fingerprint;
}

/* The state dtype a snapshot's header and payload state: versions 1, 2, 4 F32; versions 3, 5 its
 * dtype word (RECUR_EFORMAT for another value, or a payload too short to hold it). */
static int snapshot_dtype(const uint8_t *buf, size_t P, recur_state_dtype *t)
{
    uint32_t version = get_u32(buf + 8);
    if (version != SNAP_VERSION_HALF && version != SNAP_VERSION_HALF_FNV) { *t = RECUR_STATE_F32; return RECUR_OK; }
    if (P < SNAP_DTYPE_BYTES) return RECUR_EFORMAT;
    uint32_t d = get_u32(buf + SNAP_HEADER), z = get_u32(buf + SNAP_HEADER + 4);
    if ((d != RECUR_STATE_F16 && d != RECUR_STATE_BF16) || z != 0) return RECUR_EFORMAT;
    *t = (recur_state_dtype)d;
    return RECUR_OK;
}

int recur_snapshot_check(const recur_model *m, const uint8_t *buf, size_t len)
{
    if (!m || (!buf && len)) return RECUR_EINVAL;
    size_t total;
    int rc = recur_snapshot_length(buf, len, &total);
    if (rc) return rc;
    uint32_t version = get_u32(buf + 8);
    if (version != SNAP_VERSION && version != SNAP_VERSION_HALF && version != SNAP_VERSION_FNV &&
        version != SNAP_VERSION_HALF_FNV && !(version == SNAP_VERSION_V1 && m->max_conv == 0))
        return RECUR_EFORMAT;
    if (len < total) return same_model(m, buf) ? RECUR_ETRUNCATED : RECUR_EMISMATCH;
    if (len > total) return RECUR_EFORMAT; /* trailing bytes */
    size_t P = total - SNAP_HEADER - 8;
    recur_state_dtype t; /* framing too: version 3's / 5's dtype word (a flipped version bit is EFORMAT) */
    rc = snapshot_dtype(buf, P, &t);
    if (rc) return rc;
    if (snap_sum(version, buf, SNAP_HEADER + P) != get_u64(buf + SNAP_HEADER + P))
        return RECUR_ECHECKSUM;
    if (!same_model(m, buf)) return RECUR_EMISMATCH;
    uint64_t n = get_u64(buf + 24), want;
    rc = payload_bytes(m, n, t, &want);
    if (rc) return rc;
    if ((uint64_t)P != want) return RECUR_EFORMAT;
    return check_payload(m, buf + SNAP_HEADER + (t != RECUR_STATE_F32 ? SNAP_DTYPE_BYTES : 0), n, t, m->sdtype);
}

/* n values of dtype t at p -> dst, n values of the state's dtype to (converted by the rule of the
 * header comment; the same dtype is a copy). */
static void convert_values(void *dst, recur_state_dtype to, const uint8_t *p, recur_state_dtype t, size_t n)
{
    if (t == to) { memcpy(dst, p, n * recur__state_elem(t)); return; }
    float f[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        load_values(f, p + i * recur__state_elem(t), k, t);
        if (to == RECUR_STATE_F32) memcpy((float *)dst + i, f, k * 4);
        else recur__state_narrow((uint16_t *)dst + i, f, k, to);
    }
}

/* Copy a snapshot's payload into s, converting to s's dtype (buf's framing, model and size
 * already checked; len its whole length). */
static void apply(recur_state *s, const uint8_t *buf, size_t len)
{
    const recur_model *m = s->m;
    const recur_config *c = &m->cfg;
    uint64_t n = get_u64(buf + 24);
    recur_state_dtype t;
    snapshot_dtype(buf, len - SNAP_HEADER - 8, &t); /* checked */
    const uint8_t *p = buf + SNAP_HEADER + (t != RECUR_STATE_F32 ? SNAP_DTYPE_BYTES : 0);
    uint8_t *rec = recur__state_rec(s);
    const size_t e = recur__state_elem(t), se = recur__state_elem(s->dtype);
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        if (L->kind == RECUR_MIXER_SOFTMAX) {
            size_t kb = (size_t)n * HK * 4, vb = (size_t)n * HV * 4;
            memcpy(s->kcache[l], p, kb); p += kb;
            memcpy(s->vcache[l], p, vb); p += vb;
        } else {
            convert_values(rec + L->state_off * se, s->dtype, p, t, L->state_floats);
            p += L->state_floats * e;
        }
    }
    s->tokens_seen = n;
}

int recur_snapshot_read(recur_state *s, const uint8_t *buf, size_t len)
{
    if (!s || (!buf && len)) return RECUR_EINVAL;
    if (s->dtype != s->m->sdtype) return RECUR_EMISMATCH;
    int rc = recur_snapshot_check(s->m, buf, len);
    if (rc) return rc;
    apply(s, buf, len); /* valid: now, and only now, overwrite the state */
    return RECUR_OK;
}

int recur_snapshot_read_own(recur_state *s, const uint8_t *buf, size_t len)
{
    if (!s || (!buf && len)) return RECUR_EINVAL;
    const recur_model *m = s->m;
    if (s->dtype != m->sdtype) return RECUR_EMISMATCH;
    size_t total;
    int rc = recur_snapshot_length(buf, len, &total);
    if (rc) return rc;
    uint32_t version = get_u32(buf + 8);
    if (total != len || (version != SNAP_VERSION && version != SNAP_VERSION_HALF)) return RECUR_EFORMAT;
    size_t P = total - SNAP_HEADER - 8;
    recur_state_dtype t;
    rc = snapshot_dtype(buf, P, &t);
    if (rc) return rc;
    if (t != s->dtype) return RECUR_EMISMATCH; /* this process writes its states' own dtype */
    if (!same_model(m, buf)) return RECUR_EMISMATCH;
    uint64_t want;
    rc = payload_bytes(m, get_u64(buf + 24), t, &want);
    if (rc) return rc;
    if (want != (uint64_t)P) return RECUR_EFORMAT;
    apply(s, buf, len);
    return RECUR_OK;
}

int recur_state_check(const recur_state *s, uint64_t from)
{
    if (!s) return RECUR_EINVAL;
    const recur_model *m = s->m;
    const recur_config *c = &m->cfg;
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    uint64_t n = s->tokens_seen;
    const recur_state_dtype t = s->dtype;
    const size_t e = recur__state_elem(t);
    if (from > n) from = n;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        const uint8_t *S = (const uint8_t *)recur__state_rec(s) + L->state_off * e;
        int rc;
        if (L->kind == RECUR_MIXER_SOFTMAX) { /* only rows a step may have written: [from, n) */
            rc = check_values((const uint8_t *)(s->kcache[l] + from * HK), (size_t)(n - from) * HK, 0);
            if (!rc) rc = check_values((const uint8_t *)(s->vcache[l] + from * HV), (size_t)(n - from) * HV, 0);
        } else if (L->kind == RECUR_MIXER_LINEAR) {
            size_t fs = L->conv_state_off - HK;
            rc = check_typed(S, fs, 0, t, VALUE_MAX_BITS);
            if (!rc) rc = check_typed(S + fs * e, HK, 1, t, VALUE_MAX_BITS);
            if (!rc) rc = check_typed(S + L->conv_state_off * e, L->state_floats - L->conv_state_off, 0, t, VALUE_MAX_BITS);
        } else {
            rc = check_typed(S, L->state_floats, 0, t, VALUE_MAX_BITS);
        }
        if (rc) return rc;
    }
    return n > recur_max_tokens_seen(m) ? RECUR_ECONTEXT : RECUR_OK;
}
