/* ops.c — per-session FIFO of operations and their execution (ops.h). */
#include "ops.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "checkpoints.h"
#include "dlist.h"
#include "idempotency.h"
#include "log.h"
#include "openai.h"
#include "prefix_cache.h"
#include "prefix_redis.h"
#include "redis_tier.h"
#include "residency.h"
#include "responses.h"
#include "state_blob.h"
#include "text.h"

enum { REASON_LENGTH = 0, REASON_STOP = 1, REASON_CANCELLED = 2 };
static const char *const REASONS[] = {"length", "stop", "cancelled"};

static void pump(srv_session *s);
static void stream_error_end(srv_op *op, int rc);
static const char *ckpt_at_end(srv_op *op, char id[]);
static void pc_after_fold(srv_op *op);
static void write_out(srv_op *op);
static void idem_record(srv_op *op, int status, const char *json, size_t len);

/* ---------------------------------------------------------------- helpers */

srv_op *srv_op_new(srv_app *app, srv_op_kind kind, srv_session *sess, srv_conn *conn)
{
    srv_op *op = calloc(1, sizeof *op);
    if (!op)
        abort();
    op->kind = kind;
    op->app = app;
    op->sess = sess;
    op->conn = conn;
    op->t_request_ns = conn ? srv_conn_request_start_ns(conn) : uv_hrtime();
    proto_buf_init(&op->out);
    return op;
}

static void srv_op_free(srv_op *op)
{
    if (!op)
        return;
    if (op->sink)
        op->sink->released(op);
    free(op->tokens);
    free(op->blob);
    free(op->ckpt);
    free(op->gen_ids);
    proto_buf_free(&op->out);
    srv_gen_free(&op->run);
    free(op);
}

static void op_error(srv_op *op, int status, const char *code, const char *message)
{
    if (op->sink)
        op->sink->failed(op, status, code, message);
    else if (!op->cancelled)
        srv_respond_error(op->conn, status, code, message);
}

/* Tokens the op's request folded and generated, for its access log line (an OpenAI request
 * reports its usage itself, openai.c). */
static void note_tokens(srv_op *op, uint64_t in, uint64_t out)
{
    if (op->conn && !op->sink) {
        srv_access_note *n = srv_conn_access_note(op->conn);
        n->tokens_in += in;
        n->tokens_out += out;
    }
}

/* The op's client may take more output now. */
static int op_writable(srv_op *op)
{
    return op->sink ? op->sink->writable(op) : srv_stream_writable(op->conn);
}

/* ---------------------------------------------------------------- checkpoint (docs/API.md non_finite)
 *
 * A fold or a generation either completes with a state that keeps the value rule (docs/MODEL.md
 * "State values") or leaves the session exactly as it found it: the workers refuse a step whose
 * logits are not finite (scheduler.c), the op then puts the checkpoint back. One copy of the
 * recurrent state per op (models/default: 196 KB, a few microseconds), not per step: batched
 * decode is untouched. The copy is taken on the worker, right before the op's first item
 * computes (ckpt_take), and a fold's or a create's check of the value rule runs on the worker
 * right after its last item (check_after): the loop thread makes no pass over the state (at
 * 100k resident sessions a state not touched for a while costs several µs a page on its first
 * touch, docs/OPERATIONS.md). Until the first item the state is as the op found it. */

static void op_checkpoint(srv_op *op)
{
    srv_session *s = op->sess;
    size_t sb = recur_state_checkpoint_bytes(s->state);
    size_t lb = (size_t)op->app->info->vocab_size * sizeof(float);
    op->ckpt = malloc(sb + lb);
    if (!op->ckpt)
        abort();
    op->ckpt_pending = 1;
}

/* On the worker (srv_work.before), before an item of the op computes: the checkpoint, once. */
static void ckpt_take(srv_work *w)
{
    srv_op *op = w->owner;
    if (!op->ckpt_pending)
        return;
    size_t sb = recur_state_checkpoint_bytes(w->state);
    recur_state_checkpoint(w->state, op->ckpt);
    memcpy(op->ckpt + sb, w->logits, (size_t)op->app->info->vocab_size * sizeof(float));
    op->ckpt_has_logits = *w->has_logits;
    memcpy(op->ckpt_lsm, w->lsm_c, sizeof op->ckpt_lsm);
    op->ckpt_pending = 0;
}

/* The value rule on the state after the op's tokens: from the checkpoint's tokens_seen (a
 * create: from 0). */
static int op_check(srv_op *op, const recur_state *st)
{
    uint64_t seen0 = 0;
    if (op->ckpt)
        memcpy(&seen0, op->ckpt, sizeof seen0); /* recur_state_checkpoint starts with tokens_seen */
    return recur_state_check(st, seen0);
}

/* On the worker (srv_work.after), after a fold's or a create's last item computed. */
static void check_after(srv_work *w)
{
    srv_op *op = w->owner;
    op->check_rc = op_check(op, w->state);
    op->checked = 1;
}

/* Put the session back as the op found it (nothing in flight) and drop the checkpoint. */
static void op_rollback(srv_op *op)
{
    srv_session *s = op->sess;
    if (!op->ckpt)
        return;
    op->checked = 0;
    if (op->ckpt_pending) { /* no item ran: nothing changed */
        free(op->ckpt);
        op->ckpt = NULL;
        return;
    }
    size_t sb = recur_state_checkpoint_bytes(s->state);
    recur_state_rollback(s->state, op->ckpt);
    memcpy(s->logits, op->ckpt + sb, (size_t)op->app->info->vocab_size * sizeof(float));
    s->has_logits = op->ckpt_has_logits;
    memcpy(s->lsm_c, op->ckpt_lsm, sizeof op->ckpt_lsm);
    s->tokens_seen = recur_state_tokens_seen(s->state);
    s->snapshot_bytes = srv_session_state_bytes(s, op->app->info->vocab_size);
    srv_table_changed(op->app->table, s); /* a snapshot captured mid-op (residency.c) no longer
                                           * matches: write it again */
    free(op->ckpt);
    op->ckpt = NULL;
}

/* The op is done (nothing in flight): keep what it computed if the state keeps the value rule
 * (0), else roll back and return the rule's code. */
static int op_commit(srv_op *op)
{
    if (!op->ckpt)
        return 0;
    int rc = op->ckpt_pending ? 0 /* no item ran */
             : op->checked    ? op->check_rc
                              : op_check(op, op->sess->state);
    op->checked = 0;
    if (rc) {
        op_rollback(op);
        return rc;
    }
    free(op->ckpt);
    op->ckpt = NULL;
    return 0;
}

