/* test_chunk_mm_portable.c — the tests of test_chunk_mm.c on the portable recur__mm (the plain loop
 * that machines without AVX-512 run), compiled in here from core/chunk_mm.c. */
#define RECUR_MM_PORTABLE 1
#define CHUNK_MM_PORTABLE_TEST 1
#include "test_chunk_mm.c"
