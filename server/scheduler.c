/* scheduler.c — worker threads, continuous batching of decode steps, prefill slices. */
#include "scheduler.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef struct {
    srv_sched *s;
    pthread_t tid;
    recur_workspace *ws;
    float *logits;        /* [max(max_batch, prefill_slice)][vocab] */
    float *lsm;           /* [vocab] log-softmax of the previous position */
    float *scratch;       /* [2*vocab] sampler scratch */
    recur_state **states; /* [max_batch] */
    int32_t *tokens;      /* [max_batch] */
    srv_work **items;     /* [max_batch] */
} worker;

struct srv_sched {
    uv_loop_t *loop;
    uv_async_t async;
    const recur_model *model;
    int vocab;
    int max_batch, prefill_slice, n_workers;
    worker *workers;
    void (*done)(srv_work *w, void *app);
    void *app;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int turn;                          /* 1: a prefill slice goes next when both wait */
    srv_work *step_head, *step_tail;   /* ready decode steps */
    srv_work *pre_head, *pre_tail;     /* ready prefill slices */
    srv_work *done_head, *done_tail;   /* finished, for the loop */
    srv_sched_stats stats;
};

static void push(srv_work **h, srv_work **t, srv_work *w)
{
    w->next = NULL;
    if (*t)
        (*t)->next = w;
    else
        *h = w;
    *t = w;
}

int srv_top_k(const float *lp, int vocab, int k, int32_t *ids, float *vals)
{
    if (k > vocab)
        k = vocab;
    int n = 0;
    for (int i = 0; i < vocab; i++) {
        float v = lp[i];
        if (v != v) /* NaN never ranks */
            continue;
        if (n == k && !(v > vals[k - 1]))
            continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && v > vals[j - 1]) { /* strictly greater: earlier ids win ties */
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = i;
    }
    return n;
}

/* One fold line for token at pos; lsm = log-softmax of the logits after it. */
static void emit_fold_line(srv_work *w, uint64_t pos, int32_t token, int has_lp, float lp,
                           const float *lsm, int vocab)
{
    int32_t ids[64];
    float vals[64];
    int n = w->top_k > 0 ? srv_top_k(lsm, vocab, w->top_k, ids, vals) : 0;
    proto_fold_line(w->out, w->framing, pos, token, has_lp, lp, ids, vals, n);
}

static void run_steps(worker *wk, srv_work **items, int B)
{
    srv_sched *s = wk->s;
    const int V = s->vocab;
    for (int i = 0; i < B; i++) {
        srv_work *w = items[i];
        w->err = 0;
        w->has_logprob = 0;
        w->tokens_seen = recur_state_tokens_seen(w->state); /* stays right if w fails */
        if (w->sample) {
            int t = recur_sample(w->logits, V, &w->sp, w->rng, wk->scratch);
            if (t < 0) {
                w->err = t;
                continue;
            }
            w->token = t;
        }
        if (*w->has_logits) {
            recur_log_softmax(w->logits, V, wk->lsm);
            w->logprob = wk->lsm[w->token];
            w->has_logprob = 1;
        }
    }
    /* Gather the items that are still good into one batch. */
    int nb = 0;
    for (int i = 0; i < B; i++)
        if (items[i]->err == 0) {
            wk->items[nb] = items[i];
            wk->states[nb] = items[i]->state;
            wk->tokens[nb] = items[i]->token;
            nb++;
        }
    if (nb == 0)
        return;
    int rc = recur_model_step_batch(s->model, wk->ws, wk->states, wk->tokens, nb, wk->logits);
    if (rc != 0) {
        /* Isolate the failing session(s): per-session steps (a bad step changes nothing). */
        for (int i = 0; i < nb; i++)
            wk->items[i]->err = recur_model_step(s->model, wk->ws, wk->states[i], wk->tokens[i],
                                                 wk->logits + (size_t)i * V);
    }
    pthread_mutex_lock(&s->mu);
    s->stats.batches++;
    s->stats.batched_steps += (uint64_t)nb;
    if ((uint64_t)nb > s->stats.max_batch_seen)
        s->stats.max_batch_seen = (uint64_t)nb;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < nb; i++) {
        srv_work *w = wk->items[i];
        w->tokens_seen = recur_state_tokens_seen(w->state);
        if (w->err)
            continue;
        const float *lg = wk->logits + (size_t)i * V;
        memcpy(w->logits, lg, (size_t)V * sizeof *lg);
        *w->has_logits = 1;
        if (w->emit_lines) {
            recur_log_softmax(lg, V, wk->lsm);
            emit_fold_line(w, w->pos0, w->token, w->has_logprob, w->logprob, wk->lsm, V);
        }
    }
}

