"""Issue 10, items 1-3, against the real daemon (docs/OPERATIONS.md, "The durability contract"):
a busy session is snapshotted within the window whatever the load (kill -9 under steady load
loses at most the documented window, measured and printed here), a deleted session never comes
back (a failed unlink leaves a durable tombstone and is retried), and only recurd's own temp
files are removed at start."""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import requests

from persist_helpers import events, info, metrics, pd, wait_for
from daemon import Daemon

VOCAB = 256


# ---------------------------------------------------------------------------- helpers



def create(d, tokens):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]












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
            # one atomic exchange of the file and the directory (renameat2 RENAME_EXCHANGE): the
            # daemon's retry never sees the name free between an rmtree and a rename, which it
            # would take for a completed removal before the snapshot came back
            exchange(self.snap + ".aside", self.snap)
            shutil.rmtree(self.snap + ".aside")
        assert open(self.snap, "rb").read() == self.saved


def exchange(a, b):
    """Swap the names a and b atomically (Linux renameat2 with RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), a)


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
        assert sorted(os.listdir(sd)) == sorted(["quarantine", "prefix_cache", keep + ".snap"])
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
    assert sorted(os.listdir(sd)) == sorted(["quarantine", "prefix_cache", keep + ".snap"])


# ---------------------------------------------------------------------------- item 1

INTERVAL_MS = 300
# What a round may add to the interval (docs/OPERATIONS.md, "The durability contract"): the
# tick that starts it (snapshot_interval_ms/2 apart, so a round is due at most that late), the
# wait for the session's next boundary and the write with its two fsyncs -- 400 ms for those two
# on a loaded 2-core CI machine (the most seen: 546 ms in all at load average 14).
ROUND_SLACK_MS = INTERVAL_MS // 2 + 400


class _Reader:
    """HTTP/1.1 responses off one socket, in order (the daemon answers pipelined requests one
    after the other)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def _until(self, sep):
        while sep not in self.buf:
            self._fill()
        i = self.buf.index(sep)
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        hdrs = dict((k.strip().lower(), v.strip()) for k, v in
                    (h.split(":", 1) for h in head[1:] if ":" in h))
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                n = int(self._until(b"\r\n").split(b";")[0], 16)
                if n == 0:
                    self._until(b"\r\n")
                    break
                body += self._take(n)
                self._take(2)
        else:
            body = self._take(int(hdrs.get("content-length", "0")))
        return status, hdrs.get("connection", "").lower() == "close", body


def _fold_loop(d, sid, n_tokens, seed, stop, acks, errors, depth=2):
    """One client folding n_tokens-token requests into sid back to back: `depth` requests
    pipelined on its connection, so the next one is always there when one finishes (the
    session is never idle). acks gets (monotonic time the done line arrived, its tokens_seen)
    for every acknowledged fold."""
    rng = seed

    def request():
        nonlocal rng
        toks = []
        for _ in range(n_tokens):
            rng = (rng * 1103515245 + 12345) & 0x7FFFFFFF
            toks.append(rng % VOCAB)
        body = json.dumps({"tokens": toks, "top_k": 0}).encode()
        return (b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % (sid.encode(), len(body))) + body

    while not stop.is_set():
        try:
            sock = socket.create_connection(("127.0.0.1", d.port), timeout=30)
        except OSError:
            return  # killed
        with sock:
            rd = _Reader(sock)
            try:
                for _ in range(depth):
                    sock.sendall(request())
                while True:
                    status, close, body = rd.response()
                    if status != 200:
                        errors.append(status)
                        return
                    last = json.loads(body.strip().split(b"\n")[-1])
                    if not last.get("done"):
                        return  # cut by the kill
                    acks.append((time.monotonic(), last["tokens_seen"]))
                    if stop.is_set():
                        return
                    if close:
                        break  # the daemon's keep-alive limit: a new connection
                    sock.sendall(request())
            except (OSError, ConnectionError, ValueError):
                return  # killed


def _loss(acks, t_kill, restored):
    """(tokens lost, ms of acknowledged work lost): the work acknowledged after the last
    acknowledgement the restored state covers."""
    acks = sorted(acks)
    covered = [t for t, seen in acks if seen <= restored]
    top = max(seen for _, seen in acks)
    t_cov = covered[-1] if covered else None
    return top - restored, (t_kill - t_cov) * 1000.0 if t_cov is not None else float("inf")


