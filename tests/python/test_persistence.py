"""Durability of sessions (docs/HARDENING.md §2, docs/OPERATIONS.md) against the real daemon:
state_dir snapshots across SIGTERM and kill -9, crash debris, corrupt files, a full disk, the
resident-memory budget, and a state_dir that cannot be used."""
import json
import os
import random
import re
import resource
import signal
import socket
import stat
import subprocess
import threading
import time

import pytest
import requests

from persist_helpers import events, get_state, info, metrics, pd, wait_for
from daemon import Daemon, RECURD, ROOT, TINY_MODEL, read_to_eof

VOCAB = 256


# ---------------------------------------------------------------------------- helpers

class FaultDaemon(Daemon):
    """A Daemon whose process starts with a file-size limit (RLIMIT_FSIZE), when set."""

    def __init__(self, *args, fsize=None, **kw):
        super().__init__(*args, **kw)
        self.fsize = fsize

    def start(self):
        if self.fsize is None:
            return super().start()
        real_popen = subprocess.Popen
        limit = self.fsize

        def popen(*a, **k):
            k["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            return real_popen(*a, **k)

        subprocess.Popen = popen
        try:
            return super().start()
        finally:
            subprocess.Popen = real_popen




def create(d, tokens=None, expect=201):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens} if tokens else None,
                      timeout=30)
    assert r.status_code == expect, r.text
    return r.json()["id"] if expect == 201 else r




def fold(d, sid, tokens, top_k=5):
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid),
                      json={"tokens": tokens, "top_k": top_k}, timeout=60)
    assert r.status_code == 200, r.text
    lines = [json.loads(x) for x in r.text.split("\n") if x]
    assert lines[-1]["done"] is True, lines[-1]
    return lines




def probe(d, sid, token=65):
    """The prediction after sid's history, read on a fork (sid itself is unchanged): the exact
    text of the fold line for `token`: its logprob and the top-5 next-token logprobs."""
    r = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30)
    assert r.status_code == 201, r.text
    fid = r.json()["id"]
    lines = fold(d, fid, [token])
    assert requests.delete(d.url("/v1/sessions/%s" % fid), timeout=30).status_code == 204
    return lines[0]






def snap_files(state_dir):
    return sorted(f for f in os.listdir(state_dir) if f.endswith(".snap"))




def wait_event(d, name, n=1):
    """The log lines of event name, once at least n arrived (stderr is read by a thread)."""
    return wait_for(lambda: len(events(d, name)) >= n and events(d, name), timeout=10,
                    what="log event " + name)


def writes_settled(d, n_on_disk=None):
    """Every changed session written: nothing in flight and nothing changed since."""
    m = metrics(d)
    ok = m.get("recurd_snapshot_writes_in_flight", 1) == 0
    if n_on_disk is not None:
        ok = ok and m.get("recurd_sessions_on_disk") == n_on_disk
    return ok


def random_histories(d, n, seed):
    """n sessions, each with a random history: a prefill, token-by-token folds, or a fork."""
    rng = random.Random(seed)
    ids = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.1 and ids:
            src = rng.choice(ids)
            r = requests.post(d.url("/v1/sessions/%s/fork" % src), timeout=30)
            assert r.status_code == 201
            sid = r.json()["id"]
        elif kind < 0.2:
            sid = create(d)  # empty: must survive too
        else:
            sid = create(d, [rng.randrange(VOCAB) for _ in range(rng.randint(1, 40))])
        if rng.random() < 0.5:
            fold(d, sid, [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))], top_k=0)
        ids.append(sid)
    return ids


# ---------------------------------------------------------------------------- SIGTERM / restart

def test_sigterm_restart_is_bit_identical(tmp_path):
    sd = tmp_path / "state"
    with pd(sd) as d:
        ids = random_histories(d, 100, seed=1)
        before = {sid: (info(d, sid)["tokens_seen"], get_state(d, sid), probe(d, sid)) for sid in ids}
        assert d.terminate() == 0
        assert wait_event(d, "snapshot_flush_done")[0]["failed"] == 0
    assert os.stat(sd).st_mode & 0o777 == 0o700
    assert len(snap_files(sd)) == 100
    for f in snap_files(sd):
        assert os.stat(sd / f).st_mode & 0o777 == 0o600
    with pd(sd) as d:
        assert metrics(d)["recurd_sessions"] == 0  # lazily loaded
        for sid in ids:
            seen, state, line = before[sid]
            assert info(d, sid)["tokens_seen"] == seen
            assert get_state(d, sid) == state  # state and next-token logits, byte for byte
            assert probe(d, sid) == line       # logprob and top-5, bit-identical floats
        m = metrics(d)
        assert m["recurd_sessions_loaded_total"] == 100
        assert m["recurd_snapshots_quarantined_total"] == 0


