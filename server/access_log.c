/* access_log.c — the access log: line format, bounded buffer, writer thread (access_log.h). */
#include "access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "recur.h"

/* Lines gather this long (or until a quarter of the buffer is used) before the writer writes
 * them: one wake-up and one write per batch instead of per request. */
#define ACCESS_LOG_FLUSH_MS 200
/* How long srv_access_log_close waits for the last writes at exit. */
#define ACCESS_LOG_CLOSE_MS 2000

struct srv_access_log {
    char path[1024];
    int to_stderr;
    int fd;
    char id_prefix[9];        /* 8 hex digits naming this process in generated request ids */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu: the loop appends to fill; the writer swaps it with its empty spare */
    char *fill, *spare;       /* [cap] each */
    size_t fill_len, cap;
    int reopen, stop;
    atomic_uint_fast64_t lines, dropped, write_errors, reopens;
};

/* ------------------------------------------------------------------ the line */

void srv_access_session_hash(const char *id, char out[13])
{
    uint64_t h = recur_fnv1a64(0xcbf29ce484222325ULL, id, strlen(id));
    snprintf(out, 13, "%012llx", (unsigned long long)(h >> 16));
}

/* The line is built by hand (no snprintf: glibc's took ~3 us of CPU for these 16 fields, and it
 * runs for every request on the loop thread). `ok` turns 0 when the line would not fit. */
typedef struct {
    char *p, *end;
    int ok;
} line_writer;

static void put(line_writer *w, const char *s, size_t n)
{
    if (!w->ok || (size_t)(w->end - w->p) < n) {
        w->ok = 0;
        return;
    }
    memcpy(w->p, s, n);
    w->p += n;
}

static void put_lit(line_writer *w, const char *s)
{
    put(w, s, strlen(s));
}

static void put_u64(line_writer *w, uint64_t v)
{
    char tmp[20], *e = tmp + sizeof tmp, *q = e;
    do {
        *--q = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(w, q, (size_t)(e - q));
}

/* A static code or template as a JSON string: only bytes that need no escaping, else null. */
static void put_str(line_writer *w, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!s || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./{}:[]") != n) {
        put_lit(w, "null");
        return;
    }
    put(w, "\"", 1);
    put(w, s, n);
    put(w, "\"", 1);
}

/* Seconds between two uv_hrtime stamps with 6 decimals (null when the start is unknown). */
static void put_secs(line_writer *w, uint64_t from, uint64_t to)
{
    if (!from || to < from) {
        put_lit(w, "null");
        return;
    }
    uint64_t us = (to - from + 500) / 1000, f = us % 1000000;
    char frac[6];
    for (int i = 5; i >= 0; i--, f /= 10)
        frac[i] = (char)('0' + f % 10);
    put_u64(w, us / 1000000);
    put(w, ".", 1);
    put(w, frac, 6);
}

size_t srv_access_log_format(const srv_access *a, const char *id_prefix, char *line, size_t cap)
{
    char ts[32], route[128] = "";
    srv_log_timestamp(ts, sizeof ts);
    const srv_access_note *note = a->note;
    if (note && note->route) { /* the template without routes.c's optional-slash marker */
        size_t rl = strlen(note->route);
        if (rl >= 2 && !strcmp(note->route + rl - 2, "/?"))
            rl -= 2;
        if (rl < sizeof route) {
            memcpy(route, note->route, rl);
            route[rl] = '\0';
        }
    }
    line_writer w = {line, line + cap, 1};
    put_lit(&w, "{\"ts\":\"");
    put_lit(&w, ts);
    put_lit(&w, "\",\"level\":\"info\",\"event\":\"access\",\"request_id\":");
    if (a->request_id) {
        put_str(&w, a->request_id);
    } else {
        put(&w, "\"", 1);
        put_lit(&w, id_prefix);
        put(&w, "-", 1);
        put_u64(&w, a->seq);
        put(&w, "\"", 1);
    }
    put_lit(&w, ",\"remote\":");
    put_str(&w, a->remote);
    put_lit(&w, ",\"method\":");
    put_str(&w, a->method);
    put_lit(&w, ",\"route\":");
    put_str(&w, route[0] ? route : NULL);
    put_lit(&w, ",\"status\":");
    put_u64(&w, (uint64_t)(a->status > 0 ? a->status : 0));
    put_lit(&w, ",\"bytes_in\":");
    put_u64(&w, a->bytes_in);
    put_lit(&w, ",\"bytes_out\":");
    put_u64(&w, a->bytes_out);
    put_lit(&w, ",\"duration_s\":");
    put_secs(&w, a->t_start_ns, a->t_end_ns);
    put_lit(&w, ",\"ttfb_s\":");
    put_secs(&w, a->t_first_ns ? a->t_start_ns : 0, a->t_first_ns);
    put_lit(&w, ",\"tokens_in\":");
    put_u64(&w, note ? note->tokens_in : 0);
    put_lit(&w, ",\"tokens_out\":");
    put_u64(&w, note ? note->tokens_out : 0);
    put_lit(&w, ",\"session\":");
    put_str(&w, note && note->session[0] ? note->session : NULL);
    put_lit(&w, ",\"error\":");
    put_str(&w, a->error);
    put_lit(&w, a->aborted ? ",\"aborted\":true}\n" : ",\"aborted\":false}\n");
    return w.ok ? (size_t)(w.p - line) : 0;
}

