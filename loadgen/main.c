/*
 * main.c — recur-load: flags, then the phases of a run on one libuv loop:
 *
 *   info    GET /v1/model (vocab_size, state_bytes)
 *   create  POST /v1/sessions N times (or GET /v1/sessions/{id} for --session), C at a time
 *   drive   C keep-alive connections take idle sessions round-robin (one request in flight per
 *           session, so per-session order and the expected tokens_seen are exact) until the
 *           duration or the token count is reached
 *   delete  DELETE /v1/sessions/{id} (unless --keep-sessions)
 *
 * GET /metrics (and /proc/PID with --server-pid) is sampled on its own connection throughout.
 * A deadline timer bounds every run (--max-time).
 *
 * Exit codes: 0 every check passed; 1 some check failed; 2 usage; 3 setup failed (server
 * unreachable, /v1/model wrong, no session created); 4 aborted (deadline or signal).
 */
#include "load.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>

typedef struct lg_req {
    lg_run *run;
    int kind;
    int sess;
    int32_t *tokens; /* [batch] */
    int n;
    int max_tokens;
    lg_check chk;
    double t_prev_line;
    int payload_lines;  /* JSON lines of the stream (SSE: data lines other than [DONE]) */
    int sse_done;       /* SSE: "data: [DONE]" seen */
} lg_req;

enum { REQ_INFO, REQ_CREATE, REQ_GET, REQ_DRIVE, REQ_DELETE };

static void pump(lg_run *r);
static void begin_teardown(lg_run *r);
static void scrape(lg_run *r);
static void request_complete(lg_conn *c);
static void request_fail(lg_conn *c, const char *why);

/* Every request but drive's (which adds on_line): request_complete and request_fail dispatch on
 * its kind. */
static const lg_conn_cb answer_cb = {.on_complete = request_complete, .on_fail = request_fail};

/* ---------------------------------------------------------------- small helpers */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static int32_t rand_token(lg_run *r)
{
    return (int32_t)(rng_next(&r->rng) % (uint64_t)r->o.vocab);
}

static void add_example(lg_run *r, const char *what, const char *sess, const char *why)
{
    if (r->n_examples >= LG_MAX_EXAMPLES)
        return;
    snprintf(r->examples[r->n_examples++], sizeof r->examples[0], "%s %s%.32s: %.190s", what,
             sess && *sess ? "session " : "", sess ? sess : "", why);
}

static void count_status(lg_run *r, int status)
{
    if (status >= 100 && status < 600)
        r->status_counts[status]++;
    else
        r->status_other++;
}

static void ring_push(lg_run *r, int i)
{
    r->ring[(r->ring_head + r->ring_count) % r->n_sessions] = i;
    r->ring_count++;
}

static int ring_pop(lg_run *r)
{
    if (r->ring_count == 0)
        return -1;
    int i = r->ring[r->ring_head];
    r->ring_head = (r->ring_head + 1) % r->n_sessions;
    r->ring_count--;
    return i;
}

static void issue(lg_run *r, int ci, proto_buf *req, int stream, const lg_conn_cb *cb)
{
    r->in_flight++;
    lg_conn_request(&r->conns[ci], req->data, req->len, stream, cb, &r->reqs[ci],
                    (uint64_t)(r->o.request_timeout * 1000.0));
}

static void request_head(lg_run *r, proto_buf *b, const char *method, const char *path, size_t body_len,
                         int with_body)
{
    b->len = 0;
    proto_buf_printf(b, "%s %s HTTP/1.1\r\nHost: %s:%d\r\n", method, path, r->o.host, r->o.port);
    if (with_body)
        proto_buf_printf(b, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", body_len);
    else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)
        proto_buf_printf(b, "Content-Length: 0\r\n\r\n");
    else
        proto_buf_printf(b, "\r\n");
}

/* ---------------------------------------------------------------- info: GET /v1/model */

static void info_answer(lg_run *r, const lg_conn *c)
{
    cJSON *j = c->status == 200 ? cJSON_ParseWithLength(c->body.data ? c->body.data : "", c->body.len) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vocab_size");
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(j, "state_bytes");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(j, "n_layers");
    if (!cJSON_IsNumber(v) || v->valuedouble < 2 || v->valuedouble > 1e9) {
        static char why[160];
        snprintf(why, sizeof why, "GET /v1/model answered %d without a valid vocab_size", c->status);
        r->setup_error = why;
    } else {
        r->vocab_size = (int)v->valuedouble;
        r->state_bytes = cJSON_IsNumber(sb) ? sb->valuedouble : -1;
        r->n_layers = cJSON_IsNumber(nl) ? (int)nl->valuedouble : -1;
        snprintf(r->model_name, sizeof r->model_name, "%s", cJSON_IsString(nm) ? nm->valuestring : "?");
        if (r->o.vocab <= 0)
            r->o.vocab = r->vocab_size;
        else if (r->o.vocab > r->vocab_size)
            fprintf(stderr, "recur-load: --vocab %d exceeds the model's vocab_size %d: expect 422s\n",
                    r->o.vocab, r->vocab_size);
    }
    cJSON_Delete(j);
}

