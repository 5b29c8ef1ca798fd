/*
 * util.h — the small bit-level helpers of librecur, one definition each (not public):
 * little-endian loads and stores (snapshots, safetensors), FNV-1a 64 (the model fingerprint,
 * snapshot checksums) and splitmix64 (seeded init, sampling).
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
