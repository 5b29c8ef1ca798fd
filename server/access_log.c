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

/* A static code or template as a JSON string: only bytes that need no escaping, else null. */
static int put_str(char *line, size_t cap, size_t n, const char *s)
{
    if (!s || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./{}:[]")
                  != strlen(s))
        return snprintf(line + n, cap - n, "null");
    return snprintf(line + n, cap - n, "\"%s\"", s);
}

/* Seconds between two uv_hrtime stamps, as a JSON number (null when the start is unknown). */
static int put_secs(char *line, size_t cap, size_t n, uint64_t from, uint64_t to)
{
    if (!from || to < from)
        return snprintf(line + n, cap - n, "null");
    return snprintf(line + n, cap - n, "%.6f", (double)(to - from) / 1e9);
}

size_t srv_access_log_format(const srv_access *a, const char *id_prefix, char *line, size_t cap)
{
    char ts[32], route[128] = "";
    srv_log_timestamp(ts, sizeof ts);
    const srv_access_note *note = a->note;
    if (note && note->route) { /* the template without routes.c's optional-slash marker */
        snprintf(route, sizeof route, "%s", note->route);
        size_t rl = strlen(route);
        if (rl >= 2 && !strcmp(route + rl - 2, "/?"))
            route[rl - 2] = '\0';
    }
    size_t n = 0;
    int w;
#define PUT(expr)                                                                                  \
    do {                                                                                           \
        w = (expr);                                                                                \
        if (w < 0 || (size_t)w >= cap - n)                                                         \
            return 0;                                                                              \
        n += (size_t)w;                                                                            \
    } while (0)
    PUT(snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"info\",\"event\":\"access\",\"request_id\":", ts));
    if (a->request_id)
        PUT(put_str(line, cap, n, a->request_id));
    else
        PUT(snprintf(line + n, cap - n, "\"%s-%llu\"", id_prefix, (unsigned long long)a->seq));
    PUT(snprintf(line + n, cap - n, ",\"remote\":"));
    PUT(put_str(line, cap, n, a->remote));
    PUT(snprintf(line + n, cap - n, ",\"method\":"));
    PUT(put_str(line, cap, n, a->method));
    PUT(snprintf(line + n, cap - n, ",\"route\":"));
    PUT(put_str(line, cap, n, route[0] ? route : NULL));
    PUT(snprintf(line + n, cap - n, ",\"status\":%d,\"bytes_in\":%llu,\"bytes_out\":%llu,\"duration_s\":",
                 a->status, (unsigned long long)a->bytes_in, (unsigned long long)a->bytes_out));
    PUT(put_secs(line, cap, n, a->t_start_ns, a->t_end_ns));
    PUT(snprintf(line + n, cap - n, ",\"ttfb_s\":"));
    PUT(put_secs(line, cap, n, a->t_first_ns ? a->t_start_ns : 0, a->t_first_ns));
    PUT(snprintf(line + n, cap - n, ",\"tokens_in\":%llu,\"tokens_out\":%llu,\"session\":",
                 (unsigned long long)(note ? note->tokens_in : 0),
                 (unsigned long long)(note ? note->tokens_out : 0)));
    PUT(put_str(line, cap, n, note && note->session[0] ? note->session : NULL));
    PUT(snprintf(line + n, cap - n, ",\"error\":"));
    PUT(put_str(line, cap, n, a->error));
    PUT(snprintf(line + n, cap - n, ",\"aborted\":%s}\n", a->aborted ? "true" : "false"));
#undef PUT
    return n;
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

static void *writer_main(void *arg)
{
    srv_access_log *l = arg;
    int failing = 0;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->fill_len && !l->reopen && !l->stop)
            pthread_cond_wait(&l->cv, &l->mu);
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
    pthread_cond_init(&l->cv, NULL);
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
    int full = l->fill_len + n > l->cap, wake = l->fill_len == 0;
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
    pthread_join(l->thread, NULL);
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
