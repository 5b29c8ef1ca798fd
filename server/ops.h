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
    SRV_OP_ROLLBACK,    /* POST .../rollback */
    SRV_OP_CLIENT  /* never an op: the kind an internal client (openai.h) starts with, so a
                    * connection's user pointer says which of the two it is */
} srv_op_kind;

/* An op run for an internal client (server/openai.c) instead of an HTTP connection: its conn
 * is NULL, and what ops.c would send on a connection goes to the sink. Called on the loop
 * thread; none of them may free the op (released says when it is freed). */
typedef struct srv_op_sink {
    /* CREATE: the prompt is folded; the op is still its session's running head, so an op
     * enqueued on the session now runs next (the session is never idle in between). */
    void (*created)(srv_op *op);
    /* The op was refused or failed before producing anything (status, code as the session API's). */
    void (*failed)(srv_op *op, int status, const char *code, const char *message);
    /* GENERATE: records (generation.h srv_gen_record) of `tokens` new tokens. */
    void (*output)(srv_op *op, const char *data, size_t len, int64_t tokens);
    /* GENERATE ended: reason "length", "stop" or "cancelled", or err != 0 (a RECUR_E*: the
     * session was put back as the op found it). */
    void (*ended)(srv_op *op, const char *reason, int err);
    int (*writable)(srv_op *op);    /* 0: hold the generation (backpressure) */
    void (*released)(srv_op *op);   /* the op is about to be freed */
} srv_op_sink;

struct srv_op {
    srv_op_kind kind;
    srv_app *app;
    uint64_t t_request_ns;  /* uv_hrtime when its request arrived (time to first token) */
    uint64_t t_enqueued_ns; /* uv_hrtime of srv_ops_enqueue (queue wait) */
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
    int last_only;          /* FOLD: "output": "last", one line for the last token */
    uint64_t progress;      /* FOLD: a progress line every this many tokens (0 = none) */
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
    int ckpt_pending;   /* ckpt is allocated, not filled yet: the worker fills it before the
                         * op's first item (ops.c ckpt_take); until then the state is as found */
    int checked;        /* the worker checked the value rule after the op's last item ... */
    int check_rc;       /* ... with this result (recur_state_check) */
    /* PUT_STATE */
    uint8_t *blob;      /* owned copy of the body */
    size_t blob_len;
    srv_work work;
    proto_buf out;
    /* an internal client's op (above) */
    const srv_op_sink *sink;
    void *sink_ctx;
    int sink_index;             /* the client's own number for the op */
    int drop_session;           /* remove the session once this op ends and nothing is queued */
    int want_top;               /* GENERATE: candidates kept per token (srv_gen_set_openai) */
    recur_logit_adjust_params adjust;
    /* the Redis tier (redis_tier.h): what follows the commit of the session the op changed */
    void (*after_commit)(srv_op *op);
    srv_session *commit_sess;   /* the session committed (fork: the new one) */
    int committed;              /* went through a commit (else a change is left for op end) */
    int end_reason;             /* GENERATE: its reason, for the done line after the commit */
    int defer_reply;            /* loop-side ops: the reply is kept until the commit is made */
    int changed;                /* ... and the op changed a session */
    int resp_status;            /* ... the kept reply: status (0: none), body in out */
    const char *resp_type;
    /* Idempotency-Key (idempotency.h): "" none */
    char idem_key[129];
    int idem_checked;           /* looked up already (start runs the op) */
};

/* A new op for conn on sess (fields to be filled by the caller). */
srv_op *srv_op_new(srv_app *app, srv_op_kind kind, srv_session *sess, srv_conn *conn);
/* Append to the session's FIFO and start it when it is first. The caller has checked
 * max_queued_ops_per_session (routes.c). */
void srv_ops_enqueue(srv_op *op);
/* The client of op left: it stops at its next step or slice boundary (what a closed
 * connection does to its op). */
void srv_ops_cancel(srv_op *op);
/* op was held for backpressure (its sink said not writable): go on when it is writable again. */
void srv_ops_resume(srv_op *op);
/* A new session holding a copy of src's state, logits, tokens_seen, checkpoints and token
 * history (what fork does): SRV_COPY_OK, or why not (nothing was created then). */
enum {
    SRV_COPY_OK = 0,
    SRV_COPY_FULL,   /* max_sessions */
    SRV_COPY_NOMEM,  /* no memory, or no resident slot */
    SRV_COPY_CKPT,   /* no memory for the checkpoints */
    SRV_COPY_MODEL,  /* the state copy failed */
};
int srv_ops_copy_session(srv_app *app, srv_session *src, srv_session **out);
/* The Redis tier's answer to the commit (or delete) op waited for (redis_tier.h): SRV_TIER_OK
 * sends the op's response; otherwise the op ends with 503 store_unavailable or 409
 * session_fenced and the copy that could not be committed is dropped. */
void srv_ops_committed(srv_op *op, int rc);
/* The Redis tier's answer about op's Idempotency-Key (redis_tier.h srv_tier_idem_get): its
 * record (NULL: none, the op runs), or ok == 0 when Redis could not be asked (503). */
void srv_ops_idem_answer(srv_op *op, const char *record, int ok);
/* A cached create's lookup in Redis (prefix_redis.h) ended: op->sess holds op->sess->pc_cached
 * tokens of its prompt; the prefill goes on from there. */
void srv_ops_pc_remote_done(srv_op *op);
/* 503 max_sessions (+ Retry-After), counted: a create or fork found the table full. */
void srv_ops_reject_full(srv_app *app, srv_conn *c);

#endif /* SRV_OPS_H */
