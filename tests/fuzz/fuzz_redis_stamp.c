/*
 * fuzz_redis_stamp.c — libFuzzer target: srv_stamp_split (server/redis_stamp.c), the Redis
 * version stamp at the end of a state_dir file written with --redis.
 *
 * Input byte 0 (flags): bit 0 recompute the stamp's checksum over the rest (so the fuzzer gets
 * past it to the version rule). Invariants asserted:
 *   - no stamp: the whole input is the body;
 *   - refused: the reason is one of the two named rules, and nothing is returned;
 *   - accepted: the version is within 1..SRV_STAMP_VERSION_MAX, the body is the input without
 *     its last SRV_STAMP_BYTES, and srv_stamp_write writes the same stamp back byte for byte.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis_stamp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1); /* its own allocation: ASan sees any read past it */
    if (!buf)
        return 0;
    memcpy(buf, data + 1, n);
    if ((flags & 1) && n >= SRV_STAMP_BYTES) {
        uint8_t st[SRV_STAMP_BYTES];
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            v |= (uint64_t)buf[n - 16 + i] << (8 * i);
        srv_stamp_write(st, v, n - SRV_STAMP_BYTES);
        memcpy(buf + n - 8, st + 16, 8); /* the checksum only: magic and version as given */
    }
    uint64_t ver = 99;
    size_t body = 0;
    const char *why = NULL;
    int rc = srv_stamp_split(buf, n, &ver, &body, &why);
    if (rc == 0) {
        assert(body == n && ver == 0);
    } else if (rc < 0) {
        assert(why && (!strcmp(why, "stamp_checksum") || !strcmp(why, "stamp_version_range")));
        assert(ver == 0 && body == n);
    } else {
        assert(rc == 1 && ver >= 1 && ver <= SRV_STAMP_VERSION_MAX);
        assert(body == n - SRV_STAMP_BYTES);
        uint8_t st[SRV_STAMP_BYTES];
        srv_stamp_write(st, ver, body);
        assert(memcmp(st, buf + body, SRV_STAMP_BYTES) == 0);
    }
    free(buf);
    return 0;
}
