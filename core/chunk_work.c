/*
 * chunk_work.c — the chunkwise kernels' per-thread workspace block (chunk_work.h).
 * Compiled once (not in the Makefile's ISA_FILES): every kernel path shares one block per thread.
 */
#include "chunk_work.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    size_t cap;
    void *data; /* 64-byte aligned, cap bytes */
} work_block;

static pthread_key_t work_key;
static pthread_once_t work_once = PTHREAD_ONCE_INIT;
static int work_key_ok;

static void work_destroy(void *p)
{
    work_block *b = p;
    free(b->data);
    free(b);
}

static void work_init(void)
{
    work_key_ok = pthread_key_create(&work_key, work_destroy) == 0;
}

/* The calling thread's block of at least `bytes`, or NULL (then the caller allocates for itself). */
static void *thread_block(size_t bytes)
{
    if (pthread_once(&work_once, work_init) != 0 || !work_key_ok)
        return NULL;
    work_block *b = pthread_getspecific(work_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return NULL;
        if (pthread_setspecific(work_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->cap < bytes) {
        void *d = aligned_alloc(64, bytes);
        if (!d)
            return NULL;
        free(b->data);
        b->data = d;
        b->cap = bytes;
    }
    return b->data;
}

void *recur__chunk_block(size_t bytes, void **own)
{
    *own = NULL;
    void *p = bytes <= RECUR_CHUNK_WORK_MAX ? thread_block(bytes) : NULL;
    if (!p)
        *own = p = aligned_alloc(64, bytes);
    return p;
}
