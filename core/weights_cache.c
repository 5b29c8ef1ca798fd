/* weights_cache.c — recur_model_quantize_cached (recur.h): a quantized model read from its cached
 * file when that file passes every check of weights_cache.h, else quantized and the file written
 * atomically. The file is untrusted input: its size is bounded before anything is read, the
 * header checked field by field (each refusal names its rule), the payload read with pread (a
 * file truncated under us is a short read, not a SIGBUS) into the new model's matrices and
 * checksummed as it arrives; a refused file is never used, only replaced. */
#include "weights_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_config.h"
#include "model_internal.h"
#include "quant.h"

#define READ_PIECE ((size_t)1 << 20) /* bytes per pread: read, then checksummed while in cache */

/* ---------------------------------------------------------------- header */

void recur__wcache_header_write(uint8_t *h, const recur__wcache_expect *e, uint64_t sum)
{
    memcpy(h, RECUR_WCACHE_MAGIC, 8);
    recur__put_le32(h + 8, RECUR_WCACHE_VERSION);
    recur__put_le32(h + 12, RECUR_QUANT_LAYOUT_VERSION);
    recur__put_le64(h + 16, e->src_fingerprint);
    recur__put_le64(h + 24, e->fingerprint);
    recur__put_le32(h + 32, e->dtype);
    recur__put_le32(h + 36, e->matrices);
    recur__put_le64(h + 40, e->payload_bytes);
    recur__put_le64(h + 48, sum);
    recur__put_le64(h + 56, recur__fnv1a(RECUR_FNV_OFFSET, h, 56));
}

const char *recur__wcache_header_check(const uint8_t *h, size_t n, const recur__wcache_expect *e, uint64_t *sum,
                                       char *detail, size_t dlen)
{
#define REFUSE(rule, ...) return snprintf(detail, dlen, __VA_ARGS__), rule
    if (detail && dlen) detail[0] = '\0';
    if (e->file_bytes > e->max_file_bytes)
        REFUSE("weights_cache_too_large", "%llu bytes > weights_cache_max_bytes %llu",
               (unsigned long long)e->file_bytes, (unsigned long long)e->max_file_bytes);
    if (n < RECUR_WCACHE_HEADER || e->file_bytes < RECUR_WCACHE_HEADER)
        REFUSE("weights_cache_truncated", "%llu bytes, shorter than the %d-byte header",
               (unsigned long long)(e->file_bytes < n ? e->file_bytes : n), RECUR_WCACHE_HEADER);
    if (memcmp(h, RECUR_WCACHE_MAGIC, 8) != 0) REFUSE("weights_cache_magic", "not a quantized-weights cache file");
    if (recur__get_le32(h + 8) != RECUR_WCACHE_VERSION)
        REFUSE("weights_cache_version", "format version %u, this build reads %u", recur__get_le32(h + 8),
               RECUR_WCACHE_VERSION);
    if (recur__get_le64(h + 56) != recur__fnv1a(RECUR_FNV_OFFSET, h, 56))
        REFUSE("weights_cache_header_checksum", "the header's checksum does not match its bytes");
    if (recur__get_le32(h + 12) != RECUR_QUANT_LAYOUT_VERSION)
        REFUSE("weights_cache_layout", "panel layout version %u, this build packs %u", recur__get_le32(h + 12),
               RECUR_QUANT_LAYOUT_VERSION);
    if (recur__get_le64(h + 16) != e->src_fingerprint)
        REFUSE("weights_cache_model", "quantized from model %016llx, not %016llx",
               (unsigned long long)recur__get_le64(h + 16), (unsigned long long)e->src_fingerprint);
    if (recur__get_le32(h + 32) != e->dtype)
        REFUSE("weights_cache_dtype", "dtype %u, not %u (%s)", recur__get_le32(h + 32), e->dtype,
               recur__wtype_name((recur_wtype)e->dtype));
    if (recur__get_le64(h + 24) != e->fingerprint)
        REFUSE("weights_cache_fingerprint", "quantized fingerprint %016llx, not %016llx",
               (unsigned long long)recur__get_le64(h + 24), (unsigned long long)e->fingerprint);
    if (recur__get_le32(h + 36) != e->matrices || recur__get_le64(h + 40) != e->payload_bytes)
        REFUSE("weights_cache_shape", "%u matrices of %llu bytes, the model has %u of %llu", recur__get_le32(h + 36),
               (unsigned long long)recur__get_le64(h + 40), e->matrices, (unsigned long long)e->payload_bytes);
    if (e->file_bytes != RECUR_WCACHE_HEADER + e->payload_bytes)
        REFUSE(e->file_bytes < RECUR_WCACHE_HEADER + e->payload_bytes ? "weights_cache_truncated" : "weights_cache_length",
               "%llu bytes, the header says %llu", (unsigned long long)e->file_bytes,
               (unsigned long long)(RECUR_WCACHE_HEADER + e->payload_bytes));
    *sum = recur__get_le64(h + 48);
    return NULL;
#undef REFUSE
}