def test_delete_removes_the_file(tmp_path):
    sd = tmp_path / "state"
    with pd(sd) as d:
        a, b = create(d, [1, 2, 3]), create(d, [4, 5])
        assert d.terminate() == 0
    assert len(snap_files(sd)) == 2
    with pd(sd) as d:
        assert requests.delete(d.url("/v1/sessions/%s" % a), timeout=10).status_code == 204
        # removed right after the 204 is written
        wait_for(lambda: not os.path.exists(sd / (a + ".snap")), timeout=2, what="unlink")
        assert d.terminate() == 0
    with pd(sd) as d:
        assert info(d, a) == 404
        assert info(d, b)["tokens_seen"] == 2


def test_without_state_dir_nothing_is_written(tmp_path):
    with Daemon() as d:
        sid = create(d, [1, 2])
        assert metrics(d)["recurd_persistence_enabled"] == 0
        assert d.terminate() == 0
    with Daemon() as d:
        assert info(d, sid) == 404


# ---------------------------------------------------------------------------- kill -9

def test_kill9_after_snapshot_interval(tmp_path):
    sd = tmp_path / "state"
    rng = random.Random(2)
    with pd(sd, "--snapshot-interval-ms", "200") as d:
        ids = [create(d, [rng.randrange(VOCAB) for _ in range(rng.randint(1, 20))]) for _ in range(20)]
        for sid in ids[:10]:
            fold(d, sid, [rng.randrange(VOCAB) for _ in range(3)], top_k=0)
        wait_for(lambda: writes_settled(d, 20), what="first snapshots")
        time.sleep(0.5)  # at least one more interval: the folds above are on disk too
        wait_for(lambda: writes_settled(d, 20), what="snapshots")
        snap = {sid: (info(d, sid)["tokens_seen"], get_state(d, sid)) for sid in ids}
        # More work on half of the sessions, then kill -9 at once: each of them comes back
        # either as snapshotted or with the new tokens, never anything in between.
        after = {}
        for sid in ids[:10]:
            fold(d, sid, [7, 8], top_k=0)
            after[sid] = (info(d, sid)["tokens_seen"], get_state(d, sid))
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    with pd(sd) as d:
        for sid in ids:
            got = (info(d, sid)["tokens_seen"], get_state(d, sid))
            if sid in after:
                assert got in (snap[sid], after[sid])
            else:
                assert got == snap[sid]
        assert metrics(d)["recurd_snapshots_quarantined_total"] == 0