/* The error code of a failed compute op. */
static const char *compute_error_code(int rc)
{
    return rc == RECUR_ENONFINITE ? "non_finite" : rc == RECUR_ERANGE ? "state_range" : "model_error";
}

/* A loop-side op's reply: sent now, or kept in op->out until its commit is made (defer_reply). */
static void reply(srv_op *op, int status, const char *type, const void *body, size_t len)
{
    if (!op->defer_reply) {
        srv_respond(op->conn, status, type, body, len, NULL);
        return;
    }
    proto_buf_clear(&op->out);
    proto_buf_append(&op->out, body, len);
    op->resp_status = status;
    op->resp_type = type;
}

static void respond_session(srv_op *op, int status, srv_session *s)
{
    if (op->cancelled)
        return;
    proto_buf b;
    proto_buf_init(&b);
    s->snapshot_bytes = srv_session_state_bytes(s, op->app->info->vocab_size); /* nothing in flight */
    proto_session_json(&b, s->id, s->tokens_seen, op->app->info->state_bytes, s->snapshot_bytes,
                       s->q_len > 0 ? s->q_len - 1 : 0);
    if (op->pc_report) { /* a create that asked for the prefix cache: how much came from it */
        b.len--;
        proto_buf_printf(&b, ",\"cached_tokens\":%llu}", (unsigned long long)s->pc_cached);
    }
    reply(op, status, "application/json", b.data, b.len);
    proto_buf_free(&b);
}

/* Pop the finished head op, release its connection, free it. Does not pump. */
static void finish(srv_op *op)
{
    srv_session *s = op->sess;
    op_commit(op); /* a cancelled fold or generation keeps what it folded, if that is valid */
    if (s->pc_hist && s->pc_hist_n != s->tokens_seen)
        srv_pcache_hist_drop(s); /* cancelled or failed midway: the history is not known */
    srv_table_touch(op->app->table, s, uv_now(op->app->loop)); /* idle time counts from the end
                                                                * of the request */
    if (s->q_head == op) {
        s->q_head = op->next;
        if (!s->q_head)
            s->q_tail = NULL;
        s->q_len--;
        s->running = 0;
    }
    if (op->conn) {
        srv_conn_set_user(op->conn, NULL);
        srv_conn_unref(op->conn);
        op->conn = NULL;
    }
    srv_op_free(op);
}

/* Finish and start whatever is next on the session (an internal client's session goes once
 * its last op ended: drop_session). */
static void finish_and_pump(srv_op *op)
{
    srv_session *s = op->sess;
    srv_app *app = op->app;
    int drop = op->drop_session;
    if (!op->committed && op->started && !op->sink &&
        (op->kind == SRV_OP_FOLD || op->kind == SRV_OP_GENERATE))
        s->rv_dirty = 1; /* cancelled or failed midway: what it kept is committed at op end */
    finish(op);
    srv_tier_op_end(app, s);
    if (drop && !s->q_head) {
        srv_table_remove(app->table, s);
        return;
    }
    pump(s);
}

/* Drop a session whose only running op is the head (answered already): every other queued op
 * gets status/code/message. gone: deleted for good (its state_dir file too); else only this
 * copy goes (its file, a version Redis accepted, stays: residency.h). */
static void drop_session_ops(srv_app *app, srv_session *s, int status, const char *code,
                             const char *message, int gone)
{
    srv_op *o = s->q_head;
    while (o) {
        srv_op *n = o->next;
        if (o->conn && !o->cancelled && !o->started)
            srv_respond_error(o->conn, status, code, message);
        if (o->conn) {
            srv_conn_set_user(o->conn, NULL);
            srv_conn_unref(o->conn);
            o->conn = NULL;
        }
        srv_op_free(o);
        o = n;
    }
    s->q_head = s->q_tail = NULL;
    s->q_len = 0;
    if (gone) {
        srv_table_remove(app->table, s);
        return;
    }
    srv_residency_dropping(app, s, 0);
    srv_table_drop(app->table, s);
}

/* Remove a session whose only op (the running head) is op: every other queued op gets 404. */
static void remove_session(srv_app *app, srv_session *s)
{
    drop_session_ops(app, s, 404, "session_not_found", "the session was deleted", 1);
}

/* ---------------------------------------------------------------- the Redis tier (redis_tier.h) */

/* op changed s: commit it, then `then` sends the response (at once, or when Redis has the
 * commit: redis_sync). */
static void commit_then(srv_op *op, srv_session *s, void (*then)(srv_op *))
{
    op->after_commit = then;
    op->commit_sess = s;
    op->committed = 1;
    if (!srv_tier_commit(op->app, s, op))
        then(op);
}

/* A loop-side op's kept reply, then the next op. */
static void send_reply(srv_op *op)
{
    if (op->resp_status && !op->cancelled)
        srv_respond(op->conn, op->resp_status, op->resp_type, op->out.data, op->out.len, NULL);
    proto_buf_clear(&op->out);
    finish_and_pump(op);
}

/* Run a loop-side op that may change a session (fn sets op->changed, and op->commit_sess when
 * it is not op->sess): its reply leaves once the change is committed. */
static void run_changing(srv_op *op, void (*fn)(srv_op *))
{
    op->defer_reply = 1;
    fn(op);
    op->defer_reply = 0;
    if (op->changed && op->resp_status)
        idem_record(op, op->resp_status, op->out.data, op->out.len);
    if (op->changed)
        commit_then(op, op->commit_sess ? op->commit_sess : op->sess, send_reply);
    else
        send_reply(op);
}

