"""Capacity (issue 18): resident sessions, sessions on disk, resuming from disk.

    /usr/bin/python3 tools/bench/section_capacity.py            # make bench size: 10k resident, 25k on disk
    /usr/bin/python3 tools/bench/section_capacity.py --full     # by hand: 100k resident, 250k on disk
    /usr/bin/python3 tools/bench/section_capacity.py --resume-only  # the resume rows alone: 5k
                                  resident, 8k on disk, no idle figures (prints, never writes docs)
    ... [--resident N] [--on-disk N] [--resumes N] [--recurd PATH] [--no-doc]

One recurd (models/default, `--state-dtype bf16` when the build has it) with a state_dir, driven
over HTTP on loopback by a keep-alive client of this file (sockets, no library):

  1. the disk and memory checks: the on-disk count is cut to what fits in 70 % of the free disk
     of the state_dir, the resident count to what fits in 70 % of MemAvailable (both printed);
  2. the sessions on disk: 1,000 real sessions are created on a first daemon (each folds 4-16
     random tokens) and their `GET /v1/sessions/{id}/state` bodies (exactly a snapshot file) are
     written under fresh random ids as <id>.snap; so are as many more files as there are
     resumes (the sessions the resumes pick from); every other session on disk is a hard link
     to one of the 1,000 (this disk wrote 30-190 snapshot files a second under the machine's
     load: 250k real files took longer than there was time for). All synced and dropped from
     the page cache (posix_fadvise DONTNEED), so resumes read the disk. Not created through
     recurd's eviction path: a durable write (fsync, rename, directory fsync) takes about 15 ms
     here;
  3. the second daemon indexes them at start (timed); its CPU time (all threads, schedstat) over
     10 s (30 s with --full) with no session resident; then N resident sessions are created over
     HTTP with 4 random tokens each (every state touched and non-zero), 8 connections, with
     VmRSS (/proc/PID/status) sampled against the session count (the plot);
  4. idle: the daemon's CPU time over the same span while it holds them all, with idle eviction
     armed (evict_idle_ms 1 h: its sweep runs every second) and idle_ttl at its default;
  5. resume: single-token /tokens requests (top_k 0), one keep-alive connection, interleaving a
     random on-disk session whose file is not in the page cache (cold: read from the disk), one
     whose file the bench has just read (warm: as a recently evicted session's is), and a random
     resident one. A resumed session evicts the least recently used resident one, whose write
     goes to the threadpool. Three clients one after the other, each on its own sessions
     (RESUME_CLIENTS; --resumes requests in all): tools/bench/resume_client.c paced at 50/s and in a
     closed loop (each request timed in C with CLOCK_MONOTONIC), and this file's Python socket
     client paced at 50/s (the figures of earlier runs). p50/p99 of each, two ways: the client's
     wall time from the request's first byte to the response's last (what a user sees: with the
     Python client, also its own wake-up after each paced sleep and its socket calls), and
     recurd's own time from the access log (`--access-log`: the request's first byte read to its
     response's last byte queued — the resume itself: lookup, read and checks, eviction, the fold
     on a worker, the response); and recurd's loop thread's CPU time (schedstat) and page faults
     per request. The resident rows are the control: the same request without a resume, so what
     it costs (thread wake-ups, the fold) is not the resume's; its p99 is the floor this machine
     shows, whatever the resume does. Then the disk's own floor, without recurd: this process
     reads DISK_FLOOR_READS snapshot-sized files not in the page cache (disk_floor): a cold resume
     cannot beat it; and the file system's price of the new file each eviction write creates
     (create_floor: CPU per empty file created beside the state_dir). recurd's CPU per request is
     given for the loop thread and for all its threads (the fold, the reads, the eviction writes).

snapshot_interval_ms is 0 (writes only on eviction): a periodic round would write every one of
the N changed sessions (minutes of fsyncs) while the figures are taken. The daemon is killed at
the end (SIGKILL: its SIGTERM flush would write every resident session), the state_dir removed.

For tools/bench/run_all.py: TITLE, ORDER and run(ctx) (the make bench size; the last --full
result is kept in the section between <!-- capacity:full --> markers). --full rewrites that
block of docs/BENCHMARKS.md and docs/bench_capacity_full.svg itself.
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import benchutil

TITLE = "Capacity: resident sessions, sessions on disk, resume from disk (issue 18)"
ORDER = 55

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("RECUR_BUILD", os.path.join(ROOT, "build"))
DOCS = os.path.join(ROOT, "docs")
MODEL_DIR = os.path.join(ROOT, "models", "default")
BENCH_DOC = os.path.join(DOCS, "BENCHMARKS.md")

QUICK = {"resident": 10000, "on_disk": 25000, "idle_s": 10, "resumes": 2700}
FULL = {"resident": 100000, "on_disk": 250000, "idle_s": 30, "resumes": 2700}
RESUME_ONLY = {"resident": 5000, "on_disk": 8000, "idle_s": 0, "resumes": 2700}
DISTINCT_BLOBS = 1000
RESUME_RATE = 50.0
DISK_SHARE = 0.7         # of the free disk the snapshot files may take       # requests per second, alternating on-disk / resident
CONNECTIONS = 8
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- HTTP/1.1 keep-alive client

class Conn:
    """One keep-alive connection; request() returns (status, body bytes). Reconnects when the
    server said Connection: close (max_requests_per_conn)."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.buf = b""

    def _connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _read_until(self, sep):
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out, self.buf = self.buf[:i], self.buf[i + len(sep):]
                return out
            d = self.sock.recv(65536)
            if not d:
                raise BenchError("connection closed by recurd")
            self.buf += d

    def _read_n(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(max(65536, n - len(self.buf)))
            if not d:
                raise BenchError("connection closed by recurd")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def request(self, method, path, body=None):
        if self.sock is None:
            self._connect()
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data)}\r\n"
                "Content-Type: application/json\r\n\r\n").encode()
        self.sock.sendall(head + data)
        lines = self._read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdr = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdr[k.strip().lower()] = v.strip().lower()
        if "content-length" in hdr:
            out = self._read_n(int(hdr["content-length"]))
        elif hdr.get("transfer-encoding") == "chunked":
            parts = []
            while True:
                n = int(self._read_until(b"\r\n").split(b";")[0], 16)
                if n == 0:
                    self._read_until(b"\r\n")
                    break
                parts.append(self._read_n(n))
                self._read_until(b"\r\n")
            out = b"".join(parts)
        else:
            out = b""
        if hdr.get("connection") == "close":
            self.close()
        return status, out

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock = None


