/* util.c — the byte helpers of core/util.h exported through recur.h for proto/ (one definition:
 * these only call the inline ones). */
#include "util.h"

uint64_t recur_fnv1a64(uint64_t h, const void *data, size_t n) { return recur__fnv1a(h, data, n); }
uint32_t recur_get_le32(const uint8_t *p) { return recur__get_le32(p); }
uint64_t recur_get_le64(const uint8_t *p) { return recur__get_le64(p); }
void recur_put_le32(uint8_t *p, uint32_t v) { recur__put_le32(p, v); }
void recur_put_le64(uint8_t *p, uint64_t v) { recur__put_le64(p, v); }
