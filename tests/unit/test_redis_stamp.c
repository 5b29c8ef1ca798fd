/* test_redis_stamp.c — server/redis_stamp.c: the Redis version stamp of a state_dir file. */
#include <criterion/criterion.h>
#include <string.h>

#include "redis_stamp.h"

/* a file body and its stamp of version ver */
static size_t stamped(uint8_t *buf, size_t body, uint64_t ver)
{
    for (size_t i = 0; i < body; i++)
        buf[i] = (uint8_t)(i * 7 + 1);
    srv_stamp_write(buf + body, ver, body);
    return body + SRV_STAMP_BYTES;
}

Test(redis_stamp, round_trip_and_no_stamp)
{
    uint8_t buf[200];
    uint64_t ver;
    size_t body;
    const char *why = NULL;
    size_t n = stamped(buf, 100, 12345);
    cr_assert_eq(srv_stamp_split(buf, n, &ver, &body, &why), 1);
    cr_assert_eq(ver, 12345);
    cr_assert_eq(body, 100);
    /* a file written without Redis: no stamp, the whole of it is the body */
    cr_assert_eq(srv_stamp_split(buf, 100, &ver, &body, &why), 0);
    cr_assert_eq(body, 100);
    cr_assert_eq(srv_stamp_split(buf, 3, &ver, &body, &why), 0);
    cr_assert_eq(srv_stamp_split(buf + 100, SRV_STAMP_BYTES, &ver, &body, &why), -1,
                 "a stamp alone: its body length (0) is not the one it was made for");
}

Test(redis_stamp, every_flipped_bit_and_a_moved_stamp_are_refused)
{
    uint8_t buf[200];
    uint64_t ver;
    size_t body;
    size_t n = stamped(buf, 100, 7);
    for (size_t bit = 8 * 8; bit < 8 * SRV_STAMP_BYTES; bit++) { /* past the magic */
        buf[100 + bit / 8] ^= (uint8_t)(1u << (bit % 8));
        const char *why = NULL;
        cr_assert_eq(srv_stamp_split(buf, n, &ver, &body, &why), -1, "bit %zu", bit);
        cr_assert_str_eq(why, "stamp_checksum");
        buf[100 + bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    /* the same stamp after a longer body: the length it binds differs */
    uint8_t other[200];
    memcpy(other, buf, 101);
    memcpy(other + 101, buf + 100, SRV_STAMP_BYTES);
    const char *why = NULL;
    cr_assert_eq(srv_stamp_split(other, n + 1, &ver, &body, &why), -1);
    cr_assert_str_eq(why, "stamp_checksum");
}

Test(redis_stamp, versions_out_of_range_are_refused_by_name)
{
    uint8_t buf[200];
    uint64_t ver;
    size_t body;
    const uint64_t bad[] = {0, SRV_STAMP_VERSION_MAX + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t n = stamped(buf, 50, bad[i]);
        const char *why = NULL;
        cr_assert_eq(srv_stamp_split(buf, n, &ver, &body, &why), -1);
        cr_assert_str_eq(why, "stamp_version_range");
    }
    size_t n = stamped(buf, 50, SRV_STAMP_VERSION_MAX);
    const char *why = NULL;
    cr_assert_eq(srv_stamp_split(buf, n, &ver, &body, &why), 1);
    cr_assert_eq(ver, SRV_STAMP_VERSION_MAX);
}
