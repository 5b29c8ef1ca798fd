/* persist.c — snapshot files in state_dir: atomic writes, reads, quarantine (persist.h). */
#include "persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "errf.h"

#define SNAP_SUFFIX ".snap"
#define TMP_SUFFIX ".tmp"
#define TOMB_SUFFIX ".deleted"
#define QUARANTINE "quarantine"
/* Smallest possible snapshot: the core header (40 bytes) and its checksum (8), MODEL.md. */
#define SNAP_MIN_BYTES 48

struct srv_persist {
    int dfd; /* state_dir, O_DIRECTORY */
    int qfd; /* state_dir/quarantine */
    size_t scan_quarantined;
};

int srv_persist_valid_id(const char *s)
{
    for (int i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return s[32] == '\0';
}

/* "<id>.snap" or "<id>.snap.tmp" into out[64]; id must be valid (checked by every caller). */
static void file_name(char out[64], const char *id, int tmp)
{
    snprintf(out, 64, "%.32s" SNAP_SUFFIX "%s", id, tmp ? TMP_SUFFIX : "");
}

/* "<id>.deleted" into out[64]. */
static void tomb_name(char out[64], const char *id)
{
    snprintf(out, 64, "%.32s" TOMB_SUFFIX, id);
}

static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---------------------------------------------------------------- open / scan */

/* The probe: create, write, fsync and remove a file, as a snapshot write would. */
static int probe_writable(int dfd)
{
    static const char name[] = ".probe" TMP_SUFFIX;
    unlinkat(dfd, name, 0);
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    static const uint8_t byte[1] = {0};
    int rc = write_all(fd, byte, 1);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (unlinkat(dfd, name, 0) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* 1 with the id when name is exactly "<32 lowercase hex>" + suffix, else 0. */
static int id_with_suffix(const char *name, const char *suffix, char id[33])
{
    if (strlen(name) != 32 + strlen(suffix) || !ends_with(name, suffix))
        return 0;
    memcpy(id, name, 32);
    id[32] = '\0';
    return srv_persist_valid_id(id);
}

static int unlink_ok(int dfd, const char *name)
{
    return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
}

static int cmp_id(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

typedef char id_buf[33];

/* Tombstones: "<id>.deleted" says that id was deleted and its files must go. Every one is
 * completed here (its snapshot and temp file removed, the directory fsynced, then the
 * tombstone removed). Ids whose removal could not be completed stay pending: reported through
 * pending() and returned in *out (sorted, malloc'd, *n_pend of them) so the listing never
 * loads them. Returns 0 or -errno of the listing. */

static int complete_tombstones(srv_persist *p, DIR *d, void (*pending)(const char *, void *),
                               void *ctx, id_buf **out, size_t *n_tomb, size_t *n_pend)
{
    id_buf *pend = NULL;
    size_t np = 0, cap = 0, nt = 0;
    struct dirent *e;
    while ((errno = 0, e = readdir(d))) {
        char id[33], snap[64], tmp[64];
        if (!id_with_suffix(e->d_name, TOMB_SUFFIX, id))
            continue;
        nt++;
        file_name(snap, id, 0);
        file_name(tmp, id, 1);
        int rc = unlink_ok(p->dfd, snap);
        unlink_ok(p->dfd, tmp);
        if (rc == 0 && fsync(p->dfd) != 0)
            rc = -errno;
        if (rc == 0)
            rc = unlink_ok(p->dfd, e->d_name) == 0 ? 0 : 1; /* 1: only the tombstone is left */
        if (rc == 0)
            continue;
        if (rc < 0)
            srv_log(SRV_LOG_ERROR, "snapshot_unlink_failed",
                    "\"error\":\"%s\",\"tombstone\":\"kept\",\"id_prefix\":\"%.8s\"",
                    strerror(-rc), id);
        if (np == cap) {
            cap = cap ? cap * 2 : 16;
            pend = realloc(pend, cap * sizeof *pend);
            if (!pend)
                abort();
        }
        memcpy(pend[np++], id, 33);
        pending(id, ctx);
    }
    int rerr = errno;
    if (np)
        qsort(pend, np, sizeof *pend, cmp_id);
    *out = pend;
    *n_tomb = nt;
    *n_pend = np;
    return rerr ? -rerr : 0;
}

static int scan(srv_persist *p, void (*found)(const char *id, void *ctx),
                void (*pending)(const char *id, void *ctx), void *ctx, char *err, size_t errlen)
{
    int fd = openat(p->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return srv_errf(err, errlen, "cannot list it: %s", strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return srv_errf(err, errlen, "cannot list it: %s", strerror(errno));
    }
    size_t n_snap = 0, n_tmp = 0, n_other = 0, n_short = 0, n_tomb = 0, n_pend = 0;
    /* First the tombstones: a session whose removal is pending is never loaded. */
    id_buf *pend = NULL;
    int trc = complete_tombstones(p, d, pending, ctx, &pend, &n_tomb, &n_pend);
    if (trc != 0) {
        free(pend);
        closedir(d);
        return srv_errf(err, errlen, "cannot list it: %s", strerror(-trc));
    }
    rewinddir(d);
    struct dirent *e;
    while ((errno = 0, e = readdir(d))) {
        const char *name = e->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, QUARANTINE))
            continue;
        char id[33];
        if (id_with_suffix(name, SNAP_SUFFIX TMP_SUFFIX, id)) {
            /* A write that never reached its rename: the old snapshot (if any) is the truth.
             * Only recurd's own temp files: any other name is the operator's and stays. */
            if (unlinkat(p->dfd, name, 0) == 0)
                n_tmp++;
            continue;
        }
        if (id_with_suffix(name, TOMB_SUFFIX, id))
            continue; /* done above */
        if (!id_with_suffix(name, SNAP_SUFFIX, id)) {
            n_other++;
            continue;
        }
        if (n_pend && bsearch(id, pend, n_pend, sizeof *pend, cmp_id))
            continue; /* deleted: its removal is pending */
        struct stat st;
        if (fstatat(p->dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
            srv_persist_quarantine(p, id, "notfile");
            n_short++;
            continue;
        }
        if (st.st_size < SNAP_MIN_BYTES) {
            srv_persist_quarantine(p, id, st.st_size == 0 ? "empty" : "short");
            n_short++;
            continue;
        }
        n_snap++;
        found(id, ctx);
    }
    int rerr = errno;
    closedir(d);
    free(pend);
    if (rerr)
        return srv_errf(err, errlen, "cannot list it: %s", strerror(rerr));
    if (n_tmp || n_tomb)
        fsync(p->dfd);
    p->scan_quarantined = n_short;
    srv_log(SRV_LOG_INFO, "state_dir_scanned",
            "\"snapshots\":%zu,\"temp_removed\":%zu,\"quarantined\":%zu,\"ignored\":%zu,"
            "\"tombstones\":%zu,\"removals_pending\":%zu",
            n_snap, n_tmp, n_short, n_other, n_tomb, n_pend);
    return 0;
}

int srv_persist_open(const char *dir, void (*found)(const char *id, void *ctx),
                     void (*pending)(const char *id, void *ctx), void *ctx, srv_persist **out,
                     char *err, size_t errlen)
{
    /* RLIMIT_FSIZE would otherwise kill the daemon with SIGXFSZ: let write() fail with EFBIG,
     * which is reported like any other snapshot failure. */
    signal(SIGXFSZ, SIG_IGN);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return srv_errf(err, errlen, "state_dir %s: cannot create it: %s", dir, strerror(errno));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return srv_errf(err, errlen, "state_dir %s: cannot open it as a directory: %s", dir,
                        strerror(errno));
    /* One daemon per directory: two writers would undo each other's deletes and evictions.
     * The lock goes with the process, kill -9 included. */
    if (flock(dfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(dfd);
        if (e == EWOULDBLOCK)
            return srv_errf(err, errlen, "state_dir %s: in use by another recurd (locked)", dir);
        return srv_errf(err, errlen, "state_dir %s: cannot lock it: %s", dir, strerror(e));
    }
    struct stat dst;
    if (fstat(dfd, &dst) == 0 && (dst.st_mode & 077)) {
        char d[600];
        srv_log(SRV_LOG_WARN, "state_dir_permissions",
                "\"path\":\"%s\",\"mode\":\"%03o\",\"message\":\"readable by others; 0700 "
                "expected\"",
                srv_log_str(dir, d, sizeof d), (unsigned)(dst.st_mode & 0777));
    }
    int rc = probe_writable(dfd);
    if (rc != 0) {
        close(dfd);
        return srv_errf(err, errlen, "state_dir %s: not writable (probe file): %s", dir,
                        strerror(-rc));
    }
    if (mkdirat(dfd, QUARANTINE, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        close(dfd);
        return srv_errf(err, errlen, "state_dir %s: cannot create quarantine/: %s", dir,
                        strerror(e));
    }
    int qfd = openat(dfd, QUARANTINE, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (qfd < 0) {
        int e = errno;
        close(dfd);
        return srv_errf(err, errlen, "state_dir %s: cannot open quarantine/: %s", dir, strerror(e));
    }
    srv_persist *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->dfd = dfd;
    p->qfd = qfd;
    char serr[256];
    if (scan(p, found, pending, ctx, serr, sizeof serr) != 0) {
        srv_persist_close(p);
        return srv_errf(err, errlen, "state_dir %s: %s", dir, serr);
    }
    *out = p;
    return 0;
}

size_t srv_persist_scan_quarantined(const srv_persist *p)
{
    return p->scan_quarantined;
}

void srv_persist_close(srv_persist *p)
{
    if (!p)
        return;
    close(p->qfd);
    close(p->dfd);
    free(p);
}

/* ---------------------------------------------------------------- files */

int srv_persist_write(srv_persist *p, const char *id, const uint8_t *buf, size_t len)
{
    if (!srv_persist_valid_id(id))
        return -EINVAL;
    char tmp[64], fin[64];
    file_name(tmp, id, 1);
    file_name(fin, id, 0);
    int fd = openat(p->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* Left by a failed unlink after an earlier failure; writes of one id never overlap. */
        unlinkat(p->dfd, tmp, 0);
        fd = openat(p->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return -errno;
    int rc = write_all(fd, buf, len);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno; /* NFS and friends report write errors at close */
    if (rc == 0 && renameat(p->dfd, tmp, p->dfd, fin) != 0)
        rc = -errno;
    if (rc != 0) {
        unlinkat(p->dfd, tmp, 0);
        return rc;
    }
    /* The rename is durable only once the directory is. */
    if (fsync(p->dfd) != 0)
        return -errno;
    return 0;
}

/* read(2), or preadv2(RWF_NOWAIT) at the file offset when nowait: -EAGAIN when that part is
 * not in the page cache (or the kernel refuses the flag: EOPNOTSUPP, EINVAL, ENOSYS). */
static ssize_t read_some(int fd, uint8_t *b, size_t n, int nowait)
{
    if (!nowait)
        return read(fd, b, n);
    struct iovec v = {b, n};
    ssize_t r = preadv2(fd, &v, 1, -1, RWF_NOWAIT);
    if (r < 0 && (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS))
        errno = EAGAIN;
    return r;
}

static int read_file(srv_persist *p, const char *id, size_t max_len, uint8_t **buf, size_t *len,
                     int nowait)
{
    if (!srv_persist_valid_id(id))
        return -EINVAL;
    char fin[64];
    file_name(fin, id, 0);
    int fd = openat(p->dfd, fin, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    /* too large: only its head, enough for the caller to tell another model's file (othermodel) */
    int too_big = (uint64_t)st.st_size > max_len;
    size_t n = too_big ? (st.st_size < SRV_PERSIST_HEAD ? (size_t)st.st_size : SRV_PERSIST_HEAD)
                       : (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        abort();
    size_t got = 0;
    while (got < n) {
        ssize_t r = read_some(fd, b + got, n - got, nowait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(b);
            close(fd);
            return -e;
        }
        if (r == 0)
            break; /* shrank under us: the snapshot check will report truncation */
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = got;
    return too_big ? -EFBIG : 0;
}

int srv_persist_read(srv_persist *p, const char *id, size_t max_len, uint8_t **buf, size_t *len)
{
    return read_file(p, id, max_len, buf, len, 0);
}

int srv_persist_read_cached(srv_persist *p, const char *id, size_t max_len, uint8_t **buf,
                            size_t *len)
{
    return read_file(p, id, max_len, buf, len, 1);
}

int srv_persist_unlink(srv_persist *p, const char *id, int sync)
{
    if (!srv_persist_valid_id(id))
        return -EINVAL;
    char fin[64];
    file_name(fin, id, 0);
    if (unlinkat(p->dfd, fin, 0) != 0 && errno != ENOENT)
        return -errno;
    if (sync && fsync(p->dfd) != 0)
        return -errno;
    return 0;
}

int srv_persist_tombstone(srv_persist *p, const char *id)
{
    if (!srv_persist_valid_id(id))
        return -EINVAL;
    char name[64];
    tomb_name(name, id);
    int fd = openat(p->dfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) != 0 ? -errno : 0;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && fsync(p->dfd) != 0)
        rc = -errno;
    return rc;
}

int srv_persist_remove(srv_persist *p, const char *id)
{
    if (!srv_persist_valid_id(id))
        return -EINVAL;
    char snap[64], tmp[64], tomb[64];
    file_name(snap, id, 0);
    file_name(tmp, id, 1);
    tomb_name(tomb, id);
    int rc = unlink_ok(p->dfd, snap);
    if (rc != 0)
        return rc;
    unlink_ok(p->dfd, tmp);
    if (fsync(p->dfd) != 0)
        return -errno;
    /* Only once the snapshot's removal is durable; a tombstone that outlives a crash is
     * completed again at the next start. */
    return unlink_ok(p->dfd, tomb);
}

int srv_persist_sync_dir(srv_persist *p)
{
    return fsync(p->dfd) != 0 ? -errno : 0;
}

int srv_persist_quarantine(srv_persist *p, const char *id, const char *why)
{
    if (!srv_persist_valid_id(id))
        return -EINVAL;
    char fin[64], dst[128];
    file_name(fin, id, 0);
    snprintf(dst, sizeof dst, "%s.%s.%lld", fin, why, (long long)time(NULL));
    int rc = 0;
    if (renameat(p->dfd, fin, p->qfd, dst) != 0)
        rc = -errno;
    if (rc == 0) {
        fsync(p->qfd);
        fsync(p->dfd);
    }
    /* Ids are capabilities: only a prefix is logged, enough to find the file in quarantine/. */
    srv_log(rc ? SRV_LOG_ERROR : SRV_LOG_WARN, "snapshot_quarantined",
            "\"reason\":\"%s\",\"id_prefix\":\"%.8s\"%s%s%s", why, id,
            rc ? ",\"error\":\"" : "", rc ? strerror(-rc) : "", rc ? "\"" : "");
    return rc;
}
