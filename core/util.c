/* util.c — the lane checksum of core/util.h (its formula is there), and the byte helpers
 * exported through recur.h for proto/ (one definition: these only call the inline ones). */
#include "util.h"

#include <string.h>

#define FNV_PRIME 0x100000001b3ULL

/* nblocks whole 32-byte blocks at p through the lanes */
static void lanes_run(uint64_t lane[4], const uint8_t *p, size_t nblocks)
{
    uint64_t a = lane[0], b = lane[1], c = lane[2], d = lane[3];
    for (size_t i = 0; i < nblocks; i++, p += 32) {
        a = (a ^ recur__get_le64(p)) * FNV_PRIME;
        b = (b ^ recur__get_le64(p + 8)) * FNV_PRIME;
        c = (c ^ recur__get_le64(p + 16)) * FNV_PRIME;
        d = (d ^ recur__get_le64(p + 24)) * FNV_PRIME;
    }
    lane[0] = a, lane[1] = b, lane[2] = c, lane[3] = d;
}

void recur__lanesum_init(recur__lanesum_state *s)
{
    for (int i = 0; i < 4; i++) s->lane[i] = RECUR_FNV_OFFSET + (uint64_t)i;
    s->bytes = 0;
    s->ntail = 0;
}

void recur__lanesum_update(recur__lanesum_state *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    if (n == 0) return; /* data may be NULL */
    s->bytes += n;
    if (s->ntail) { /* complete the waiting block first */
        size_t k = 32 - s->ntail < n ? 32 - s->ntail : n;
        memcpy(s->tail + s->ntail, p, k);
        s->ntail += (uint32_t)k;
        p += k, n -= k;
        if (s->ntail < 32) return;
        lanes_run(s->lane, s->tail, 1);
        s->ntail = 0;
    }
    lanes_run(s->lane, p, n / 32);
    s->ntail = (uint32_t)(n % 32);
    memcpy(s->tail, p + n / 32 * 32, s->ntail);
}

uint64_t recur__lanesum_final(const recur__lanesum_state *s)
{
    uint8_t b[32], len[8];
    for (int i = 0; i < 4; i++) recur__put_le64(b + 8 * i, s->lane[i]);
    recur__put_le64(len, s->bytes);
    uint64_t h = recur__fnv1a(RECUR_FNV_OFFSET, b, sizeof b);
    h = recur__fnv1a(h, s->tail, s->ntail);
    return recur__fnv1a(h, len, sizeof len);
}

uint64_t recur__lanesum(const void *data, size_t n)
{
    recur__lanesum_state s;
    recur__lanesum_init(&s);
    recur__lanesum_update(&s, data, n);
    return recur__lanesum_final(&s);
}

uint64_t recur_fnv1a64(uint64_t h, const void *data, size_t n) { return recur__fnv1a(h, data, n); }
uint32_t recur_get_le32(const uint8_t *p) { return recur__get_le32(p); }
uint64_t recur_get_le64(const uint8_t *p) { return recur__get_le64(p); }
void recur_put_le32(uint8_t *p, uint32_t v) { recur__put_le32(p, v); }
void recur_put_le64(uint8_t *p, uint64_t v) { recur__put_le64(p, v); }
