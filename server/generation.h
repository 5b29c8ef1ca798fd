/*
 * generation.h — one /generate stream as the workers run it: what a generated token produces
 * (its NDJSON/SSE line, and its text through gen_text.h: the served tokenizer's streaming
 * decoder and the stop strings) and whether another step may follow. No threads, no locks, no I/O here: scheduler.c calls these on a worker between two
 * steps of the generation, ops.c on the loop thread while the generation is not in flight.
 *
 * A generation keeps stepping on the workers without a round trip through the loop thread per
 * token: after each step the worker appends the token's line to the stream's pending output
 * (under the scheduler's lock), and puts the item back on the ready queue, where it is batched
 * with whatever else is ready. It comes back to the loop (srv_sched's done callback) when it may
 * not continue (max_tokens, max_context, a stop string), when the loop raised `stop`, `hold` or
 * `yield`,
 * or when the loop has not taken its pending lines for SRV_GEN_BACKLOG bytes.
 */
#ifndef SRV_GENERATION_H
#define SRV_GENERATION_H

#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"
#include "gen_text.h"
#include "ndjson.h"
#include "recur.h"
#include "requests.h"

/* Pending output of a generation that the loop has not taken yet, in bytes: above this the
 * generation comes back to the loop instead of stepping on (the loop's own bound is the
 * connection's write_high_watermark; this one only matters when the loop thread lags). */
#define SRV_GEN_BACKLOG 65536
/* Candidates per generated token an internal client may keep (OpenAI's top_logprobs <= 20). */
#define SRV_GEN_MAX_TOP 20

typedef struct srv_gen {
    /* Set by the loop (srv_gen_init), read-only afterwards. */
    const proto_generate_req *req; /* max_tokens, stop strings (the op's, outlives the gen) */
    proto_framing framing;
    uint64_t max_seen;       /* never step once tokens_seen reaches this (max_context of a
                              * model with softmax layers; UINT64_MAX otherwise) */

    /* The worker's while the generation is in flight, the loop's otherwise. */
    uint64_t rng;            /* sampler state (seeded: same seed, same tokens) */
    int64_t generated;       /* tokens generated and folded so far */
    srv_gen_text text;       /* decoded text and stop strings (gen_text.h) */
    proto_buf token_text;    /* scratch: the text of the token being written */
    int stop_matched;        /* the last token completed a stop string */
    /* An internal client's generation (server/openai.c): records instead of lines, the
     * sampler's logits adjusted, the top candidates kept (set by srv_gen_set_openai). */
    int records;             /* 1: srv_gen_token appends a srv_gen_record, not a line */
    int want_top;            /* candidates per token to keep (<= SRV_GEN_MAX_TOP) */
    int n_top;               /* the worker's, for the token being sampled: */
    int32_t top_ids[SRV_GEN_MAX_TOP];
    float top_lps[SRV_GEN_MAX_TOP];
    recur_logit_adjust_params adjust;
    int adjusting;           /* penalties or a bias are set */
    int32_t *seen_ids;       /* [n_seen] distinct generated ids (penalties), owned */
    uint32_t *seen_counts;   /* [n_seen] */
    int32_t *seen_slot;      /* [vocab]: index into seen_ids, or -1; owned */
    size_t n_seen;
    const int32_t *end_ids;  /* [n_end_ids] tokens that end the generation (the template's
                              * end-of-turn token; borrowed); not part of its text */
    int n_end_ids;

    /* Latency histograms (metrics.c), set by the loop after srv_gen_init; the worker's while
     * in flight: time to first token from t_request_ns, then the time between tokens. */
    struct srv_hist *ttft, *itl; /* or NULL: nothing observed */
    uint64_t t_request_ns;       /* uv_hrtime when the request arrived */
    uint64_t t_last_ns;          /* uv_hrtime of the previous token, 0 before the first */
    /* Raised by the loop at any time, read by the worker after each step. */
    atomic_int stop;         /* the client left, or the drain timed out: come back now */
    atomic_int hold;         /* the connection is above its high watermark: come back now */
    atomic_int yield;        /* a snapshot round wants the state between two steps: come
                              * back once (ops.c copies it and submits the generation again) */

    /* Under the scheduler's lock: lines produced and not yet taken by the loop. */
    proto_buf lines;
    int64_t lines_tokens;    /* tokens in `lines` */
    uint64_t lines_seen;     /* tokens_seen after the last of them */
    int on_out_list;         /* queued for the loop's progress callback */
    struct srv_work *out_next;

    /* The loop's: what it took from `lines` (swapped, not copied). */
    struct srv_work *taken_next; /* the loop's list of generations with taken lines */
    proto_buf taken;
    int64_t taken_tokens;
    uint64_t taken_seen;
} srv_gen;