/* ---------------------------------------------------------------- the model's matrices */

typedef struct {
    uint32_t matrices;
    uint64_t bytes;
    recur_wtype wt;
} count_ctx;

static void count_one(void *ctx, void *dst, const void *src, int N, int K)
{
    (void)dst, (void)src;
    count_ctx *c = ctx;
    c->matrices++;
    c->bytes += recur__packed_bytes(N, K, c->wt);
}

/* One pass over the matrices that reads (fd -> dst) or writes (dst -> fd) them at offset,
 * checksumming each piece; the first failure stops the I/O (the rest of the walk is a no-op). */
typedef struct {
    int fd, writing;
    recur_wtype wt;
    uint64_t offset;
    recur__lanesum_state sum;
    int err;       /* errno of the failure, or -1 for a short read */
} io_ctx;

static void io_one(void *ctx, void *dst, const void *src, int N, int K)
{
    (void)src;
    io_ctx *c = ctx;
    uint8_t *p = dst;
    size_t left = recur__packed_bytes(N, K, c->wt);
    while (left && !c->err) {
        size_t piece = left < READ_PIECE ? left : READ_PIECE, done = 0;
        while (done < piece) {
            ssize_t r = c->writing ? pwrite(c->fd, p + done, piece - done, (off_t)(c->offset + done))
                                   : pread(c->fd, p + done, piece - done, (off_t)(c->offset + done));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                c->err = r < 0 ? errno : -1;
                return;
            }
            done += (size_t)r;
        }
        recur__lanesum_update(&c->sum, p, piece);
        p += piece, c->offset += piece, left -= piece;
    }
}

/* ---------------------------------------------------------------- read, write */

/* Read path into m's matrices (src: m's source, e: what the file must say, file_bytes filled
 * here). 0: the file is valid and m holds it; 1: no file; -1: refused, rule and detail set. */
static int read_cache(const char *path, recur_model *m, const recur_model *src, recur__wcache_expect *e,
                      recur_wcache_report *r)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO planted there must not block */
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        snprintf(r->rule, sizeof r->rule, "weights_cache_unreadable");
        snprintf(r->detail, sizeof r->detail, "open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    const char *rule = NULL;
    uint8_t h[RECUR_WCACHE_HEADER];
    uint64_t sum = 0;
    ssize_t n = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rule = "weights_cache_not_regular";
        snprintf(r->detail, sizeof r->detail, "not a regular file");
    } else {
        e->file_bytes = (uint64_t)st.st_size;
        if (e->file_bytes <= e->max_file_bytes) /* else not a byte is read: the check refuses it */
            do n = pread(fd, h, sizeof h, 0); while (n < 0 && errno == EINTR);
        if (n < 0) {
            rule = "weights_cache_unreadable";
            snprintf(r->detail, sizeof r->detail, "read: %s", strerror(errno));
        } else {
            rule = recur__wcache_header_check(h, (size_t)n, e, &sum, r->detail, sizeof r->detail);
        }
    }
    if (!rule) {
        io_ctx io = {.fd = fd, .writing = 0, .wt = m->wtype, .offset = RECUR_WCACHE_HEADER};
        recur__lanesum_init(&io.sum);
        recur__quant_each_matrix(m, src, io_one, &io);
        if (io.err) {
            rule = io.err < 0 ? "weights_cache_truncated" : "weights_cache_unreadable";
            snprintf(r->detail, sizeof r->detail, "reading the payload at byte %llu: %s",
                     (unsigned long long)io.offset, io.err < 0 ? "end of file" : strerror(io.err));
        } else if (recur__lanesum_final(&io.sum) != sum) {
            rule = "weights_cache_checksum";
            snprintf(r->detail, sizeof r->detail, "the payload's checksum does not match the header's");
        }
    }
    close(fd);
    if (!rule) return 0;
    snprintf(r->rule, sizeof r->rule, "%s", rule);
    return -1;
}

/* Write m's matrices as the cache file path (in dir) atomically: a temporary file in dir, fsync,
 * rename over path, fsync of dir. 0, or -1 with r->detail saying why (nothing left behind). */