/* ------------------------------------------------------------------ the writer */

/* Writes buf[len]; to stderr in pieces of at most PIPE_BUF cut after a newline, so that each
 * write to a pipe is atomic and the daemon's other log lines never land inside one of ours.
 * 0, or -1 with the lines not written counted as dropped. */
static int write_all(srv_access_log *l, const char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        size_t piece = len - off;
        if (l->to_stderr && piece > PIPE_BUF) {
            piece = PIPE_BUF;
            while (piece > 1 && buf[off + piece - 1] != '\n')
                piece--;
            if (buf[off + piece - 1] != '\n')
                piece = PIPE_BUF; /* a line longer than PIPE_BUF (never formatted) */
        }
        ssize_t r = write(l->fd, buf + off, piece);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            uint64_t lost = 0;
            for (size_t i = off; i < len; i++)
                lost += buf[i] == '\n';
            atomic_fetch_add(&l->dropped, lost);
            atomic_fetch_add(&l->write_errors, 1);
            return -1;
        }
        off += (size_t)r;
    }
    return 0;
}

static void do_reopen(srv_access_log *l)
{
    if (l->to_stderr)
        return;
    int fd = open(l->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0) { /* keep writing to the old file: nothing is lost, the operator is told */
        atomic_fetch_add(&l->write_errors, 1);
        srv_log(SRV_LOG_ERROR, "access_log_reopen_failed", "\"error\":\"%s\"", strerror(errno));
        return;
    }
    close(l->fd);
    l->fd = fd;
    atomic_fetch_add(&l->reopens, 1);
    srv_log(SRV_LOG_INFO, "access_log_reopened", NULL);
}

/* Under mu: wait until the first line of a batch, then until ACCESS_LOG_FLUSH_MS later or a
 * quarter of the buffer is used, whichever comes first (a reopen or stop ends the wait). */
static void wait_for_batch(srv_access_log *l)
{
    while (!l->fill_len && !l->reopen && !l->stop)
        pthread_cond_wait(&l->cv, &l->mu);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += ACCESS_LOG_FLUSH_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!l->reopen && !l->stop && l->fill_len < l->cap / 4)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT)
            break;
}

static void *writer_main(void *arg)
{
    srv_access_log *l = arg;
    int failing = 0;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        wait_for_batch(l);
        if (!l->fill_len && !l->reopen && l->stop)
            break;
        char *buf = l->fill; /* take the whole buffer; the loop fills the spare meanwhile */
        size_t len = l->fill_len;
        l->fill = l->spare;
        l->spare = buf;
        l->fill_len = 0;
        int reopen = l->reopen;
        l->reopen = 0;
        pthread_mutex_unlock(&l->mu);
        if (reopen) /* before the write: what was buffered at the HUP goes to the new file */
            do_reopen(l);
        if (len) {
            int rc = write_all(l, buf, len);
            if (rc && !failing)
                srv_log(SRV_LOG_ERROR, "access_log_write_failed", "\"error\":\"%s\"", strerror(errno));
            failing = rc != 0;
        }
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ------------------------------------------------------------------ public */

int srv_access_log_open(const char *path, size_t buffer_bytes, srv_access_log **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    srv_access_log *l = calloc(1, sizeof *l);
    if (!l)
        abort();
    snprintf(l->path, sizeof l->path, "%s", path);
    l->to_stderr = !strcmp(path, "-");
    l->fd = l->to_stderr ? STDERR_FILENO
                         : open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (l->fd < 0) {
        snprintf(err, errlen, "access_log %s: %s", path, strerror(errno));
        free(l);
        return -1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    seed = recur_fnv1a64(seed ^ (uint64_t)getpid(), &seed, sizeof seed);
    snprintf(l->id_prefix, sizeof l->id_prefix, "%08llx", (unsigned long long)(seed >> 32));
    l->cap = buffer_bytes;
    l->fill = malloc(l->cap);
    l->spare = malloc(l->cap);
    if (!l->fill || !l->spare)
        abort();
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&l->thread, NULL, writer_main, l) != 0) {
        snprintf(err, errlen, "access_log: cannot start its writer thread");
        if (!l->to_stderr)
            close(l->fd);
        free(l->fill);
        free(l->spare);
        free(l);
        return -1;
    }
    *out = l;
    return 0;
}

