/* test_persist.c — server/persist.c: the on-disk snapshot store, against a real directory. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist.h"

#define ID_A "0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210"

static char dir[256];
static int n_found;
static char found_ids[8][33];

static void on_found(const char *id, void *ctx)
{
    (void)ctx;
    if (n_found < 8)
        memcpy(found_ids[n_found], id, 33);
    n_found++;
}

static int n_pending;
static char pending_ids[8][33];

static void on_pending(const char *id, void *ctx)
{
    (void)ctx;
    if (n_pending < 8)
        memcpy(pending_ids[n_pending], id, 33);
    n_pending++;
}

static void mkdtemp_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_persist_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    n_found = 0;
    n_pending = 0;
}

/* Remove the test directory (a path we made with mkdtemp: safe for the shell). */
static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        cr_log_warn("could not remove %s", dir);
}

static void put_file(const char *name, const void *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

static int exists(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static srv_persist *open_ok(void)
{
    srv_persist *p = NULL;
    char err[512];
    int rc = srv_persist_open(dir, on_found, on_pending, NULL, &p, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    return p;
}

Test(persist, write_read_roundtrip_modes_and_no_temp)
{
    mkdtemp_dir();
    srv_persist *p = open_ok();
    uint8_t data[1000];
    for (int i = 0; i < 1000; i++)
        data[i] = (uint8_t)(i * 7);
    cr_assert_eq(srv_persist_write(p, ID_A, data, sizeof data), 0);
    cr_assert(!exists(ID_A ".snap.tmp"));
    char path[512];
    snprintf(path, sizeof path, "%s/" ID_A ".snap", dir);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    uint8_t *back;
    size_t n;
    cr_assert_eq(srv_persist_read(p, ID_A, 4096, &back, &n), 0);
    cr_assert_eq(n, sizeof data);
    cr_assert_eq(memcmp(back, data, n), 0);
    free(back);
    cr_assert_eq(srv_persist_read(p, ID_A, 999, &back, &n), -EFBIG); /* and its head */
    cr_assert_eq(n, SRV_PERSIST_HEAD);
    cr_assert_eq(memcmp(back, data, n), 0);
    free(back);
    cr_assert_eq(srv_persist_read(p, ID_B, 4096, &back, &n), -ENOENT);
    /* A second write replaces the first. */
    cr_assert_eq(srv_persist_write(p, ID_A, data, 100), 0);
    cr_assert_eq(srv_persist_read(p, ID_A, 4096, &back, &n), 0);
    cr_assert_eq(n, 100);
    free(back);
    cr_assert_eq(srv_persist_unlink(p, ID_A, 1), 0);
    cr_assert(!exists(ID_A ".snap"));
    cr_assert_eq(srv_persist_unlink(p, ID_A, 0), 0); /* ENOENT is fine */
    srv_persist_close(p);
    cleanup();
}

Test(persist, ids_are_validated_before_any_path)
{
    mkdtemp_dir();
    srv_persist *p = open_ok();
    static const char *bad[] = {"../../../../etc/passwd", "0123456789ABCDEF0123456789abcdef",
                                "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0",
                                ""};
    uint8_t b = 0, *out;
    size_t n;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(srv_persist_write(p, bad[i], &b, 1), -EINVAL, "%s", bad[i]);
        cr_assert_eq(srv_persist_read(p, bad[i], 10, &out, &n), -EINVAL);
        cr_assert_eq(srv_persist_unlink(p, bad[i], 0), -EINVAL);
        cr_assert_eq(srv_persist_quarantine(p, bad[i], "x"), -EINVAL);
    }
    srv_persist_close(p);
    cleanup();
}

Test(persist, open_removes_temps_quarantines_empty_and_lists_snapshots)
{
    mkdtemp_dir();
    uint8_t snap[64] = {1};
    put_file(ID_A ".snap", snap, sizeof snap);
    put_file(ID_A ".snap.tmp", snap, 10);
    put_file(ID_B ".snap", NULL, 0);               /* zero-length */
    put_file("abababababababababababababababab.snap.tmp", snap, 64); /* orphan temp */
    put_file("README", "x", 1);                    /* ignored */
    srv_persist *p = open_ok();
    cr_assert_eq(n_found, 1);
    cr_assert_str_eq(found_ids[0], ID_A);
    cr_assert(!exists(ID_A ".snap.tmp"));
    cr_assert(!exists("abababababababababababababababab.snap.tmp"));
    cr_assert(!exists(ID_B ".snap"));
    cr_assert(exists("README"));
    char q[512];
    snprintf(q, sizeof q, "%s/quarantine", dir);
    struct stat st;
    cr_assert_eq(stat(q, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);
    cr_assert_eq(srv_persist_quarantine(p, ID_A, "checksum"), 0);
    cr_assert(!exists(ID_A ".snap"));
    srv_persist_close(p);
    cleanup();
}

Test(persist, a_failed_write_keeps_the_previous_file)
{
    mkdtemp_dir();
    srv_persist *p = open_ok(); /* also ignores SIGXFSZ */
    uint8_t small[100], big[8192];
    memset(small, 1, sizeof small);
    memset(big, 2, sizeof big);
    cr_assert_eq(srv_persist_write(p, ID_A, small, sizeof small), 0);
    struct rlimit rl = {4096, 4096};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    cr_assert_eq(srv_persist_write(p, ID_A, big, sizeof big), -EFBIG);
    cr_assert(!exists(ID_A ".snap.tmp"));
    uint8_t *back;
    size_t n;
    cr_assert_eq(srv_persist_read(p, ID_A, 1 << 20, &back, &n), 0);
    cr_assert_eq(n, sizeof small);
    cr_assert_eq(memcmp(back, small, n), 0);
    free(back);
    srv_persist_close(p);
    cleanup();
}

Test(persist, unusable_directories_are_refused)
{
    mkdtemp_dir();
    put_file("plain", "x", 1);
    char path[512], err[512];
    srv_persist *p = NULL;
    snprintf(path, sizeof path, "%s/plain/sub", dir);
    cr_assert_eq(srv_persist_open(path, on_found, on_pending, NULL, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot create") != NULL, "%s", err);
    snprintf(path, sizeof path, "%s/plain", dir);
    cr_assert_eq(srv_persist_open(path, on_found, on_pending, NULL, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "directory") != NULL, "%s", err);
    /* A symlinked snapshot is never followed. */
    snprintf(path, sizeof path, "%s/" ID_A ".snap", dir);
    cr_assert_eq(symlink("/etc/passwd", path), 0);
    p = open_ok();
    cr_assert_eq(n_found, 0); /* quarantined as notfile */
    cr_assert(!exists(ID_A ".snap"));
    srv_persist_close(p);
    cleanup();
}

Test(persist, only_recurds_own_temp_files_are_removed_at_start)
{
    mkdtemp_dir();
    uint8_t snap[64] = {1};
    put_file(ID_A ".snap", snap, sizeof snap);
    put_file(ID_A ".snap.tmp", snap, 10);          /* ours: a write that never renamed */
    put_file("operator-notes.tmp", "keep", 4);     /* not ours: every one of these stays */
    put_file(".tmp", "k", 1);
    put_file("x.snap.tmp", "k", 1);
    put_file("0123456789ABCDEF0123456789ABCDEF.snap.tmp", "k", 1); /* not a recurd id */
    put_file(ID_B ".tmp", "k", 1);
    put_file(ID_B ".snap.tmp.tmp", "k", 1);
    srv_persist *p = open_ok();
    cr_assert_eq(n_found, 1);
    cr_assert(!exists(ID_A ".snap.tmp"));
    cr_assert(exists("operator-notes.tmp"));
    cr_assert(exists(".tmp"));
    cr_assert(exists("x.snap.tmp"));
    cr_assert(exists("0123456789ABCDEF0123456789ABCDEF.snap.tmp"));
    cr_assert(exists(ID_B ".tmp"));
    cr_assert(exists(ID_B ".snap.tmp.tmp"));
    srv_persist_close(p);
    cleanup();
}

Test(persist, a_tombstoned_session_is_never_listed_and_its_removal_completes)
{
    mkdtemp_dir();
    uint8_t snap[64] = {1};
    put_file(ID_A ".snap", snap, sizeof snap);
    put_file(ID_B ".snap", snap, sizeof snap);
    srv_persist *p = open_ok();
    cr_assert_eq(n_found, 2);
    cr_assert_eq(srv_persist_tombstone(p, ID_A), 0);
    cr_assert(exists(ID_A ".deleted"));
    char path[512];
    snprintf(path, sizeof path, "%s/" ID_A ".deleted", dir);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    srv_persist_close(p);
    /* Restart: A is removed (snapshot, then tombstone) and never reported; B is listed. */
    n_found = 0;
    p = open_ok();
    cr_assert_eq(n_found, 1);
    cr_assert_str_eq(found_ids[0], ID_B);
    cr_assert_eq(n_pending, 0);
    cr_assert(!exists(ID_A ".snap"));
    cr_assert(!exists(ID_A ".deleted"));
    /* srv_persist_remove: the snapshot and a tombstone, ENOENT included. */
    cr_assert_eq(srv_persist_tombstone(p, ID_B), 0);
    cr_assert_eq(srv_persist_remove(p, ID_B), 0);
    cr_assert(!exists(ID_B ".snap"));
    cr_assert(!exists(ID_B ".deleted"));
    cr_assert_eq(srv_persist_remove(p, ID_B), 0);
    cr_assert_eq(srv_persist_remove(p, "../x"), -EINVAL);
    cr_assert_eq(srv_persist_tombstone(p, "../x"), -EINVAL);
    srv_persist_close(p);
    cleanup();
}

Test(persist, a_tombstone_whose_snapshot_cannot_be_removed_stays_pending)
{
    mkdtemp_dir();
    uint8_t snap[64] = {1};
    put_file(ID_B ".snap", snap, sizeof snap);
    /* A snapshot name that unlink(2) refuses even for root: a non-empty directory. */
    char path[512];
    snprintf(path, sizeof path, "%s/" ID_A ".snap", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    put_file(ID_A ".snap/x", "x", 1);
    put_file(ID_A ".deleted", NULL, 0);
    srv_persist *p = open_ok();
    cr_assert_eq(n_pending, 1);
    cr_assert_str_eq(pending_ids[0], ID_A);
    cr_assert_eq(n_found, 1); /* only B: A is neither loaded nor quarantined */
    cr_assert_str_eq(found_ids[0], ID_B);
    cr_assert(exists(ID_A ".deleted"));
    cr_assert_neq(srv_persist_remove(p, ID_A), 0);
    cr_assert(exists(ID_A ".deleted")); /* kept until the snapshot is gone */
    /* The obstacle goes: the retry completes. */
    snprintf(path, sizeof path, "%s/" ID_A ".snap/x", dir);
    cr_assert_eq(unlink(path), 0);
    snprintf(path, sizeof path, "%s/" ID_A ".snap", dir);
    cr_assert_eq(rmdir(path), 0);
    put_file(ID_A ".snap", snap, sizeof snap); /* even a valid snapshot there now */
    cr_assert_eq(srv_persist_remove(p, ID_A), 0);
    cr_assert(!exists(ID_A ".snap"));
    cr_assert(!exists(ID_A ".deleted"));
    srv_persist_close(p);
    cleanup();
}