void srv_ops_committed(srv_op *op, int rc)
{
    if (rc == SRV_TIER_OK) {
        op->after_commit(op);
        return;
    }
    srv_app *app = op->app;
    int fenced = rc == SRV_TIER_FENCED;
    int status = fenced ? 409 : 503;
    const char *code = fenced ? "session_fenced" : "store_unavailable";
    const char *msg = fenced ? "another node took this session over; this request's result was "
                               "not kept: send it again"
                             : "the session store (Redis) did not take this request's result; it "
                               "was not kept: retry";
    if (op->kind == SRV_OP_DELETE) { /* nothing was removed */
        srv_respond_error_ex(op->conn, status, code, msg, fenced ? NULL : "Retry-After: 1\r\n");
        finish_and_pump(op);
        return;
    }
    srv_session *s = op->sess, *changed = op->commit_sess;
    if (!op->cancelled) {
        if (op->streaming) {
            proto_stream_error(&op->out, op->framing, code, msg);
            write_out(op);
            srv_stream_end(op->conn);
        } else {
            srv_respond_error_ex(op->conn, status, code, msg, fenced ? NULL : "Retry-After: 1\r\n");
        }
    }
    srv_log(SRV_LOG_WARN, "commit_refused", "\"code\":\"%s\",\"id_prefix\":\"%.8s\"", code,
            changed->id);
    if (changed != s) { /* a fork's new session: never acknowledged */
        srv_table_drop(app->table, changed);
        finish_and_pump(op);
        return;
    }
    /* the copy holds a change Redis does not: dropped, the next request reloads from Redis */
    drop_session_ops(app, s, status, code, msg, 0);
}

static void write_out(srv_op *op)
{
    if (op->out.len && !op->cancelled)
        srv_stream_write(op->conn, op->out.data, op->out.len);
    proto_buf_clear(&op->out);
}

/* ---------------------------------------------------------------- Idempotency-Key (idempotency.h) */

static char idem_kind(const srv_op *op)
{
    return op->kind == SRV_OP_FOLD ? 'f' : op->kind == SRV_OP_GENERATE ? 'g'
           : op->kind == SRV_OP_CKPT_TAKE ? 'c' : 'r';
}

/* The op succeeded: its record (status, JSON body) is kept with the session and committed with
 * its state. */
static void idem_record(srv_op *op, int status, const char *json, size_t len)
{
    if (!op->idem_key[0])
        return;
    proto_buf r;
    proto_buf_init(&r);
    proto_buf_printf(&r, "%c%d ", idem_kind(op), status);
    proto_buf_append(&r, json, len);
    proto_buf_append(&r, "", 1); /* NUL */
    srv_idem_put(op->sess, op->idem_key, r.data, op->app->cfg.max_idempotency_keys_per_session);
    proto_buf_free(&r);
}

/* A stream's final line as a record's JSON: the line without its newline (NDJSON framing). */
static void idem_record_line(srv_op *op, proto_buf *line)
{
    if (op->idem_key[0] && line->len > 1)
        idem_record(op, 200, line->data, line->len - 1);
}

/* Answer op from a record of its key (a retry): nothing runs, nothing changes. */
static void idem_replay(srv_op *op, const char *record)
{
    char kind;
    int status;
    const char *json;
    op->committed = 1; /* nothing to commit */
    if (srv_idem_parse(record, &kind, &status, &json) != 0) {
        op_error(op, 500, "store_invalid", "the Idempotency-Key record is malformed");
    } else if (kind != idem_kind(op)) {
        op_error(op, 422, "idempotency_key_reused",
                 "this Idempotency-Key was used for another kind of request on this session");
    } else if (!op->cancelled) {
        static const char hdr[] = "Idempotency-Replayed: true\r\n";
        if (kind == 'f' || kind == 'g') {
            proto_buf b;
            proto_buf_init(&b);
            proto_final_line(&b, op->framing, json, strlen(json));
            srv_respond(op->conn, status, proto_frame_content_type(op->framing), b.data, b.len, hdr);
            proto_buf_free(&b);
        } else {
            srv_respond(op->conn, status, "application/json", json, strlen(json), hdr);
        }
    }
    finish_and_pump(op);
}

static void run_op(srv_op *op);

/* The op carries a key: a record of it answers (1), or Redis is asked (1: srv_ops_idem_answer
 * goes on), or the op runs (0). */
static int idem_check(srv_op *op)
{
    if (!op->idem_key[0] || op->idem_checked)
        return 0;
    op->idem_checked = 1;
    const srv_idem *r = srv_idem_find(op->sess, op->idem_key);
    if (r) {
        idem_replay(op, r->record);
        return 1;
    }
    return srv_tier_idem_get(op->app, op->sess, op->idem_key, op);
}

void srv_ops_idem_answer(srv_op *op, const char *record, int ok)
{
    if (!ok) {
        srv_respond_error_ex(op->conn, 503, "store_unavailable",
                             "the Idempotency-Key could not be looked up in the session store; retry",
                             "Retry-After: 1\r\n");
        op->committed = 1;
        finish_and_pump(op);
    } else if (record) {
        idem_replay(op, record);
    } else {
        run_op(op);
    }
}

/* ---------------------------------------------------------------- prefix cache (prefix_cache.h) */

/* The longest token history a session tracks: a prompt and a completion of one request each. */
static size_t pc_hist_max(const srv_app *app)
{
    return 2 * app->cfg.max_tokens_per_request;
}

/* A cached create's history follows its prefill: the prompt's ids folded so far (from the
 * restored prefix on) are appended, so the history and its hash are never rebuilt. */
static void pc_create_hist(srv_op *op)
{
    srv_session *s = op->sess;
    if (s->pc_hist && s->pc_hist_n < op->done && s->tokens_seen == op->done)
        srv_pcache_hist_append(s, op->tokens + s->pc_hist_n, op->done - s->pc_hist_n,
                               pc_hist_max(op->app));
}

/* A fold or create completed: the session's history grows by its tokens (a create's prompt is
 * the whole history), and the state after them is stored. */
static void pc_after_fold(srv_op *op)
{
    srv_session *s = op->sess;
    srv_app *app = op->app;
    if (op->kind == SRV_OP_CREATE && op->pc_lookup) {
        pc_create_hist(op); /* the prompt's ids not yet in the history (usually none) */
    } else if (op->kind == SRV_OP_FOLD && s->pc_hist) {
        if (s->pc_hist_n + op->n != s->tokens_seen) { /* cannot happen: the history was exact */
            srv_pcache_hist_drop(s);
            return;
        }
        srv_pcache_hist_append(s, op->tokens, op->n, pc_hist_max(app));
    }
    if (s->pc_hist && s->pc_hist_n == s->tokens_seen)
        srv_pcache_store_hist(app->pcache, s);
}

/* A cached create's prefill slice ends at the next multiple of prefix_checkpoint_interval, where
 * its state is stored (an edit late in a long prompt resumes from there). */
static int64_t pc_slice_cap(const srv_op *op, int64_t n)
{
    uint64_t iv = op->pc_lookup ? srv_pcache_interval(op->app->pcache) : 0;
    if (!iv)
        return n;
    uint64_t pos = op->sess->tokens_seen, next = (pos / iv + 1) * iv;
    return (int64_t)(next - pos) < n ? (int64_t)(next - pos) : n;
}

