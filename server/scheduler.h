/*
 * scheduler.h — model computation on worker threads, with continuous batching.
 *
 * The loop thread submits work items; worker pthreads (each with its own recur_workspace and
 * buffers) take them:
 *   - SRV_WORK_STEP: fold one token (given, or sampled from the session's logits). Every STEP
 *     item that is ready when a worker looks is executed in ONE recur_model_step_batch call
 *     (up to max_batch sessions).
 *   - a generation (SRV_WORK_STEP with gen set) keeps stepping on the workers: after each step
 *     the worker appends the token's line to the generation's pending output, wakes the loop
 *     (progress callback, coalesced) and puts the item back at the tail of the ready queue, to
 *     be batched with whatever else is ready then. It returns to the loop (done) only when it
 *     may not continue or the loop asked it to (generation.h).
 *   - SRV_WORK_PREFILL: fold up to prefill_slice tokens with recur_model_prefill. The loop
 *     submits one slice at a time, and workers alternate between a decode batch and a prefill
 *     slice when both are waiting, so a long prefill never starves other sessions' decode.
 * Submissions made during one loop turn are handed to the workers together at the end of the
 * turn (uv_check / uv_prepare: one lock, at most one wake-up), so an idle worker takes them as
 * one batch rather than one or two at a time. Steps arriving while a batch computes wait for it
 * and form the next batch, unless a whole batch (max_batch steps) waits: then another worker
 * starts one, up to max_decode decode batches at once.
 * Finished items return to the loop thread through uv_async; done() runs there, in completion
 * order, after progress() for every generation with pending lines (so a generation's last
 * lines are always delivered before its done()). While an item is in flight the loop must not
 * touch its state or logits (a generation is in flight from submission to done()); the caller
 * submits at most one item per session at a time (per-session FIFO order lives in ops.c).
 */
#ifndef SRV_SCHEDULER_H
#define SRV_SCHEDULER_H

#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "generation.h"
#include "recur.h"
#include "requests.h"

/* Candidates per folded token at most (the request's top_k is bounded by the same number). */
#define SRV_MAX_TOP_K PROTO_MAX_TOP_K

struct srv_work;

/* What folding one token produced, handed to the work item's owner (srv_work.on_fold). */
typedef struct {
    uint64_t pos;           /* the token's position */
    int32_t token;
    int has_logprob;        /* 0 for a session's very first token */
    float logprob;          /* log p(token | everything before it) */
    int n_top;              /* candidates for the next position, highest first */
    const int32_t *top_ids; /* [n_top], valid during the call */
    const float *top_lps;   /* [n_top] */
} srv_fold_result;

typedef enum { SRV_WORK_STEP = 0, SRV_WORK_PREFILL = 1 } srv_work_kind;

typedef struct srv_work {
    srv_work_kind kind;
    /* the session's, written by the worker while in flight */
    recur_state *state;
    float *logits;          /* [vocab] next-position logits, IN and OUT */
    int *has_logits;        /* IN/OUT: 0, 1, or 2 = lsm_c holds the log-softmax constants */
    float *lsm_c;           /* [2] IN/OUT, the session's (see srv_session.lsm_c) */
    /* STEP */
    int sample;             /* 1: sample token from logits with sp/rng; 0: fold token */
    recur_sampler_params sp;
    uint64_t *rng;
    srv_gen *gen;           /* a generation that steps on (see above), or NULL */
    int32_t *gen_ids;       /* with gen: [gen->req->max_tokens] where each sampled id is recorded
                             * (at index gen->generated), or NULL */
    int32_t token;          /* IN (fold) or OUT (sampled) */
    float logprob;          /* OUT: log p(token | before), when has_logprob */
    int has_logprob;
    /* PREFILL */
    const int32_t *tokens;  /* [n] */
    int64_t n;
    int logit_tail;         /* 0: logits (and on_fold) for every position; k > 0: the LM head
                             * runs on the last k positions only, and on_fold is called for the
                             * last one alone (a fold answering its last position) */
    /* fold results (STEP with sample == 0, and PREFILL): when on_fold is set, it is called on
     * the worker for every folded token, in order, with the top_k most likely next tokens */
    void (*on_fold)(struct srv_work *w, const srv_fold_result *r);
    /* the owner's passes over the session's state, on the worker rather than the loop thread
     * (ops.c "checkpoint"): before(w) runs before the item computes (a generation: before each
     * of its steps), after(w) once it computed without error; NULL: none */
    void (*before)(struct srv_work *w);
    void (*after)(struct srv_work *w);
    int top_k;              /* <= SRV_MAX_TOP_K */
    int top_limit;          /* > 0: candidates only among ids < top_limit (the padding of a
                             * model's vocabulary beyond its tokenizer's never shows) */
    uint64_t pos0;          /* position of the first token (a generation: of its next token) */
    /* results */
    int err;                /* 0 or RECUR_E* */
    uint64_t tokens_seen;   /* after the item */
    /* bookkeeping */
    void *owner;
    struct srv_work *next;
} srv_work;

typedef struct srv_sched srv_sched;

typedef struct {
    uint64_t batches, batched_steps, max_batch_seen, prefill_slices, prefill_tokens;
    uint64_t busy_ns; /* workers' time in model work (decode batches and prefill slices) */
} srv_sched_stats;

/* Start workers. done(w, app) runs on the loop thread for every finished item; progress(w, app)
 * for a generation in flight whose new lines the scheduler moved to w->gen->taken. */
int srv_sched_create(uv_loop_t *loop, const recur_model *m, int workers, int max_batch,
                     int max_decode, int prefill_slice, void (*done)(srv_work *w, void *app),
                     void (*progress)(srv_work *w, void *app), void *app, srv_sched **out);
void srv_sched_submit(srv_sched *s, srv_work *w);
/* How long an idle worker polls for work before it sleeps on its condition variable (ns). */
void srv_sched_set_spin(srv_sched *s, uint64_t ns);
int srv_sched_prefill_slice(const srv_sched *s);
/* Counters (read on the loop thread; approximate while workers run). */
srv_sched_stats srv_sched_get_stats(srv_sched *s);
/* Join the workers (items still queued are dropped) and close the async handle; the loop must
 * run once more for the close to complete. free with srv_sched_free after that. */
void srv_sched_stop(srv_sched *s);
void srv_sched_free(srv_sched *s);

#endif /* SRV_SCHEDULER_H */