static int write_cache(const char *dir, const char *path, recur_model *m, const recur_model *src,
                       const recur__wcache_expect *e, recur_wcache_report *r)
{
    char tmp[sizeof r->path + 16];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, base);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) return snprintf(r->detail, sizeof r->detail, "create a file in %.200s: %s", dir, strerror(errno)), -1;
    uint8_t h[RECUR_WCACHE_HEADER] = {0};
    const char *step = "write";
    io_ctx io = {.fd = fd, .writing = 1, .wt = m->wtype, .offset = RECUR_WCACHE_HEADER};
    recur__lanesum_init(&io.sum);
    recur__quant_each_matrix(m, src, io_one, &io);
    int ok = !io.err;
    if (ok) { /* the header last: it carries the payload's checksum */
        recur__wcache_header_write(h, e, recur__lanesum_final(&io.sum));
        ssize_t w;
        do w = pwrite(fd, h, sizeof h, 0); while (w < 0 && errno == EINTR);
        ok = w == (ssize_t)sizeof h;
        if (!ok && w >= 0) errno = ENOSPC;
    } else {
        errno = io.err > 0 ? io.err : EIO;
    }
    if (ok && fsync(fd) != 0) ok = 0, step = "fsync";
    int saved = errno;
    if (close(fd) != 0 && ok) ok = 0, step = "close", saved = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, step = "rename", saved = errno;
    if (!ok) {
        unlink(tmp);
        snprintf(r->detail, sizeof r->detail, "%s %.200s: %s", step, tmp, strerror(saved));
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the rename itself durable */
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* ---------------------------------------------------------------- public */

const char *recur_wcache_outcome_name(recur_wcache_outcome o)
{
    switch (o) {
    case RECUR_WCACHE_OFF: return "off";
    case RECUR_WCACHE_HIT: return "hit";
    case RECUR_WCACHE_WRITTEN: return "written";
    case RECUR_WCACHE_REPLACED: return "replaced";
    case RECUR_WCACHE_NOT_WRITTEN: return "not_written";
    }
    return "?";
}

int recur_model_quantize_cached(const recur_model *src, const char *weights_dtype, const char *cache_dir,
                                uint64_t max_file_bytes, recur_model **out, recur_wcache_report *report,
                                char *err, size_t errlen)
{
    recur_wcache_report scratch, *r = report ? report : &scratch;
    memset(r, 0, sizeof *r);
    recur_model *m;
    int rc = recur__quant_shell(src, weights_dtype, &m, err, errlen);
    if (rc) return rc;
    count_ctx cnt = {0, 0, m->wtype};
    recur__quant_each_matrix(m, src, count_one, &cnt);
    recur__wcache_expect e = {src->info.fingerprint, m->info.fingerprint, (uint32_t)m->wtype, cnt.matrices,
                              cnt.bytes, 0, max_file_bytes ? max_file_bytes : RECUR_WEIGHTS_CACHE_MAX_BYTES};
    int cached = 0;
    if (cache_dir && cache_dir[0]) {
        char dt[8];
        snprintf(dt, sizeof dt, "%s", m->wtype == RECUR_WT_Q8_0 ? "q8_0" : "q4_0");
        int n = snprintf(r->path, sizeof r->path, "%s/%016llx.%s.p%u.qweights", cache_dir,
                         (unsigned long long)m->info.fingerprint, dt, RECUR_QUANT_LAYOUT_VERSION);
        r->outcome = RECUR_WCACHE_NOT_WRITTEN;
        if (n < 0 || (size_t)n >= sizeof r->path)
            snprintf(r->detail, sizeof r->detail, "the cache directory's path is too long");
        else if (RECUR_WCACHE_HEADER + cnt.bytes > e.max_file_bytes)
            snprintf(r->detail, sizeof r->detail, "the file would be %llu bytes > weights_cache_max_bytes %llu",
                     (unsigned long long)(RECUR_WCACHE_HEADER + cnt.bytes), (unsigned long long)e.max_file_bytes);
        else
            cached = 1;
    }
    int got = cached ? read_cache(r->path, m, src, &e, r) : 1;
    if (got == 0) {
        r->outcome = RECUR_WCACHE_HIT;
        snprintf(m->info.weights_origin, sizeof m->info.weights_origin, "cache");
        *out = m;
        return RECUR_OK;
    }
    /* no file, or a refused one: quantize (every matrix byte is rewritten, whatever was read) */
    recur_model *q;
    recur_model_free(m);
    rc = recur_model_quantize(src, weights_dtype, &q, err, errlen);
    if (rc) return rc;
    if (cached) {
        if (mkdir(cache_dir, 0700) != 0 && errno != EEXIST)
            snprintf(r->detail, sizeof r->detail, "create the directory %.200s: %s", cache_dir, strerror(errno));
        else if (write_cache(cache_dir, r->path, q, src, &e, r) == 0)
            r->outcome = got < 0 ? RECUR_WCACHE_REPLACED : RECUR_WCACHE_WRITTEN;
    }
    *out = q;
    return RECUR_OK;
}