static void pc_after_slice(srv_op *op)
{
    srv_session *s = op->sess;
    uint64_t iv = op->pc_lookup ? srv_pcache_interval(op->app->pcache) : 0;
    if (!op->pc_lookup || op->kind != SRV_OP_CREATE)
        return;
    pc_create_hist(op);
    if (iv && op->done < op->n && s->tokens_seen % iv == 0 && s->pc_hist_n == op->done)
        srv_pcache_store_hist(op->app->pcache, s);
}

/* ---------------------------------------------------------------- compute submission */

/* On a worker, while op's work item is in flight (the loop does not touch op->out then): the
 * folded token's /tokens line. */
static void fold_line(srv_work *w, const srv_fold_result *r)
{
    srv_op *op = w->owner;
    proto_fold_line(&op->out, op->framing, r->pos, r->token, r->has_logprob, r->logprob, r->top_ids,
                    r->top_lps, r->n_top);
}

static void submit_fold_slice(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    if (s->snap_wanted) /* a snapshot round is waiting for this boundary */
        srv_residency_capture(app, s);
    srv_work *w = &op->work;
    memset(w, 0, sizeof *w);
    w->state = s->state;
    w->logits = s->logits;
    w->has_logits = &s->has_logits;
    w->lsm_c = s->lsm_c;
    w->owner = op;
    if (op->kind == SRV_OP_FOLD) /* a create's prefill answers with no lines */
        w->on_fold = fold_line;
    int final = 1; /* the op's last slice (a step is: it is the op's last token) */
    w->top_k = op->top_k;
    w->top_limit = srv_text_sample_limit(app);
    w->pos0 = s->tokens_seen;
    size_t left = op->n - op->done;
    if (left == 1) {
        /* One token: a decode step, batched with other sessions' steps. */
        w->kind = SRV_WORK_STEP;
        w->token = op->tokens[op->done];
    } else {
        w->kind = SRV_WORK_PREFILL;
        size_t slice = (size_t)srv_sched_prefill_slice(app->sched);
        w->tokens = op->tokens + op->done;
        w->n = pc_slice_cap(op, (int64_t)(left < slice ? left : slice));
        final = op->done + (size_t)w->n == op->n;
    }
    if (op->kind == SRV_OP_CREATE) /* no lines: the LM head on the last position alone */
        w->logit_tail = 1;
    if (op->ckpt_pending)
        w->before = ckpt_take;
    if (final && (op->ckpt || op->kind == SRV_OP_CREATE))
        w->after = check_after;
    if (op->last_only) {
        /* "output": "last": the LM head only where it is needed — the last position of every
         * slice (the session's next-token logits), the last two of the final one (its line's
         * logprob) */
        w->logit_tail = final ? 2 : 1;
        if (!final)
            w->on_fold = NULL;
    }
    op->in_flight = 1;
    srv_sched_submit(app->sched, w);
}

/* Hand the generation to the workers: it steps on there until it ends or is held/stopped. */
static void submit_generation(srv_op *op)
{
    srv_session *s = op->sess;
    if (s->snap_wanted) /* the generation came back for this (generation.h, yield) */
        srv_residency_capture(op->app, s);
    srv_work *w = &op->work;
    memset(w, 0, sizeof *w);
    w->kind = SRV_WORK_STEP;
    w->state = s->state;
    w->logits = s->logits;
    w->has_logits = &s->has_logits;
    w->lsm_c = s->lsm_c;
    w->owner = op;
    w->sample = 1;
    w->sp.temperature = op->gen.temperature;
    w->sp.top_k = op->gen.top_k;
    w->sp.top_p = op->gen.top_p;
    w->sp.vocab_limit = srv_text_sample_limit(op->app); /* padded ids are never sampled */
    w->rng = &op->run.rng;
    w->gen = &op->run;
    w->gen_ids = op->gen_ids;
    w->pos0 = s->tokens_seen;
    if (op->ckpt_pending)
        w->before = ckpt_take; /* its first step takes it; its end is checked on the loop */
    atomic_store(&op->run.hold, 0); /* continue_op submits only while the stream is writable */
    atomic_store(&op->run.yield, 0);
    op->in_flight = 1;
    srv_sched_submit(op->app->sched, w);
}

static void gen_done(srv_op *op);

static void end_generation(srv_op *op, int reason)
{
    srv_app *app = op->app;
    int rc = op_commit(op);
    if (rc) {
        stream_error_end(op, rc);
        return;
    }
    app->counters.generations_by_reason[reason]++;
    srv_session *s = op->sess;
    if (s->pc_hist && op->gen_ids) { /* prompt + completion: the next turn's prefix */
        srv_pcache_hist_append(s, op->gen_ids, (size_t)op->run.generated, pc_hist_max(app));
        if (s->pc_hist && s->pc_hist_n == s->tokens_seen)
            srv_pcache_store_hist(app->pcache, s);
    }
    char cid[SRV_CKPT_ID_LEN + 1];
    const char *ck = reason == REASON_CANCELLED ? NULL : ckpt_at_end(op, cid);
    snprintf(op->ckpt_id, sizeof op->ckpt_id, "%s", ck ? ck : "");
    op->end_reason = reason;
    if (op->idem_key[0] && reason != REASON_CANCELLED) {
        /* the done line, with the generated ids (the per-token lines are not kept) */
        proto_buf line;
        proto_buf_init(&line);
        proto_gen_done(&line, PROTO_FRAME_NDJSON, REASONS[reason], NULL, 0, s->tokens_seen, ck);
        line.len -= 2; /* reopen: "}\n" */
        proto_buf_puts(&line, ",\"tokens\":[");
        for (int64_t i = 0; op->gen_ids && i < op->run.generated; i++)
            proto_buf_printf(&line, "%s%d", i ? "," : "", (int)op->gen_ids[i]);
        proto_buf_puts(&line, "]}\n");
        idem_record_line(op, &line);
        proto_buf_free(&line);
    }
    commit_then(op, s, gen_done);
}