/* A transport failure of info, create, get or delete. */
static void setup_failed(lg_run *r, lg_req *q, const char *why)
{
    static char buf[200];
    snprintf(buf, sizeof buf, "%s", why);
    if (q->kind == REQ_INFO) {
        r->setup_error = buf;
    } else {
        r->checks[LG_CHK_TRANSPORT]++;
        r->setup_failures++;
        add_example(r, q->kind == REQ_DELETE ? "delete" : "create", NULL, why);
        if (q->kind == REQ_CREATE || q->kind == REQ_GET)
            r->sessions[q->sess].dead = 1;
    }
}

/* ---------------------------------------------------------------- create: POST /v1/sessions */

static void create_answer(lg_run *r, lg_req *q, const lg_conn *c)
{
    lg_session *s = &r->sessions[q->sess];
    int want = q->kind == REQ_CREATE ? 201 : 200;
    cJSON *j = cJSON_ParseWithLength(c->body.data ? c->body.data : "", c->body.len);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *seen = cJSON_GetObjectItemCaseSensitive(j, "tokens_seen");
    char why[200] = "";
    int kind = LG_CHK_JSON;
    if (c->status != want) {
        snprintf(why, sizeof why, "status %d, expected %d: %.100s", c->status, want, c->body.data ? c->body.data : "");
        kind = LG_CHK_STATUS;
    } else if (!cJSON_IsString(id) || strlen(id->valuestring) == 0 || strlen(id->valuestring) >= sizeof s->id) {
        snprintf(why, sizeof why, "no session id in the answer");
    } else if (!cJSON_IsNumber(seen) || seen->valuedouble < 0 || seen->valuedouble != floor(seen->valuedouble)) {
        snprintf(why, sizeof why, "no integer tokens_seen in the answer");
        kind = LG_CHK_TOKENS_SEEN;
    } else if (q->kind == REQ_CREATE && (uint64_t)seen->valuedouble != (uint64_t)q->n) {
        snprintf(why, sizeof why, "tokens_seen %.0f after creating with %d tokens", seen->valuedouble, q->n);
        kind = LG_CHK_TOKENS_SEEN;
    } else if (q->kind == REQ_GET && strcmp(id->valuestring, s->id) != 0) {
        snprintf(why, sizeof why, "GET answered for another session id");
    }
    if (why[0]) {
        r->checks[kind]++;
        r->setup_failures++;
        s->dead = 1;
        add_example(r, q->kind == REQ_CREATE ? "create" : "get", s->id, why);
    } else {
        snprintf(s->id, sizeof s->id, "%s", id->valuestring);
        s->expected = (uint64_t)seen->valuedouble;
        s->may_lack_logits = q->kind == REQ_GET;
        s->n_top = 0;
        r->created++;
        ring_push(r, q->sess);
    }
    cJSON_Delete(j);
}

static void send_create(lg_run *r, int ci, int si)
{
    lg_req *q = &r->reqs[ci];
    proto_buf body = {0}, req = {0};
    char path[128];
    q->kind = r->o.n_reuse ? REQ_GET : REQ_CREATE;
    q->sess = si;
    q->n = 0;
    if (q->kind == REQ_GET) {
        snprintf(path, sizeof path, "/v1/sessions/%s", r->sessions[si].id);
        request_head(r, &req, "GET", path, 0, 0);
    } else if (r->o.prefill > 0) {
        proto_buf_printf(&body, "{\"tokens\":[");
        for (int i = 0; i < r->o.prefill; i++)
            proto_buf_printf(&body, "%s%d", i ? "," : "", rand_token(r));
        proto_buf_printf(&body, "]}");
        q->n = r->o.prefill;
        request_head(r, &req, "POST", "/v1/sessions", body.len, 1);
        proto_buf_append(&req, body.data, body.len);
    } else {
        request_head(r, &req, "POST", "/v1/sessions", 0, 0);
    }
    issue(r, ci, &req, 0, &answer_cb);
    proto_buf_free(&body);
    proto_buf_free(&req);
}

/* ---------------------------------------------------------------- drive: tokens / generate */

