/*
 * persist.h — the on-disk session store: one snapshot file per session in state_dir
 * (docs/HARDENING.md §2).
 *
 *   state_dir/                      0700, probed writable at start
 *     <id>.snap                     0600: the body of GET /v1/sessions/{id}/state (core snapshot
 *                                   of docs/DESIGN.md §6 + the logits trailer of proto/state_blob.h)
 *     <id>.snap.tmp                 being written; removed at start (a crash mid-write); no
 *                                   other name is ever removed (an operator's notes.tmp stays)
 *     <id>.deleted                  tombstone, 0600, empty: id was deleted but its snapshot
 *                                   could not be removed yet (or a write in flight may rename
 *                                   it back); fsynced before it is relied on. At start the
 *                                   removal is completed and the id is never loaded.
 *     quarantine/<id>.snap.<why>    files that failed a check, kept aside for the operator
 *
 * <id> is always a validated 32-lowercase-hex session id: request bytes never become a path.
 * A write goes to the temp file (O_CREAT|O_EXCL|O_NOFOLLOW, 0600), is fsynced, renamed over
 * <id>.snap, and the directory is fsynced: a reader sees the old file or the new one, never a
 * part of either. On failure the temp file is removed and the previous <id>.snap is untouched.
 *
 * Threads: srv_persist_write, srv_persist_read and srv_persist_unlink touch only the file
 * system through the directory fd and may run on any thread, concurrently for different ids.
 * Two writes of the same id must not overlap (residency.c guarantees it). Open/close/scan run
 * on the loop thread.
 */
#ifndef SRV_PERSIST_H
#define SRV_PERSIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct srv_persist srv_persist;

/* Open (create with mode 0700 if missing) dir, lock it (flock: one daemon per directory),
 * check that it is a directory we can write
 * (a probe file is created, fsynced and removed), create quarantine/, complete every
 * tombstone (remove the id's snapshot and temp file, fsync, remove the tombstone; an id whose
 * snapshot cannot be removed is reported by pending(id, ctx) and never listed), remove
 * leftover "<id>.snap.tmp" files, and call found(id, ctx) for every other "<id>.snap". Files
 * too short to hold a snapshot header (zero-length included) are quarantined here instead.
 * Returns 0, or -1 with a clear reason in err (the daemon must then refuse to start). */
int srv_persist_open(const char *dir, void (*found)(const char *id, void *ctx),
                     void (*pending)(const char *id, void *ctx), void *ctx, srv_persist **out,
                     char *err, size_t errlen);
void srv_persist_close(srv_persist *p);
/* Files quarantined by the scan of srv_persist_open. */
size_t srv_persist_scan_quarantined(const srv_persist *p);

/* Write len bytes as id's snapshot, atomically and durably. Returns 0 or -errno. */
int srv_persist_write(srv_persist *p, const char *id, const uint8_t *buf, size_t len);

/* Read id's snapshot into a malloc'd buffer (*buf, *len; the caller frees). Returns 0, -errno,
 * -EINVAL when not a regular file, or -EFBIG when the file is larger than max_len: then *buf
 * holds its first SRV_PERSIST_HEAD bytes (the caller frees it too). */
#define SRV_PERSIST_HEAD 64
int srv_persist_read(srv_persist *p, const char *id, size_t max_len, uint8_t **buf, size_t *len);
/* The same, but only from the page cache: -EAGAIN (nothing returned) when any part of the file
 * would have to come from the disk, or the kernel cannot tell (preadv2 RWF_NOWAIT refused). */
int srv_persist_read_cached(srv_persist *p, const char *id, size_t max_len, uint8_t **buf,
                            size_t *len);

/* Remove id's snapshot (ENOENT is success). sync: also fsync the directory. Returns 0 or -errno. */
int srv_persist_unlink(srv_persist *p, const char *id, int sync);

/* Write id's tombstone ("<id>.deleted"), durably (file and directory fsynced). 0 or -errno. */
int srv_persist_tombstone(srv_persist *p, const char *id);

/* Remove id for good: its snapshot and temp file (ENOENT is success), fsync the directory,
 * then its tombstone if any. 0, or -errno of the first step that failed (nothing after it
 * was tried: a tombstone stays until the snapshot's removal is durable). */
int srv_persist_remove(srv_persist *p, const char *id);

/* fsync state_dir (makes earlier unlinks durable). 0 or -errno. Any thread. */
int srv_persist_sync_dir(srv_persist *p);

/* Move id's snapshot to quarantine/<id>.snap.<why>.<unix time> (why: a short word). Returns 0
 * or -errno. */
int srv_persist_quarantine(srv_persist *p, const char *id, const char *why);

/* 1 when s is exactly 32 lowercase hex digits. */
int srv_persist_valid_id(const char *s);

#endif /* SRV_PERSIST_H */
