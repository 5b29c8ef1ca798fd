/*
 * ops.h — a session's requests as a FIFO of operations, so requests on one session apply in
 * arrival order. The head op runs; cheap ops (info, delete, fork, state get/put) run on the
 * loop thread when they reach the head, compute ops (fold, generate, create with prefill) go
 * to the scheduler one step or slice at a time, and stream their lines back as they finish. A
 * generation is submitted once and steps on the workers until it ends or the loop holds it
 * (backpressure) or stops it (client gone, drain timeout); its lines arrive through
 * srv_ops_gen_progress.
 *
 * Ownership: an op holds a reference on its connection (srv_conn_ref) from enqueue to finish,
 * and is the connection's user pointer meanwhile (on_close / on_drain find it there).
 */
#ifndef SRV_OPS_H
#define SRV_OPS_H

#include "app.h"
#include "generation.h"
#include "ndjson.h"
#include "requests.h"

typedef enum {
    SRV_OP_DELETE,
    SRV_OP_FORK,
    SRV_OP_GET_STATE,
    SRV_OP_PUT_STATE,
    SRV_OP_FOLD,
    SRV_OP_GENERATE,
    SRV_OP_CREATE, /* prefill of a session being created; answers 201 when done */
    SRV_OP_CKPT_TAKE,   /* POST .../checkpoints (checkpoints.h) */
    SRV_OP_CKPT_LIST,   /* GET .../checkpoints */
    SRV_OP_CKPT_DELETE, /* DELETE .../checkpoints/{cid} */
    SRV_OP_ROLLBACK     /* POST .../rollback */
} srv_op_kind;

struct srv_op {
    srv_op_kind kind;
    srv_app *app;
    srv_session *sess;
    srv_conn *conn;
    struct srv_op *next;
    int started, in_flight, paused, streaming;
    int cancelled;      /* the client left: produce nothing more */
    int stop_requested; /* drain timeout: end the stream with reason "cancelled" */
    proto_framing framing;
    /* FOLD / CREATE */
    int32_t *tokens;    /* [n], owned */
    size_t n, done;
    int top_k;
    /* CREATE: look the prompt up in the prefix cache first, store its states (prefix_cache.h);
     * the session then tracks its tokens and reports pc_cached as "cached_tokens" */
    int pc_lookup;
    int pc_report;      /* CREATE: the response carries "cached_tokens" (asked for the cache) */
    /* FOLD / GENERATE: take a checkpoint at the end ("checkpoint": true), its id in the done line */
    int ckpt_at_end;
    /* CKPT_DELETE / ROLLBACK: the checkpoint id as the client gave it (NUL-terminated) */
    char ckpt_id[65];
    /* GENERATE */
    proto_generate_req gen;
    int32_t *gen_ids;   /* [gen.max_tokens] the sampled ids (scheduler.c records them), for the
                         * session's token history (pc_hist); NULL when it tracks none */
    srv_gen run;        /* the stream as the workers run it (generation.h) */
    /* FOLD / GENERATE: the session as the op found it (state checkpoint, then the logits), put
     * back when the op fails: a step turned non-finite or left the state outside the value
     * rule (docs/API.md non_finite / state_range); freed when the op commits */
    uint8_t *ckpt;
    int ckpt_has_logits;
    float ckpt_lsm[2];
    /* PUT_STATE */
    uint8_t *blob;      /* owned copy of the body */
    size_t blob_len;
    srv_work work;
    proto_buf out;
};

/* A new op for conn on sess (fields to be filled by the caller). */
srv_op *srv_op_new(srv_app *app, srv_op_kind kind, srv_session *sess, srv_conn *conn);
/* Append to the session's FIFO and start it when it is first. The caller has checked
 * max_queued_ops_per_session (routes.c). */
void srv_ops_enqueue(srv_op *op);
/* 503 max_sessions (+ Retry-After), counted: a create or fork found the table full. */
void srv_ops_reject_full(srv_app *app, srv_conn *c);

#endif /* SRV_OPS_H */