static void drive_line(lg_conn *c, char *line, size_t len)
{
    lg_req *q = c->user;
    if (q->run->teardown)
        return;
    if (q->run->o.sse) {
        /* SSE: "data: {...}" then a blank line per event; the stream ends with "data: [DONE]" */
        if (len == 0 || line[0] == ':' || strncmp(line, "event:", 6) == 0 || strncmp(line, "id:", 3) == 0 ||
            strncmp(line, "retry:", 6) == 0)
            return;
        if (strncmp(line, "data:", 5) != 0) {
            lg_check_fail(&q->chk, LG_CHK_FRAMING, "SSE line without data: %.40s", line);
            return;
        }
        line += 5;
        len -= 5;
        if (len && line[0] == ' ') {
            line++;
            len--;
        }
        if (len == 6 && memcmp(line, "[DONE]", 6) == 0) {
            if (q->sse_done || !q->chk.done)
                lg_check_fail(&q->chk, LG_CHK_FRAMING, "[DONE] %s", q->sse_done ? "twice" : "before the done line");
            q->sse_done = 1;
            return;
        }
        if (q->sse_done) {
            lg_check_fail(&q->chk, LG_CHK_FRAMING, "data after [DONE]");
            return;
        }
    }
    if (++q->payload_lines > 1)
        lg_samples_add(&q->run->gap, (c->t_last_line - q->t_prev_line) * 1e3);
    q->t_prev_line = c->t_last_line;
    lg_check_line(&q->chk, line, len);
}

/* The media type of the stream, without parameters, against the framing asked for. */
static void check_content_type(lg_req *q, const lg_conn *c)
{
    const char *want = q->run->o.sse ? "text/event-stream" : "application/x-ndjson";
    size_t n = strcspn(c->content_type, "; ");
    if (n != strlen(want) || strncasecmp(c->content_type, want, n) != 0)
        lg_check_fail(&q->chk, LG_CHK_FRAMING, "Content-Type \"%.40s\", expected %s", c->content_type, want);
}

static void drive_answer(lg_run *r, lg_req *q, const lg_conn *c)
{
    lg_session *s = &r->sessions[q->sess];
    lg_check *k = &q->chk;
    if (c->status == 200) {
        check_content_type(q, c);
        if (r->o.sse && !q->sse_done)
            lg_check_fail(k, LG_CHK_FRAMING, "SSE stream without data: [DONE]");
    }
    int fails = lg_check_end(k, c->status, c->chunked, c->chunk_split_lines);
    uint64_t folded = r->o.mode == LG_MODE_TOKENS ? (uint64_t)q->n : (uint64_t)k->lines;
    s->busy = 0;
    if (fails == 0) {
        r->tokens_ok += folded;
        r->requests_ok++;
        s->expected = k->tokens_seen;
        s->may_lack_logits = 0;
        s->requests++;
        s->tokens += folded;
        if (r->o.mode == LG_MODE_TOKENS) {
            s->n_top = k->have_prev_top ? k->n_top : 0;
            memcpy(s->top, k->top, (size_t)s->n_top * sizeof *s->top);
        }
        lg_samples_add(&r->lat, (c->t_done - c->t_sent) * 1e3);
        if (c->t_first_line > 0)
            lg_samples_add(&r->ttfc, (c->t_first_line - c->t_sent) * 1e3);
        r->t_drive1 = c->t_done;
    } else {
        r->requests_bad++;
        for (int i = 0; i < LG_CHK_N; i++)
            r->checks[i] += (uint64_t)k->fail[i];
        add_example(r, r->o.mode == LG_MODE_TOKENS ? "tokens" : "generate", s->id, k->why);
        s->n_top = 0;
        if (c->status == 200) {
            /* resynchronise on what the server says it folded, so that one wrong answer is counted
             * once; without a done line the session's state is unknown and it is retired */
            if (k->done)
                s->expected = k->tokens_seen;
            else
                s->dead = 1;
        }
        /* any other status: "a rejected request changes no state" (docs/DESIGN.md §5) */
    }
    if (s->dead)
        r->dead++;
    else
        ring_push(r, q->sess);
}

static void drive_failed(lg_run *r, lg_req *q, const char *why)
{
    lg_session *s = &r->sessions[q->sess];
    r->checks[LG_CHK_TRANSPORT]++;
    r->requests_bad++;
    add_example(r, r->o.mode == LG_MODE_TOKENS ? "tokens" : "generate", s->id, why);
    /* the server may or may not have folded the tokens: the session is no longer known exactly */
    s->busy = 0;
    s->dead = 1;
    r->dead++;
}

static const lg_conn_cb drive_cb = {.on_line = drive_line, .on_complete = request_complete, .on_fail = request_fail};

static int drive_should_stop(lg_run *r)
{
    if (r->o.total_tokens)
        return r->tokens_issued >= r->o.total_tokens;
    return lg_now_s() - r->t_drive0 >= r->o.duration;
}

