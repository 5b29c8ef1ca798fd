/* openai.c — the OpenAI routes as an internal client of ops.c (openai.h). */
#include "openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "metrics.h"
#include "openai_responses.h"
#include "ops.h"

/* ---------------------------------------------------------------- the request */

/* One generated token of a choice. */
typedef struct {
    int32_t token;
    float logprob;
    size_t text_off, text_len; /* its text in the choice's text */
    int n_top;
    size_t top_at;             /* its candidates in the choice's top_ids / top_lps */
} oai_token;

typedef struct {
    srv_op *op;                /* its GENERATE op until released, or NULL */
    proto_buf text;            /* the generated text */
    oai_token *toks;
    size_t n_toks, cap_toks;
    int32_t *top_ids;
    float *top_lps;
    size_t n_tops, cap_tops;
    size_t sent_text, sent_toks; /* streamed so far */
    const char *finish;        /* "stop" / "length" once ended */
} oai_choice;

typedef struct {
    srv_op_kind kind;          /* SRV_OP_CLIENT, first: ops.c reads it from the connection */
    srv_app *app;
    srv_conn *conn;            /* referenced until the answer is complete */
    proto_oai_req req;
    char id[40], fingerprint[24];
    proto_oai_head head;
    int n_choices, n_ended, prompts_left;
    oai_choice *choices;       /* [n_prompts * n]: prompt p's choice j is p * n + j */
    srv_op **creates;          /* [n_prompts]: the CREATE op of each prompt until released */
    char **echo;               /* [n_prompts] the prompt's text (echo), or NULL */
    size_t *echo_len;
    int refs;                  /* ops not released, + 1 while a call of ours runs */
    int answered;              /* the answer is complete, or an error was sent */
    int streaming;             /* the stream's head is sent */
    int cancelled;             /* the client left */
    uint64_t prompt_tokens, cached_tokens;
} oai_req;

static const srv_op_sink SINK;

static void oai_ref(oai_req *o)
{
    o->refs++;
}

static void oai_unref(oai_req *o)
{
    if (--o->refs > 0)
        return;
    for (int i = 0; i < o->n_choices; i++) {
        oai_choice *c = &o->choices[i];
        proto_buf_free(&c->text);
        free(c->toks);
        free(c->top_ids);
        free(c->top_lps);
    }
    for (size_t p = 0; p < o->req.n_prompts; p++)
        free(o->echo[p]);
    free(o->echo);
    free(o->echo_len);
    free(o->creates);
    free(o->choices);
    proto_oai_req_free(&o->req);
    free(o);
}

/* The answer is complete: the connection is no longer ours. */
static void release_conn(oai_req *o)
{
    o->answered = 1;
    if (!o->conn)
        return;
    srv_conn_set_user(o->conn, NULL);
    srv_conn_unref(o->conn);
    o->conn = NULL;
}

/* ---------------------------------------------------------------- errors */

static const char *error_type(int status)
{
    return status == 401 ? "authentication_error"
           : status == 404 ? "invalid_request_error"
           : status == 429 ? "rate_limit_error"
           : status >= 500 ? "server_error"
                           : "invalid_request_error";
}

static void respond_error(srv_conn *c, int status, const char *message, const char *param,
                          const char *code)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_oai_error_json(&b, message, error_type(status), param, code);
    srv_respond(c, status, "application/json", b.data, b.len,
                status == 503 || status == 429 ? "Retry-After: 1\r\n" : NULL);
    proto_buf_free(&b);
}

/* Stop every op of o (each ends at its next boundary and is released then). */
static void cancel_ops(oai_req *o)
{
    oai_ref(o);
    for (size_t p = 0; p < o->req.n_prompts; p++)
        if (o->creates[p])
            srv_ops_cancel(o->creates[p]);
    for (int i = 0; i < o->n_choices; i++)
        if (o->choices[i].op)
            srv_ops_cancel(o->choices[i].op);
    oai_unref(o);
}

/* The request failed: the error (a status, or an error event when the stream had begun), and
 * everything it still runs is stopped. */