void srv_access_log_record(srv_access_log *l, const srv_access *a)
{
    if (!l)
        return;
    char line[1024];
    size_t n = srv_access_log_format(a, l->id_prefix, line, sizeof line);
    if (n == 0) { /* cannot happen with the fields' bounds; counted, never truncated */
        atomic_fetch_add(&l->dropped, 1);
        return;
    }
    pthread_mutex_lock(&l->mu);
    /* the writer waits for a batch's first line, then for a quarter of the buffer (or time) */
    int full = l->fill_len + n > l->cap,
        wake = l->fill_len == 0 || (l->fill_len < l->cap / 4 && l->fill_len + n >= l->cap / 4);
    if (!full) {
        memcpy(l->fill + l->fill_len, line, n);
        l->fill_len += n;
    }
    pthread_mutex_unlock(&l->mu);
    if (full) {
        atomic_fetch_add(&l->dropped, 1);
        return;
    }
    atomic_fetch_add(&l->lines, 1);
    if (wake)
        pthread_cond_signal(&l->cv);
}

/* Sets one of the writer's flags (reopen, stop) and wakes it. */
static void tell_writer(srv_access_log *l, int *flag)
{
    pthread_mutex_lock(&l->mu);
    *flag = 1;
    pthread_mutex_unlock(&l->mu);
    pthread_cond_signal(&l->cv);
}

void srv_access_log_reopen(srv_access_log *l)
{
    if (l)
        tell_writer(l, &l->reopen);
}

void srv_access_log_close(srv_access_log *l)
{
    if (!l)
        return;
    tell_writer(l, &l->stop);
    /* A writer stuck in write() (a hung disk, a stderr pipe nobody reads) must not keep the
     * daemon from exiting: after ACCESS_LOG_CLOSE_MS it is left behind, with what it holds. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ACCESS_LOG_CLOSE_MS / 1000;
    if (pthread_timedjoin_np(l->thread, NULL, &until) != 0) {
        pthread_mutex_lock(&l->mu);
        size_t pending = l->fill_len;
        pthread_mutex_unlock(&l->mu);
        srv_log(SRV_LOG_WARN, "access_log_flush_timeout", "\"pending_bytes\":%zu", pending);
        return; /* not freed: the writer still uses it until the process exits */
    }
    if (!l->to_stderr)
        close(l->fd);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->fill);
    free(l->spare);
    free(l);
}

srv_access_log_stats srv_access_log_get_stats(const srv_access_log *l)
{
    srv_access_log_stats s = {0};
    if (l) {
        s.lines = atomic_load(&l->lines);
        s.dropped = atomic_load(&l->dropped);
        s.write_errors = atomic_load(&l->write_errors);
        s.reopens = atomic_load(&l->reopens);
    }
    return s;
}

void srv_access_log_metrics(const srv_access_log *l, proto_buf *b)
{
    if (!l)
        return;
    srv_access_log_stats s = srv_access_log_get_stats(l);
    const struct {
        const char *name, *help;
        uint64_t v;
    } m[] = {
        {"recurd_access_log_lines_total", "Access log lines buffered for writing.", s.lines},
        {"recurd_access_log_dropped_total",
         "Access log lines dropped: the buffer (access_log_buffer_bytes) was full, or their write failed.",
         s.dropped},
        {"recurd_access_log_write_errors_total", "Failed access log writes and reopens.",
         s.write_errors},
        {"recurd_access_log_reopens_total", "Access log reopens (SIGHUP).", s.reopens},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        srv_metric(b, m[i].name, "counter", m[i].help, m[i].v);
}