def _kill9_rounds(tmp_path, clients, n_tokens, rounds, run_s):
    """kill -9 rounds under `clients` back-to-back folders. With several clients the session's
    queue is never empty, so some snapshot must have been copied between two of its work items
    (a busy capture). One pipelined client cannot show that: the daemon parses the pipelined
    request on the loop turn after the previous response (http_conn.c), so on a fast machine the
    snapshot tick may always find the session idle for that turn (CI saw 0 in two rounds)."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        sid = create(d, [1, 2, 3, 4, 5])
        assert d.terminate() == 0
    seen = 5
    report, busy_captures = [], 0
    for rnd in range(rounds):
        with pd(sd, "--snapshot-interval-ms", str(INTERVAL_MS)) as d:
            assert info(d, sid)["tokens_seen"] == seen
            stop, acks, errors = threading.Event(), [], []
            ts = [threading.Thread(target=_fold_loop,
                                   args=(d, sid, n_tokens, 1000 * rnd + i, stop, acks, errors))
                  for i in range(clients)]
            for t in ts:
                t.start()
            time.sleep(run_s + 0.37 * rnd)  # kill at different phases of the round
            m = metrics(d)
            t_kill = time.monotonic()
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(10)
            stop.set()
            for t in ts:
                t.join(30)
            assert not errors, errors
        with pd(sd) as d:
            got = info(d, sid)
            assert got != 404, "session lost"
            restored = got["tokens_seen"]
            assert metrics(d)["recurd_snapshots_quarantined_total"] == 0
            assert d.terminate() == 0
        acked = max(s for _, s in acks)
        assert seen <= restored <= acked + clients * n_tokens
        lost_tokens, lost_ms = _loss(acks, t_kill, max(restored, seen))
        rate = (acked - seen) / run_s
        line = ("kill -9 round %d (%d client(s) x %d-token folds, interval %d ms): %d tokens "
                "acknowledged, restored at %d: lost %d tokens = %.0f ms of load (%.0f tokens/s), "
                "allowed %d ms" % (rnd + 1, clients, n_tokens, INTERVAL_MS, acked, restored,
                                   lost_tokens, lost_ms, rate, INTERVAL_MS + ROUND_SLACK_MS))
        print(line)
        report.append((lost_ms, line))
        # Before the fix: the .snap stayed at the state of the start for the whole run.
        assert restored > seen, line
        assert lost_ms <= INTERVAL_MS + ROUND_SLACK_MS, line
        busy_captures += m.get("recurd_snapshot_busy_captures_total", 0)
        seen = restored
    # Taken between two folds of the computing session, not only when it happened to be idle.
    if clients > 1:
        assert busy_captures >= 1
    return report


def test_kill9_under_steady_load_three_clients_loses_at_most_the_window(tmp_path):
    """Item 1: three clients fold 64-token requests into one session without pause (the
    session is never idle at a round); kill -9 at several moments, restart each time: the
    session comes back with everything acknowledged up to at most snapshot_interval_ms (plus a
    round) before the kill."""
    _kill9_rounds(tmp_path, clients=3, n_tokens=64, rounds=3, run_s=1.6)


def test_kill9_under_back_to_back_256_token_folds_loses_at_most_the_window(tmp_path):
    """Item 1, the other recipe: one client, back-to-back 256-token folds."""
    _kill9_rounds(tmp_path, clients=1, n_tokens=256, rounds=2, run_s=1.6)


def _gen_stream(d, sid, body, lines, stop_after=None):
    """POST /generate on a raw socket, read as fast as the daemon writes (no backpressure
    pause, which would give the loop the state anyway). lines gets (monotonic time, pos,
    token, logprob) per generated token; returns the done line (None if cut)."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", d.port), timeout=60)
    sock.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (sid.encode(), len(payload)) + payload)
    buf = b""
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return None
            buf += chunk
            now = time.monotonic()
            *full, buf = buf.split(b"\n")
            for raw in full:
                raw = raw.strip()
                if not raw.startswith(b"{"):
                    continue  # HTTP head, chunk sizes
                obj = json.loads(raw)
                if "done" in obj:
                    return obj
                lines.append((now, obj["pos"], obj["token"], obj["logprob"]))
    except OSError:
        return None
    finally:
        sock.close()