static void fail_request(oai_req *o, int status, const char *code, const char *message)
{
    if (o->answered)
        return;
    o->app->counters.openai_errors++;
    if (o->streaming) {
        proto_buf b;
        proto_buf_init(&b);
        proto_oai_error_json(&b, message, error_type(status), NULL, code);
        proto_oai_sse_wrap(&b, 0);
        srv_stream_write(o->conn, b.data, b.len);
        srv_stream_end(o->conn);
        proto_buf_free(&b);
    } else {
        respond_error(o->conn, status, message, NULL, code);
    }
    release_conn(o);
    cancel_ops(o);
}

/* ---------------------------------------------------------------- logprobs */

/* The text of token id alone (malloc'd by the tokenizer: recur_tokenizer_release). */
static char *token_text(const srv_app *app, int32_t id, size_t *len)
{
    char *t = NULL;
    if (recur_tokenizer_decode(app->tok, &id, 1, &t, len) != 0) {
        *len = 0;
        return NULL;
    }
    return t;
}

/* The logprobs JSON of tokens [from, to) of choice c into out. offset0: where the choice's
 * text starts in what the client sees (completions' text_offset, after an echoed prompt). */
static void logprobs_json(const oai_req *o, const oai_choice *c, size_t from, size_t to,
                          size_t offset0, proto_buf *out)
{
    size_t n = to - from, n_cand = 0;
    for (size_t i = from; i < to; i++)
        n_cand += (size_t)c->toks[i].n_top;
    proto_oai_lp *lps = calloc(n ? n : 1, sizeof *lps);
    proto_oai_cand *cands = calloc(n_cand ? n_cand : 1, sizeof *cands);
    char **owned = calloc(n + n_cand + 1, sizeof *owned);
    if (!lps || !cands || !owned)
        abort();
    size_t k = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const oai_token *t = &c->toks[from + i];
        proto_oai_lp *l = &lps[i];
        owned[m] = token_text(o->app, t->token, &l->tok.len);
        l->tok.text = owned[m] ? owned[m] : "";
        m++;
        l->tok.logprob = t->logprob;
        l->text_offset = offset0 + t->text_off;
        l->top = &cands[k];
        l->n_top = t->n_top;
        for (int j = 0; j < t->n_top; j++, k++) {
            owned[m] = token_text(o->app, c->top_ids[t->top_at + (size_t)j], &cands[k].len);
            cands[k].text = owned[m] ? owned[m] : "";
            m++;
            cands[k].logprob = c->top_lps[t->top_at + (size_t)j];
        }
    }
    proto_oai_logprobs_json(out, o->req.chat, lps, n, o->req.top_logprobs > 0);
    for (size_t i = 0; i < m; i++)
        recur_tokenizer_release(owned[i]);
    free(owned);
    free(cands);
    free(lps);
}

/* ---------------------------------------------------------------- streaming */

/* One chunk: choice `index` with text (NULL: none), its logprobs JSON (NULL: null), finish. */
static void write_chunk(oai_req *o, int index, const char *text, size_t len, int with_role,
                        const proto_buf *lp, const char *finish)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_oai_object_begin(&b, &o->head, 1);
    proto_oai_choice_json(&b, &o->head, 1, 0, index, text, len, with_role, lp ? lp->data : NULL,
                          lp ? lp->len : 0, finish);
    proto_oai_object_end(&b, NULL, o->req.include_usage);
    proto_oai_sse_wrap(&b, 0);
    srv_stream_write(o->conn, b.data, b.len);
    proto_buf_free(&b);
}

/* What choice idx has that the client has not seen: one chunk per token (its final text and
 * logprobs), then, once ended, its finish_reason. */