# ---------------------------------------------------------------- the daemon

class Daemon:
    """build/recurd on a free port; killed (SIGKILL) at the end."""

    def __init__(self, exe, args, timeout=600):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", "0"] + args,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=ENV)
        self.port, self.log, self.events = None, [], {}
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                if len(self.log) < 300:
                    self.log.append(line)
                m = re.search(r'"event":"(\w+)"', line)
                if m and m.group(1) in ("persistence", "listening"):
                    self.events[m.group(1)] = line
                if self.port is None and '"listening"' in line:
                    self.port = int(re.search(r'"port":(\d+)', line).group(1))
                    self.ready_s = time.monotonic() - self.t0
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        ready.wait(timeout)
        if self.port is None:
            self.kill()
            raise BenchError("recurd did not start: " + "".join(self.log[-5:])[-600:])

    @property
    def pid(self):
        return self.proc.pid

    def status(self, key):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return None

    def cpu_s(self, tid=None):
        """CPU seconds of all its threads, or of thread tid (schedstat: nanoseconds)."""
        return benchutil.proc_cpu_s(self.pid, tid)

    def metrics(self):
        _, body = Conn(self.port).request("GET", "/metrics")
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)


def state_dtype_args(exe):
    """bf16 states when this build has --state-dtype (issue 18), else the default (f32)."""
    helptext = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=ENV).stdout
    return (["--state-dtype", "bf16"], "bf16") if "state-dtype" in helptext or "state_dtype" in helptext \
        else ([], "f32 (this build has no --state-dtype)")


# ---------------------------------------------------------------- phases

def make_blobs(exe, margs, n, rng):
    """n state bodies of real sessions (4-16 random tokens each)."""
    d = Daemon(exe, margs + ["--max-sessions", str(n + 10)])
    try:
        c = Conn(d.port)
        _, body = c.request("GET", "/v1/model")
        model = json.loads(body)
        vocab = model["vocab_size"]
        blobs = []
        for _ in range(n):
            st, body = c.request("POST", "/v1/sessions",
                                 {"tokens": [rng.randrange(vocab) for _ in range(rng.randint(4, 16))]})
            if st != 201:
                raise BenchError(f"create: {st} {body[:200]!r}")
            sid = json.loads(body)["id"]
            st, blob = c.request("GET", f"/v1/sessions/{sid}/state")
            if st != 200:
                raise BenchError(f"GET state: {st}")
            blobs.append(blob)
            c.request("DELETE", f"/v1/sessions/{sid}")
        return model, blobs
    finally:
        d.kill()