static int send_drive(lg_run *r, int ci)
{
    if (drive_should_stop(r))
        return 0;
    int si = ring_pop(r);
    if (si < 0)
        return 0;
    lg_session *s = &r->sessions[si];
    lg_req *q = &r->reqs[ci];
    proto_buf body = {0}, req = {0};
    char path[160];
    q->kind = REQ_DRIVE;
    q->sess = si;
    q->t_prev_line = 0;
    q->payload_lines = 0;
    q->sse_done = 0;
    s->busy = 1;
    uint64_t remaining = r->o.total_tokens ? r->o.total_tokens - r->tokens_issued : UINT64_MAX;
    if (r->o.mode == LG_MODE_TOKENS) {
        q->n = (uint64_t)r->o.batch < remaining ? r->o.batch : (int)remaining;
        proto_buf_printf(&body, "{\"tokens\":[");
        for (int i = 0; i < q->n; i++) {
            q->tokens[i] = rand_token(r);
            proto_buf_printf(&body, "%s%d", i ? "," : "", q->tokens[i]);
        }
        proto_buf_printf(&body, "]");
        if (r->o.top_k >= 0)
            proto_buf_printf(&body, ",\"top_k\":%d", r->o.top_k);
        proto_buf_printf(&body, "}");
        snprintf(path, sizeof path, "/v1/sessions/%s/tokens", s->id);
        lg_check_begin(&q->chk, LG_MODE_TOKENS, r->o.vocab, r->o.top_k, s, q->tokens, q->n, 0,
                       &r->pos_base_tokens);
        r->tokens_issued += (uint64_t)q->n;
    } else {
        q->max_tokens = (uint64_t)r->o.max_tokens < remaining ? r->o.max_tokens : (int)remaining;
        proto_buf_printf(&body, "{\"max_tokens\":%d,\"temperature\":%g,\"seed\":%llu", q->max_tokens,
                      r->o.temperature, (unsigned long long)(rng_next(&r->rng) >> 12));
        if (r->o.top_k >= 0)
            proto_buf_printf(&body, ",\"top_k\":%d", r->o.top_k);
        proto_buf_printf(&body, "}");
        snprintf(path, sizeof path, "/v1/sessions/%s/generate", s->id);
        lg_check_begin(&q->chk, LG_MODE_GENERATE, r->vocab_size, -1, s, NULL, 0, q->max_tokens,
                       &r->pos_base_generate);
        r->tokens_issued += (uint64_t)q->max_tokens;
    }
    request_head(r, &req, "POST", path, body.len, 1);
    if (r->o.sse) {
        /* insert the Accept header before the blank line that ends the head */
        req.len -= 2;
        proto_buf_printf(&req, "Accept: text/event-stream\r\n\r\n");
    }
    proto_buf_append(&req, body.data, body.len);
    r->requests_sent++;
    issue(r, ci, &req, 1, &drive_cb);
    proto_buf_free(&body);
    proto_buf_free(&req);
    return 1;
}

/* ---------------------------------------------------------------- delete */

static void delete_answer(lg_run *r, lg_req *q, const lg_conn *c)
{
    if (c->status == 204 || c->status == 200) {
        r->deleted++;
    } else {
        char why[160];
        snprintf(why, sizeof why, "DELETE answered %d", c->status);
        r->checks[LG_CHK_STATUS]++;
        r->setup_failures++;
        add_example(r, "delete", r->sessions[q->sess].id, why);
    }
}

static int send_delete(lg_run *r, int ci)
{
    while (r->next_delete < r->n_sessions && r->sessions[r->next_delete].id[0] == '\0')
        r->next_delete++;
    if (r->next_delete >= r->n_sessions)
        return 0;
    int si = r->next_delete++;
    lg_req *q = &r->reqs[ci];
    proto_buf req = {0};
    char path[128];
    q->kind = REQ_DELETE;
    q->sess = si;
    snprintf(path, sizeof path, "/v1/sessions/%s", r->sessions[si].id);
    request_head(r, &req, "DELETE", path, 0, 0);
    issue(r, ci, &req, 0, &answer_cb);
    proto_buf_free(&req);
    return 1;
}

/* ---------------------------------------------------------------- every request's end */

/* Where an answer or a failure begins: the request is no longer in flight. Its run, or NULL while
 * the run tears down (the answer is then ignored). */
static lg_run *request_ended(lg_conn *c)
{
    lg_req *q = c->user;
    q->run->in_flight--;
    return q->run->teardown ? NULL : q->run;
}

static void request_complete(lg_conn *c)
{
    lg_req *q = c->user;
    lg_run *r = request_ended(c);
    if (!r)
        return;
    count_status(r, c->status);
    switch (q->kind) {
    case REQ_INFO: info_answer(r, c); break;
    case REQ_CREATE:
    case REQ_GET: create_answer(r, q, c); break;
    case REQ_DRIVE: drive_answer(r, q, c); break;
    case REQ_DELETE: delete_answer(r, q, c); break;
    }
    pump(r);
}

static void request_fail(lg_conn *c, const char *why)
{
    lg_req *q = c->user;
    lg_run *r = request_ended(c);
    if (!r)
        return;
    if (q->kind == REQ_DRIVE)
        drive_failed(r, q, why);
    else
        setup_failed(r, q, why);
    pump(r);
}