def test_kill9_while_writing_leaves_the_previous_snapshot(tmp_path):
    """Crash debris of a write: partial and empty temp files beside the real snapshots (what a
    kill -9 between open and rename leaves). The temps are removed and never loaded; the real
    files load."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        ids = [create(d, [i + 1, i + 2, i + 3]) for i in range(4)]
        states = {sid: get_state(d, sid) for sid in ids}
        assert d.terminate() == 0
    full = open(sd / (ids[0] + ".snap"), "rb").read()
    with open(sd / (ids[0] + ".snap.tmp"), "wb") as f:
        f.write(full[: len(full) // 2])  # half-written newer state
    open(sd / (ids[1] + ".snap.tmp"), "wb").close()  # created, nothing written
    with open(sd / (ids[2] + ".snap.tmp"), "wb") as f:
        f.write(b"\0" * len(full))  # full length, not yet fsynced garbage
    orphan = "ab" * 16  # a first write that never reached its rename
    with open(sd / (orphan + ".snap.tmp"), "wb") as f:
        f.write(full)
    with pd(sd) as d:
        scanned = events(d, "state_dir_scanned")[0]
        assert scanned["temp_removed"] == 4 and scanned["snapshots"] == 4
        assert not [f for f in os.listdir(sd) if f.endswith(".tmp")]
        for sid in ids:
            assert get_state(d, sid) == states[sid]
        assert info(d, orphan) == 404


def test_kill9_during_busy_snapshots(tmp_path):
    """kill -9 at a random moment while folds and 20 ms snapshot rounds run: every session loads
    (none quarantined, none lost) at a count it really had."""
    sd = tmp_path / "state"
    seen = {}
    with pd(sd, "--snapshot-interval-ms", "40") as d:
        ids = [create(d, [1, 2]) for _ in range(12)]
        for sid in ids:
            seen[sid] = {2}
        wait_for(lambda: writes_settled(d, 12), what="first snapshots")
        stop = threading.Event()

        def worker(my):
            s = requests.Session()
            while not stop.is_set():
                for sid in my:
                    try:
                        r = s.post(d.url("/v1/sessions/%s/tokens" % sid),
                                   json={"tokens": [3, 4, 5]}, timeout=10)
                    except requests.RequestException:
                        return  # killed
                    if r.status_code != 200:
                        return
                    seen[sid].add(json.loads(r.text.strip().split("\n")[-1])["tokens_seen"])

        ts = [threading.Thread(target=worker, args=(ids[i::2],)) for i in range(2)]
        for t in ts:
            t.start()
        time.sleep(0.7 + random.random() * 0.3)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        stop.set()
        for t in ts:
            t.join(10)
    with pd(sd) as d:
        for sid in ids:
            got = info(d, sid)
            assert got != 404, "session lost"
            assert got["tokens_seen"] in seen[sid]
        assert metrics(d)["recurd_snapshots_quarantined_total"] == 0


# ---------------------------------------------------------------------------- corrupt files

def test_corrupt_snapshots_are_quarantined_and_the_rest_load(tmp_path):
    sd = tmp_path / "state"
    with pd(sd) as d:
        ids = [create(d, [i, i + 1, i + 2, i + 3]) for i in range(8)]
        states = {sid: get_state(d, sid) for sid in ids}
        assert d.terminate() == 0
    with Daemon(seed=8) as other:  # same architecture, other weights: another fingerprint
        foreign = get_state(other, create(other, [1, 2, 3]))
    path = lambda sid: sd / (sid + ".snap")
    bad = {}
    data = bytearray(open(path(ids[0]), "rb").read())
    data[len(data) // 3] ^= 0x10  # one flipped bit in the payload
    open(path(ids[0]), "wb").write(data)
    bad[ids[0]] = "checksum"
    data = open(path(ids[1]), "rb").read()
    open(path(ids[1]), "wb").write(data[: len(data) // 2])
    bad[ids[1]] = "truncated"
    open(path(ids[2]), "wb").close()
    bad[ids[2]] = "empty"
    open(path(ids[3]), "wb").write(foreign)
    bad[ids[3]] = "othermodel"
    data = bytearray(open(path(ids[4]), "rb").read())
    data[-1] ^= 0x01  # the logits trailer's checksum
    open(path(ids[4]), "wb").write(data)
    bad[ids[4]] = "trailer"
    open(path(ids[5]), "wb").write(b"RECURST1" + os.urandom(100))
    bad[ids[5]] = None  # some reason
    with pd(sd) as d:
        for sid in ids:
            if sid in bad:
                assert info(d, sid) == 404
                assert requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [1]},
                                     timeout=10).status_code == 404
            else:
                assert get_state(d, sid) == states[sid]
        q = sorted(os.listdir(sd / "quarantine"))
        assert len(q) == len(bad), q
        for sid, why in bad.items():
            assert not os.path.exists(path(sid))
            mine = [f for f in q if f.startswith(sid + ".snap.")]
            assert len(mine) == 1, (sid, q)
            if why:  # a flipped bit fails the trailer's checksum (it covers the core) first
                assert mine[0].split(".")[2] in {why, "checksum" if why == "trailer" else why,
                                                 "trailer" if why == "checksum" else why}, mine
        assert len(wait_event(d, "snapshot_quarantined", len(bad))) == len(bad)
        assert metrics(d)["recurd_snapshots_quarantined_total"] == len(bad)  # 1 at start
        # Quarantined ids stay gone after another restart; the good ones stay.
        assert d.terminate() == 0
    with pd(sd) as d:
        for sid in ids:
            assert (info(d, sid) == 404) == (sid in bad)


# ---------------------------------------------------------------------------- disk full

def _mount_tiny_tmpfs(path):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def _fill(path, leave):
    """Fill the file system of path until `leave` bytes are free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free > leave:
        with open(os.path.join(path, "filler"), "wb") as f:
            f.write(b"\0" * (free - leave))
            f.flush()
            os.fsync(f.fileno())


