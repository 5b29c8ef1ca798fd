/* readpool.c — reader threads for the reads a request waits on (readpool.h). */
#include "readpool.h"

#include <pthread.h>
#include <stdlib.h>

#include "dlist.h"

struct srv_readpool {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_t th[SRV_READPOOL_THREADS];
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_readjob *todo_head, *todo_tail; /* submitted, not started (mu) */
    srv_readjob *done_head, *done_tail; /* worked, done() not run yet (mu) */
    int stopping;                       /* mu */
    int pending;                        /* loop thread: submitted, done() not run yet */
};

static void *reader_main(void *arg)
{
    srv_readpool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->todo_head && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        srv_readjob *j = p->todo_head;
        if (!j)
            break; /* stopping, and nothing left to read */
        p->todo_head = j->next;
        if (!p->todo_head)
            p->todo_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->work(j);
        j->next = NULL;
        pthread_mutex_lock(&p->mu);
        QUEUE_APPEND(p->done_head, p->done_tail, j, next);
        pthread_mutex_unlock(&p->mu);
        uv_async_send(&p->async); /* coalesced while the loop has not run on_async */
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void on_async(uv_async_t *h)
{
    srv_readpool *p = h->data;
    pthread_mutex_lock(&p->mu);
    srv_readjob *j = p->done_head;
    p->done_head = p->done_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (j) {
        srv_readjob *n = j->next;
        p->pending--;
        j->done(j); /* may free j */
        j = n;
    }
}

int srv_readpool_start(uv_loop_t *loop, srv_readpool **out)
{
    srv_readpool *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->loop = loop;
    if (uv_async_init(loop, &p->async, on_async) != 0) {
        free(p);
        return -1;
    }
    p->async.data = p;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 0; i < SRV_READPOOL_THREADS; i++) {
        if (pthread_create(&p->th[i], NULL, reader_main, p) != 0)
            break;
        p->n_threads++;
    }
    if (p->n_threads == 0) {
        uv_close((uv_handle_t *)&p->async, NULL); /* p leaks until exit: start refused anyway */
        return -1;
    }
    *out = p;
    return 0;
}

void srv_readpool_submit(srv_readpool *p, srv_readjob *job)
{
    job->next = NULL;
    p->pending++;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) { /* the readers are gone: read here */
        pthread_mutex_unlock(&p->mu);
        job->work(job);
        p->pending--;
        job->done(job);
        return;
    }
    QUEUE_APPEND(p->todo_head, p->todo_tail, job, next);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int srv_readpool_pending(const srv_readpool *p)
{
    return p->pending;
}

static void pool_closed(uv_handle_t *h)
{
    srv_readpool *p = h->data;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

void srv_readpool_stop(srv_readpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) /* each reads what is queued before it exits */
        pthread_join(p->th[i], NULL);
    on_async(&p->async); /* every finished job's done(), here */
    uv_close((uv_handle_t *)&p->async, pool_closed);
}
