/*
 * weights_cache.h — the file format of the quantized-weights cache (recur.h:
 * recur_model_quantize_cached) and its header check. Private to librecur (and the fuzz target).
 *
 * One file per (quantized model fingerprint, dtype, panel layout version), all integers
 * little-endian:
 *
 *   0  "RECURWQC"                 8  u32 format version (RECUR_WCACHE_VERSION)
 *   12 u32 panel layout version (RECUR_QUANT_LAYOUT_VERSION, quant.h)
 *   16 u64 fingerprint of the source model (the F32 / F16 / BF16 one quantized)
 *   24 u64 fingerprint of the quantized model (what GET /v1/model and the Redis keys carry)
 *   32 u32 dtype (recur_wtype: 3 Q8_0, 4 Q4_0)   36 u32 number of matrices
 *   40 u64 payload bytes          48 u64 payload checksum (the lane checksum, util.h)
 *   56 u64 header checksum: FNV-1a 64 of bytes 0 .. 55
 *   64 payload: every packed matrix of the quantized model (quant.h's layout), back to back, in
 *      the order of recur__quant_each_matrix
 *
 * The payload checksum is the lane checksum of core/util.h (recur__lanesum): four FNV-1a-style
 * lanes over the payload's 64-bit little-endian words, word i into lane i mod 4 (lane = (lane ^
 * word) * 0x100000001b3, lanes start at RECUR_FNV_OFFSET + lane index), then FNV-1a 64 over the
 * four lanes' 8 bytes each and the payload length (8 bytes). Every matrix is a whole number of
 * 32-byte blocks (a panel block is 544 or 288 bytes), so there is no tail. Four independent
 * multiplies: several GB/s, where byte-wise FNV-1a runs under 1.
 */
#ifndef RECUR_WEIGHTS_CACHE_H
#define RECUR_WEIGHTS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define RECUR_WCACHE_MAGIC "RECURWQC"
#define RECUR_WCACHE_VERSION 1u
#define RECUR_WCACHE_HEADER 64

/* What the file must say for the model being loaded. */
typedef struct {
    uint64_t src_fingerprint, fingerprint;
    uint32_t dtype, matrices;
    uint64_t payload_bytes;
    uint64_t file_bytes;     /* the file's size (fstat) */
    uint64_t max_file_bytes; /* the configured bound */
} recur__wcache_expect;

/* The header of a file for e (payload checksum sum) into h [RECUR_WCACHE_HEADER]. */
void recur__wcache_header_write(uint8_t *h, const recur__wcache_expect *e, uint64_t sum);

/* Check the first n bytes of a file (n may be short) against e. NULL when it may be read (then
 * *sum is the payload checksum it states), else the rule that refuses it (a static string:
 * weights_cache_too_large, _truncated, _magic, _version, _header_checksum, _layout, _model,
 * _dtype, _fingerprint, _shape, _length) with what it saw in detail. */
const char *recur__wcache_header_check(const uint8_t *h, size_t n, const recur__wcache_expect *e, uint64_t *sum,
                                       char *detail, size_t dlen);

#endif /* RECUR_WEIGHTS_CACHE_H */