def _full_disk(path, files):
    """A state_dir holding files where no snapshot write succeeds: a 64 KiB tmpfs filled up, or
    (if mount is not allowed here) a file-size limit below one snapshot for the daemon.
    Returns (mounted, fsize for FaultDaemon, the strerror text to expect)."""
    if not os.environ.get("RECUR_TEST_NO_MOUNT") and _mount_tiny_tmpfs(path):
        (path / "quarantine").mkdir(mode=0o700)
        for f, b in files.items():
            open(path / f, "wb").write(b)
        _fill(str(path), 4096)  # the start-up probe fits, no snapshot does
        return True, None, "No space left on device"
    os.makedirs(path, mode=0o700, exist_ok=True)
    for f, b in files.items():
        open(path / f, "wb").write(b)
    return False, 1024, "File too large"


def test_disk_full_is_reported_and_loses_nothing_written(tmp_path):
    sd = tmp_path / "state"
    # Phase 1, healthy disk: three sessions on disk.
    sd.mkdir(mode=0o700)
    with pd(sd) as d:
        ids = [create(d, [i, 2 * i, 3 * i + 1]) for i in range(1, 4)]
        states = {sid: get_state(d, sid) for sid in ids}
        assert d.terminate() == 0
    saved = {f: open(sd / f, "rb").read() for f in snap_files(sd)}

    # Phase 2, the disk is full.
    full = tmp_path / "full"
    mounted, fsize, expect = _full_disk(full, saved)
    try:
        d = FaultDaemon("--state-dir", str(full), "--snapshot-interval-ms", "100", fsize=fsize)
        with d:
            for sid in ids:  # the old sessions move on
                fold(d, sid, [9, 9, 9], top_k=0)
            new = create(d, [5, 6, 7])
            wait_for(lambda: metrics(d).get("recurd_snapshot_failures_total", 0) >= 4,
                     what="snapshot failures")
            h = requests.get(d.url("/healthz"), timeout=10)
            assert h.status_code == 200
            assert h.json()["status"] == "degraded"
            assert expect in h.json()["persistence"]
            m = metrics(d)
            assert m["recurd_persistence_degraded"] == 1
            failed = wait_event(d, "snapshot_failed")
            assert failed and expect in failed[0]["error"]
            # Still serving, every session intact in memory.
            fold(d, new, [1], top_k=0)
            assert info(d, new)["tokens_seen"] == 4
            assert create(d, [1])
            for sid in ids:
                assert info(d, sid)["tokens_seen"] == 6
            # No temp file left, the previous snapshots untouched.
            assert not [f for f in os.listdir(full) if f.endswith(".tmp")]
            for f, b in saved.items():
                assert open(full / f, "rb").read() == b
            assert d.terminate() == 0  # the final flush fails too, and says so
            assert wait_event(d, "snapshot_flush_done")[0]["failed"] >= 4
        for f, b in saved.items():
            assert open(full / f, "rb").read() == b
        if mounted and os.path.exists(full / "filler"):
            os.remove(full / "filler")
        # Restart on a healthy disk: the last snapshot of each old session is there.
        with pd(full) as d:
            for sid in ids:
                assert get_state(d, sid) == states[sid]
            assert requests.get(d.url("/healthz"), timeout=10).json() == {"status": "ok"}
    finally:
        if mounted:
            subprocess.run(["umount", str(full)])


# ---------------------------------------------------------------------------- resident budget