/* ---------------------------------------------------------------- the phases */

static void enter_phase(lg_run *r, int phase)
{
    if (r->phase == LG_PH_DRIVE && phase != LG_PH_DRIVE)
        r->cpu_drive1 = lg_proc_cpu(r->o.server_pid);
    r->phase = phase;
    if (phase == LG_PH_DRIVE) {
        r->t_drive0 = r->t_drive1 = lg_now_s();
        r->cpu_drive0 = lg_proc_cpu(r->o.server_pid);
    }
    if (r->o.metrics_interval_ms > 0 || r->o.server_pid > 0)
        scrape(r); /* one sample at every phase boundary */
}

static int assign(lg_run *r, int ci)
{
    switch (r->phase) {
    case LG_PH_INFO:
        if (r->info_sent || ci != 0)
            return 0;
        r->info_sent = 1;
        {
            proto_buf req = {0};
            r->reqs[ci].kind = REQ_INFO;
            request_head(r, &req, "GET", "/v1/model", 0, 0);
            issue(r, ci, &req, 0, &answer_cb);
            proto_buf_free(&req);
        }
        return 1;
    case LG_PH_CREATE:
        if (r->next_create >= r->n_sessions)
            return 0;
        send_create(r, ci, r->next_create++);
        return 1;
    case LG_PH_DRIVE:
        return send_drive(r, ci);
    case LG_PH_DELETE:
        return send_delete(r, ci);
    default:
        return 0;
    }
}

static void pump(lg_run *r)
{
    if (r->teardown)
        return;
    for (;;) {
        int any = 0;
        for (int ci = 0; ci < r->n_conns; ci++) {
            if (lg_conn_available(&r->conns[ci]) && r->conns[ci].cb == NULL && assign(r, ci))
                any = 1;
        }
        if (any || r->in_flight > 0)
            return;
        /* nothing in flight and nothing left to send: next phase */
        switch (r->phase) {
        case LG_PH_INFO:
            if (r->setup_error) {
                begin_teardown(r);
                return;
            }
            enter_phase(r, LG_PH_CREATE);
            break;
        case LG_PH_CREATE:
            if (r->created == 0) {
                r->setup_error = "no session could be created";
                begin_teardown(r);
                return;
            }
            enter_phase(r, LG_PH_DRIVE);
            break;
        case LG_PH_DRIVE:
            enter_phase(r, (r->o.keep_sessions || r->o.n_reuse) ? LG_PH_DONE : LG_PH_DELETE);
            break;
        case LG_PH_DELETE:
            enter_phase(r, LG_PH_DONE);
            break;
        default:
            if (!r->final_scrape) {
                r->final_scrape = 1;
                if (r->scrape_inflight)
                    return; /* the scrape's completion comes back here */
            }
            if (!r->scrape_inflight)
                begin_teardown(r);
            return;
        }
    }
}

/* ---------------------------------------------------------------- server sampling */

static const char *phase_names[] = {"info", "create", "drive", "delete", "done"};

static void add_mem_sample(lg_run *r, const char *text)
{
    if (r->n_mem == r->cap_mem) {
        r->cap_mem = r->cap_mem ? r->cap_mem * 2 : 256;
        r->mem = realloc(r->mem, r->cap_mem * sizeof *r->mem);
        if (!r->mem) {
            fprintf(stderr, "recur-load: out of memory\n");
            abort();
        }
    }
    lg_mem_sample *m = &r->mem[r->n_mem++];
    m->t = lg_now_s() - r->t_start;
    m->phase = phase_names[r->phase];
    m->tokens = r->tokens_ok;
    m->metric_rss = text ? lg_prom_value(text, r->o.rss_metric) : -1;
    m->metric_state = text ? lg_prom_value(text, r->o.state_metric) : -1;
    m->metric_sessions = text ? lg_prom_value(text, r->o.sessions_metric) : -1;
    m->proc_rss = lg_proc_rss(r->o.server_pid);
    m->proc_cpu_s = lg_proc_cpu(r->o.server_pid);
}

/* A /metrics sample ends: text is the body of a 200 answer, NULL after a failure. */
static void scrape_end(lg_run *r, const char *text)
{
    r->scrape_inflight = 0;
    if (r->teardown)
        return;
    if (text)
        r->scrapes_ok++;
    else
        r->scrape_errors++;
    add_mem_sample(r, text);
    if (r->final_scrape)
        pump(r);
}

static void scrape_complete(lg_conn *c)
{
    scrape_end(c->user, c->status == 200 ? (c->body.data ? c->body.data : "") : NULL);
}

static void scrape_fail(lg_conn *c, const char *why)
{
    (void)why;
    scrape_end(c->user, NULL);
}

static const lg_conn_cb scrape_cb = {.on_complete = scrape_complete, .on_fail = scrape_fail};

