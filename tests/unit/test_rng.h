/* test_rng.h — the unit tests' pseudo-random inputs: xorshift64 (shifts 13, 7, 17). Each test file
 * keeps its own state and seed, so its cases do not depend on which other tests ran. */
#ifndef TEST_RNG_H
#define TEST_RNG_H

#include <stdint.h>

static inline uint64_t xorshift64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in [0, 1): the top 53 bits of one step */
static inline double xorshift_unit(uint64_t *s)
{
    return (double)(xorshift64(s) >> 11) * (1.0 / 9007199254740992.0);
}

#endif /* TEST_RNG_H */
