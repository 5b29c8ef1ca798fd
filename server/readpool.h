/*
 * readpool.h — threads of their own for the reads a request waits on (a session resumed from
 * state_dir: file read, checks, state decode), so they never queue behind libuv's threadpool.
 *
 * libuv's threadpool (4 threads) runs the snapshot writes, each a durable write (write, fsync,
 * rename, directory fsync: about 15 ms here). Every resume past max_resident_sessions evicts a
 * session and starts one such write, so under steady resuming the threadpool's threads are
 * often all in fsync; a read queued there waited for one of them to finish. These threads run
 * reads only, first come first served, and hand each finished job back to the loop thread
 * (uv_async, coalesced): done() runs there, in completion order.
 *
 * submit, and every done(), run on the loop thread; work() on a reader thread and must touch
 * only what its job owns.
 */
#ifndef SRV_READPOOL_H
#define SRV_READPOOL_H

#include <uv.h>

/* Reader threads: one disk read or decode in flight while another waits on the disk. */
#define SRV_READPOOL_THREADS 2

typedef struct srv_readjob {
    struct srv_readjob *next;             /* the pool's own link */
    void (*work)(struct srv_readjob *job); /* on a reader thread */
    void (*done)(struct srv_readjob *job); /* on the loop thread, after work */
} srv_readjob;

typedef struct srv_readpool srv_readpool;

/* Start the threads; 0, or -1 (nothing started). */
int srv_readpool_start(uv_loop_t *loop, srv_readpool **out);
/* Queue job (loop thread): work(job) on a reader, then done(job) on the loop. */
void srv_readpool_submit(srv_readpool *p, srv_readjob *job);
/* Jobs submitted and not yet done. */
int srv_readpool_pending(const srv_readpool *p);
/* Finish every queued job (work, then done, on the loop thread), join the threads and close
 * the async handle; p is freed once the handle is closed (the loop must run). NULL: no-op. */
void srv_readpool_stop(srv_readpool *p);

#endif /* SRV_READPOOL_H */
