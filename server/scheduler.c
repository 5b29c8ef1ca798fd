/* scheduler.c — worker threads, continuous batching of decode steps, prefill slices. */
#include "scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "histogram.h"
#include "log.h"

typedef struct {
    srv_sched *s;
    pthread_t tid;
    recur_workspace *ws;
    float *logits;        /* [max(max_batch, prefill_slice)][vocab] */
    float *lsm;           /* [vocab] log-softmax of the previous position */
    float *scratch;       /* [2*vocab] sampler scratch */
    float *adjusted;      /* [vocab] logits after a generation's adjustment (generation.h) */
    recur_state **states; /* [max_batch] */
    proto_buf lines;      /* generated lines of the last batch, before they go to their streams */
    size_t *line_end;     /* [max_batch] end of item i's line in `lines` */
    int last_nb;          /* sessions in the last batched model step (for the stats) */
    int32_t *tokens;      /* [max_batch] */
    srv_work **items;     /* [max_batch] */
} worker;

struct srv_sched {
    uv_loop_t *loop;
    uv_async_t async;
    uv_prepare_t sub_prepare;          /* hand this turn's submissions to the workers: */
    uv_check_t sub_check;              /* after the I/O callbacks, and before the loop blocks */
    const recur_model *model;
    int vocab;
    int max_batch, prefill_slice, n_workers;
    int max_decode;                    /* decode batches running at once */
    worker *workers;
    void (*done)(srv_work *w, void *app);
    void (*progress)(srv_work *w, void *app);
    void *app;

    /* loop thread only: submitted during this loop turn, not yet visible to the workers */
    srv_work *sub_step_head, *sub_step_tail, *sub_pre_head, *sub_pre_tail;
    int sub_n_steps;                   /* items on sub_step_head */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int turn;                          /* 1: a prefill slice goes next when both wait */
    int idle;                          /* workers waiting on cv */
    int spinning;                      /* workers spinning before they wait (spin_for_work) */
    uint64_t spin_ns;                  /* how long an idle worker spins before it waits on cv */
    atomic_int avail;                  /* 1 when a worker could take something (mirror of
                                        * can_decode || pre_head, read by spinners unlocked) */

    int decoding;                      /* decode batches running */
    uint64_t last_notify;              /* uv_hrtime of the last uv_async_send */
    srv_work *step_head, *step_tail;   /* ready decode steps */
    int n_steps;                       /* items on step_head */
    srv_work *pre_head, *pre_tail;     /* ready prefill slices */
    srv_work *done_head, *done_tail;   /* finished, for the loop */
    srv_work *out_head, *out_tail;     /* generations with lines for the loop (gen->out_next) */
    srv_sched_stats stats;
};

/* A running generation's lines reach the loop at most this often (unless something finished or
 * the workers ran out of steps): waking the loop thread, and through it the client, for every
 * token took the second core from the worker (single greedy stream, models/default, 2026-11-29:
 * 10.7-10.8k tokens/s waking the loop per token, 11.3-11.6k with 0.2 ms; the chunk gap p90 goes
 * from 0.11 to 0.26 ms), while 0.2 ms is far below what a reader
 * of the stream can notice. Every line is still its own chunk. */
#define SRV_GEN_NOTIFY_NS 200000u

static void push(srv_work **h, srv_work **t, srv_work *w)
{
    w->next = NULL;
    if (*t)
        (*t)->next = w;
    else
        *h = w;
    *t = w;
}

