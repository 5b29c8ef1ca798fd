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

/* The ids srv_persist_open reports: n counts them all, ids keeps the first 8. */
typedef struct {
    int n;
    char ids[8][33];
} id_list;

static id_list found, pending;

static void record(id_list *l, const char *id)
{
    if (l->n < 8)
        memcpy(l->ids[l->n], id, 33);
    l->n++;
}

static void on_found(const char *id, void *ctx) { record(&found, id); }
static void on_pending(const char *id, void *ctx) { record(&pending, id); }

static void mkdtemp_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_persist_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    found.n = 0;
    pending.n = 0;
}

/* Remove the test directory (a path we made with mkdtemp: safe for the shell). */
static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        cr_log_warn("could not remove %s", dir);
}

/* dir/name, in a buffer the next call overwrites. */
static const char *in_dir(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void put_file(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(in_dir(name), "wb");
    cr_assert_not_null(f);
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

static int exists(const char *name)
{
    return access(in_dir(name), F_OK) == 0;
}

/* The permission bits of dir/name (asserted to exist). */
static unsigned mode_of(const char *name)
{
    struct stat st;
    cr_assert_eq(stat(in_dir(name), &st), 0, "%s", name);
    return st.st_mode & 0777;
}

static srv_persist *open_ok(void)
{
    srv_persist *p = NULL;
    char err[512];
    int rc = srv_persist_open(dir, on_found, on_pending, NULL, &p, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    return p;
}

TestSuite(persist, .init = mkdtemp_dir, .fini = cleanup);

Test(persist, write_read_roundtrip_modes_and_no_temp)
{
    srv_persist *p = open_ok();
    uint8_t data[1000];
    for (int i = 0; i < 1000; i++)
        data[i] = (uint8_t)(i * 7);
    cr_assert_eq(srv_persist_write(p, ID_A, data, sizeof data), 0);
    cr_assert(!exists(ID_A ".snap.tmp"));
    cr_assert_eq(mode_of(ID_A ".snap"), 0600);
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
}

Test(persist, ids_are_validated_before_any_path)
{
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
}

Test(persist, open_removes_temps_quarantines_empty_and_lists_snapshots)
{
    uint8_t snap[64] = {1};
    put_file(ID_A ".snap", snap, sizeof snap);
    put_file(ID_A ".snap.tmp", snap, 10);
    put_file(ID_B ".snap", NULL, 0);               /* zero-length */
    put_file("abababababababababababababababab.snap.tmp", snap, 64); /* orphan temp */
    put_file("README", "x", 1);                    /* ignored */
    srv_persist *p = open_ok();
    cr_assert_eq(found.n, 1);
    cr_assert_str_eq(found.ids[0], ID_A);
    cr_assert(!exists(ID_A ".snap.tmp"));
    cr_assert(!exists("abababababababababababababababab.snap.tmp"));
    cr_assert(!exists(ID_B ".snap"));
    cr_assert(exists("README"));
    cr_assert_eq(mode_of("quarantine"), 0700);
    cr_assert_eq(srv_persist_quarantine(p, ID_A, "checksum"), 0);
    cr_assert(!exists(ID_A ".snap"));
    srv_persist_close(p);
}

Test(persist, a_failed_write_keeps_the_previous_file)
{
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
}

Test(persist, unusable_directories_are_refused)
{
    put_file("plain", "x", 1);
    char err[512];
    srv_persist *p = NULL;
    cr_assert_eq(srv_persist_open(in_dir("plain/sub"), on_found, on_pending, NULL, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot create") != NULL, "%s", err);
    cr_assert_eq(srv_persist_open(in_dir("plain"), on_found, on_pending, NULL, &p, err, sizeof err), -1);
    cr_assert(strstr(err, "directory") != NULL, "%s", err);
    /* A symlinked snapshot is never followed. */
    cr_assert_eq(symlink("/etc/passwd", in_dir(ID_A ".snap")), 0);
    p = open_ok();
    cr_assert_eq(found.n, 0); /* quarantined as notfile */
    cr_assert(!exists(ID_A ".snap"));
    srv_persist_close(p);
}

Test(persist, only_recurds_own_temp_files_are_removed_at_start)
{
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
    cr_assert_eq(found.n, 1);
    cr_assert(!exists(ID_A ".snap.tmp"));
    cr_assert(exists("operator-notes.tmp"));
    cr_assert(exists(".tmp"));
    cr_assert(exists("x.snap.tmp"));
    cr_assert(exists("0123456789ABCDEF0123456789ABCDEF.snap.tmp"));
    cr_assert(exists(ID_B ".tmp"));
    cr_assert(exists(ID_B ".snap.tmp.tmp"));
    srv_persist_close(p);
}

Test(persist, a_tombstoned_session_is_never_listed_and_its_removal_completes)
{
    uint8_t snap[64] = {1};
    put_file(ID_A ".snap", snap, sizeof snap);
    put_file(ID_B ".snap", snap, sizeof snap);
    srv_persist *p = open_ok();
    cr_assert_eq(found.n, 2);
    cr_assert_eq(srv_persist_tombstone(p, ID_A), 0);
    cr_assert(exists(ID_A ".deleted"));
    cr_assert_eq(mode_of(ID_A ".deleted"), 0600);
    srv_persist_close(p);
    /* Restart: A is removed (snapshot, then tombstone) and never reported; B is listed. */
    found.n = 0;
    p = open_ok();
    cr_assert_eq(found.n, 1);
    cr_assert_str_eq(found.ids[0], ID_B);
    cr_assert_eq(pending.n, 0);
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
}

Test(persist, a_tombstone_whose_snapshot_cannot_be_removed_stays_pending)
{
    uint8_t snap[64] = {1};
    put_file(ID_B ".snap", snap, sizeof snap);
    /* A snapshot name that unlink(2) refuses even for root: a non-empty directory. */
    cr_assert_eq(mkdir(in_dir(ID_A ".snap"), 0700), 0);
    put_file(ID_A ".snap/x", "x", 1);
    put_file(ID_A ".deleted", NULL, 0);
    srv_persist *p = open_ok();
    cr_assert_eq(pending.n, 1);
    cr_assert_str_eq(pending.ids[0], ID_A);
    cr_assert_eq(found.n, 1); /* only B: A is neither loaded nor quarantined */
    cr_assert_str_eq(found.ids[0], ID_B);
    cr_assert(exists(ID_A ".deleted"));
    cr_assert_neq(srv_persist_remove(p, ID_A), 0);
    cr_assert(exists(ID_A ".deleted")); /* kept until the snapshot is gone */
    /* The obstacle goes: the retry completes. */
    cr_assert_eq(unlink(in_dir(ID_A ".snap/x")), 0);
    cr_assert_eq(rmdir(in_dir(ID_A ".snap")), 0);
    put_file(ID_A ".snap", snap, sizeof snap); /* even a valid snapshot there now */
    cr_assert_eq(srv_persist_remove(p, ID_A), 0);
    cr_assert(!exists(ID_A ".snap"));
    cr_assert(!exists(ID_A ".deleted"));
    srv_persist_close(p);
}