static void stream_choice(oai_req *o, int idx)
{
    oai_choice *c = &o->choices[idx];
    if (!o->streaming || o->answered)
        return;
    size_t p = (size_t)idx / (size_t)o->req.n;
    size_t offset0 = o->echo[p] ? o->echo_len[p] : 0;
    for (; c->sent_toks < c->n_toks; c->sent_toks++) {
        const oai_token *t = &c->toks[c->sent_toks];
        size_t end = t->text_off + t->text_len;
        size_t from = c->sent_text < end ? c->sent_text : end;
        if (from == end && !o->req.logprobs)
            continue; /* its text is held back (a stop sequence may begin there): nothing to say yet */
        proto_buf lp;
        proto_buf_init(&lp);
        if (o->req.logprobs)
            logprobs_json(o, c, c->sent_toks, c->sent_toks + 1, offset0, &lp);
        write_chunk(o, idx, c->text.data + from, end - from, 0, o->req.logprobs ? &lp : NULL, NULL);
        proto_buf_free(&lp);
        c->sent_text = end > c->sent_text ? end : c->sent_text;
    }
    if (!c->finish)
        return;
    if (c->sent_text < c->text.len) /* text the last token released (a held-back tail) */
        write_chunk(o, idx, c->text.data + c->sent_text, c->text.len - c->sent_text, 0, NULL, NULL);
    c->sent_text = c->text.len;
    if (o->req.chat)
        write_chunk(o, idx, NULL, 0, 0, NULL, c->finish);
    else
        write_chunk(o, idx, "", 0, 0, NULL, c->finish);
}

/* Every prompt is folded: the stream's head, and each choice's first chunk (chat: the role;
 * completions with echo: the prompt). */
static void begin_stream(oai_req *o)
{
    srv_stream_begin(o->conn, 200, "text/event-stream");
    o->streaming = 1;
    for (int i = 0; i < o->n_choices; i++) {
        size_t p = (size_t)i / (size_t)o->req.n;
        if (o->req.chat)
            write_chunk(o, i, "", 0, 1, NULL, NULL);
        else if (o->echo[p])
            write_chunk(o, i, o->echo[p], o->echo_len[p], 0, NULL, NULL);
    }
    for (int i = 0; i < o->n_choices; i++)
        stream_choice(o, i);
}

/* ---------------------------------------------------------------- the answer */

static proto_oai_usage usage_of(const oai_req *o)
{
    proto_oai_usage u = {o->prompt_tokens, 0, o->cached_tokens};
    for (int i = 0; i < o->n_choices; i++)
        u.completion_tokens += o->choices[i].n_toks;
    return u;
}

/* Every choice ended: the whole answer, or the stream's usage chunk and [DONE]. */
static void complete(oai_req *o)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_oai_usage u = usage_of(o);
    if (o->conn) { /* the access log's token counts */
        srv_access_note *n = srv_conn_access_note(o->conn);
        n->tokens_in = u.prompt_tokens;
        n->tokens_out = u.completion_tokens;
    }
    if (o->streaming) {
        if (o->req.include_usage) {
            proto_oai_object_begin(&b, &o->head, 1);
            proto_oai_object_end(&b, &u, 0);
            proto_oai_sse_wrap(&b, 0);
        }
        proto_oai_sse_done(&b);
        srv_stream_write(o->conn, b.data, b.len);
        srv_stream_end(o->conn);
    } else {
        proto_oai_object_begin(&b, &o->head, 0);
        for (int i = 0; i < o->n_choices; i++) {
            const oai_choice *c = &o->choices[i];
            size_t p = (size_t)i / (size_t)o->req.n;
            proto_buf text, lp;
            proto_buf_init(&text);
            proto_buf_init(&lp);
            if (o->echo[p])
                proto_buf_append(&text, o->echo[p], o->echo_len[p]);
            proto_buf_append(&text, c->text.data ? c->text.data : "", c->text.len);
            if (o->req.logprobs)
                logprobs_json(o, c, 0, c->n_toks, o->echo[p] ? o->echo_len[p] : 0, &lp);
            proto_oai_choice_json(&b, &o->head, 0, i, i, text.data ? text.data : "", text.len, 0,
                                  o->req.logprobs ? lp.data : NULL, lp.len, c->finish);
            proto_buf_free(&text);
            proto_buf_free(&lp);
        }
        proto_oai_object_end(&b, &u, 0);
        srv_respond(o->conn, 200, "application/json", b.data, b.len, NULL);
    }
    proto_buf_free(&b);
    release_conn(o);
}

/* ---------------------------------------------------------------- the sink (ops.h) */

