/* state_blob.c — snapshot body with the logits trailer (state_blob.h). */
#include "state_blob.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TRAILER_MAGIC "RECURLG1"

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ULL

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

size_t proto_state_trailer_size(int vocab)
{
    return 16 + 4 * (size_t)vocab + 8;
}

void proto_state_trailer_write(uint8_t *dst, const uint8_t *core, size_t core_len,
                               const float *logits, int vocab)
{
    memcpy(dst, TRAILER_MAGIC, 8);
    put_u32(dst + 8, (uint32_t)vocab);
    put_u32(dst + 12, 0);
    for (int i = 0; i < vocab; i++) { /* little-endian fp32 regardless of host order */
        uint32_t bits;
        memcpy(&bits, &logits[i], 4);
        put_u32(dst + 16 + 4 * (size_t)i, bits);
    }
    size_t n = 16 + 4 * (size_t)vocab;
    uint64_t h = fnv1a(fnv1a(FNV_OFFSET, core, core_len), dst, n);
    put_u64(dst + n, h);
}

int proto_state_split(const uint8_t *body, size_t len, int vocab, size_t *core_len,
                      const uint8_t **logits, proto_error *err)
{
    *core_len = len;
    *logits = NULL;
    if (len < 40)
        return 0;
    uint64_t P = get_u64(body + 32);
    if (P > len || 48 + P > len) /* truncated: the core says so */
        return 0;
    size_t clen = (size_t)(48 + P);
    if (clen == len)
        return 0;
    size_t tlen = proto_state_trailer_size(vocab);
    if (len - clen != tlen || memcmp(body + clen, TRAILER_MAGIC, 8) != 0 ||
        get_u32(body + clen + 8) != (uint32_t)vocab || get_u32(body + clen + 12) != 0) {
        err->status = 400;
        snprintf(err->code, sizeof err->code, "invalid_snapshot");
        snprintf(err->message, sizeof err->message,
                 "bytes after the snapshot are not a logits trailer for this model");
        return -1;
    }
    uint64_t h = fnv1a(FNV_OFFSET, body, clen + tlen - 8);
    if (h != get_u64(body + clen + tlen - 8)) {
        err->status = 400;
        snprintf(err->code, sizeof err->code, "invalid_snapshot");
        snprintf(err->message, sizeof err->message, "snapshot logits trailer checksum mismatch");
        return -1;
    }
    /* The core refuses a non-finite state; refuse non-finite logits too (a NaN would fail every
     * later sampling step of the session, an infinity would make its logprobs null). */
    for (size_t i = 0; i < (size_t)vocab; i++) {
        uint32_t bits = get_u32(body + clen + 16 + 4 * i);
        float f;
        memcpy(&f, &bits, 4);
        if (!isfinite(f)) {
            err->status = 400;
            snprintf(err->code, sizeof err->code, "invalid_snapshot");
            snprintf(err->message, sizeof err->message,
                     "snapshot logits trailer holds a non-finite value");
            return -1;
        }
    }
    *core_len = clen;
    *logits = body + clen + 16;
    return 0;
}
