/*
 * chunk_work.h — the chunkwise kernels' workspace: one block per thread, reused call after call
 * (private to core/).
 *
 * The chunkwise forms of gated_linear.c, delta_rule.c and generalized_delta.c need a few chunk-
 * sized buffers per call (O(chunk^2 + chunk (K + V)) floats, not O(T)). A prefill calls them
 * once per layer, again and again, and a fresh block costs a page fault per 4 KiB on first touch
 * (~13.8 us each on the reference VM): generalized_delta.c's 260 KiB workspace at chunk 64 came
 * from mmap on many calls (66 faults per call at T = 1024 in bench_kernels, 2026-12-02), and
 * delta_rule.c made nine mallocs per call. So a block up to RECUR_CHUNK_WORK_MAX is kept per
 * thread and handed out again (gated_linear.c kept one of its own before; now all three share).
 *
 * recur__chunk_carve(sizes, n, off, &base, &own) lays out n pieces of sizes[i] bytes one after
 * another, piece i at the 64-byte-aligned offset off[i] of one block, sets base to the block and
 * returns RECUR_OK; or RECUR_ESHAPE (the sizes overflow size_t) or RECUR_ENOMEM.
 *   total <= RECUR_CHUNK_WORK_MAX: the calling thread's block (grown as needed; own = NULL). The
 *     thread owns it; it stays valid until the same thread's next recur__chunk_carve call, so a
 *     kernel holding it must not call another that takes it (none of the three does: they call
 *     only recur__mm and the chunk_decay helpers, which have their own scratch). Freed when the
 *     thread exits (pthread key destructor; the main thread's at process exit).
 *   larger (the parallel form over a long sequence): a fresh block for this call; own = the
 *     block, which the caller frees.
 * Either way the caller ends with free(own) (free(NULL) for the thread's block). The contents are
 * garbage on return.
 */
#ifndef RECUR_CHUNK_WORK_H
#define RECUR_CHUNK_WORK_H

#include <stddef.h>

#define RECUR_CHUNK_WORK_MAX ((size_t)4 << 20) /* bytes kept per thread */

#include "recur.h"

/* The block of at least `bytes` (a non-zero multiple of 64) described above, or NULL; *own as
 * above. Aliasing: the malloc attribute says the block aliases no pointer the caller holds (the
 * previous call's pieces are dead by contract), as GCC knows of aligned_alloc; and own is a local
 * of recur__chunk_carve (inlined), never the address of a field of the caller's workspace struct,
 * which would let that struct escape. Without either, generalized_delta.c's chunkwise form ran
 * 2x slower at T = 1024 (bench_kernels, 2026-12-02: GCC no longer kept the pieces apart from the
 * inputs). */
__attribute__((malloc)) void *recur__chunk_block(size_t bytes, void **own);

static inline int recur__chunk_carve(const size_t *sizes, int n, size_t *off, char **base,
                                     void **own)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const size_t sz = (sizes[i] + 63) & ~(size_t)63;
        if (sz < sizes[i] || total > (size_t)-1 - sz)
            return RECUR_ESHAPE;
        off[i] = total;
        total += sz;
    }
    void *mine;
    *base = recur__chunk_block(total ? total : 64, &mine);
    *own = mine;
    return *base ? RECUR_OK : RECUR_ENOMEM;
}

#endif /* RECUR_CHUNK_WORK_H */