/* Queue choice idx's generation on s (behind whatever s runs). */
static void queue_generation(oai_req *o, srv_session *s, int idx)
{
    srv_op *g = srv_op_new(o->app, SRV_OP_GENERATE, s, NULL);
    if (o->conn) /* time to first token includes the prompt's fold */
        g->t_request_ns = srv_conn_request_start_ns(o->conn);
    g->gen = o->req.gen;
    if (g->gen.has_seed) /* same seed, same texts; each choice its own draw */
        g->gen.seed += (uint64_t)idx;
    g->sink = &SINK;
    g->sink_ctx = o;
    g->sink_index = idx;
    g->drop_session = 1;
    g->want_top = o->req.logprobs ? o->req.top_logprobs : 0;
    g->adjust = (recur_logit_adjust_params){o->req.presence_penalty, o->req.frequency_penalty,
                                            o->req.bias_ids, o->req.bias, o->req.n_bias};
    o->choices[idx].op = g;
    oai_ref(o);
    srv_ops_enqueue(g);
}

/* A prompt is folded: fork it for choices 1..n-1, then generate choice 0 on it. */
static void sink_created(srv_op *op)
{
    oai_req *o = op->sink_ctx;
    size_t p = (size_t)op->sink_index;
    o->prompt_tokens += op->n;
    o->cached_tokens += op->sess->pc_cached;
    if (o->answered) {
        op->drop_session = 1;
        return;
    }
    oai_ref(o);
    int n = o->req.n;
    for (int j = 1; j < n && !o->answered; j++) {
        srv_session *dst;
        int rc = srv_ops_copy_session(o->app, op->sess, &dst);
        if (rc != SRV_COPY_OK) {
            if (rc == SRV_COPY_FULL)
                o->app->counters.sessions_rejected_full++;
            fail_request(o, 503, rc == SRV_COPY_FULL ? "max_sessions" : "out_of_memory",
                         rc == SRV_COPY_FULL ? "max_sessions reached: no session for another choice"
                                             : "cannot create a session for another choice");
            break;
        }
        queue_generation(o, dst, (int)p * n + j);
    }
    if (o->answered)
        op->drop_session = 1;
    else
        queue_generation(o, op->sess, (int)p * n);
    if (--o->prompts_left == 0 && !o->answered && o->req.stream)
        begin_stream(o);
    oai_unref(o);
}

static void sink_failed(srv_op *op, int status, const char *code, const char *message)
{
    oai_req *o = op->sink_ctx;
    char msg[256];
    if (!strcmp(code, "max_context")) {
        snprintf(msg, sizeof msg, "%s", message);
        fail_request(o, 400, "context_length_exceeded", msg);
        return;
    }
    fail_request(o, status == 422 || status == 409 ? 400 : status, code, message);
}

static void grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        abort();
    *p = q;
    *cap = c;
}

static void sink_output(srv_op *op, const char *data, size_t len, int64_t tokens)
{
    oai_req *o = op->sink_ctx;
    oai_choice *c = &o->choices[op->sink_index];
    const char *p = data, *end = data + len, *text;
    srv_gen_record r;
    int32_t ids[SRV_GEN_MAX_TOP];
    float lps[SRV_GEN_MAX_TOP];
    while (srv_gen_record_next(&p, end, &r, &text, ids, lps)) {
        grow((void **)&c->toks, &c->cap_toks, c->n_toks + 1, sizeof *c->toks);
        size_t cap_tops = c->cap_tops;
        grow((void **)&c->top_ids, &c->cap_tops, c->n_tops + (size_t)r.n_top, sizeof *c->top_ids);
        grow((void **)&c->top_lps, &cap_tops, c->n_tops + (size_t)r.n_top, sizeof *c->top_lps);
        oai_token *t = &c->toks[c->n_toks++];
        *t = (oai_token){r.token, r.logprob, c->text.len, r.text_len, r.n_top, c->n_tops};
        proto_buf_append(&c->text, text, r.text_len);
        if (r.n_top > 0) { /* the arrays exist once a token kept candidates */
            memcpy(c->top_ids + c->n_tops, ids, (size_t)r.n_top * sizeof *ids);
            memcpy(c->top_lps + c->n_tops, lps, (size_t)r.n_top * sizeof *lps);
            c->n_tops += (size_t)r.n_top;
        }
    }
    stream_choice(o, op->sink_index);
}