def test_kill9_mid_generation_loses_at_most_the_window(tmp_path):
    """Item 1 for a generation: it steps on the workers with no boundary the loop sees, so a
    round asks it to come back once (yield), copies the state and resubmits it. A generation
    longer than the interval is on disk within the window: kill -9 mid-stream, twice."""
    sd = tmp_path / "state"
    with pd(sd) as d:
        sid = create(d, [1, 2, 3])
        assert d.terminate() == 0
    seen = 3
    for rnd in range(2):
        with pd(sd, "--snapshot-interval-ms", str(INTERVAL_MS),
                "--max-tokens-per-request", "100000000") as d:
            assert info(d, sid)["tokens_seen"] == seen
            lines = []
            t = threading.Thread(target=_gen_stream, args=(
                d, sid, {"max_tokens": 100000000, "seed": 5 + rnd, "temperature": 0.9}, lines))
            t.start()
            time.sleep(1.5 + 0.4 * rnd)
            m = metrics(d)
            t_kill = time.monotonic()
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(10)
            t.join(30)
        with pd(sd) as d:
            got = info(d, sid)
            assert got != 404
            restored = got["tokens_seen"]
        acks = [(tm, pos + 1) for tm, pos, _, _ in lines]  # tokens_seen after each token
        lost_tokens, lost_ms = _loss(acks, t_kill, restored)
        line = ("kill -9 mid-generation round %d (interval %d ms): %d tokens streamed, restored "
                "at %d: lost %d tokens = %.0f ms of the stream, allowed %d ms; %d busy captures, "
                "longest copy %d us" % (rnd + 1, INTERVAL_MS, acks[-1][1], restored, lost_tokens,
                                        lost_ms, INTERVAL_MS + ROUND_SLACK_MS,
                                        m.get("recurd_snapshot_busy_captures_total", 0),
                                        m.get("recurd_snapshot_capture_seconds_max", -1) * 1e6))
        print(line)
        assert restored > seen, line
        assert restored <= acks[-1][1] + 64, line
        assert lost_ms <= INTERVAL_MS + ROUND_SLACK_MS, line
        seen = restored


def test_generations_under_snapshot_rounds_are_bit_identical(tmp_path):
    """The yield of a generation for a snapshot changes nothing it computes: four seeded
    generations at once (batched on one worker) under 100 ms rounds give the tokens and
    logprobs of the same generations on a daemon without persistence, bit for bit."""
    prompts = [[i + 1, 2 * i + 3, 40 + i] for i in range(4)]

    def run(d):
        sids = [create(d, p) for p in prompts]
        outs = [[] for _ in sids]
        ts = [threading.Thread(target=_gen_stream, args=(
            d, sid, {"max_tokens": 6000, "seed": 11 + i, "temperature": 0.8}, outs[i]))
            for i, sid in enumerate(sids)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        return [[(pos, tok, lp) for _, pos, tok, lp in o] for o in outs], sids

    with Daemon("--workers", "1", "--max-tokens-per-request", "6000") as d:
        alone, _ = run(d)
    with pd(tmp_path / "state", "--workers", "1", "--max-tokens-per-request", "6000",
            "--snapshot-interval-ms", "100") as d:
        got, sids = run(d)
        m = metrics(d)
        assert m["recurd_snapshot_busy_captures_total"] >= 1, m
        for sid in sids:
            assert info(d, sid)["tokens_seen"] == 6003
    assert [len(o) for o in got] == [6000] * 4
    assert got == alone


def test_deleted_while_its_eviction_write_runs_never_comes_back(tmp_path):
    """Item 2, the write-in-flight case: with a budget of one resident session, creating a
    session evicts the previous one (its write runs on the threadpool) and a DELETE of it
    pipelined right behind finds that write in flight; its rename could bring the file back.
    After kill -9 and a restart, no deleted session is there and every kept one is."""
    sd = tmp_path / "state"
    deleted, kept = [], []
    with pd(sd, "--max-resident-sessions", "1", "--snapshot-interval-ms", "50") as d:
        prev = create(d, [1, 2, 3])
        for i in range(40):
            sock = socket.create_connection(("127.0.0.1", d.port), timeout=30)
            body = json.dumps({"tokens": [i % VOCAB, 7, 8]}).encode()
            sock.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                         b"DELETE /v1/sessions/%s HTTP/1.1\r\nHost: x\r\n\r\n"
                         % (len(body), body, prev.encode()))
            rd = _Reader(sock)
            status, _, created = rd.response()
            assert status == 201, created
            status, _, _ = rd.response()
            assert status == 204
            sock.close()
            deleted.append(prev)
            prev = json.loads(created)["id"]
            if i % 4 == 3:  # some survive
                kept.append(prev)
                prev = create(d, [9, i % VOCAB])
        wait_for(lambda: metrics(d)["recurd_session_removals_pending"] == 0, what="removals")
        for sid in deleted:
            assert info(d, sid) == 404
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    with pd(sd) as d:
        for sid in deleted:
            assert info(d, sid) == 404, sid
        for sid in kept:
            assert info(d, sid)["tokens_seen"] == 3
        assert metrics(d)["recurd_snapshots_quarantined_total"] == 0
    assert not [f for f in os.listdir(sd) if f.endswith(".deleted")]
    assert not [f for f in os.listdir(sd) if f[:32] in set(deleted)]