def _round_robin(d, n_sessions, rounds, seed):
    rng = random.Random(seed)
    ids = [create(d, [rng.randrange(VOCAB) for _ in range(rng.randint(1, 12))]) for _ in range(n_sessions)]
    out = []
    for _ in range(rounds):
        for sid in ids:
            out.append(fold(d, sid, [rng.randrange(VOCAB) for _ in range(2)], top_k=3))
    for sid in ids:
        r = requests.post(d.url("/v1/sessions/%s/generate" % sid),
                          json={"max_tokens": 5, "temperature": 0.8, "seed": 11}, timeout=30)
        assert r.status_code == 200
        out.append(r.text)
        out.append(info(d, sid)["tokens_seen"])
    for sid in ids[:8]:  # forks need a resident slot too
        r = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30)
        assert r.status_code == 201, r.text
        out.append(fold(d, r.json()["id"], [42], top_k=3))
    return out


def test_eviction_is_invisible(tmp_path):
    with Daemon() as d:
        reference = _round_robin(d, 20, 3, seed=5)
    with pd(tmp_path / "state", "--max-resident-sessions", "4") as d:
        got = _round_robin(d, 20, 3, seed=5)
        m = metrics(d)
        assert m["recurd_sessions"] <= 4
        assert m["recurd_sessions_evicted_total"] >= 60
        assert m["recurd_sessions_loaded_total"] >= 60
        assert m["recurd_resident_budget_exceeded_total"] == 0
    assert got == reference


def test_busy_session_is_never_evicted(tmp_path):
    # A generation steps on the workers without a loop round trip per token, so with the tiny
    # model a few thousand tokens take milliseconds: the stream is made long and not read until
    # the evictions are done (backpressure keeps it running, paused, until then).
    n = 100000
    with pd(tmp_path / "state", "--max-resident-sessions", "2", "--max-tokens-per-request", str(n),
            "--write-high-watermark", "4096", "--write-low-watermark", "1024") as d:
        busy = create(d, [1, 2, 3])
        sk = socket.create_connection(("127.0.0.1", d.port), timeout=60)
        body = json.dumps({"max_tokens": n, "temperature": 0}).encode()
        sk.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (busy.encode(), len(body), body))
        wait_for(lambda: info(d, busy)["tokens_seen"] > 3, what="generation start")
        others = [create(d, [i]) for i in range(6)]  # each evicts the idle one, never busy
        st = info(d, busy)
        assert st["pending_ops"] == 1 and st["tokens_seen"] < 3 + n, \
            "the generation ended before the evictions: test proves nothing"
        data = read_to_eof(sk)
        lines = [json.loads(m) for m in re.findall(rb"^\{.*\}$", data, re.M)]
        done = lines[-1]
        assert done["done"] and done["reason"] == "length" and done["tokens_seen"] == 3 + n
        assert len(lines) == n + 1
        for sid in others:
            assert info(d, sid)["tokens_seen"] == 1
        assert metrics(d)["recurd_sessions_evicted_total"] >= 4


def test_budget_without_state_dir_is_503():
    with Daemon("--max-resident-sessions", "3") as d:
        for i in range(3):
            create(d, [i])
        r = create(d, [1], expect=503)
        assert r.headers.get("Retry-After")
        assert r.json()["error"]["code"] == "max_sessions"


def test_idle_eviction_and_ttl_reach_the_disk(tmp_path):
    sd = tmp_path / "state"
    with pd(sd, "--evict-idle-ms", "100", "--idle-ttl-ms", "1500") as d:
        sid = create(d, [1, 2, 3])
        wait_for(lambda: metrics(d)["recurd_sessions_evicted_total"] == 1, what="idle eviction")
        assert metrics(d)["recurd_sessions"] == 0
        assert os.path.exists(sd / (sid + ".snap"))
        assert info(d, sid)["tokens_seen"] == 3  # lazily loaded again
        # Not touched again (a GET would count as use): the file goes at idle_ttl.
        wait_for(lambda: not os.path.exists(sd / (sid + ".snap")), timeout=6, what="idle_ttl")
        assert info(d, sid) == 404
        assert metrics(d)["recurd_sessions_expired_total"] == 1


# ---------------------------------------------------------------------------- unusable state_dir