static void sink_ended(srv_op *op, const char *reason, int err)
{
    oai_req *o = op->sink_ctx;
    if (o->answered)
        return;
    if (err) {
        fail_request(o, 500, err == RECUR_ENONFINITE ? "non_finite" : "model_error",
                     "the generation failed (the model's output turned non-finite or out of range)");
        return;
    }
    if (!strcmp(reason, "cancelled")) {
        fail_request(o, 503, "shutting_down", "the server is shutting down");
        return;
    }
    oai_choice *c = &o->choices[op->sink_index];
    srv_gen_end_text(&op->run, &c->text); /* text still held back (usually none) */
    c->finish = !strcmp(reason, "stop") ? "stop" : "length";
    o->n_ended++;
    stream_choice(o, op->sink_index);
    if (o->n_ended == o->n_choices)
        complete(o);
}

static int sink_writable(srv_op *op)
{
    oai_req *o = op->sink_ctx;
    return !o->streaming || o->answered || srv_stream_writable(o->conn);
}

static void sink_released(srv_op *op)
{
    oai_req *o = op->sink_ctx;
    if (op->kind == SRV_OP_CREATE)
        o->creates[op->sink_index] = NULL;
    else if (o->choices[op->sink_index].op == op)
        o->choices[op->sink_index].op = NULL;
    oai_unref(o);
}

static const srv_op_sink SINK = {sink_created, sink_failed, sink_output, sink_ended, sink_writable,
                                 sink_released};

void srv_openai_on_close(void *client)
{
    oai_req *o = client;
    o->cancelled = 1;
    o->app->counters.streams_cancelled++;
    release_conn(o);
    cancel_ops(o);
}

void srv_openai_on_drain(void *client)
{
    oai_req *o = client;
    oai_ref(o);
    for (int i = 0; i < o->n_choices; i++)
        if (o->choices[i].op)
            srv_ops_resume(o->choices[i].op);
    oai_unref(o);
}

/* ---------------------------------------------------------------- the routes */

static void random_id(char *out, size_t cap, const char *prefix)
{
    uint8_t r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (uint8_t)(uv_hrtime() >> (i % 8 * 8));
    int n = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && (size_t)n + 2 < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", r[i]);
}

/* The client's copy of the request (taken from the decoded body), or NULL after answering. */
static oai_req *new_request(srv_app *app, srv_conn *c, srv_body *body)
{
    proto_oai_req *r = &body->oai;
    if (body->oai_rc) {
        app->counters.openai_errors++;
        const proto_oai_error *e = &body->oai_err;
        respond_error(c, e->err.status, e->err.message, e->param, e->err.code);
        return NULL;
    }
    if (strcmp(r->model, app->model_name) != 0) {
        char msg[200];
        app->counters.openai_errors++;
        snprintf(msg, sizeof msg, "the model does not exist: this server serves \"%s\" (GET /v1/models)",
                 app->model_name);
        respond_error(c, 404, msg, "model", "model_not_found");
        return NULL;
    }
    size_t choices = r->n_prompts * (size_t)r->n;
    if (choices > (size_t)app->cfg.max_choices_per_request) {
        char msg[160];
        app->counters.openai_errors++;
        snprintf(msg, sizeof msg, "%zu prompts x n = %zu choices; max_choices_per_request is %d",
                 r->n_prompts, choices, app->cfg.max_choices_per_request);
        respond_error(c, 400, msg, "n", "max_choices_per_request");
        return NULL;
    }
    oai_req *o = calloc(1, sizeof *o);
    if (!o)
        abort();
    o->kind = SRV_OP_CLIENT;
    o->app = app;
    o->conn = c;
    o->req = *r;
    r->prompts = NULL; /* taken */
    r->n_prompts = 0;
    o->n_choices = (int)choices;
    o->prompts_left = (int)o->req.n_prompts;
    o->choices = calloc(choices, sizeof *o->choices);
    o->creates = calloc(o->req.n_prompts, sizeof *o->creates);
    o->echo = calloc(o->req.n_prompts, sizeof *o->echo);
    o->echo_len = calloc(o->req.n_prompts, sizeof *o->echo_len);
    if (!o->choices || !o->creates || !o->echo || !o->echo_len)
        abort();
    for (size_t i = 0; i < choices; i++)
        proto_buf_init(&o->choices[i].text);
    for (size_t p = 0; o->req.echo && p < o->req.n_prompts; p++)
        if (recur_tokenizer_decode(app->tok, o->req.prompts[p].tokens, o->req.prompts[p].n,
                                   &o->echo[p], &o->echo_len[p]) != 0)
            o->echo[p] = NULL;
    random_id(o->id, sizeof o->id, o->req.chat ? "chatcmpl-" : "cmpl-");
    snprintf(o->fingerprint, sizeof o->fingerprint, "fp_%016llx",
             (unsigned long long)app->info->fingerprint);
    o->head = (proto_oai_head){o->id, (uint64_t)time(NULL), app->model_name, o->fingerprint,
                               o->req.chat};
    srv_conn_ref(c);
    srv_conn_set_user(c, o);
    return o;
}

