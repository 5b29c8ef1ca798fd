/*
 * redis_stamp.h — the Redis version a state_dir file holds (docs/SCALING.md "State dir with
 * Redis", docs/HARDENING.md "Checked files").
 *
 * With --redis and --state-dir, a session file is a cache of one version of the session in
 * Redis. Its last SRV_STAMP_BYTES say which:
 *   "RECURRV1", u64 version (little-endian), u64 FNV-1a 64 over the magic, the version and the
 *   length of the file before the stamp (u64 LE)
 * so a stamp moved onto another file, a truncated or extended body, or a flipped version is
 * refused. A file without a stamp (written without Redis) still loads without Redis; with
 * Redis it is never trusted (the state comes from Redis). Rejections, by rule:
 *   stamp_checksum       the checksum does not match
 *   stamp_version_range  version 0, or above SRV_STAMP_VERSION_MAX
 */
#ifndef SRV_REDIS_STAMP_H
#define SRV_REDIS_STAMP_H

#include <stddef.h>
#include <stdint.h>

#define SRV_STAMP_BYTES 24
/* Redis's versions are Lua numbers (doubles) in the commit script: exact up to 2^53. */
#define SRV_STAMP_VERSION_MAX (1ULL << 53)

/* The stamp of version ver for a file whose body (what precedes the stamp) is body_len bytes. */
void srv_stamp_write(uint8_t out[SRV_STAMP_BYTES], uint64_t ver, uint64_t body_len);

/* A file's stamp: 1 with *ver and *body_len (the file without the stamp), 0 when it has none
 * (*body_len = len), -1 when its stamp is refused (*why: the rule). */
int srv_stamp_split(const uint8_t *buf, size_t len, uint64_t *ver, size_t *body_len,
                    const char **why);

#endif /* SRV_REDIS_STAMP_H */