static void run_prefill(worker *wk, srv_work *w)
{
    srv_sched *s = wk->s;
    const int V = s->vocab;
    w->err = recur_model_prefill(s->model, wk->ws, w->state, w->tokens, w->n, wk->logits);
    w->tokens_seen = recur_state_tokens_seen(w->state);
    if (w->err)
        return;
    int have_prev = *w->has_logits;
    if (w->emit_lines && have_prev)
        recur_log_softmax(w->logits, V, wk->lsm);
    for (int64_t i = 0; i < w->n && w->emit_lines; i++) {
        /* lsm holds log p(. | tokens before i); read token i's logprob, then advance. */
        float lp = have_prev ? wk->lsm[w->tokens[i]] : 0.0f;
        recur_log_softmax(wk->logits + (size_t)i * V, V, wk->lsm);
        emit_fold_line(w, w->pos0 + (uint64_t)i, w->tokens[i], have_prev, lp, wk->lsm, V);
        have_prev = 1;
    }
    if (w->n > 0) {
        memcpy(w->logits, wk->logits + (size_t)(w->n - 1) * V, (size_t)V * sizeof(float));
        *w->has_logits = 1;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.prefill_slices++;
    s->stats.prefill_tokens += (uint64_t)w->n;
    pthread_mutex_unlock(&s->mu);
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    srv_sched *s = wk->s;
    srv_work *batch[1024];
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && !s->step_head && !s->pre_head)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        int B = 0;
        srv_work *pre = NULL;
        if (s->step_head && (!s->pre_head || !s->turn)) {
            while (s->step_head && B < s->max_batch) {
                batch[B++] = s->step_head;
                s->step_head = s->step_head->next;
            }
            if (!s->step_head)
                s->step_tail = NULL;
            s->turn = 1;
        } else {
            pre = s->pre_head;
            s->pre_head = pre->next;
            if (!s->pre_head)
                s->pre_tail = NULL;
            s->turn = 0;
        }
        pthread_mutex_unlock(&s->mu);

        if (pre)
            run_prefill(wk, pre);
        else
            run_steps(wk, batch, B);

        pthread_mutex_lock(&s->mu);
        if (pre)
            push(&s->done_head, &s->done_tail, pre);
        for (int i = 0; i < B; i++)
            push(&s->done_head, &s->done_tail, batch[i]);
        pthread_mutex_unlock(&s->mu);
        uv_async_send(&s->async);
    }
    return NULL;
}

static void on_async(uv_async_t *h)
{
    srv_sched *s = h->data;
    pthread_mutex_lock(&s->mu);
    srv_work *w = s->done_head;
    s->done_head = s->done_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (w) {
        srv_work *n = w->next;
        w->next = NULL;
        s->done(w, s->app);
        w = n;
    }
}

int srv_sched_create(uv_loop_t *loop, const recur_model *m, int workers, int max_batch,
                     int prefill_slice, void (*done)(srv_work *w, void *app), void *app,
                     srv_sched **out)
{
    if (max_batch > 1024)
        max_batch = 1024;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s)
        return RECUR_ENOMEM;
    s->loop = loop;
    s->model = m;
    s->vocab = recur_model_get_info(m)->vocab_size;
    s->max_batch = max_batch;
    s->prefill_slice = prefill_slice;
    s->n_workers = workers;
    s->done = done;
    s->app = app;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = uv_async_init(loop, &s->async, on_async);
    if (rc) {
        free(s);
        return RECUR_EINVAL;
    }
    s->async.data = s;
    s->workers = calloc((size_t)workers, sizeof *s->workers);
    size_t rows = (size_t)(max_batch > prefill_slice ? max_batch : prefill_slice);
    for (int i = 0; i < workers; i++) {
        worker *wk = &s->workers[i];
        wk->s = s;
        rc = recur_workspace_create(m, max_batch, &wk->ws);
        if (rc)
            return rc; /* startup failure: the process exits */
        wk->logits = malloc(rows * (size_t)s->vocab * sizeof(float));
        wk->lsm = malloc((size_t)s->vocab * sizeof(float));
        wk->scratch = malloc(2 * (size_t)s->vocab * sizeof(float));
        wk->states = malloc((size_t)max_batch * sizeof *wk->states);
        wk->tokens = malloc((size_t)max_batch * sizeof *wk->tokens);
        wk->items = malloc((size_t)max_batch * sizeof *wk->items);
        if (!wk->logits || !wk->lsm || !wk->scratch || !wk->states || !wk->tokens || !wk->items)
            return RECUR_ENOMEM;
        if (pthread_create(&wk->tid, NULL, worker_main, wk) != 0)
            return RECUR_ENOMEM;
    }
    *out = s;
    return 0;
}

void srv_sched_submit(srv_sched *s, srv_work *w)
{
    pthread_mutex_lock(&s->mu);
    if (w->kind == SRV_WORK_STEP)
        push(&s->step_head, &s->step_tail, w);
    else
        push(&s->pre_head, &s->pre_tail, w);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int srv_sched_prefill_slice(const srv_sched *s)
{
    return s->prefill_slice;
}

srv_sched_stats srv_sched_get_stats(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    srv_sched_stats st = s->stats;
    pthread_mutex_unlock(&s->mu);
    return st;
}

void srv_sched_stop(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_workers; i++)
        pthread_join(s->workers[i].tid, NULL);
    uv_close((uv_handle_t *)&s->async, NULL);
}

void srv_sched_free(srv_sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_workers; i++) {
        worker *wk = &s->workers[i];
        recur_workspace_free(wk->ws);
        free(wk->logits);
        free(wk->lsm);
        free(wk->scratch);
        free(wk->states);
        free(wk->tokens);
        free(wk->items);
    }
    free(s->workers);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