/* Reset g for a new stream (rng: the seeded sampler state, never 0) whose text is decoded with
 * tok (the served tokenizer, borrowed). 0, or RECUR_ENOMEM. */
int srv_gen_init(srv_gen *g, const proto_generate_req *req, proto_framing framing, uint64_t rng,
                 uint64_t max_seen, const recur_tokenizer *tok);
void srv_gen_free(srv_gen *g); /* the buffers and the decoder */

/* What srv_gen_token appends for a generation with records set: this header, then text_len
 * bytes of text, then n_top (int32 id, float logprob) pairs, highest first. Native layout: the
 * loop reads what a worker of the same process wrote (srv_gen_record_next). */
typedef struct {
    int32_t token;
    float logprob;      /* log p(token | before), the model's (before any adjustment) */
    uint32_t text_len;  /* UTF-8 text this token completes */
    int32_t n_top;
} srv_gen_record;

/* Make g an internal client's generation (after srv_gen_init): records, want_top candidates per
 * token, and the logit adjustment p (copied; its arrays must outlive g). vocab sizes the
 * penalty bookkeeping, allocated only when a penalty is set. */
void srv_gen_set_openai(srv_gen *g, int want_top, const recur_logit_adjust_params *p, int vocab);
/* The next record in [*p, end): 1 with *rec, *text and the top pairs (ids, lps copied into
 * [SRV_GEN_MAX_TOP] arrays), *p advanced; 0 at the end. */
int srv_gen_record_next(const char **p, const char *end, srv_gen_record *rec, const char **text,
                        int32_t *top_ids, float *top_lps);

/* On the worker, before sampling: the logits to sample from. adjusted [vocab] is the worker's
 * scratch; returns logits itself when g adjusts nothing. */
const float *srv_gen_sampling_logits(srv_gen *g, const float *logits, float *adjusted, int vocab);
/* On the worker, once log p = (logits - c[0]) - c[1] is known for the position being sampled:
 * keep its want_top best candidates. */
void srv_gen_keep_top(srv_gen *g, const float *logits, int vocab, const float c[2]);

/* Token `token` at position `pos` was sampled (log-probability logprob) and folded: append its
 * line to out with the text that is final now (gen_text.h), check the stop strings and the end
 * ids (an end id ends the generation as a stop string does; its own text is left out), count it.
 * When this token is the last one (a stop string, max_tokens, max_seen), its line also carries
 * the text held back until then, so the stream's text fields concatenate to the decoded text
 * (cut at the stop string). */
void srv_gen_token(srv_gen *g, uint64_t pos, int32_t token, float logprob, proto_buf *out);

/* The stream ends otherwise (cancelled by the drain): append the text still held back (an
 * unfinished UTF-8 sequence, the beginning of a stop string), usually nothing. */
void srv_gen_end_text(srv_gen *g, proto_buf *out);

/* 1 when another step may follow, tokens_seen being the session's after the last step
 * (max_tokens, max_seen and stop strings; not the flags, which the caller checks). */
int srv_gen_may_continue(const srv_gen *g, uint64_t tokens_seen);

#endif /* SRV_GENERATION_H */
