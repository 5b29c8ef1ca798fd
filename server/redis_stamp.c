/* redis_stamp.c — the Redis version a state_dir file holds (redis_stamp.h). */
#include "redis_stamp.h"

#include <string.h>

#include "recur.h"

static const char MAGIC[8] = {'R', 'E', 'C', 'U', 'R', 'R', 'V', '1'};

/* FNV-1a 64 over magic, version, body length (the first 16 stamp bytes, then the length). */
static uint64_t stamp_sum(const uint8_t *head16, uint64_t body_len)
{
    uint8_t l[8];
    recur_put_le64(l, body_len);
    return recur_fnv1a64(recur_fnv1a64(RECUR_FNV_OFFSET, head16, 16), l, 8);
}

void srv_stamp_write(uint8_t out[SRV_STAMP_BYTES], uint64_t ver, uint64_t body_len)
{
    memcpy(out, MAGIC, 8);
    recur_put_le64(out + 8, ver);
    recur_put_le64(out + 16, stamp_sum(out, body_len));
}

int srv_stamp_split(const uint8_t *buf, size_t len, uint64_t *ver, size_t *body_len,
                    const char **why)
{
    *body_len = len;
    *ver = 0;
    if (len < SRV_STAMP_BYTES || memcmp(buf + len - SRV_STAMP_BYTES, MAGIC, 8) != 0)
        return 0;
    const uint8_t *st = buf + len - SRV_STAMP_BYTES;
    size_t body = len - SRV_STAMP_BYTES;
    if (recur_get_le64(st + 16) != stamp_sum(st, body)) {
        *why = "stamp_checksum";
        return -1;
    }
    uint64_t v = recur_get_le64(st + 8);
    if (v == 0 || v > SRV_STAMP_VERSION_MAX) {
        *why = "stamp_version_range";
        return -1;
    }
    *ver = v;
    *body_len = body;
    return 1;
}
