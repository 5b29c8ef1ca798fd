"""Issue 10, items 1-3, against the real daemon (docs/OPERATIONS.md, "The durability contract"):
a busy session is snapshotted within the window whatever the load (kill -9 under steady load
loses at most the documented window, measured and printed here), a deleted session never comes
back (a failed unlink leaves a durable tombstone and is retried), and only recurd's own temp
files are removed at start."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import requests

from daemon import Daemon

VOCAB = 256


# ---------------------------------------------------------------------------- helpers

def pd(state_dir, *args, **kw):
    return Daemon("--state-dir", str(state_dir), *args, **kw)


def create(d, tokens):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def info(d, sid):
    r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30)
    return r.json() if r.status_code == 200 else r.status_code


def get_state(d, sid):
    r = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def metrics(d):
    out = {}
    for line in requests.get(d.url("/metrics"), timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def events(d, name):
    out = []
    for line in d.logs():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("event") == name:
            out.append(obj)
    return out


def wait_for(cond, timeout=10.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def mount_tmpfs(path):
    """A small tmpfs at path (True), or False where mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    if os.environ.get("RECUR_TEST_NO_MOUNT"):
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def remount(path, mode):
    for _ in range(50):  # EBUSY while a file is open for writing
        if subprocess.run(["mount", "-o", "remount," + mode, str(path)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return
        time.sleep(0.05)
    raise AssertionError("cannot remount %s %s" % (path, mode))


class Obstacle:
    """Make the removal of sid's snapshot fail for real, even for root: the state dir remounted
    read-only (EROFS: not even a tombstone can be written), or, where mounting is not allowed,
    the snapshot's name taken by a non-empty directory (unlink fails with EISDIR). lift() undoes
    it and puts the session's valid snapshot back in place, so a session that is not really
    deleted would load again."""

    def __init__(self, sd, sid, mounted):
        self.sd, self.sid, self.mounted = sd, sid, mounted
        self.snap = os.path.join(str(sd), sid + ".snap")
        self.saved = open(self.snap, "rb").read()

    def put(self):
        if self.mounted:
            remount(self.sd, "ro")
        else:
            os.rename(self.snap, self.snap + ".aside")
            os.mkdir(self.snap)
            open(os.path.join(self.snap, "x"), "wb").close()

    def lift(self):
        if self.mounted:
            remount(self.sd, "rw")
        else:
            shutil.rmtree(self.snap)
            os.rename(self.snap + ".aside", self.snap)
        assert open(self.snap, "rb").read() == self.saved


def umount(path):
    subprocess.run(["umount", "-l", str(path)], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


# ---------------------------------------------------------------------------- item 3

def test_only_recurds_own_temp_files_are_removed_at_start(tmp_path):
    """Item 3: `echo keep > SD/operator-notes.tmp` survives a start; a crashed write's
    <id>.snap.tmp does not."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        sid = create(d, [1, 2, 3])
        assert d.terminate() == 0
    foreign = {"operator-notes.tmp": b"keep\n", "backup.snap.tmp": b"mine\n",
               sid.upper() + ".snap.tmp": b"not an id\n", sid + ".tmp": b"neither\n"}
    for name, data in foreign.items():
        open(sd / name, "wb").write(data)
    open(sd / (sid + ".snap.tmp"), "wb").write(b"half a write")
    with pd(sd) as d:
        assert events(d, "state_dir_scanned")[0]["temp_removed"] == 1
        assert info(d, sid)["tokens_seen"] == 3
    assert not os.path.exists(sd / (sid + ".snap.tmp"))
    for name, data in foreign.items():
        assert open(sd / name, "rb").read() == data, name


# ---------------------------------------------------------------------------- item 2

def test_delete_on_a_read_only_state_dir_never_comes_back(tmp_path):
    """Item 2: DELETE answers 204 while the snapshot cannot be removed (state dir read-only);
    the removal stays pending and is retried every tick; once the directory is writable again
    it completes, and after a clean restart the session is gone (404), its files too."""
    sd = tmp_path / "state"
    mounted = mount_tmpfs(sd)
    try:
        with pd(sd) as d:
            sid, keep = create(d, list(range(20))), create(d, [5, 6])
            assert d.terminate() == 0
        with pd(sd, "--snapshot-interval-ms", "200") as d:
            assert info(d, sid)["tokens_seen"] == 20  # resident now
            ob = Obstacle(sd, sid, mounted)
            ob.put()
            try:
                r = requests.delete(d.url("/v1/sessions/%s" % sid), timeout=10)
                assert r.status_code == 204
                failed = wait_for(lambda: events(d, "snapshot_unlink_failed"),
                                  what="snapshot_unlink_failed")
                assert failed[0]["error"] in ("Read-only file system", "Is a directory")
                assert info(d, sid) == 404
                time.sleep(0.5)  # a few ticks of failing retries
                assert info(d, sid) == 404
                assert os.path.exists(sd / (sid + ".snap"))
            finally:
                ob.lift()
            # Retried on a later tick: the file goes, nothing is pending any more.
            wait_for(lambda: not os.path.exists(sd / (sid + ".snap")), timeout=5,
                     what="the retried unlink")
            wait_for(lambda: metrics(d)["recurd_session_removals_pending"] == 0, what="done")
            assert events(d, "snapshot_unlink_done")
            assert info(d, sid) == 404
            assert d.terminate() == 0
        with pd(sd) as d:
            assert info(d, sid) == 404
            assert info(d, keep)["tokens_seen"] == 2
        assert sorted(os.listdir(sd)) == sorted(["quarantine", keep + ".snap"])
    finally:
        if mounted:
            umount(sd)


def test_delete_whose_unlink_fails_leaves_a_durable_tombstone_across_kill9(tmp_path):
    """Item 2: a failed unlink leaves <id>.deleted (fsynced) before anything else; after
    kill -9 the restart never loads the session, even with its valid snapshot back in place:
    while the snapshot cannot be removed the removal stays pending (404, not quarantined), and
    once it can, a later tick completes it (snapshot and tombstone gone)."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        sid, keep = create(d, list(range(30))), create(d, [7])
        assert d.terminate() == 0
    with pd(sd, "--snapshot-interval-ms", "200") as d:
        assert info(d, sid)["tokens_seen"] == 30
        ob = Obstacle(sd, sid, mounted=False)  # the directory stays writable: EISDIR
        ob.put()
        assert requests.delete(d.url("/v1/sessions/%s" % sid), timeout=10).status_code == 204
        failed = wait_for(lambda: events(d, "snapshot_unlink_failed"), what="unlink failure")
        assert failed[0]["tombstone"] == "written"
        assert os.path.isfile(sd / (sid + ".deleted"))
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    # Restart with the obstacle still there: pending, never loaded.
    with pd(sd, "--snapshot-interval-ms", "200") as d:
        scanned = events(d, "state_dir_scanned")[0]
        assert scanned["tombstones"] == 1 and scanned["removals_pending"] == 1
        assert info(d, sid) == 404
        m = metrics(d)
        assert m["recurd_session_removals_pending"] == 1
        assert m["recurd_snapshots_quarantined_total"] == 0
        ob.lift()  # a valid snapshot of the deleted session is back under its name
        wait_for(lambda: metrics(d)["recurd_session_removals_pending"] == 0, timeout=5,
                 what="the retried removal")
        assert not os.path.exists(sd / (sid + ".snap"))
        assert not os.path.exists(sd / (sid + ".deleted"))
        assert info(d, sid) == 404
        assert info(d, keep)["tokens_seen"] == 1
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    # The same state once more (valid snapshot and tombstone), nothing in the way: the
    # removal completes at start.
    open(sd / (sid + ".snap"), "wb").write(ob.saved)
    open(sd / (sid + ".deleted"), "wb").close()
    with pd(sd) as d:
        scanned = events(d, "state_dir_scanned")[0]
        assert scanned["tombstones"] == 1 and scanned["removals_pending"] == 0
        assert info(d, sid) == 404
        assert metrics(d)["recurd_snapshots_quarantined_total"] == 0
    assert sorted(os.listdir(sd)) == sorted(["quarantine", keep + ".snap"])