def write_disk_sessions(state_dir, blobs, n, n_real, rng):
    """n sessions on disk, <id>.snap each: the first n_real (the ones the resumes pick from, and
    the 1,000 blobs) are files of their own, the others hard links to the blob files (the disk
    here writes 30-190 snapshot files a second under the machine's load: 250k real files took
    longer than the session has). Synced, then out of the page cache. Returns (ids of real files,
    all ids, seconds)."""
    t0 = time.monotonic()
    os.makedirs(state_dir, mode=0o700)
    ids = []
    for i in range(n):
        sid = "%032x" % rng.getrandbits(128)
        path = os.path.join(state_dir, sid + ".snap")
        if i < max(n_real, len(blobs)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, blobs[i % len(blobs)])
            os.close(fd)
        else:
            os.link(os.path.join(state_dir, ids[i % len(blobs)] + ".snap"), path)
        ids.append(sid)
    os.sync()
    for sid in ids[:max(n_real, len(blobs))]:
        fd = os.open(os.path.join(state_dir, sid + ".snap"), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return ids[len(blobs):n_real], ids, time.monotonic() - t0


def create_resident(d, n, vocab, sample_every):
    """n sessions over CONNECTIONS keep-alive connections, 4 random tokens each; VmRSS sampled
    every sample_every sessions. Returns (ids, samples [(sessions, rss)], seconds)."""
    ids, lock, errors = [], threading.Lock(), []
    counter = [0]

    def worker(k):
        rng = random.Random(1000 + k)
        c = Conn(d.port)
        mine = n // CONNECTIONS + (1 if k < n % CONNECTIONS else 0)
        try:
            for _ in range(mine):
                st, body = c.request("POST", "/v1/sessions",
                                     {"tokens": [rng.randrange(vocab) for _ in range(4)]})
                if st != 201:
                    raise BenchError(f"create: {st} {body[:200]!r}")
                with lock:
                    ids.append(json.loads(body)["id"])
                    counter[0] += 1
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)
        finally:
            c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(CONNECTIONS)]
    for t in threads:
        t.start()
    samples = [(0, d.status("VmRSS"))]
    nxt = sample_every
    while any(t.is_alive() for t in threads):
        if counter[0] >= nxt:
            samples.append((counter[0], d.status("VmRSS")))
            nxt = (counter[0] // sample_every + 1) * sample_every
        time.sleep(0.02)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    elapsed = time.monotonic() - t0
    time.sleep(0.5)
    samples.append((len(ids), d.status("VmRSS")))
    return ids, samples, elapsed


CONTROL = """
import sys, time
b = bytearray(int(sys.argv[1]))
for i in range(0, len(b), 4096):
    b[i] = 1
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def control_idle(rss, seconds):
    """CPU time of a plain process holding rss bytes (touched) and waking once a second, like the
    daemon's residency tick: what the machine charges for a wake-up of that much memory."""
    p = subprocess.Popen([sys.executable, "-c", CONTROL, str(rss)], stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()
        time.sleep(2)

        def cpu():
            with open(f"/proc/{p.pid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e9
        c0 = cpu()
        time.sleep(seconds)
        return cpu() - c0
    finally:
        p.kill()
        p.wait()


def session_hash(sid):
    """The access log's short hash of a session id (server/access_log.c srv_access_session_hash:
    FNV-1a 64 of the id, its top 48 bits as 12 hex digits)."""
    h = 0xcbf29ce484222325
    for b in sid.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%012x" % (h >> 16)


def access_durations(path, kinds, timeout=10):
    """{kind: [ms]} of the access log's /tokens lines whose session is one of kinds' ids
    ({kind: [ids]}), once every one of them is there (the log is written by its own thread)."""
    want = {session_hash(sid): kind for kind, ids in kinds.items() for sid in ids}
    n = sum(len(ids) for ids in kinds.values())
    deadline = time.monotonic() + timeout
    while True:
        out = {k: [] for k in kinds}
        try:
            with open(path) as f:
                for line in f:
                    if '"/v1/sessions/{id}/tokens"' not in line:
                        continue
                    rec = json.loads(line)
                    kind = want.get(rec.get("session"))
                    if kind and rec.get("status") == 200:
                        out[kind].append(rec["duration_s"] * 1e3)
        except OSError:
            pass
        if sum(len(v) for v in out.values()) >= n or time.monotonic() > deadline:
            return out
        time.sleep(0.1)


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


RESUME_CLIENTS = (  # (label, client, rate): each on its own sessions, one after the other
    (f"C client, paced {RESUME_RATE:.0f}/s", "c", RESUME_RATE),
    ("C client, closed loop", "c", 0.0),
    (f"Python client, paced {RESUME_RATE:.0f}/s", "py", RESUME_RATE),
)
KINDS = ("cold", "warm", "resident")
DISK_FLOOR_READS = 300  # files of the disk's own floor (disk_floor)


def timed_python(d, state_dir, order, vocab, rng, rate):
    """This file's socket client: [ms] of each (kind, sid) of order, paced at rate (the request's
    first byte to the response's last, Python's own time in it)."""
    c = Conn(d.port)
    out = []
    nxt = time.monotonic()
    for kind, sid in order:
        if kind == "warm":
            with open(os.path.join(state_dir, sid + ".snap"), "rb") as f:
                f.read()
        nxt += 1.0 / rate
        body = {"tokens": [rng.randrange(vocab)], "top_k": 0}
        t0 = time.perf_counter()
        st, resp = c.request("POST", f"/v1/sessions/{sid}/tokens", body)
        out.append((time.perf_counter() - t0) * 1e3)
        if st != 200 or b'"done":true' not in resp:
            raise BenchError(f"resume {kind}: {st} {resp[:200]!r}")
        time.sleep(max(0.0, nxt - time.monotonic()))
    c.close()
    return out


def timed_c(d, state_dir, order, vocab, rng, rate):
    """tools/bench/resume_client.c: [ms] of each (kind, sid) of order, timed in C, paced at rate
    or a closed loop (rate 0). The warm files are read just before (all of them: the client
    sends without pausing for the bench); the answers' status is checked, not their lines."""
    for kind, sid in order:
        if kind == "warm":
            with open(os.path.join(state_dir, sid + ".snap"), "rb") as f:
                f.read()
    reqs = [("POST", f"/v1/sessions/{sid}/tokens", {"tokens": [rng.randrange(vocab)], "top_k": 0})
            for _, sid in order]
    return benchutil.resume_client(ROOT, BUILD, d.port, reqs, rate)


def resume(d, state_dir, disk_ids, resident_ids, n, vocab, rng):
    """n requests in all, split among RESUME_CLIENTS; each client's a third each of: an on-disk
    session whose file is not in the page cache (cold), one whose file the bench has just read
    (warm: recently evicted sessions are), a resident one; interleaved. Returns
    ({client: {kind: [ms]}}, {(client, kind): [ids]}, {client: loop-thread cost per request})."""
    k = n // (len(KINDS) * len(RESUME_CLIENTS))
    picked = rng.sample(disk_ids, 2 * k * len(RESUME_CLIENTS))
    resident = rng.sample(resident_ids[len(resident_ids) // 2:], k * len(RESUME_CLIENTS))  # never evicted meanwhile
    out, ids, cost = {}, {}, {}
    for ci, (label, client, rate) in enumerate(RESUME_CLIENTS):
        kinds = {"cold": picked[2 * k * ci:2 * k * ci + k], "warm": picked[2 * k * ci + k:2 * k * (ci + 1)],
                 "resident": resident[k * ci:k * (ci + 1)]}
        order = [(kind, kinds[kind][i]) for i in range(k) for kind in KINDS]
        c0, f0, a0 = d.cpu_s(d.pid), benchutil.proc_minflt(d.pid, d.pid), d.cpu_s()
        ms = (timed_python if client == "py" else timed_c)(d, state_dir, order, vocab, rng, rate)
        cost[label] = {"cpu_loop_ms": (d.cpu_s(d.pid) - c0) * 1e3 / len(order),
                       "faults_loop": (benchutil.proc_minflt(d.pid, d.pid) - f0) / len(order),
                       "cpu_all_ms": (d.cpu_s() - a0) * 1e3 / len(order)}
        out[label] = {kind: [x for (kd, _), x in zip(order, ms) if kd == kind] for kind in KINDS}
        for kind in KINDS:
            ids[(label, kind)] = kinds[kind]
    return out, ids, cost


def disk_floor(work, blobs, n):
    """The disk's own floor for a cold resume, no recurd: n snapshot-sized files (the blobs) written
    under work/floor, synced and dropped from the page cache as the on-disk sessions are, then each
    opened, read whole and closed by this process in a closed loop. Returns [ms] per file."""
    floor = os.path.join(work, "floor")
    os.makedirs(floor)
    paths = [os.path.join(floor, f"{i}.snap") for i in range(n)]
    for i, path in enumerate(paths):
        with open(path, "wb") as f:
            f.write(blobs[i % len(blobs)])
    os.sync()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    out = []
    for path in paths:
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        while os.read(fd, 1 << 20):
            pass
        os.close(fd)
        out.append((time.perf_counter() - t0) * 1e3)
    shutil.rmtree(floor)
    return out


def create_floor(work, n):
    """The file system's price of a new file, no recurd: n empty files created (O_CREAT | O_EXCL, as
    each eviction write creates its temp file) under work/floor-create, beside the state_dir.
    Returns ([ms] per create, CPU ms per create). On ext4 without a journal a new inode skips every
    inode freed in the last minutes (fs/ext4/ialloc.c recently_deleted): that scan is kernel CPU
    that nothing preempts on a kernel with preempt=none (this VM's)."""
    floor = os.path.join(work, "floor-create")
    os.makedirs(floor)
    out = []
    c0 = time.thread_time()
    for i in range(n):
        t0 = time.perf_counter()
        fd = os.open(os.path.join(floor, f"{i}.tmp"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        out.append((time.perf_counter() - t0) * 1e3)
        os.close(fd)
    cpu = (time.thread_time() - c0) * 1e3 / n
    shutil.rmtree(floor)
    return out, cpu


# ---------------------------------------------------------------- the plot (hand-written SVG)

def svg_plot(path, samples, base, state_bytes, title):
    W, H, L, R, T, B = 640, 400, 70, 20, 40, 50
    xs = [s for s, _ in samples]
    ys = [(r - base) / 2**20 for _, r in samples]
    xmax = max(xs) or 1
    ymax = max(max(ys), 1.1 * xmax * state_bytes / 2**20) * 1.05 or 1
    px = lambda x: L + (W - L - R) * x / xmax  # noqa: E731
    py = lambda y: H - B - (H - T - B) * y / ymax  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    for i in range(6):
        x, y = xmax * i / 5, ymax * i / 5
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:,.0f}</text>')
        out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#ddd"/>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">resident sessions</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T + H - B) / 2})">RSS above baseline (MiB)</text>')
    for k, colour, label in ((1.0, "#888", "sessions × state bytes"), (1.1, "#c33", "1.1 × that (target)")):
        out.append(f'<line x1="{px(0):.1f}" y1="{py(0):.1f}" x2="{px(xmax):.1f}" '
                   f'y2="{py(k * xmax * state_bytes / 2**20):.1f}" stroke="{colour}" stroke-dasharray="6 4"/>')
    pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    for i, (colour, label, dash) in enumerate((("#1f5fbf", "recurd VmRSS − baseline", ""),
                                                ("#888", "sessions × state bytes", "6 4"),
                                                ("#c33", "1.1 × sessions × state bytes (target)", "6 4"))):
        y = T + 12 + 16 * i
        out.append(f'<line x1="{L + 12}" y1="{y}" x2="{L + 40}" y2="{y}" stroke="{colour}" '
                   f'stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{L + 46}" y="{y + 4}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------- the run

def mib(x):
    return f"{x / 2**20:,.1f}"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def measure(sizes, exe, work, svg_name, log=print):
    """One run at sizes; returns markdown."""
    rng = random.Random(18)
    margs = ["--model", MODEL_DIR]
    dtype_args, dtype = state_dtype_args(exe)
    margs += dtype_args
    loads = [loadavg()]
    t_all = time.monotonic()
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    model, blobs = make_blobs(exe, margs, min(DISTINCT_BLOBS, sizes["on_disk"]), rng)
    state_bytes, vocab = model["state_bytes"], model["vocab_size"]
    snap_bytes = sum(len(b) for b in blobs) / len(blobs)

    # disk and memory checks
    free = shutil.disk_usage(work).free
    on_disk = min(sizes["on_disk"], int(free * DISK_SHARE / snap_bytes))
    disk_note = (f"disk check: {free / 2**30:.1f} GiB free under {os.path.relpath(work, ROOT)}; "
                 f"{sizes['on_disk']:,} sessions × {snap_bytes:,.0f} bytes = "
                 f"{sizes['on_disk'] * snap_bytes / 2**30:.1f} GiB wanted, {DISK_SHARE:.0%} of the free disk "
                 f"allows {int(free * DISK_SHARE / snap_bytes):,}: {on_disk:,} on disk")
    avail = meminfo("MemAvailable")
    fit = int((avail * 0.7 - 2**30) / (state_bytes * 1.15))
    resident = min(sizes["resident"], max(1000, fit // 1000 * 1000))
    mem_note = (f"memory check: MemAvailable {avail / 2**30:.1f} GiB; {sizes['resident']:,} sessions × "
                f"{state_bytes:,} state bytes × 1.15 + 1 GiB must fit in 70 % of it: {resident:,} resident")
    log(disk_note)
    log(mem_note)

    state_dir = os.path.join(work, "state")
    resumes = sizes["resumes"]
    # the resumes pick among real files that are no blob's (a blob file has hard links)
    disk_ids, all_ids, write_s = write_disk_sessions(state_dir, blobs, on_disk,
                                                     len(blobs) + resumes, rng)
    log(f"wrote {on_disk:,} sessions on disk ({len(blobs) + resumes:,} files) in {write_s:.1f} s")
    args = margs + ["--state-dir", state_dir, "--max-sessions", str(resident + on_disk + resumes + 100),
                    "--max-resident-sessions", str(resident), "--snapshot-interval-ms", "0",
                    "--evict-idle-ms", "3600000", "--max-requests-per-conn", "1000000000",
                    "--keepalive-idle-ms", "600000", "--prefix-cache-bytes", "0",
                    "--access-log", os.path.join(work, "access.log")]
    d = Daemon(exe, args)
    try:
        start_s = d.ready_s
        m0 = d.metrics()
        indexed = m0.get("recurd_sessions_on_disk")
        # warm the workspaces, then the baseline
        c = Conn(d.port)
        for _ in range(4):
            st, body = c.request("POST", "/v1/sessions", {"tokens": [1, 2, 3, 4]})
            sid = json.loads(body)["id"]
            c.request("POST", f"/v1/sessions/{sid}/tokens", {"tokens": [5], "top_k": 0})
            c.request("DELETE", f"/v1/sessions/{sid}")
        c.close()
        time.sleep(2)
        base = d.status("VmRSS")
        idle = sizes["idle_s"] > 0  # 0: --resume-only
        c0, w0 = d.cpu_s(), time.monotonic()
        time.sleep(sizes["idle_s"])
        idle0_cpu, idle0_wall = d.cpu_s() - c0, time.monotonic() - w0
        log(f"daemon ready in {start_s:.1f} s with {indexed:,.0f} sessions indexed; baseline RSS {mib(base)} MiB")
        ids, samples, create_s = create_resident(d, resident, vocab, max(500, resident // 40))
        loads.append(loadavg())
        rss = samples[-1][1]
        m1 = d.metrics()
        log(f"{len(ids):,} resident sessions in {create_s:.1f} s; RSS {mib(rss)} MiB")
        # idle
        time.sleep(2)
        c0, w0 = d.cpu_s(), time.monotonic()
        time.sleep(sizes["idle_s"])
        idle_cpu, idle_wall = d.cpu_s() - c0, time.monotonic() - w0
        loads.append(loadavg())
        control_rss = min(rss, 2 << 30, int(meminfo("MemAvailable") * 0.3))
        control_cpu = control_idle(control_rss, sizes["idle_s"]) if idle else 0.0
        if idle:
            log(f"idle: {idle_cpu * 1e3:.0f} ms CPU in {idle_wall:.1f} s")
            log(f"control: {control_cpu * 1e3:.1f} ms CPU with {mib(control_rss)} MiB")
        lat, lat_ids, lat_cost = resume(d, state_dir, disk_ids, ids, resumes, vocab, rng)
        create_ms, create_cpu = create_floor(work, DISK_FLOOR_READS)
        floor_ms = disk_floor(work, blobs, DISK_FLOOR_READS)
        loads.append(loadavg())
        m2 = d.metrics()
        own = access_durations(os.path.join(work, "access.log"), lat_ids)
        own = {c: {kd: own[(c, kd)] for kd in KINDS} for c in lat}
        rss_end = d.status("VmRSS")
    finally:
        d.kill()
    shutil.rmtree(work, ignore_errors=True)

    above = rss - base
    want = resident * state_bytes
    per_session = above / resident
    evictions = m2.get("recurd_sessions_evicted_total", 0) - m1.get("recurd_sessions_evicted_total", 0)
    sync_ev = m2.get("recurd_eviction_sync_writes_total", 0) - m1.get("recurd_eviction_sync_writes_total", 0)
    disk_reads = m2.get("recurd_session_disk_reads_total", 0) - m1.get("recurd_session_disk_reads_total", 0)
    loads_s = ", ".join(loads)
    if svg_name:  # (not with --resume-only)
        svg_plot(os.path.join(DOCS, svg_name), samples, base, state_bytes,
                 f"recurd RSS vs resident sessions ({dtype} states, {state_bytes:,} bytes each)")
    md = [
        f"Model `models/default`, state dtype {dtype}: state_bytes {state_bytes:,} per session, "
        f"snapshot files {snap_bytes:,.0f} bytes on average. Load average (1/5/15 min) during the run: "
        f"{loads_s}. {disk_note}; {mem_note}.",
        "",
        "| figure | value | target |",
        "|---|---:|---|",
        f"| resident sessions (created over HTTP, 4 tokens each) | {len(ids):,} "
        f"({create_s:.0f} s, {len(ids) / create_s:,.0f} creates/s) | ≥ 100,000 at full size |",
        f"| sessions on disk (indexed at start; {len(blobs) + resumes:,} files of their own, the others "
        f"hard links to {len(blobs):,} of them) | {indexed:,.0f} (daemon ready in {start_s:.1f} s) | "
        "≥ 250,000 at full size |",
        f"| baseline RSS → RSS with the resident sessions | {mib(base)} → {mib(rss)} MiB | |",
        f"| RSS above baseline / (sessions × state_bytes) | **{above / want:.3f}** "
        f"({mib(above)} / {mib(want)} MiB) | ≤ 1.1 |",
        f"| bytes per resident session beyond its state | **{per_session - state_bytes:,.0f}** "
        f"({per_session:,.0f} − {state_bytes:,}) | reported |",
        *([f"| daemon CPU while idle: no session resident / {len(ids):,} resident (+ {indexed:,.0f} on "
           f"disk both times) | {idle0_cpu * 1e3:.1f} ms / {idle_cpu * 1e3:.1f} ms in {idle_wall:.0f} s "
           f"({100 * idle_cpu / idle_wall:.2f} % of a core) | none |",
           f"| control: a plain process holding {mib(control_rss)} MiB, waking once a second | "
           f"{control_cpu * 1e3:.1f} ms in {sizes['idle_s']} s | |"] if idle else []),
        *resume_rows(lat, own, lat_cost),
        f"| control: the disk alone — this bench opens, reads and closes a snapshot-sized file not in "
        f"the page cache (no recurd, closed loop): p50 / p99 | {percentile(floor_ms, 0.5):.2f} / "
        f"{percentile(floor_ms, 0.99):.2f} ms ({len(floor_ms)} files) | the floor of a cold resume |",
        f"| control: the file system alone — this bench creates an empty file beside the state_dir, as "
        f"each eviction write does (no recurd): p50 / p99, CPU per create | {percentile(create_ms, 0.5):.2f} / "
        f"{percentile(create_ms, 0.99):.2f} ms, {create_cpu:.3f} ms ({len(create_ms)} files) | |",
        f"| evictions during the resumes / written on the loop thread / resumes read by a reader thread "
        f"(file not in the page cache) | {evictions:.0f} / {sync_ev:.0f} / {disk_reads:.0f} | |",
        "",
        (f"RSS against sessions: [{svg_name}]({svg_name}). " if svg_name else "") + f"RSS at the end (after the resumes): "
        f"{mib(rss_end)} MiB. Run took {time.monotonic() - t_all:.0f} s; the snapshot files were "
        f"written by the bench in {write_s:.0f} s.",
    ]
    return "\n".join(md)


def resume_rows(lat, own, cost):
    """The resume rows of the table: per client, cold / warm / resident (the control), p50 / p99
    at the client and in recurd's access log; the loop thread's CPU and page faults per request."""
    p = lambda xs, q: f"{percentile(xs, q):.2f}"  # noqa: E731
    what = {"cold": "resume a random on-disk session, file not in the page cache",
            "warm": "resume a random on-disk session, file in the page cache",
            "resident": "control: the same request on a resident session"}
    rows = []
    for client, by_kind in lat.items():
        for kind in KINDS:
            xs, ys = by_kind[kind], own[client][kind]
            fig = (f"{p(xs, 0.5)} / {p(xs, 0.99)} ms / {p(ys, 0.5)} / {p(ys, 0.99)} ms "
                   f"({len(xs)} requests)")
            rows.append(f"| {what[kind]} ({client}): p50 / p99, client / recurd's own (access log) | "
                        + (f"**{fig}**" if kind != "resident" else fig)
                        + (" | p99 ≤ 2 ms |" if kind != "resident" else " | the floor |"))
        c = cost[client]
        rows.append(f"| recurd per request ({client}, the three kinds together): loop thread CPU / page "
                    f"faults; all threads' CPU (the fold, reads, eviction writes) | {c['cpu_loop_ms']:.3f} ms / "
                    f"{c['faults_loop']:.1f}; {c['cpu_all_ms']:.3f} ms | |")
    return rows


def section_text(quick_md, full_md):
    return "\n".join([
        "`tools/bench/section_capacity.py` (its docstring says exactly what it does). On-disk "
        "sessions are snapshot files of real sessions written by the bench (most of them hard links "
        "to 1,000 files: the disk check says what real files would take) and indexed by recurd at "
        "start; resident sessions are created over HTTP; resumes are single-token `/tokens` requests "
        "over one keep-alive connection on loopback, by three clients in turn (a C client paced at 50/s and in "
        "a closed loop, the Python client of earlier runs paced at 50/s), each timed at the client (the figure "
        "compared with the target: an honest resume of a session that is not resident, over HTTP) and in "
        "recurd's access log (its own time, without the client's wake-up); the resident rows are the control "
        "(the same request with no resume: the floor of what this machine shows). A file not in the page cache is read by a reader thread, one in "
        "it on the loop thread (docs/OPERATIONS.md \"Resuming a session from disk\"). Sizing rules: docs/OPERATIONS.md "
        "\"Sizing\". Idle CPU: recurd does no per-session work while idle (evictions, idle sweeps and "
        "snapshot rounds start at the list heads, server/session_table.h); with a state_dir it wakes "
        "once a second (the residency tick), and this VM charges each wake-up of a process in "
        "proportion to its resident memory: the control row is a plain process holding the same "
        "memory and sleeping a second at a time.",
        "",
        "### make bench size",
        "",
        quick_md,
        "",
        "### Full size (run by hand: `/usr/bin/python3 tools/bench/section_capacity.py --full`)",
        "",
        "<!-- capacity:full -->",
        full_md,
        "<!-- /capacity:full -->",
    ])


def kept_full():
    try:
        text = open(BENCH_DOC, encoding="utf-8").read()
    except OSError:
        return "_Not run yet._"
    m = re.search(r"<!-- capacity:full -->\n(.*?)\n<!-- /capacity:full -->", text, re.S)
    return m.group(1) if m else "_Not run yet._"


def run(ctx):
    """tools/bench/run_all.py entry point: the make bench size; the last --full block is kept."""
    global BUILD
    BUILD = ctx.build
    md = measure(QUICK, os.path.join(BUILD, "recurd"), os.path.join(BUILD, "bench", "capacity"),
                 "bench_capacity.svg", log=lambda s: sys.stderr.write(s + "\n"))
    return section_text(md, kept_full())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="100k resident, 250k on disk")
    ap.add_argument("--resume-only", action="store_true",
                    help="only the resume rows: 5k resident, 8k on disk, no idle figures")
    ap.add_argument("--resident", type=int)
    ap.add_argument("--on-disk", type=int)
    ap.add_argument("--resumes", type=int)
    ap.add_argument("--recurd", default=os.path.join(BUILD, "recurd"))
    ap.add_argument("--no-doc", action="store_true", help="print the markdown only (no plot either)")
    a = ap.parse_args()
    sizes = dict(FULL if a.full else RESUME_ONLY if a.resume_only else QUICK)
    for k in ("resident", "on_disk", "resumes"):
        if getattr(a, k) is not None:
            sizes[k] = getattr(a, k)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    # --no-doc writes nothing under docs/ (the plot neither)
    svg = None if a.resume_only or a.no_doc else "bench_capacity_full.svg" if a.full else "bench_capacity.svg"
    md = measure(sizes, a.recurd, os.path.join(BUILD, "bench", "capacity-full" if a.full else "capacity"), svg,
                 log=lambda s: print(s, file=sys.stderr, flush=True))
    md = f"_Run {when}._\n\n" + md
    print(md)
    if a.full and not a.no_doc and not a.resume_only:
        text = open(BENCH_DOC, encoding="utf-8").read()
        if "<!-- capacity:full -->" not in text:
            raise SystemExit("docs/BENCHMARKS.md has no capacity section yet: run "
                             "`tools/bench/run_all.py --sections capacity` first")
        text = re.sub(r"<!-- capacity:full -->\n.*?\n<!-- /capacity:full -->",
                      lambda _: f"<!-- capacity:full -->\n{md}\n<!-- /capacity:full -->", text, flags=re.S)
        with open(BENCH_DOC + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(BENCH_DOC + ".tmp", BENCH_DOC)
        print("updated docs/BENCHMARKS.md (capacity:full)", file=sys.stderr)


if __name__ == "__main__":
    main()
