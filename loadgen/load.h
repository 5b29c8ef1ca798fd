/*
 * load.h — recur-load, the session-aware load generator for recurd (docs/DESIGN.md §5, issue 5).
 *
 * One libuv loop thread drives C keep-alive HTTP/1.1 connections (llhttp in HTTP_RESPONSE mode)
 * against N sessions. Every response is checked (status, chunked NDJSON framing, each line a JSON
 * object, token echo, positions, logprobs, tokens_seen advancing by exactly what was folded), and
 * throughput counts only responses that passed every check.
 *
 * Files: conn.c (one HTTP client connection), check.c (response checks), stats.c (samples,
 * percentiles, buffers), scrape.c (/metrics and /proc sampling), report.c (table and JSON),
 * main.c (flags and the phases of a run).
 */
#ifndef LOADGEN_LOAD_H
#define LOADGEN_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <uv.h>
#include <llhttp.h>
#include <cJSON.h>

#include "buf.h"

/* ---------------------------------------------------------------- buffers and samples (stats.c) */

/* Byte buffers are proto_buf (proto/buf.h; recur-load links libproto). */

/* A growable vector of doubles; percentiles sort it in place. */
typedef struct {
    double *v;
    size_t n, cap;
    int sorted;
} lg_samples;

void lg_samples_add(lg_samples *s, double x);
double lg_samples_pct(lg_samples *s, double p); /* p in [0,100]; nearest-rank; 0 when empty */
double lg_samples_mean(const lg_samples *s);

double lg_now_s(void); /* monotonic seconds (uv_hrtime) */

/* ---------------------------------------------------------------- one HTTP client connection (conn.c) */

typedef struct lg_conn lg_conn;

typedef struct {
    /* stream mode only: one complete body line (without '\n', NUL-terminated, may be modified). */
    void (*on_line)(lg_conn *c, char *line, size_t len);
    /* The response is complete: c->status, c->chunked, c->body (non-stream mode) are valid. */
    void (*on_complete)(lg_conn *c);
    /* Transport failure, HTTP parse error or timeout; the connection is being closed. */
    void (*on_fail)(lg_conn *c, const char *why);
} lg_conn_cb;

enum { LG_CONN_CLOSED = 0, LG_CONN_CONNECTING, LG_CONN_READY, LG_CONN_BUSY, LG_CONN_CLOSING };

struct lg_conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_timer_t timer;
    llhttp_t parser;
    uv_loop_t *loop;
    struct sockaddr_in addr;
    int state;
    int index;

    /* the request in flight */
    proto_buf pending;          /* request bytes waiting for the connection */
    int stream;              /* split the body into lines */
    const lg_conn_cb *cb;
    void *user;
    uint64_t timeout_ms;
    double t_sent, t_first_line, t_last_line, t_done;

    /* the response */
    int status;
    int chunked;
    int keep_alive;
    int complete;
    int chunk_split_lines;   /* chunks that ended in the middle of a line */
    int in_header_value;
    proto_buf hfield;
    proto_buf hvalue;
    char content_type[96];
    proto_buf body;             /* non-stream: the whole body; stream: the current partial line */
    uint64_t lines;
    uint64_t reconnects;
    int closing_handles;     /* shutdown: tcp and timer close */
};

void lg_conn_init(lg_conn *c, uv_loop_t *loop, const struct sockaddr_in *addr, int index);
/* Send one request (bytes copied). Connects (or waits for the old socket to close) first when
 * needed. Exactly one of cb->on_complete / cb->on_fail follows. Not while LG_CONN_BUSY. */
void lg_conn_request(lg_conn *c, const char *req, size_t len, int stream, const lg_conn_cb *cb,
                     void *user, uint64_t timeout_ms);
int lg_conn_available(const lg_conn *c); /* not busy (a request would be accepted) */
/* Close every handle of the connection (end of run). A request in flight fails with "aborted". */
void lg_conn_shutdown(lg_conn *c);

/* ---------------------------------------------------------------- checks (check.c) */

enum {
    LG_CHK_STATUS = 0,   /* unexpected HTTP status */
    LG_CHK_FRAMING,      /* not chunked, chunk ending mid-line, data after done, missing done */
    LG_CHK_JSON,         /* a line or body that is not the expected JSON object */
    LG_CHK_COUNT,        /* wrong number of token lines */
    LG_CHK_TOKEN,        /* token echo wrong or out of range */
    LG_CHK_POS,          /* positions not consecutive from tokens_seen */
    LG_CHK_LOGPROB,      /* logprob missing, non-finite, > 0, null where it must not be, or
                            inconsistent with the previous line's top candidates */
    LG_CHK_TOP,          /* top candidates malformed or out of order */
    LG_CHK_TOKENS_SEEN,  /* tokens_seen does not advance by exactly the folded count */
    LG_CHK_TRANSPORT,    /* connection error, parse error, timeout */
    LG_CHK_N
};
extern const char *const lg_check_names[LG_CHK_N];

#define LG_TOP_MAX 64
typedef struct {
    int32_t token;
    double logprob;
} lg_cand;

/* One session as the load generator tracks it. */
typedef struct {
    char id[72];
    uint64_t expected;       /* tokens_seen the server must report now */
    int busy;
    int dead;                /* retired: its server-side state is no longer known exactly */
    int may_lack_logits;     /* --session: restored sessions may answer null for their next token */
    int n_top;               /* candidates predicted for the next position by the last line */
    lg_cand top[LG_TOP_MAX];
    uint64_t requests, tokens;
} lg_session;