/* A generation's done line (after its commit, redis_tier.h). */
static void gen_done(srv_op *op)
{
    const char *ck = op->ckpt_id[0] ? op->ckpt_id : NULL;
    const char *reason = REASONS[op->end_reason];
    if (op->sink) {
        op->sink->ended(op, reason, 0); /* it takes the held-back text (openai.c) */
    } else if (!op->cancelled) {
        proto_buf held; /* a stream cut by the drain may still hold text back (generation.h) */
        proto_buf_init(&held);
        srv_gen_end_text(&op->run, &held);
        proto_gen_done(&op->out, op->framing, reason, held.data, held.len,
                       op->sess->tokens_seen, ck);
        proto_buf_free(&held);
        write_out(op);
        srv_stream_end(op->conn);
    }
    finish_and_pump(op);
}

static void fold_done(srv_op *op);

static void end_fold(srv_op *op)
{
    int rc = op_commit(op);
    if (rc) {
        stream_error_end(op, rc);
        return;
    }
    pc_after_fold(op);
    char cid[SRV_CKPT_ID_LEN + 1];
    const char *ck = ckpt_at_end(op, cid);
    snprintf(op->ckpt_id, sizeof op->ckpt_id, "%s", ck ? ck : "");
    if (op->idem_key[0]) {
        proto_buf line;
        proto_buf_init(&line);
        proto_fold_done(&line, PROTO_FRAME_NDJSON, op->sess->tokens_seen, ck);
        idem_record_line(op, &line);
        proto_buf_free(&line);
    }
    commit_then(op, op->sess, fold_done);
}

/* A fold's done line (after its commit, redis_tier.h). */
static void fold_done(srv_op *op)
{
    if (!op->cancelled) {
        proto_fold_done(&op->out, op->framing, op->sess->tokens_seen,
                        op->ckpt_id[0] ? op->ckpt_id : NULL);
        write_out(op);
        srv_stream_end(op->conn);
    }
    finish_and_pump(op);
}

/* End a stream whose op failed: the session is put back as the op found it. */
static void stream_error_end(srv_op *op, int rc)
{
    op_rollback(op);
    const char *code = compute_error_code(rc);
    if (op->sink) {
        op->sink->ended(op, NULL, rc);
    } else if (!op->cancelled) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s; the request was undone, the session is as it was before it",
                 rc == RECUR_ENONFINITE ? "the computation turned non-finite"
                 : rc == RECUR_ERANGE   ? "the result is outside the state value bound (2^40)"
                                        : recur_strerror(rc));
        proto_stream_error(&op->out, op->framing, code, msg);
        write_out(op);
        srv_stream_end(op->conn);
    }
    srv_log(SRV_LOG_ERROR, code, "\"code\":%d", rc);
    finish_and_pump(op);
}

/* Tokens a session may still see: up to max_context with softmax layers, else up to
 * RECUR_MAX_TOKENS_SEEN (2^53 - 1, exact as a JSON number; the snapshot loader refuses more,
 * so a session never gets where its own snapshot would be refused). */
static int64_t context_left(srv_app *app, srv_session *s)
{
    return (int64_t)(recur_max_tokens_seen(app->model) - s->tokens_seen);
}

/* A create's answer (after its commit, redis_tier.h). */
static void create_done(srv_op *op)
{
    if (op->sink)
        op->sink->created(op);
    else
        respond_session(op, 201, op->sess);
    finish_and_pump(op);
}

/* Next step of a running FOLD/CREATE/GENERATE op, after a result or a drain. */
static void continue_op(srv_op *op)
{
    srv_app *app = op->app;
    if (op->kind == SRV_OP_GENERATE) {
        if (op->cancelled) {
            app->counters.streams_cancelled++;
            end_generation(op, REASON_CANCELLED);
        } else if (op->stop_requested) {
            end_generation(op, REASON_CANCELLED);
        } else if (op->run.generated >= op->gen.max_tokens || context_left(app, op->sess) <= 0) {
            end_generation(op, REASON_LENGTH);
        } else if (!op_writable(op)) {
            op->paused = 1;
        } else {
            submit_generation(op);
        }
        return;
    }
    /* FOLD / CREATE */
    if (op->done == op->n) {
        if (op->kind == SRV_OP_FOLD) {
            end_fold(op);
        } else {
            srv_session *s = op->sess;
            if (op->cancelled) { /* nobody will ever know this id */
                remove_session(app, s);
                return;
            }
            int rc = op->checked ? op->check_rc : op_check(op, s->state);
            if (rc) { /* no id was given out: the session goes away */
                op_error(op, 500, compute_error_code(rc), "the prefill left the state outside the value bound");
                remove_session(app, s);
                return;
            }
            pc_after_fold(op);
            commit_then(op, s, create_done);
        }
        return;
    }
    if (op->cancelled) {
        /* The client left: stop at a slice boundary; tokens_seen says what was folded. */
        app->counters.streams_cancelled++;
        if (op->kind == SRV_OP_CREATE) {
            remove_session(app, op->sess);
            return;
        }
        finish_and_pump(op);
        return;
    }
    if (op->kind == SRV_OP_FOLD && !op_writable(op)) {
        op->paused = 1;
        return;
    }
    submit_fold_slice(op);
}

/* ---------------------------------------------------------------- completion (loop thread) */

void srv_ops_work_done(srv_work *w, void *appv)
{
    srv_op *op = w->owner;
    srv_app *app = appv;
    srv_session *s = op->sess;
    op->in_flight = 0;
    uint64_t before = s->tokens_seen;
    s->tokens_seen = w->tokens_seen;
    s->snapshot_bytes = srv_session_state_bytes(s, app->info->vocab_size); /* the worker is done */
    if (op->kind == SRV_OP_GENERATE) {
        /* Back from the workers: its lines were delivered by srv_ops_gen_progress before. */
        if (w->err) {
            stream_error_end(op, w->err);
            return;
        }
        if (op->run.stop_matched) {
            end_generation(op, REASON_STOP);
            return;
        }
        continue_op(op); /* max_tokens / max_context, stop, cancelled, or held: decides */
        return;
    }
    /* FOLD / CREATE */
    app->counters.tokens_folded += s->tokens_seen - before;
    note_tokens(op, s->tokens_seen - before, 0);
    if (w->err) {
        if (op->kind == SRV_OP_CREATE) { /* no id was given out: the session goes away */
            op_error(op, 500, compute_error_code(w->err), recur_strerror(w->err));
            remove_session(app, s);
            return;
        }
        stream_error_end(op, w->err);
        return;
    }
    size_t done_before = op->done;
    op->done += w->kind == SRV_WORK_STEP ? 1 : (size_t)w->n;
    if (op->progress && op->done < op->n && !op->cancelled &&
        op->done / op->progress > done_before / op->progress)
        proto_fold_progress(&op->out, op->framing, op->done, op->n, s->tokens_seen);
    pc_after_slice(op);
    write_out(op);
    continue_op(op);
}