static void scrape(lg_run *r)
{
    if (r->teardown || r->scrape_inflight)
        return;
    if (r->o.metrics_interval_ms <= 0) {
        add_mem_sample(r, NULL); /* /proc only */
        return;
    }
    if (!lg_conn_available(&r->mconn) || r->mconn.cb)
        return;
    proto_buf req = {0};
    request_head(r, &req, "GET", "/metrics", 0, 0);
    r->scrape_inflight = 1;
    lg_conn_request(&r->mconn, req.data, req.len, 0, &scrape_cb, r, (uint64_t)(r->o.request_timeout * 1000.0));
    proto_buf_free(&req);
}

static void on_mtimer(uv_timer_t *t)
{
    scrape(t->data);
}

/* ---------------------------------------------------------------- end of run */

static void begin_teardown(lg_run *r)
{
    if (r->teardown)
        return;
    r->teardown = 1;
    if (r->t_drive1 < r->t_drive0)
        r->t_drive1 = r->t_drive0;
    for (int i = 0; i < r->n_conns; i++)
        lg_conn_shutdown(&r->conns[i]);
    lg_conn_shutdown(&r->mconn);
    uv_close((uv_handle_t *)&r->mtimer, NULL);
    uv_close((uv_handle_t *)&r->deadline, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
}

static void abort_run(lg_run *r, const char *why)
{
    r->aborted = why;
    if (r->phase == LG_PH_DRIVE)
        r->cpu_drive1 = lg_proc_cpu(r->o.server_pid);
    begin_teardown(r);
}

static void on_deadline(uv_timer_t *t)
{
    abort_run(t->data, "deadline (--max-time) reached");
}

static void on_signal(uv_signal_t *s, int signum)
{
    abort_run(s->data, signum == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
}

/* ---------------------------------------------------------------- flags */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: recur-load [options]\n"
            "Session-aware load generator for recurd: creates N sessions, drives them over C keep-alive\n"
            "connections, checks every answer, reports throughput and latency (table + JSON).\n\n"
            "  --host ADDR            server address, loopback only (default 127.0.0.1)\n"
            "  --port N               server port (default 8080)\n"
            "  --sessions N           sessions to create (default 16)\n"
            "  --connections C        concurrent keep-alive connections (default min(N,64))\n"
            "  --mode tokens|generate one token per request (/tokens) or generate streams (default tokens)\n"
            "  --duration S           drive for S seconds (default 10)\n"
            "  --tokens N             instead of a duration: fold/generate N tokens in total\n"
            "  --batch K              tokens per /tokens request (default 1)\n"
            "  --max-tokens M         tokens per generate request (default 16)\n"
            "  --prefill P            tokens folded into each session at creation (default 0; generate: 1)\n"
            "  --vocab V              token ids uniform in [0,V) (default: the model's vocab_size)\n"
            "  --top-k K              send \"top_k\":K (tokens: candidates per line; generate: sampling)\n"
            "  --temperature T        generate temperature (default 1.0)\n"
            "  --seed S               random seed (default 1)\n"
            "  --session ID           drive an existing session instead of creating (repeatable; kept)\n"
            "  --keep-sessions        do not delete the sessions at the end\n"
            "  --sse                  ask for SSE framing (Accept: text/event-stream) instead of NDJSON\n"
            "  --json FILE            write the report as JSON\n"
            "  --metrics-interval MS  sample GET /metrics every MS ms (default 500; 0: off)\n"
            "  --rss-metric NAME      RSS metric name (default process_resident_memory_bytes)\n"
            "  --state-metric NAME    state-bytes metric name (default recurd_state_bytes)\n"
            "  --sessions-metric NAME sessions metric name (default recurd_sessions)\n"
            "  --server-pid PID       also sample VmRSS and CPU time of PID from /proc\n"
            "  --request-timeout S    per request (default 30)\n"
            "  --max-time S           hard bound on the whole run (default duration+60, or 600 with --tokens)\n"
            "  --quiet                no table on stdout\n"
            "  --help\n\n"
            "exit: 0 all checks passed, 1 a check failed, 2 usage, 3 setup failed, 4 aborted\n");
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end || !isfinite(x) || x < lo || x > hi)
        return 0;
    *out = x;
    return 1;
}

static int is_loopback(const char *host, struct sockaddr_in *addr, int port)
{
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    if (uv_ip4_addr(host, port, addr) != 0)
        return 0;
    return (ntohl(addr->sin_addr.s_addr) >> 24) == 127;
}