@pytest.mark.parametrize("kind", ["under_a_file", "a_file", "unwritable_fs"])
def test_unusable_state_dir_refuses_to_start(tmp_path, kind):
    f = tmp_path / "plain"
    f.write_bytes(b"x")
    target = {"under_a_file": f / "state", "a_file": f, "unwritable_fs": "/proc/recurd-state"}[kind]
    p = subprocess.run([RECURD, "--config", "", "--port", "0", "--model-config", TINY_MODEL,
                        "--state-dir", str(target)], cwd=ROOT, capture_output=True, timeout=30)
    assert p.returncode != 0
    err = p.stderr.decode()
    assert "state_dir_unusable" in err and "refusing to start" in err, err
    assert "listening" not in err


def test_state_dir_is_created_0700(tmp_path):
    sd = tmp_path / "new" / "state"
    (tmp_path / "new").mkdir()
    with pd(sd) as d:
        create(d)
    assert stat.S_IMODE(os.stat(sd).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(sd / "quarantine").st_mode) == 0o700


def test_failed_eviction_write_keeps_the_session(tmp_path):
    """Disk full under max_resident_sessions: the eviction write fails, the evicted session is
    put back in memory (nothing lost), and once persistence is degraded a create that would
    need an eviction is refused with 503 + Retry-After."""
    full = tmp_path / "full"
    mounted, fsize, expect = _full_disk(full, {})
    try:
        d = FaultDaemon("--state-dir", str(full), "--max-resident-sessions", "2",
                        "--snapshot-interval-ms", "0", fsize=fsize)
        with d:
            a, b = create(d, [1, 2, 3]), create(d, [4, 5])
            state_a = get_state(d, a)
            c = create(d, [6])  # evicts a (LRU); its write fails; a comes back
            wait_for(lambda: metrics(d)["recurd_snapshot_failures_total"] >= 1, what="failure")
            assert wait_event(d, "eviction_undone")
            r = create(d, [7], expect=503)
            assert r.headers.get("Retry-After")
            for sid, n in ((a, 3), (b, 2), (c, 1)):
                assert info(d, sid)["tokens_seen"] == n
            assert get_state(d, a) == state_a
            assert requests.get(d.url("/healthz"), timeout=10).json()["status"] == "degraded"
            assert not [f for f in os.listdir(full) if f.endswith(".tmp")]
    finally:
        if mounted:
            subprocess.run(["umount", str(full)])


def test_sigterm_mid_stream_saves_what_was_folded(tmp_path):
    """SIGTERM while a generation streams: the stream finishes (drain), and the snapshot taken
    after the drain holds exactly what the stream's done line reported."""
    sd = tmp_path / "state"
    with pd(sd, "--snapshot-interval-ms", "0") as d:
        sid = create(d, [1, 2, 3])
        result = {}

        def gen():
            r = requests.post(d.url("/v1/sessions/%s/generate" % sid),
                              json={"max_tokens": 4000, "temperature": 0}, timeout=60)
            result["done"] = json.loads(r.text.strip().split("\n")[-1])

        t = threading.Thread(target=gen)
        t.start()
        wait_for(lambda: info(d, sid)["tokens_seen"] > 3, what="generation start")
        d.proc.send_signal(signal.SIGTERM)
        assert t.is_alive(), "the generation ended before SIGTERM: test proves nothing"
        t.join(60)
        assert d.proc.wait(30) == 0
        assert result["done"]["done"] and result["done"]["reason"] == "length"
    with pd(sd) as d:
        assert info(d, sid)["tokens_seen"] == result["done"]["tokens_seen"] == 4003