/* Lines of a generation still on the workers: one chunk per line, in order. */
void srv_ops_gen_progress(srv_work *w, void *appv)
{
    srv_op *op = w->owner;
    srv_app *app = appv;
    srv_gen *g = &op->run;
    op->sess->tokens_seen = g->taken_seen; /* GET /v1/sessions/{id} follows the stream */
    app->counters.tokens_generated += (uint64_t)g->taken_tokens;
    note_tokens(op, 0, (uint64_t)g->taken_tokens);
    if (op->sink) {
        op->sink->output(op, g->taken.data, g->taken.len, g->taken_tokens);
        if (!op->sink->writable(op))
            atomic_store(&g->hold, 1);
    } else if (!op->cancelled) {
        const char *p = g->taken.data, *end = p + g->taken.len;
        while (p < end) { /* one line (NDJSON) or event (SSE) per chunk */
            const char *next = proto_frame_next(p, end, op->framing);
            srv_stream_write(op->conn, p, (size_t)(next - p));
            p = next;
        }
        if (!srv_stream_writable(op->conn))
            atomic_store(&g->hold, 1); /* comes back to the loop; on_drain resubmits it */
    }
    proto_buf_clear(&g->taken);
}

/* ---------------------------------------------------------------- starting ops */

static void start_get_state(srv_op *op)
{
    if (op->cancelled)
        return;
    srv_app *app = op->app;
    srv_session *s = op->sess;
    uint8_t *buf;
    size_t len;
    int rc = proto_state_write(s->state, s->logits, s->has_logits != 0, app->info->vocab_size,
                               &buf, &len);
    if (rc == RECUR_ENOMEM) {
        op_error(op, 503, "out_of_memory", "cannot allocate the snapshot");
        return;
    }
    if (rc != 0) {
        op_error(op, 500, "snapshot_failed", recur_strerror(rc));
        return;
    }
    srv_respond(op->conn, 200, "application/octet-stream", buf, len, NULL);
    free(buf);
}

static void start_put_state(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    proto_state_fault f;
    if (proto_state_load(app->model, s->state, app->info->vocab_size, op->blob, op->blob_len,
                         s->logits, &s->has_logits, &f) != 0) {
        op_error(op, 400, f.code, f.message);
        return;
    }
    s->tokens_seen = recur_state_tokens_seen(s->state);
    srv_pcache_hist_drop(s);
    op->changed = 1;
    respond_session(op, 200, s);
}

void srv_ops_reject_full(srv_app *app, srv_conn *c)
{
    char msg[96];
    app->counters.sessions_rejected_full++;
    snprintf(msg, sizeof msg, "max_sessions (%d) reached", srv_table_max(app->table));
    srv_respond_error_ex(c, 503, "max_sessions", msg, "Retry-After: 1\r\n");
}

int srv_ops_copy_session(srv_app *app, srv_session *src, srv_session **out)
{
    srv_session *dst;
    int rc = srv_table_new(app->table, uv_now(app->loop), &dst);
    if (rc != 0)
        return rc == -1 ? SRV_COPY_FULL : SRV_COPY_NOMEM;
    if (recur_state_copy(dst->state, src->state) != 0) {
        srv_table_remove(app->table, dst);
        return SRV_COPY_MODEL;
    }
    memcpy(dst->logits, src->logits, (size_t)app->info->vocab_size * sizeof(float));
    dst->has_logits = src->has_logits;
    memcpy(dst->lsm_c, src->lsm_c, sizeof dst->lsm_c);
    dst->tokens_seen = src->tokens_seen;
    if (srv_ckpt_copy(dst, src) != 0) {
        srv_table_remove(app->table, dst);
        return SRV_COPY_CKPT;
    }
    srv_pcache_hist_copy(dst, src);
    *out = dst;
    return SRV_COPY_OK;
}

static void start_fork(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *dst;
    int rc = srv_ops_copy_session(app, op->sess, &dst);
    if (rc == SRV_COPY_FULL) {
        srv_ops_reject_full(app, op->conn);
        return;
    }
    if (rc == SRV_COPY_NOMEM || rc == SRV_COPY_CKPT) {
        op_error(op, 503, "out_of_memory",
                 rc == SRV_COPY_NOMEM ? "cannot create a session" : "cannot copy the session's checkpoints");
        return;
    }
    if (rc != SRV_COPY_OK) {
        op_error(op, 500, "model_error", "the state could not be copied");
        return;
    }
    app->counters.sessions_created++;
    op->changed = 1;
    op->commit_sess = dst;
    respond_session(op, 201, dst);
}

/* ---------------------------------------------------------------- checkpoints (checkpoints.h) */

static void reject_ckpt_limit(srv_op *op)
{
    char msg[128];
    snprintf(msg, sizeof msg, "max_checkpoints_per_session (%d) reached: delete one first",
             op->app->cfg.max_checkpoints_per_session);
    op_error(op, 409, "max_checkpoints_per_session", msg);
}

static void reject_ckpt_unknown(srv_op *op)
{
    op_error(op, 404, "checkpoint_not_found", "no such checkpoint on this session");
}

static void start_ckpt_take(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    char id[SRV_CKPT_ID_LEN + 1];
    int rc = srv_ckpt_take(s, app->info->vocab_size, app->cfg.max_checkpoints_per_session, id);
    if (rc == -1) {
        reject_ckpt_limit(op);
        return;
    }
    if (rc != 0) {
        op_error(op, 503, "out_of_memory", "cannot capture the state");
        return;
    }
    op->changed = 1;
    if (op->cancelled)
        return;
    proto_buf b;
    proto_buf_init(&b);
    proto_buf_printf(&b, "{\"checkpoint\":\"%s\",\"tokens_seen\":%llu}", id,
                     (unsigned long long)s->tokens_seen);
    reply(op, 201, "application/json", b.data, b.len);
    proto_buf_free(&b);
}

static void start_ckpt_list(srv_op *op)
{
    if (op->cancelled)
        return;
    proto_buf b;
    proto_buf_init(&b);
    srv_ckpt_list_json(op->sess, &b);
    srv_respond(op->conn, 200, "application/json", b.data, b.len, NULL);
    proto_buf_free(&b);
}