/* Hand the owner what folding token at pos produced; lsm = log-softmax of the logits after it. */
static void fold_result(srv_work *w, uint64_t pos, int32_t token, int has_lp, float lp,
                        const float *lsm, int vocab)
{
    int32_t ids[SRV_MAX_TOP_K];
    float vals[SRV_MAX_TOP_K];
    srv_fold_result r = {pos, token, has_lp, lp, 0, ids, vals};
    int k = w->top_k < SRV_MAX_TOP_K ? w->top_k : SRV_MAX_TOP_K;
    int n = w->top_limit > 0 && w->top_limit < vocab ? w->top_limit : vocab;
    r.n_top = k > 0 ? recur_top_k(lsm, n, k, ids, vals) : 0;
    w->on_fold(w, &r);
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
        if (w->before)
            w->before(w);
        if (w->sample) {
            const float *lg = srv_gen_sampling_logits(w->gen, w->logits, wk->adjusted, V);
            int t = recur_sample(lg, V, &w->sp, w->rng, wk->scratch);
            if (t < 0) {
                w->err = t;
                continue;
            }
            w->token = t;
        }
        if (*w->has_logits == 2) { /* constants kept from the line of the previous step */
            w->logprob = (w->logits[w->token] - w->lsm_c[0]) - w->lsm_c[1];
            w->has_logprob = 1;
        } else if (*w->has_logits) {
            /* the same function as every line's: a session's logprobs do not depend on
             * whether its logits came from a step, a prefill, a fork or an upload */
            recur_log_softmax_consts(w->logits, V, wk->lsm, w->lsm_c);
            *w->has_logits = 2;
            w->logprob = wk->lsm[w->token];
            w->has_logprob = 1;
        }
        if (w->gen && w->gen->want_top && *w->has_logits == 2)
            srv_gen_keep_top(w->gen, w->logits, V, w->lsm_c);
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
    wk->last_nb = nb;
    if (nb == 0)
        return;
    int rc = recur_model_step_batch(s->model, wk->ws, wk->states, wk->tokens, nb, wk->logits);
    if (rc != 0) {
        /* Isolate the failing session(s): per-session steps (a bad step changes nothing). */
        for (int i = 0; i < nb; i++)
            wk->items[i]->err = recur_model_step(s->model, wk->ws, wk->states[i], wk->tokens[i],
                                                 wk->logits + (size_t)i * V);
    }
    for (int i = 0; i < nb; i++) {
        srv_work *w = wk->items[i];
        w->tokens_seen = recur_state_tokens_seen(w->state);
        if (w->err)
            continue;
        const float *lg = wk->logits + (size_t)i * V;
        if ((w->err = recur_values_check(lg, (size_t)V)) != 0)
            continue; /* turned non-finite: the op puts the session back (ops.c checkpoint) */
        memcpy(w->logits, lg, (size_t)V * sizeof *lg);
        *w->has_logits = 1;
        if (w->on_fold) {
            recur_log_softmax_consts(lg, V, wk->lsm, w->lsm_c);
            *w->has_logits = 2;
            fold_result(w, w->pos0, w->token, w->has_logprob, w->logprob, wk->lsm, V);
        }
        if (w->after)
            w->after(w);
    }
}

/* A generation's token was sampled: its time to first token, or the time since its previous
 * token (histogram.h: atomic, no lock). */
static void observe_token_time(srv_gen *g)
{
    if (!g->ttft)
        return;
    uint64_t now = uv_hrtime();
    if (g->t_last_ns)
        srv_hist_observe(g->itl, now > g->t_last_ns ? now - g->t_last_ns : 0);
    else
        srv_hist_observe(g->ttft, now > g->t_request_ns ? now - g->t_request_ns : 0);
    g->t_last_ns = now;
}

/* Lines of the generations in batch[0..B) into wk->lines (outside the lock). */
static void gen_lines(worker *wk, srv_work **batch, int B)
{
    proto_buf_clear(&wk->lines);
    for (int i = 0; i < B; i++) {
        srv_work *w = batch[i];
        if (w->gen && w->err == 0) {
            if (w->gen_ids && w->gen->generated < w->gen->req->max_tokens)
                w->gen_ids[w->gen->generated] = w->token; /* the session's token history */
            srv_gen_token(w->gen, w->pos0, w->token, w->logprob, &wk->lines);
            observe_token_time(w->gen);
        }
        wk->line_end[i] = wk->lines.len;
    }
}

/* After a decode batch (mu held): hand the generations' lines to the loop, put the generations
 * that may step on back at the tail of the ready queue, everything else on the done list. */
static void settle_batch(srv_sched *s, worker *wk, srv_work **batch, int B)
{
    size_t start = 0;
    for (int i = 0; i < B; i++) {
        srv_work *w = batch[i];
        srv_gen *g = w->gen;
        size_t end = wk->line_end[i];
        if (!g || w->err) {
            push(&s->done_head, &s->done_tail, w);
            start = end;
            continue;
        }
        proto_buf_append(&g->lines, wk->lines.data + start, end - start);
        start = end;
        g->lines_tokens++;
        g->lines_seen = w->tokens_seen;
        if (!g->on_out_list) {
            g->on_out_list = 1;
            g->out_next = NULL;
            if (s->out_tail)
                s->out_tail->gen->out_next = w;
            else
                s->out_head = w;
            s->out_tail = w;
        }
        if (srv_gen_may_continue(g, w->tokens_seen) && !atomic_load(&g->stop) &&
            !atomic_load(&g->hold) && !atomic_load(&g->yield) && g->lines.len < SRV_GEN_BACKLOG) {
            w->pos0 = w->tokens_seen; /* the next token's position */
            push(&s->step_head, &s->step_tail, w);
            s->n_steps++;
        } else {
            push(&s->done_head, &s->done_tail, w);
        }
    }
}

