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
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "errf.h"

#define SNAP_SUFFIX ".snap"
#define TMP_SUFFIX ".tmp"
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

/* Called with a name like "<32 hex>.snap": the id, or NULL for any other name. */
static int snap_id(const char *name, char id[33])
{
    if (strlen(name) != 32 + sizeof SNAP_SUFFIX - 1 || !ends_with(name, SNAP_SUFFIX))
        return 0;
    memcpy(id, name, 32);
    id[32] = '\0';
    return srv_persist_valid_id(id);
}

static int scan(srv_persist *p, void (*found)(const char *id, void *ctx), void *ctx, char *err,
                size_t errlen)
{
    int fd = openat(p->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return srv_errf(err, errlen, "cannot list it: %s", strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return srv_errf(err, errlen, "cannot list it: %s", strerror(errno));
    }
    size_t n_snap = 0, n_tmp = 0, n_other = 0, n_short = 0;
    struct dirent *e;
    while ((errno = 0, e = readdir(d))) {
        const char *name = e->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, QUARANTINE))
            continue;
        char id[33];
        if (ends_with(name, TMP_SUFFIX)) {
            /* A write that never reached its rename: the old snapshot (if any) is the truth. */
            if (unlinkat(p->dfd, name, 0) == 0)
                n_tmp++;
            continue;
        }
        if (!snap_id(name, id)) {
            n_other++;
            continue;
        }
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
    if (rerr)
        return srv_errf(err, errlen, "cannot list it: %s", strerror(rerr));
    if (n_tmp)
        fsync(p->dfd);
    p->scan_quarantined = n_short;
    srv_log(SRV_LOG_INFO, "state_dir_scanned",
            "\"snapshots\":%zu,\"temp_removed\":%zu,\"quarantined\":%zu,\"ignored\":%zu", n_snap,
            n_tmp, n_short, n_other);
    return 0;
}

int srv_persist_open(const char *dir, void (*found)(const char *id, void *ctx), void *ctx,
                     srv_persist **out, char *err, size_t errlen)
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
    if (scan(p, found, ctx, serr, sizeof serr) != 0) {
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

int srv_persist_read(srv_persist *p, const char *id, size_t max_len, uint8_t **buf, size_t *len)
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
    if ((uint64_t)st.st_size > max_len) {
        close(fd);
        return -EFBIG;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        abort();
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
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
    return 0;
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