/* Per-response checker state: fed line by line, then finished. */
typedef struct {
    int mode;                /* LG_MODE_TOKENS / LG_MODE_GENERATE */
    int vocab;
    int top_k;               /* requested candidates, -1 when not sent */
    lg_session *s;
    const int32_t *sent;     /* tokens mode: the tokens of the request */
    int n_sent;
    int max_tokens;          /* generate mode */
    uint64_t before;         /* s->expected when the request was sent */
    int64_t *pos_base;       /* learned offset pos - (tokens_seen_before + i), shared by the run */
    int lines;               /* token lines so far */
    int done;                /* the done line was seen */
    uint64_t tokens_seen;    /* from the done line */
    int fail[LG_CHK_N];
    char why[200];           /* first failure of this response */
    int n_top;
    lg_cand top[LG_TOP_MAX]; /* candidates of the previous line */
    int have_prev_top;
} lg_check;

enum { LG_MODE_TOKENS = 0, LG_MODE_GENERATE = 1 };

void lg_check_begin(lg_check *k, int mode, int vocab, int top_k, lg_session *s, const int32_t *sent,
                    int n_sent, int max_tokens, int64_t *pos_base);
void lg_check_line(lg_check *k, const char *line, size_t len);
/* Call after the response completed; checks the count and tokens_seen. Returns the number of
 * failed checks of this response (0: it is a correct answer). */
int lg_check_end(lg_check *k, int status, int chunked, int chunk_split_lines);
void lg_check_fail(lg_check *k, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- server sampling (scrape.c) */

typedef struct {
    double t;                /* seconds since the run started */
    const char *phase;
    uint64_t tokens;         /* verified tokens folded so far (drive phase) */
    double metric_rss;       /* -1 when absent */
    double metric_state;
    double metric_sessions;
    double proc_rss;         /* VmRSS from /proc/PID/status in bytes, -1 without --server-pid */
    double proc_cpu_s;       /* utime+stime of the server, -1 without --server-pid */
} lg_mem_sample;

/* Value of the first sample of metric `name` (exact name, any labels) in Prometheus text, or -1. */
double lg_prom_value(const char *text, const char *name);
/* VmRSS of pid in bytes, or -1. */
double lg_proc_rss(int pid);
/* utime+stime of pid in seconds, or -1. */
double lg_proc_cpu(int pid);


/* ---------------------------------------------------------------- a run (main.c, report.c) */

typedef struct {
    char host[64];
    int port;
    int n_sessions;
    int n_conns;
    int mode;
    double duration;          /* seconds; 0 when --tokens is used */
    uint64_t total_tokens;    /* 0 when --duration is used */
    int max_tokens;           /* generate: tokens per request */
    int batch;                /* tokens: tokens per request */
    int prefill;              /* tokens folded into each session at creation */
    int vocab;                /* token ids uniform in [0, vocab); 0: the model's vocab_size */
    uint64_t seed;
    const char *json_path;
    int metrics_interval_ms;  /* 0: no /metrics sampling */
    int server_pid;
    int top_k;                /* -1: not sent */
    double temperature;
    double max_time;          /* hard bound on the whole run, seconds */
    double request_timeout;   /* seconds */
    const char *rss_metric, *state_metric, *sessions_metric;
    char **reuse_ids;         /* --session ID (repeatable): drive existing sessions */
    int n_reuse;
    int keep_sessions;
    int sse;                  /* Accept: text/event-stream (SSE framing) instead of NDJSON */
    int quiet;
} lg_opts;

enum { LG_PH_INFO = 0, LG_PH_CREATE, LG_PH_DRIVE, LG_PH_DELETE, LG_PH_DONE };

#define LG_MAX_EXAMPLES 8

typedef struct lg_run {
    lg_opts o;
    uv_loop_t *loop;
    struct sockaddr_in addr;

    lg_conn *conns;
    struct lg_req *reqs;      /* one request context per connection */
    int n_conns;
    int phase;
    int info_sent;
    int teardown;             /* handles are closing: completion callbacks do nothing */
    const char *aborted;      /* why the run stopped early, or NULL */
    const char *setup_error;  /* why the run could not start, or NULL */

    double t_start, t_drive0, t_drive1;

    /* the model, from GET /v1/model */
    char model_name[64];
    int vocab_size;
    double state_bytes;
    int n_layers;

    /* sessions */
    lg_session *sessions;
    int n_sessions;
    int next_create, next_delete;
    int created, deleted, dead;
    int *ring;                /* idle sessions, FIFO */
    int ring_head, ring_count;

    /* drive */
    uint64_t rng;
    uint64_t tokens_issued, tokens_ok;
    uint64_t requests_sent, requests_ok, requests_bad;
    int in_flight;
    int64_t pos_base_tokens, pos_base_generate;
    lg_samples lat, ttfc, gap;
    uint64_t checks[LG_CHK_N];
    uint64_t status_counts[600];
    uint64_t status_other;
    char examples[LG_MAX_EXAMPLES][256];
    int n_examples;
    uint64_t setup_failures;  /* failed checks while creating or deleting sessions */

    /* server sampling */
    lg_conn mconn;
    uv_timer_t mtimer, deadline;
    uv_signal_t sigint, sigterm;
    int scrape_inflight;
    int final_scrape;
    uint64_t scrape_errors, scrapes_ok;
    lg_mem_sample *mem;
    size_t n_mem, cap_mem;
    double cpu_drive0, cpu_drive1;
    uint64_t requests_at_cpu0;
} lg_run;

int lg_report(lg_run *r, int exit_code);           /* prints the table, writes --json; returns exit_code */

#endif /* LOADGEN_LOAD_H */