static void run_prefill(worker *wk, srv_work *w)
{
    srv_sched *s = wk->s;
    const int V = s->vocab;
    /* logits for rows first.. (all, or the tail: wk->logits row r is position first + r) */
    int64_t rows = w->logit_tail > 0 && w->logit_tail < w->n ? w->logit_tail : w->n;
    int64_t first = w->n - rows;
    if (w->before)
        w->before(w);
    w->err = recur_model_prefill_tail(s->model, wk->ws, w->state, w->tokens, w->n, rows, wk->logits);
    w->tokens_seen = recur_state_tokens_seen(w->state);
    if (!w->err) /* turned non-finite: the op puts the session back (ops.c checkpoint) */
        w->err = recur_values_check(wk->logits, (size_t)rows * V);
    if (w->err)
        return;
    int have_prev = first == 0 && *w->has_logits;
    float c[2];
    if (w->on_fold && have_prev)
        recur_log_softmax_consts(w->logits, V, wk->lsm, c);
    for (int64_t i = first; i < w->n && w->on_fold; i++) {
        /* lsm holds log p(. | tokens before i); read token i's logprob, then advance. */
        float lp = have_prev ? wk->lsm[w->tokens[i]] : 0.0f;
        recur_log_softmax_consts(wk->logits + (size_t)(i - first) * V, V, wk->lsm, c);
        if (!w->logit_tail || i == w->n - 1)
            fold_result(w, w->pos0 + (uint64_t)i, w->tokens[i], have_prev, lp, wk->lsm, V);
        have_prev = 1;
    }
    if (w->n > 0) {
        memcpy(w->logits, wk->logits + (size_t)(rows - 1) * V, (size_t)V * sizeof(float));
        *w->has_logits = 1;
    }
    if (w->after)
        w->after(w);
}

/* A decode batch may start when steps are ready and no batch runs; another one at the same time
 * (up to max_decode) only when at least a whole batch (max_batch steps) waits. Below that, the
 * running batch's worker takes them next, in one bigger batch: on 2 cores two small batches at
 * once took the cores from the loop thread and the clients. models/default over HTTP, 3 runs each,
 * 2026-11-29: 64 sessions 12.1-13.2k -> 14.0-15.1k tokens/s, 256 sessions 16.4-17.7k ->
 * 17.1-18.7k (a threshold of half a batch: 11.6-12.3k at 64 sessions). */
static int can_decode(const srv_sched *s)
{
    if (!s->step_head)
        return 0;
    return s->decoding == 0 || (s->decoding < s->max_decode && s->n_steps >= s->max_batch);
}

/* After the queues changed (mu held): publish whether there is work, and wake a sleeping
 * worker for it unless one is spinning (that one takes it without a futex wake-up). */
static void wake_if_needed(srv_sched *s)
{
    int avail = can_decode(s) || s->pre_head;
    atomic_store_explicit(&s->avail, avail, memory_order_relaxed);
    if (avail && s->idle > 0 && s->spinning == 0)
        pthread_cond_signal(&s->cv);
}

/* An idle worker polls for up to spin_ns before it sleeps on cv (mu held on entry and exit),
 * which saves the futex wake-up when work comes within that time. Off by default
 * (worker_spin_us 0): on 2 shared cores the polling took CPU from the loop and the clients and
 * lowered single-session /tokens throughput (docs/OPERATIONS.md). */