static int parse_args(int argc, char **argv, lg_opts *o)
{
    enum {
        O_HOST = 256, O_PORT, O_SESSIONS, O_CONNS, O_MODE, O_DURATION, O_TOKENS, O_BATCH, O_MAXTOK,
        O_PREFILL, O_VOCAB, O_TOPK, O_TEMP, O_SEED, O_SESSION, O_KEEP, O_JSON, O_MINT, O_RSSM, O_STATEM,
        O_SESSM, O_PID, O_RTO, O_MAXTIME, O_QUIET, O_HELP, O_SSE
    };
    static const struct option opts[] = {
        {"host", 1, 0, O_HOST}, {"port", 1, 0, O_PORT}, {"sessions", 1, 0, O_SESSIONS},
        {"connections", 1, 0, O_CONNS}, {"mode", 1, 0, O_MODE}, {"duration", 1, 0, O_DURATION},
        {"tokens", 1, 0, O_TOKENS}, {"batch", 1, 0, O_BATCH}, {"max-tokens", 1, 0, O_MAXTOK},
        {"prefill", 1, 0, O_PREFILL}, {"vocab", 1, 0, O_VOCAB}, {"top-k", 1, 0, O_TOPK},
        {"temperature", 1, 0, O_TEMP}, {"seed", 1, 0, O_SEED}, {"session", 1, 0, O_SESSION},
        {"keep-sessions", 0, 0, O_KEEP}, {"json", 1, 0, O_JSON}, {"metrics-interval", 1, 0, O_MINT},
        {"rss-metric", 1, 0, O_RSSM}, {"state-metric", 1, 0, O_STATEM}, {"sessions-metric", 1, 0, O_SESSM},
        {"server-pid", 1, 0, O_PID}, {"request-timeout", 1, 0, O_RTO}, {"max-time", 1, 0, O_MAXTIME},
        {"quiet", 0, 0, O_QUIET}, {"help", 0, 0, O_HELP}, {"sse", 0, 0, O_SSE}, {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = 8080;
    o->n_sessions = 16;
    o->n_conns = -1;
    o->mode = LG_MODE_TOKENS;
    o->duration = 10;
    o->max_tokens = 16;
    o->batch = 1;
    o->prefill = -1;
    o->top_k = -1;
    o->temperature = 1.0;
    o->seed = 1;
    o->metrics_interval_ms = 500;
    o->request_timeout = 30;
    o->rss_metric = "process_resident_memory_bytes";
    o->state_metric = "recurd_state_bytes";
    o->sessions_metric = "recurd_sessions";
    int have_duration = 0;
    double x;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
#define NUM(lo, hi)                                                                          \
    do {                                                                                     \
        if (!parse_num(optarg, lo, hi, &x)) {                                                \
            fprintf(stderr, "recur-load: bad value for --%s: %s\n", opts[c - O_HOST].name, optarg); \
            return 0;                                                                        \
        }                                                                                    \
    } while (0)
        switch (c) {
        case O_HOST:
            if (strlen(optarg) >= sizeof o->host) {
                fprintf(stderr, "recur-load: host too long\n");
                return 0;
            }
            snprintf(o->host, sizeof o->host, "%s", optarg);
            break;
        case O_PORT: NUM(1, 65535); o->port = (int)x; break;
        case O_SESSIONS: NUM(1, 1000000); o->n_sessions = (int)x; break;
        case O_CONNS: NUM(1, 4096); o->n_conns = (int)x; break;
        case O_MODE:
            if (strcmp(optarg, "tokens") == 0)
                o->mode = LG_MODE_TOKENS;
            else if (strcmp(optarg, "generate") == 0)
                o->mode = LG_MODE_GENERATE;
            else {
                fprintf(stderr, "recur-load: --mode is tokens or generate\n");
                return 0;
            }
            break;
        case O_DURATION: NUM(0.001, 86400); o->duration = x; have_duration = 1; break;
        case O_TOKENS: NUM(1, 1e15); o->total_tokens = (uint64_t)x; break;
        case O_BATCH: NUM(1, 1 << 20); o->batch = (int)x; break;
        case O_MAXTOK: NUM(1, 1 << 20); o->max_tokens = (int)x; break;
        case O_PREFILL: NUM(0, 1 << 20); o->prefill = (int)x; break;
        case O_VOCAB: NUM(1, 1e9); o->vocab = (int)x; break;
        case O_TOPK: NUM(0, LG_TOP_MAX); o->top_k = (int)x; break;
        case O_TEMP: NUM(0, 100); o->temperature = x; break;
        case O_SEED: NUM(0, 1.8e19); o->seed = (uint64_t)x; break;
        case O_SESSION:
            o->reuse_ids = realloc(o->reuse_ids, (size_t)(o->n_reuse + 1) * sizeof *o->reuse_ids);
            if (!o->reuse_ids || strlen(optarg) == 0 || strlen(optarg) >= 72 || strpbrk(optarg, "/?# \r\n")) {
                fprintf(stderr, "recur-load: bad --session id\n");
                return 0;
            }
            o->reuse_ids[o->n_reuse++] = optarg;
            break;
        case O_KEEP: o->keep_sessions = 1; break;
        case O_JSON: o->json_path = optarg; break;
        case O_MINT: NUM(0, 3600000); o->metrics_interval_ms = (int)x; break;
        case O_RSSM: o->rss_metric = optarg; break;
        case O_STATEM: o->state_metric = optarg; break;
        case O_SESSM: o->sessions_metric = optarg; break;
        case O_PID: NUM(1, 1 << 30); o->server_pid = (int)x; break;
        case O_RTO: NUM(0.001, 86400); o->request_timeout = x; break;
        case O_MAXTIME: NUM(0.001, 86400 * 7); o->max_time = x; break;
        case O_QUIET: o->quiet = 1; break;
        case O_SSE: o->sse = 1; break;
        case O_HELP:
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 0;
        }
#undef NUM
    }
    if (optind < argc) {
        fprintf(stderr, "recur-load: unexpected argument %s\n", argv[optind]);
        return 0;
    }
    if (o->total_tokens && have_duration) {
        fprintf(stderr, "recur-load: give --duration or --tokens, not both\n");
        return 0;
    }
    if (o->total_tokens)
        o->duration = 0;
    if (o->n_reuse)
        o->n_sessions = o->n_reuse;
    if (o->n_conns < 0)
        o->n_conns = o->n_sessions < 64 ? o->n_sessions : 64;
    if (o->prefill < 0)
        o->prefill = o->mode == LG_MODE_GENERATE ? 1 : 0;
    if (o->max_time <= 0)
        o->max_time = o->total_tokens ? 600 : o->duration + 60;
    return 1;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    static lg_run run;
    lg_run *r = &run;
    signal(SIGPIPE, SIG_IGN);
    if (!parse_args(argc, argv, &r->o))
        return 2;
    if (!is_loopback(r->o.host, &r->addr, r->o.port)) {
        fprintf(stderr, "recur-load: refusing host %s: only loopback (127.0.0.0/8, localhost) is allowed\n",
                r->o.host);
        return 2;
    }
    r->loop = uv_default_loop();
    r->rng = r->o.seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (r->rng == 0)
        r->rng = 1;
    r->pos_base_tokens = r->pos_base_generate = INT64_MIN;
    r->n_sessions = r->o.n_sessions;
    r->sessions = calloc((size_t)r->n_sessions, sizeof *r->sessions);
    r->ring = calloc((size_t)r->n_sessions, sizeof *r->ring);
    r->n_conns = r->o.n_conns < r->n_sessions ? r->o.n_conns : r->n_sessions;
    r->conns = calloc((size_t)r->n_conns, sizeof *r->conns);
    r->reqs = calloc((size_t)r->n_conns, sizeof *r->reqs);
    if (!r->sessions || !r->ring || !r->conns || !r->reqs) {
        fprintf(stderr, "recur-load: out of memory\n");
        return 3;
    }
    for (int i = 0; i < r->o.n_reuse; i++)
        snprintf(r->sessions[i].id, sizeof r->sessions[i].id, "%s", r->o.reuse_ids[i]);
    for (int i = 0; i < r->n_conns; i++) {
        lg_conn_init(&r->conns[i], r->loop, &r->addr, i);
        r->reqs[i].run = r;
        r->reqs[i].tokens = calloc((size_t)r->o.batch, sizeof(int32_t));
        if (!r->reqs[i].tokens) {
            fprintf(stderr, "recur-load: out of memory\n");
            return 3;
        }
    }
    lg_conn_init(&r->mconn, r->loop, &r->addr, -1);

    r->t_start = lg_now_s();
    uv_timer_init(r->loop, &r->mtimer);
    r->mtimer.data = r;
    if (r->o.metrics_interval_ms > 0 || r->o.server_pid > 0) {
        uint64_t every = r->o.metrics_interval_ms > 0 ? (uint64_t)r->o.metrics_interval_ms : 500;
        uv_timer_start(&r->mtimer, on_mtimer, every, every);
    }
    uv_timer_init(r->loop, &r->deadline);
    r->deadline.data = r;
    uv_timer_start(&r->deadline, on_deadline, (uint64_t)(r->o.max_time * 1000.0), 0);
    uv_signal_init(r->loop, &r->sigint);
    r->sigint.data = r;
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_init(r->loop, &r->sigterm);
    r->sigterm.data = r;
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);

    enter_phase(r, LG_PH_INFO);
    pump(r);
    uv_run(r->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(r->loop);
    if (rc != 0)
        fprintf(stderr, "recur-load: warning: loop closed with open handles (%s)\n", uv_strerror(rc));

    uint64_t failed = 0;
    for (int i = 0; i < LG_CHK_N; i++)
        failed += r->checks[i];
    int code = 0;
    if (r->setup_error)
        code = 3;
    else if (r->aborted)
        code = 4;
    else if (failed)
        code = 1;
    return lg_report(r, code);
}