static void start_ckpt_delete(srv_op *op)
{
    if (srv_ckpt_remove(op->sess, op->ckpt_id) != 0) {
        reject_ckpt_unknown(op);
        return;
    }
    op->changed = 1;
    if (!op->cancelled)
        reply(op, 204, NULL, NULL, 0);
}

/* The state and tokens_seen of the checkpoint, back in O(state) (its blob's checks, then copies). */
static void start_rollback(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    srv_ckpt *c = srv_ckpt_find(s, op->ckpt_id);
    if (!c) {
        reject_ckpt_unknown(op);
        return;
    }
    const char *why = NULL;
    if (srv_state_restore(app->model, app->info->vocab_size, s, c->blob, c->len, &why) != 0) {
        op_error(op, 500, "checkpoint_invalid", "the checkpoint's state failed its checks");
        return;
    }
    srv_pcache_hist_drop(s); /* its token history is not this checkpoint's */
    op->changed = 1;
    respond_session(op, 200, s);
}

/* "checkpoint": true on a fold or generation: refused before anything runs when the session
 * cannot hold one more (0 after answering). */
static int ckpt_room(srv_op *op)
{
    if (!op->ckpt_at_end || op->sess->n_ckpts < op->app->cfg.max_checkpoints_per_session)
        return 1;
    reject_ckpt_limit(op);
    finish_and_pump(op);
    return 0;
}

/* At the end of a fold or generation that asked for it: the id for the done line, or NULL. */
static const char *ckpt_at_end(srv_op *op, char id[])
{
    if (!op->ckpt_at_end)
        return NULL;
    srv_app *app = op->app;
    int rc = srv_ckpt_take(op->sess, app->info->vocab_size, app->cfg.max_checkpoints_per_session, id);
    if (rc != 0) {
        srv_log(SRV_LOG_ERROR, "checkpoint_failed", "\"code\":%d", rc);
        return NULL;
    }
    return id;
}