static void spin_for_work(srv_sched *s)
{
    if (s->spin_ns == 0)
        return;
    s->spinning++;
    pthread_mutex_unlock(&s->mu);
    uint64_t t0 = uv_hrtime();
    for (;;) {
        int seen = 0;
        for (int i = 0; i < 64 && !seen; i++) {
            seen = atomic_load_explicit(&s->avail, memory_order_relaxed);
            __builtin_ia32_pause();
        }
        if (seen || uv_hrtime() - t0 >= s->spin_ns)
            break;
    }
    pthread_mutex_lock(&s->mu);
    s->spinning--;
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    srv_sched *s = wk->s;
    srv_work *batch[SRV_MAX_BATCH];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (!s->stop && !can_decode(s) && !s->pre_head)
            spin_for_work(s);
        while (!s->stop && !can_decode(s) && !s->pre_head) {
            s->idle++;
            pthread_cond_wait(&s->cv, &s->mu);
            s->idle--;
        }
        if (s->stop)
            break;
        int B = 0;
        srv_work *pre = NULL;
        if (can_decode(s) && (!s->pre_head || !s->turn)) {
            /* every ready step, up to max_batch, in one batched model step */
            while (s->step_head && B < s->max_batch) {
                batch[B++] = s->step_head;
                s->step_head = s->step_head->next;
            }
            s->n_steps -= B;
            if (!s->step_head)
                s->step_tail = NULL;
            s->turn = 1;
            s->decoding++;
        } else {
            pre = s->pre_head;
            s->pre_head = pre->next;
            if (!s->pre_head)
                s->pre_tail = NULL;
            s->turn = 0;
        }
        wake_if_needed(s); /* what is left may be another worker's */
        pthread_mutex_unlock(&s->mu);

        uint64_t t0 = uv_hrtime();
        if (pre) {
            run_prefill(wk, pre);
        } else {
            run_steps(wk, batch, B);
            gen_lines(wk, batch, B);
        }
        uint64_t t1 = uv_hrtime();

        pthread_mutex_lock(&s->mu);
        s->stats.busy_ns += t1 - t0;
        if (pre) {
            if (pre->err == 0) {
                s->stats.prefill_slices++;
                s->stats.prefill_tokens += (uint64_t)pre->n;
            }
            push(&s->done_head, &s->done_tail, pre);
        } else {
            if (wk->last_nb > 0) {
                s->stats.batches++;
                s->stats.batched_steps += (uint64_t)wk->last_nb;
                if ((uint64_t)wk->last_nb > s->stats.max_batch_seen)
                    s->stats.max_batch_seen = (uint64_t)wk->last_nb;
            }
            s->decoding--;
            settle_batch(s, wk, batch, B);
        }
        /* No wake-up for requeued generations: this worker takes them with the next batch
         * (waking another one would only move them across threads). The loop is woken for
         * finished items at once, for generations' lines at most every SRV_GEN_NOTIFY_NS (or
         * when no step is left to run), see there. */
        int notify = s->done_head != NULL || !s->step_head ||
                     t1 - s->last_notify >= SRV_GEN_NOTIFY_NS;
        if (notify)
            s->last_notify = t1;
        pthread_mutex_unlock(&s->mu);
        if (notify)
            uv_async_send(&s->async); /* coalesced by libuv while the loop has not run on_async */
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Loop thread: make this turn's submissions visible to the workers, in one critical section. */
static void sched_flush(srv_sched *s)
{
    if (!s->sub_step_head && !s->sub_pre_head)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->sub_step_head) {
        if (s->step_tail)
            s->step_tail->next = s->sub_step_head;
        else
            s->step_head = s->sub_step_head;
        s->step_tail = s->sub_step_tail;
        s->n_steps += s->sub_n_steps;
        s->sub_n_steps = 0;
    }
    if (s->sub_pre_head) {
        if (s->pre_tail)
            s->pre_tail->next = s->sub_pre_head;
        else
            s->pre_head = s->sub_pre_head;
        s->pre_tail = s->sub_pre_tail;
    }
    s->sub_step_head = s->sub_step_tail = s->sub_pre_head = s->sub_pre_tail = NULL;
    wake_if_needed(s);
    pthread_mutex_unlock(&s->mu);
}

static void on_sub_prepare(uv_prepare_t *h)
{
    sched_flush(h->data);
}

static void on_sub_check(uv_check_t *h)
{
    sched_flush(h->data);
}