def test_hybrid_model_variable_size_snapshots_survive(tmp_path):
    """A model with a softmax layer: snapshots grow with the KV cache; they restart exactly,
    including one at the context limit."""
    hybrid = os.path.join(ROOT, "tests", "fixtures", "tiny_hybrid.json")
    sd = tmp_path / "state"
    with pd(sd, model_config=hybrid) as d:
        limit = requests.get(d.url("/v1/model"), timeout=10).json()["max_context"]
        lens = [1, 7, limit // 2, limit]
        ids = [create(d, [(i * 31 + j) % VOCAB for j in range(n)]) for i, n in enumerate(lens)]
        before = {sid: get_state(d, sid) for sid in ids}
        assert len(set(len(b) for b in before.values())) == len(lens)
        assert d.terminate() == 0
    with pd(sd, model_config=hybrid) as d:
        for sid in ids:
            assert get_state(d, sid) == before[sid]
        assert metrics(d)["recurd_snapshots_quarantined_total"] == 0


def test_fd_exhaustion_fails_the_write_then_recovers(tmp_path):
    """EMFILE on a snapshot write (prlimit on the running daemon): reported, previous file kept,
    a kept-alive connection is still served; once fds are available again the next round
    succeeds and /healthz is ok again."""
    sd = tmp_path / "state"
    with pd(sd, "--snapshot-interval-ms", "100") as d:
        s = requests.Session()
        sid = create(d, [1, 2, 3])
        wait_for(lambda: writes_settled(d, 1), what="first snapshot")
        wait_for(lambda: metrics(d)["recurd_snapshots_total"] >= 1, what="first snapshot")
        saved = open(sd / (sid + ".snap"), "rb").read()
        s.get(d.url("/healthz"), timeout=10)  # the connection we keep
        n_open = len(os.listdir("/proc/%d/fd" % d.pid))
        old = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (n_open, old[1]))
        try:
            r = s.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [4, 5]}, timeout=10)
            assert r.status_code == 200
            wait_for(lambda: s.get(d.url("/healthz"), timeout=10).json()["status"] == "degraded",
                     what="degraded")
            assert "Too many open files" in s.get(d.url("/healthz"), timeout=10).json()["persistence"]
            assert open(sd / (sid + ".snap"), "rb").read() == saved
            assert s.get(d.url("/v1/sessions/%s" % sid), timeout=10).json()["tokens_seen"] == 5
        finally:
            resource.prlimit(d.pid, resource.RLIMIT_NOFILE, old)
        wait_for(lambda: requests.get(d.url("/healthz"), timeout=10).json() == {"status": "ok"},
                 what="recovery")
        wait_event(d, "snapshot_recovered")
        assert open(sd / (sid + ".snap"), "rb").read() != saved
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    with pd(sd) as d:
        assert info(d, sid)["tokens_seen"] == 5


@pytest.mark.parametrize("delay_ms", [0, 5, 20])
def test_kill9_during_the_sigterm_flush(tmp_path, delay_ms):
    """kill -9 while the final SIGTERM writes run (real writes, cut at a few points): each
    session loads either its previous snapshot or its new one, never a mixture or nothing."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        ids = [create(d, [i % VOCAB, 1, 2]) for i in range(60)]
        assert d.terminate() == 0
    with pd(sd) as d:
        old = {sid: get_state(d, sid) for sid in ids}
        for sid in ids:
            fold(d, sid, [3, 4], top_k=0)
        new = {sid: get_state(d, sid) for sid in ids}
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(delay_ms / 1000)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    with pd(sd) as d:
        got = {sid: get_state(d, sid) for sid in ids}
        for sid in ids:
            assert got[sid] in (old[sid], new[sid])
        assert metrics(d)["recurd_snapshots_quarantined_total"] == 0


def test_unreadable_snapshot_is_503_not_404(tmp_path):
    """A session on disk whose file cannot be opened just now (EMFILE) answers 503 +
    Retry-After, not 404 — it exists — and loads once fds are available again."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        sid = create(d, [1, 2, 3])
        assert d.terminate() == 0
    with pd(sd) as d:
        s = requests.Session()
        assert s.get(d.url("/healthz"), timeout=10).status_code == 200  # the connection we keep
        n_open = len(os.listdir("/proc/%d/fd" % d.pid))
        old = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (n_open, old[1]))
        try:
            r = s.get(d.url("/v1/sessions/%s" % sid), timeout=10)
            assert r.status_code == 503, r.text
            assert r.headers.get("Retry-After") and r.json()["error"]["code"] == "session_unavailable"
            r = s.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [1]}, timeout=10)
            assert r.status_code == 503
            assert s.get(d.url("/v1/sessions/%032x" % 5), timeout=10).status_code == 404
        finally:
            resource.prlimit(d.pid, resource.RLIMIT_NOFILE, old)
        assert s.get(d.url("/v1/sessions/%s" % sid), timeout=10).json()["tokens_seen"] == 3
        assert metrics(d)["recurd_session_load_failures_total"] == 2