static void start_generate(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    if (!s->has_logits) {
        op_error(op, 409, "no_context",
                          "the session has no next-token prediction yet: fold at least one token first");
        finish_and_pump(op);
        return;
    }
    op->ckpt_at_end = op->gen.checkpoint;
    if (!ckpt_room(op))
        return;
    if ((s->pc_hist || op->idem_key[0]) && op->gen.max_tokens > 0) { /* recorded by the workers */
        op->gen_ids = malloc((size_t)op->gen.max_tokens * sizeof *op->gen_ids);
        if (!op->gen_ids)
            abort();
    }
    uint64_t seed = op->gen.seed;
    if (!op->gen.has_seed && getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = uv_hrtime();
    int64_t left = context_left(app, s);
    if (srv_gen_init(&op->run, &op->gen, op->framing, recur_sampler_seed(seed),
                     s->tokens_seen + (uint64_t)(left > 0 ? left : 0), app->tok) != 0) {
        op_error(op, 503, "out_of_memory", "cannot allocate the generation's decoder");
        finish_and_pump(op);
        return;
    }
    op->run.ttft = &app->hists.ttft;
    op->run.itl = &app->hists.itl;
    op->run.t_request_ns = op->t_request_ns;
    op_checkpoint(op);
    op->streaming = 1;
    if (op->sink) {
        srv_gen_set_openai(&op->run, op->want_top, &op->adjust, app->info->vocab_size);
        op->run.end_ids = app->end_ids;
        op->run.n_end_ids = app->n_end_ids;
    } else {
        srv_stream_begin(op->conn, 200, proto_frame_content_type(op->framing));
    }
    if (app->stopping)
        op->stop_requested = 1;
    continue_op(op);
}

/* A cached create's prefix is restored (locally, or from Redis): its prefill starts. */
static void pc_lookup_end(srv_op *op)
{
    srv_session *s = op->sess;
    if (srv_pcache_enabled(op->app->pcache) && !s->pc_hist) /* a miss: tracking starts empty */
        srv_pcache_hist_append(s, NULL, 0, pc_hist_max(op->app));
    continue_op(op);
}

void srv_ops_pc_remote_done(srv_op *op)
{
    op->done = (size_t)op->sess->pc_cached;
    pc_lookup_end(op);
}

static void start_fold(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    srv_hist_observe(&app->hists.prompt_tokens, op->n);
    int64_t left = context_left(app, s);
    if ((int64_t)op->n > left) {
        char msg[160];
        if (app->info->softmax_layers)
            snprintf(msg, sizeof msg, "%zu tokens would exceed max_context (%lld) of this model's softmax layers",
                     op->n, (long long)app->info->max_context);
        else
            snprintf(msg, sizeof msg, "%zu tokens would exceed the %llu tokens a session may see",
                     op->n, (unsigned long long)RECUR_MAX_TOKENS_SEEN);
        if (op->kind == SRV_OP_CREATE) {
            op_error(op, 422, "max_context", msg);
            remove_session(app, s);
            return;
        }
        op_error(op, 422, "max_context", msg);
        finish_and_pump(op);
        return;
    }
    if (op->kind == SRV_OP_FOLD && !ckpt_room(op))
        return;
    if (op->kind == SRV_OP_CREATE && op->pc_lookup) {
        /* nothing folded yet: the longest stored prefix of the prompt, if any, becomes the state */
        uint64_t h;
        s->pc_cached = srv_pcache_restore_h(app->pcache, op->tokens, op->n, s, &h);
        op->done = (size_t)s->pc_cached;
        if (srv_pcredis_lookup(app, op))
            return; /* Redis is asked for a longer prefix: srv_ops_pc_remote_done goes on */
        pc_lookup_end(op);
        return;
    }
    if (op->kind == SRV_OP_FOLD) {
        op_checkpoint(op);
        op->streaming = 1;
        srv_stream_begin(op->conn, 200, proto_frame_content_type(op->framing));
    }
    continue_op(op);
}

static void delete_done(srv_op *op);

/* Start the head op. Synchronous ops finish here; compute ops stay running. */
static void start(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    op->started = 1;
    s->running = 1;
    srv_hist_observe_since(&app->hists.queue, op->t_enqueued_ns);
    if (op->cancelled && op->kind != SRV_OP_DELETE && op->kind != SRV_OP_PUT_STATE) {
        if (op->kind == SRV_OP_CREATE) {
            remove_session(app, s);
            return;
        }
        finish_and_pump(op);
        return;
    }
    if (idem_check(op))
        return; /* answered from its record, or waiting for Redis's */
    run_op(op);
}

/* What the head op does (its Idempotency-Key found no record). */
static void run_op(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    switch (op->kind) {
    case SRV_OP_DELETE:
        /* With the Redis tier its keys go first; the 204 waits for that. */
        op->after_commit = delete_done;
        if (!srv_tier_delete(app, s, op))
            delete_done(op);
        return;
    case SRV_OP_FORK:
        run_changing(op, start_fork);
        return;
    case SRV_OP_GET_STATE:
        start_get_state(op);
        finish_and_pump(op);
        return;
    case SRV_OP_PUT_STATE:
        /* An upload that arrived complete is applied even if its client left. */
        run_changing(op, start_put_state);
        return;
    case SRV_OP_GENERATE:
        start_generate(op);
        return;
    case SRV_OP_FOLD:
    case SRV_OP_CREATE:
        start_fold(op);
        return;
    case SRV_OP_CKPT_TAKE:
        run_changing(op, start_ckpt_take);
        return;
    case SRV_OP_CKPT_LIST:
        start_ckpt_list(op);
        finish_and_pump(op);
        return;
    case SRV_OP_CKPT_DELETE:
        run_changing(op, start_ckpt_delete);
        return;
    case SRV_OP_ROLLBACK:
        run_changing(op, start_rollback);
        return;
    case SRV_OP_CLIENT: /* never queued */
        abort();
    }
}

/* DELETE: the session goes (its files too, or their tombstone is written, residency.c) before
 * the 204 leaves. */
static void delete_done(srv_op *op)
{
    srv_app *app = op->app;
    srv_conn *c = op->cancelled ? NULL : op->conn;
    if (c)
        srv_conn_ref(c);
    app->counters.sessions_deleted++;
    remove_session(app, op->sess);
    if (c) {
        srv_respond(c, 204, NULL, NULL, 0, NULL);
        srv_conn_unref(c);
    }
}

/* Start queued ops until one stays running. Each start either finishes (and pumps again
 * through finish_and_pump) or leaves the head running; the recursion depth is bounded by
 * max_queued_ops_per_session. */
static void pump(srv_session *s)
{
    if (!s->running && s->q_head)
        start(s->q_head);
}

void srv_ops_enqueue(srv_op *op)
{
    srv_app *app = op->app;
    srv_session *s = op->sess;
    QUEUE_APPEND(s->q_head, s->q_tail, op, next);
    s->q_len++;
    op->t_enqueued_ns = uv_hrtime();
    srv_table_touch(app->table, s, uv_now(app->loop));
    srv_table_changed(app->table, s); /* may change the state: due for a snapshot (residency.c) */
    if (op->conn) {
        srv_conn_ref(op->conn);
        srv_conn_set_user(op->conn, op);
    }
    pump(s);
}

/* ---------------------------------------------------------------- connection events */

void srv_ops_cancel(srv_op *op)
{
    op->cancelled = 1;
    if (op->kind == SRV_OP_GENERATE && op->in_flight)
        atomic_store(&op->run.stop, 1); /* stops after its current step */
    if (op->started && !op->in_flight && op->paused) {
        op->paused = 0;
        continue_op(op);
    }
}

void srv_ops_resume(srv_op *op)
{
    if (op->kind == SRV_OP_GENERATE && op->in_flight)
        atomic_store(&op->run.hold, 0); /* not yet back: it may step on */
    if (!op->paused || op->in_flight)
        return;
    op->paused = 0;
    continue_op(op);
}

/* A connection's user is an op, or an internal client (server/openai.h), told apart by the
 * kind both start with: the event goes to the one it is. */
static void conn_event(srv_conn *c, void (*client_fn)(void *), void (*op_fn)(srv_op *))
{
    void *u = srv_conn_get_user(c);
    if (u && *(const srv_op_kind *)u == SRV_OP_CLIENT)
        client_fn(u);
    else if (u)
        op_fn(u);
}

void srv_app_on_close(srv_conn *c, void *appv)
{
    conn_event(c, srv_openai_on_close, srv_ops_cancel);
}

void srv_app_on_drain(srv_conn *c, void *appv)
{
    conn_event(c, srv_openai_on_drain, srv_ops_resume);
}

typedef struct {
    srv_app *app;
    srv_op **paused;
    size_t n, cap;
} cancel_ctx;

static void cancel_one(srv_session *s, void *arg)
{
    cancel_ctx *cx = arg;
    for (srv_op *op = s->q_head; op; op = op->next) {
        if (op->kind != SRV_OP_GENERATE)
            continue;
        op->stop_requested = 1;
        if (op->in_flight)
            atomic_store(&op->run.stop, 1);
        if (op->started && op->paused && !op->in_flight) {
            if (cx->n == cx->cap) {
                cx->cap = cx->cap ? cx->cap * 2 : 16;
                cx->paused = realloc(cx->paused, cx->cap * sizeof *cx->paused);
                if (!cx->paused)
                    abort();
            }
            cx->paused[cx->n++] = op;
        }
    }
}

void srv_ops_cancel_all(srv_app *app)
{
    app->stopping = 1;
    cancel_ctx cx = {app, NULL, 0, 0};
    srv_table_foreach(app->table, cancel_one, &cx);
    /* Paused streams end now (continue_op may start the next op of the same session). */
    for (size_t i = 0; i < cx.n; i++) {
        cx.paused[i]->paused = 0;
        continue_op(cx.paused[i]);
    }
    free(cx.paused);
}

/* The recency list is sorted by last use: the sweep stops at the first session used within
 * idle_ttl_ms, so it walks the expired sessions and the busy old ones, never the live idle
 * ones (100k idle sessions cost nothing per tick). */
void srv_ops_expire_idle(srv_app *app)
{
    if (app->cfg.idle_ttl_ms == 0)
        return;
    size_t before = srv_table_count(app->table);
    uint64_t now = uv_now(app->loop);
    for (srv_session *s = srv_table_lru_first(app->table), *n; s; s = n) {
        if (now - s->last_used_ms < app->cfg.idle_ttl_ms)
            break;
        n = s->lru_next; /* removing s (and its hooks) frees no other session */
        if (s->q_len == 0) {
            srv_table_remove(app->table, s);
            app->counters.sessions_expired++;
        }
    }
    size_t gone = before - srv_table_count(app->table);
    if (gone)
        srv_log(SRV_LOG_INFO, "sessions_expired", "\"count\":%zu,\"sessions\":%zu", gone,
                srv_table_count(app->table));
}