static void on_async(uv_async_t *h)
{
    srv_sched *s = h->data;
    pthread_mutex_lock(&s->mu);
    srv_work *w = s->done_head;
    s->done_head = s->done_tail = NULL;
    srv_work *o = s->out_head;
    s->out_head = s->out_tail = NULL;
    /* Take the generations' lines now, in the same critical section as the done list: a
     * generation on the done list has all its lines here. The loop walks its own link
     * (taken_next): once mu is released a worker may put a generation on the list again. */
    for (srv_work *x = o; x; x = x->gen->out_next) {
        srv_gen *g = x->gen;
        g->taken_next = g->out_next;
        proto_buf t = g->taken;
        g->taken = g->lines;
        g->lines = t;
        proto_buf_clear(&g->lines);
        g->taken_tokens = g->lines_tokens;
        g->taken_seen = g->lines_seen;
        g->lines_tokens = 0;
        g->on_out_list = 0;
    }
    pthread_mutex_unlock(&s->mu);
    while (o) {
        srv_work *n = o->gen->taken_next; /* progress() never finishes an op: done() does */
        s->progress(o, s->app);
        o = n;
    }
    while (w) {
        srv_work *n = w->next;
        w->next = NULL;
        s->done(w, s->app);
        w = n;
    }
    sched_flush(s); /* the follow-up steps of these sessions, at once */
}

int srv_sched_create(uv_loop_t *loop, const recur_model *m, int workers, int max_batch,
                     int max_decode, int prefill_slice, void (*done)(srv_work *w, void *app),
                     void (*progress)(srv_work *w, void *app), void *app, srv_sched **out)
{
    if (max_batch > SRV_MAX_BATCH)
        max_batch = SRV_MAX_BATCH;
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
    s->progress = progress;
    s->app = app;
    /* Adaptive: a thread that finds mu taken spins briefly before it sleeps in the kernel.
     * Every critical section here is a few list operations, and a futex sleep + wake-up
     * costs far more on these VMs than the wait. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&s->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&s->cv, NULL);
    int rc = uv_async_init(loop, &s->async, on_async);
    if (rc) {
        free(s);
        return RECUR_EINVAL;
    }
    s->async.data = s;
    uv_prepare_init(loop, &s->sub_prepare);
    uv_check_init(loop, &s->sub_check);
    s->sub_prepare.data = s->sub_check.data = s;
    uv_prepare_start(&s->sub_prepare, on_sub_prepare);
    uv_check_start(&s->sub_check, on_sub_check);
    uv_unref((uv_handle_t *)&s->sub_prepare);
    uv_unref((uv_handle_t *)&s->sub_check);
    s->max_decode = max_decode < 1 ? 1 : max_decode;
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
        wk->adjusted = malloc((size_t)s->vocab * sizeof(float));
        wk->states = malloc((size_t)max_batch * sizeof *wk->states);
        wk->tokens = malloc((size_t)max_batch * sizeof *wk->tokens);
        wk->items = malloc((size_t)max_batch * sizeof *wk->items);
        wk->line_end = malloc((size_t)max_batch * sizeof *wk->line_end);
        proto_buf_init(&wk->lines);
        if (!wk->logits || !wk->lsm || !wk->scratch || !wk->adjusted || !wk->states || !wk->tokens || !wk->items ||
            !wk->line_end)
            return RECUR_ENOMEM;
        if (pthread_create(&wk->tid, NULL, worker_main, wk) != 0)
            return RECUR_ENOMEM;
        pthread_setname_np(wk->tid, "recurd-worker"); /* top -H, perf --sort comm */
    }
    *out = s;
    return 0;
}

void srv_sched_submit(srv_sched *s, srv_work *w)
{
    /* Held until the end of the loop turn (sched_flush): every step submitted in one turn is
     * seen by the workers at once, so they go into one batch, for one wake-up. */
    if (w->kind == SRV_WORK_STEP) {
        push(&s->sub_step_head, &s->sub_step_tail, w);
        s->sub_n_steps++;
    } else
        push(&s->sub_pre_head, &s->sub_pre_tail, w);
}

void srv_sched_set_spin(srv_sched *s, uint64_t ns)
{
    pthread_mutex_lock(&s->mu);
    s->spin_ns = ns;
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
    uv_close((uv_handle_t *)&s->sub_prepare, NULL);
    uv_close((uv_handle_t *)&s->sub_check, NULL);
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
        free(wk->adjusted);
        free(wk->states);
        free(wk->tokens);
        free(wk->items);
        free(wk->line_end);
        proto_buf_free(&wk->lines);
    }
    free(s->workers);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