def test_concurrent_clients_with_every_snapshot_path_on(tmp_path):
    """4 clients on their own sessions, each doing random folds, generations, forks, deletes and
    state reads, while the budget (3 resident), 50 ms snapshot rounds and 30 ms idle eviction
    all move sessions between memory and disk. Every session's count stays exactly what its
    client folded, before and after a restart."""
    sd = tmp_path / "state"
    expect = {}
    lock = threading.Lock()
    errors = []

    def client(d, seed):
        rng = random.Random(seed)
        s = requests.Session()
        mine = {}
        try:
            for _ in range(40):
                op = rng.random()
                if op < 0.15 or not mine:
                    n = rng.randint(1, 6)
                    r = s.post(d.url("/v1/sessions"), json={"tokens": [rng.randrange(VOCAB)] * n},
                               timeout=30)
                    assert r.status_code == 201, r.text
                    mine[r.json()["id"]] = n
                    continue
                sid = rng.choice(sorted(mine))
                if op < 0.5:
                    n = rng.randint(1, 5)
                    r = s.post(d.url("/v1/sessions/%s/tokens" % sid),
                               json={"tokens": [rng.randrange(VOCAB) for _ in range(n)]}, timeout=30)
                    assert r.status_code == 200, r.text
                    mine[sid] += n
                elif op < 0.65:
                    n = rng.randint(1, 8)
                    r = s.post(d.url("/v1/sessions/%s/generate" % sid),
                               json={"max_tokens": n, "seed": 1}, timeout=30)
                    assert r.status_code == 200, r.text
                    mine[sid] += n
                elif op < 0.75:
                    r = s.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30)
                    assert r.status_code == 201, r.text
                    mine[r.json()["id"]] = mine[sid]
                elif op < 0.82:
                    assert s.delete(d.url("/v1/sessions/%s" % sid), timeout=30).status_code == 204
                    del mine[sid]
                else:
                    r = s.get(d.url("/v1/sessions/%s/state" % sid), timeout=30)
                    assert r.status_code == 200
                if rng.random() < 0.2:
                    time.sleep(0.04)  # let idle eviction happen
            with lock:
                expect.update(mine)
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))

    args = ("--max-resident-sessions", "3", "--snapshot-interval-ms", "50", "--evict-idle-ms", "30")
    with pd(sd, *args) as d:
        ts = [threading.Thread(target=client, args=(d, i)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors, errors
        for sid, n in expect.items():
            assert info(d, sid)["tokens_seen"] == n
        m = metrics(d)
        assert m["recurd_sessions_evicted_total"] > 0 and m["recurd_snapshot_failures_total"] == 0
        assert d.terminate() == 0
    assert len(snap_files(sd)) == len(expect)
    with pd(sd) as d:
        for sid, n in expect.items():
            assert info(d, sid)["tokens_seen"] == n


def test_one_daemon_per_state_dir(tmp_path):
    sd = tmp_path / "state"
    with pd(sd) as d:
        p = subprocess.run([RECURD, "--config", "", "--port", "0", "--model-config", TINY_MODEL,
                            "--state-dir", str(sd)], cwd=ROOT, capture_output=True, timeout=30)
        assert p.returncode != 0
        assert "in use by another recurd" in p.stderr.decode()
        sid = create(d, [1])
        d.proc.send_signal(signal.SIGKILL)  # the lock goes with the process
        d.proc.wait(10)
    with pd(sd) as d:
        assert info(d, sid) == 404  # never snapshotted: lost by kill -9, as documented


def test_max_sessions_counts_sessions_on_disk(tmp_path):
    sd = tmp_path / "state"
    with pd(sd, "--max-sessions", "5", "--max-resident-sessions", "2") as d:
        ids = [create(d, [i]) for i in range(5)]
        r = create(d, [9], expect=503)
        assert r.json()["error"]["code"] == "max_sessions" and r.headers.get("Retry-After")
        m = metrics(d)
        assert m["recurd_sessions"] <= 2 and m["recurd_sessions_stored"] >= 3
        assert requests.delete(d.url("/v1/sessions/%s" % ids[0]), timeout=10).status_code == 204
        create(d, [9])
        assert d.terminate() == 0
    with pd(sd, "--max-sessions", "5") as d:  # after a restart too
        create(d, [1], expect=503)
