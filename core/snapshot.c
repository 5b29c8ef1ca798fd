/* snapshot.c — a session state as bytes (DESIGN.md §6, docs/MODEL.md "Snapshot"), little-endian:
 *
 *   0  "RECURST1"   8  u32 version (1)   12 u32 n_layers   16 u64 model fingerprint
 *   24 u64 tokens_seen   32 u64 payload bytes P   40 P bytes of fp32 state, layer by layer
 *   (linear: S then z; other recurrent kinds: S; softmax: K rows [n][H][K] then V rows [n][H][V],
 *   n = tokens_seen)   40+P  u64 FNV-1a 64 of bytes [0, 40+P).
 *
 * Reading validates everything (magic, version, layers, fingerprint, length, checksum, finite
 * payload) before the state is touched. */
#include <math.h>
#include <string.h>
#include "model_internal.h"

#define SNAP_MAGIC "RECURST1"
#define SNAP_VERSION 1u
#define SNAP_HEADER 40

#define put_u32 recur__put_le32 /* util.h */
#define put_u64 recur__put_le64
#define get_u32 recur__get_le32
#define get_u64 recur__get_le64

/* Payload bytes for a state of model m having seen n tokens; 0 on overflow for absurd n. */
static int payload_bytes(const recur_model *m, uint64_t n, uint64_t *out)
{
    const recur_config *c = &m->cfg;
    uint64_t HK = (uint64_t)c->n_heads * c->head_k, HV = (uint64_t)c->n_heads * c->head_v;
    if (m->n_softmax && n > (uint64_t)c->max_context) return RECUR_EFORMAT;
    uint64_t p = (uint64_t)m->rec_floats * 4;
    if (m->n_softmax) p += (uint64_t)m->n_softmax * n * (HK + HV) * 4;
    *out = p;
    return RECUR_OK;
}

size_t recur_snapshot_size(const recur_state *s)
{
    if (!s) return 0;
    uint64_t p;
    if (payload_bytes(s->m, s->tokens_seen, &p)) return 0;
    return SNAP_HEADER + (size_t)p + 8;
}

int recur_snapshot_write(const recur_state *s, uint8_t *buf, size_t cap, size_t *written)
{
    if (!s || !buf) return RECUR_EINVAL;
    size_t need = recur_snapshot_size(s);
    if (need == 0) return RECUR_EINVAL;
    if (cap < need) return RECUR_ESHAPE;
    const recur_model *m = s->m;
    const recur_config *c = &m->cfg;
    memcpy(buf, SNAP_MAGIC, 8);
    put_u32(buf + 8, SNAP_VERSION);
    put_u32(buf + 12, (uint32_t)c->n_layers);
    put_u64(buf + 16, m->info.fingerprint);
    put_u64(buf + 24, s->tokens_seen);
    put_u64(buf + 32, (uint64_t)(need - SNAP_HEADER - 8));
    /* fp32 payload: this host is little-endian (x86-64 / aarch64), so floats go as they are */
    uint8_t *p = buf + SNAP_HEADER;
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        if (L->kind == RECUR_MIXER_SOFTMAX) {
            size_t kb = (size_t)s->tokens_seen * HK * 4, vb = (size_t)s->tokens_seen * HV * 4;
            memcpy(p, s->kcache[l], kb); p += kb;
            memcpy(p, s->vcache[l], vb); p += vb;
        } else {
            memcpy(p, s->rec + L->state_off, L->state_floats * 4);
            p += L->state_floats * 4;
        }
    }
    put_u64(p, recur__fnv1a(RECUR_FNV_OFFSET, buf, (size_t)(p - buf)));
    if (written) *written = need;
    return RECUR_OK;
}

int recur_snapshot_read(recur_state *s, const uint8_t *buf, size_t len)
{
    if (!s || (!buf && len)) return RECUR_EINVAL;
    const recur_model *m = s->m;
    const recur_config *c = &m->cfg;
    if (len < SNAP_HEADER + 8) return len >= 8 && memcmp(buf, SNAP_MAGIC, 8) != 0 ? RECUR_EFORMAT : RECUR_ETRUNCATED;
    if (memcmp(buf, SNAP_MAGIC, 8) != 0) return RECUR_EFORMAT;
    if (get_u32(buf + 8) != SNAP_VERSION) return RECUR_EFORMAT;
    if (get_u32(buf + 12) != (uint32_t)c->n_layers) return RECUR_EMISMATCH;
    if (get_u64(buf + 16) != m->info.fingerprint) return RECUR_EMISMATCH;
    uint64_t n = get_u64(buf + 24), P = get_u64(buf + 32), want;
    if (payload_bytes(m, n, &want)) return RECUR_EFORMAT;
    if (P != want) return RECUR_EFORMAT;
    if ((uint64_t)len - SNAP_HEADER - 8 < P) return RECUR_ETRUNCATED;
    if ((uint64_t)len - SNAP_HEADER - 8 > P) return RECUR_EFORMAT; /* trailing bytes */
    if (recur__fnv1a(RECUR_FNV_OFFSET, buf, SNAP_HEADER + (size_t)P) != get_u64(buf + SNAP_HEADER + P))
        return RECUR_ECHECKSUM;
    const uint8_t *p = buf + SNAP_HEADER;
    float acc = 0.0f;
    for (uint64_t i = 0; i < P / 4; i++) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        acc += f * 0.0f;
    }
    if (!isfinite(acc)) return RECUR_EFORMAT;

    /* valid: now, and only now, overwrite the state */
    size_t HK = (size_t)c->n_heads * c->head_k, HV = (size_t)c->n_heads * c->head_v;
    for (int l = 0; l < c->n_layers; l++) {
        const recur_layer *L = &m->layers[l];
        if (L->kind == RECUR_MIXER_SOFTMAX) {
            size_t kb = (size_t)n * HK * 4, vb = (size_t)n * HV * 4;
            memcpy(s->kcache[l], p, kb); p += kb;
            memcpy(s->vcache[l], p, vb); p += vb;
        } else {
            memcpy(s->rec + L->state_off, p, L->state_floats * 4);
            p += L->state_floats * 4;
        }
    }
    s->tokens_seen = n;
    return RECUR_OK;
}