void srv_openai_completions(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                            srv_body *body)
{
    app->counters.openai_requests[body->kind == SRV_BODY_OAI_CHAT]++;
    oai_req *o = new_request(app, c, body);
    if (!o)
        return;
    o->refs = 1; /* ours, while the creates are queued */
    for (size_t p = 0; p < o->req.n_prompts && !o->answered; p++) {
        srv_session *sess;
        /* each session is queued on at once, so the next srv_table_new cannot evict it */
        int rc = srv_table_new(app->table, uv_now(app->loop), &sess);
        if (rc != 0) {
            if (rc == -1)
                app->counters.sessions_rejected_full++;
            fail_request(o, 503, rc == -1 ? "max_sessions" : "out_of_memory",
                         rc == -1 ? "max_sessions reached" : "cannot create a session");
            break;
        }
        srv_op *op = srv_op_new(app, SRV_OP_CREATE, sess, NULL);
        op->tokens = o->req.prompts[p].tokens;
        op->n = o->req.prompts[p].n;
        o->req.prompts[p].tokens = NULL; /* the op's now */
        op->sink = &SINK;
        op->sink_ctx = o;
        op->sink_index = (int)p;
        op->pc_lookup = 1; /* the longest cached prefix of the prompt is restored, not folded */
        o->creates[p] = op;
        oai_ref(o);
        srv_ops_enqueue(op);
    }
    oai_unref(o);
}

/* What "created" says of the one model: when this daemon first described it (recurd does not
 * know when the weights were made). Loop thread only. */
static uint64_t model_created(void)
{
    static uint64_t t;
    if (!t)
        t = (uint64_t)time(NULL);
    return t;
}

void srv_openai_models(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                       srv_body *body)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_oai_models_json(&b, app->model_name, model_created());
    srv_respond(c, 200, "application/json", b.data, b.len, NULL);
    proto_buf_free(&b);
}

void srv_openai_model(srv_app *app, srv_conn *c, const srv_request *req, srv_session *s,
                      srv_body *body)
{
    static const char prefix[] = "/v1/models/";
    const char *id = req->path + sizeof prefix - 1;
    size_t n = strlen(id);
    if (n && id[n - 1] == '/')
        n--;
    if (n != strlen(app->model_name) || memcmp(id, app->model_name, n) != 0) {
        respond_error(c, 404, "the model does not exist (GET /v1/models lists the one served)",
                      "model", "model_not_found");
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    proto_oai_model_json(&b, app->model_name, model_created());
    srv_respond(c, 200, "application/json", b.data, b.len, NULL);
    proto_buf_free(&b);
}

void srv_openai_metrics(const srv_app *app, proto_buf *b)
{
    const srv_counters *k = &app->counters;
    srv_metric(b, "recurd_openai_completions_total", "counter", "POST /v1/completions requests.",
               k->openai_requests[0]);
    srv_metric(b, "recurd_openai_chat_completions_total", "counter",
               "POST /v1/chat/completions requests.", k->openai_requests[1]);
    srv_metric(b, "recurd_openai_errors_total", "counter",
               "OpenAI-route requests answered with an error.", k->openai_errors);
}
