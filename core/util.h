/*
 * util.h — the small bit-level helpers of librecur, one definition each (not public):
 * little-endian loads and stores (snapshots, safetensors), FNV-1a 64 (the model fingerprint,
 * small checksums), the lane checksum (snapshots, the weights cache) and splitmix64 (seeded
 * init, sampling).
 */
#ifndef RECUR_UTIL_H
#define RECUR_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "recur.h" /* RECUR_FNV_OFFSET; the exported wrappers are in util.c */

/* ---------------------------------------------------------------- little-endian */

static inline uint32_t recur__get_le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t recur__get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void recur__put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void recur__put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---------------------------------------------------------------- hashing, random numbers */

/* FNV-1a 64 of n bytes, continuing from h (start from RECUR_FNV_OFFSET):
 *   h = (h ^ byte) * 0x100000001b3, byte by byte */
static inline uint64_t recur__fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The lane checksum of a byte string B of n bytes, for bulk data (a snapshot, the weights cache's
 * payload): FNV-1a 64 runs byte by byte, one multiply after another (under 1 GB/s); this runs
 * four independent multiplies per 32 bytes (several GB/s).
 *   B = W blocks of 32 bytes, then a tail T of n mod 32 bytes;
 *   lane[j] = RECUR_FNV_OFFSET + j (j = 0..3); for every 64-bit little-endian word w_i of the
 *     blocks (i = 0 .. 4W-1): lane[i mod 4] = (lane[i mod 4] ^ w_i) * 0x100000001b3 (mod 2^64);
 *   sum = FNV-1a 64 over the bytes of lane[0..3] (little-endian, 32 bytes), then T, then n as a
 *     u64 little-endian.
 * On whole blocks (T empty) this is the weights cache's payload checksum (weights_cache.h) as it
 * has always been, so existing cache files stay valid. A changed byte of T or of n always changes
 * the sum (FNV-1a's steps are bijections of its state); one in a block changes its lane for good
 * (xor, then a multiply by an odd prime: a bijection), but the lane's 8 bytes then differ in
 * several places, and FNV-1a over several bytes is not injective (its 32-bit form maps the 2^32
 * 4-byte strings to 1.93e9 values), so such a change escapes with probability ~2^-64, as with any
 * 64-bit sum. (Byte-wise FNV-1a, versions 1-3, caught every single changed byte.)
 * Streaming: update may be called with any split of B (a partial block waits in the state); the
 * sum is the same however B is split. tests/python/checksums.py is the reference. */
typedef struct {
    uint64_t lane[4];
    uint64_t bytes;    /* n so far */
    uint8_t tail[32];  /* the partial block not yet run through the lanes */
    uint32_t ntail;
} recur__lanesum_state;

void recur__lanesum_init(recur__lanesum_state *s);
void recur__lanesum_update(recur__lanesum_state *s, const void *data, size_t n);
uint64_t recur__lanesum_final(const recur__lanesum_state *s);
/* init, update (data, n), final */
uint64_t recur__lanesum(const void *data, size_t n);

/* splitmix64: *s += golden gamma, then the output mix of the new *s (Steele, Lea, Flood 2014) */
static inline uint64_t recur__splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) from the top 53 bits of one splitmix64 draw */
static inline double recur__uniform01(uint64_t *s)
{
    return (double)(recur__splitmix64(s) >> 11) * 0x1.0p-53;
}

#endif /* RECUR_UTIL_H */
