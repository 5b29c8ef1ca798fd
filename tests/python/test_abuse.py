"""Abuse tests (issue 6) against the real daemon on loopback: slowloris connections closed at the
header timeout while a canary session keeps its latency; a client that never reads its stream cut
at the send-stall timeout with memory bounded; 10k connect/close cycles leave fd count and RSS at
baseline. Every socket has a timeout, every wait is bounded, the daemon is killed at teardown."""
import array
import fcntl
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import termios
import time

import requests

from daemon import Daemon, ROOT
from session_helpers import info

TINY = os.path.join(ROOT, "tests", "fixtures", "tiny_model.json")


# ---------------------------------------------------------------------------- helpers

def tiny_daemon(*args):
    return Daemon(*args, model_config=TINY, seed=1)


def create(d, tokens=None):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens} if tokens else None,
                      timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def fold(d, sid, tokens, http=None):
    r = (http or requests).post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": tokens},
                                timeout=30)
    assert r.status_code == 200, r.text
    last = json.loads(r.text.strip().split("\n")[-1])
    assert last["done"] is True, last
    return last


def metric(d, name, labels="", text=None):
    if text is None:
        text = requests.get(d.url("/metrics"), timeout=10).text
    m = re.search(r"^%s%s\s+([0-9.eE+-]+)\s*$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def tcp_send_queue(local_port, remote_port):
    """tx_queue of the loopback TCP socket local_port -> remote_port (/proc/net/tcp); 0 when gone."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if (int(parts[1].split(":")[1], 16) == local_port
                    and int(parts[2].split(":")[1], 16) == remote_port):
                return int(parts[4].split(":")[0], 16)
    return 0


def unread(sock):
    buf = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    return buf[0]


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def healthy(d):
    r = requests.get(d.url("/healthz"), timeout=10)
    return r.status_code == 200 and r.json()["status"] == "ok"


def canary_latencies(d, sid, http, n, gap=0.02, min_seconds=0.0):
    """At least n one-token folds (and for at least min_seconds) on the canary session over a
    keep-alive connection; seconds each."""
    out = []
    t_end = time.monotonic() + min_seconds
    i = 0
    while i < n or time.monotonic() < t_end:
        i += 1
        t0 = time.perf_counter()
        fold(d, sid, [65 + i % 26], http=http)
        out.append(time.perf_counter() - t0)
        time.sleep(gap)
    return out


# The slowloris attacker runs in its own process, so that its Python work does not share the
# GIL with the canary client in this process (that would inflate the canary's measured latency
# on the client side, which is not what is under test). It keeps N connections open, each
# trickling one header byte every TRICKLE seconds and never finishing the headers; a connection
# the server closes is replaced by a new one until the attack's end. It prints one JSON object:
# per closed connection, the seconds from its first byte to the close, and how it ended.
ATTACKER = r"""
import json, selectors, socket, sys, time
port, n, trickle, duration = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100000
sel = selectors.DefaultSelector()
conns = {}          # sock -> [first_byte_time, bytes_sent, received]
closed = []         # [seconds_open, kind]
errors = []
end = time.monotonic() + duration
def open_one():
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
    except OSError as e:
        errors.append("connect: %r" % e); s.close(); return
    s.setblocking(False)
    s.send(HEAD[:1])
    conns[s] = [time.monotonic(), 1, b""]
    sel.register(s, selectors.EVENT_READ)
def finish(s, kind):
    t0 = conns.pop(s)[0]
    closed.append([time.monotonic() - t0, kind])
    sel.unregister(s); s.close()
for _ in range(n):
    open_one()
print(json.dumps({"ready": len(conns)}), flush=True)
next_trickle = time.monotonic() + trickle
while time.monotonic() < end:
    for key, _ in sel.select(timeout=max(0.0, min(next_trickle, end) - time.monotonic())):
        s = key.fileobj
        try:
            data = s.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            finish(s, "reset"); continue
        except BlockingIOError:
            continue
        st = conns[s]
        st[2] += data
        if not data:
            kind = "eof:" + st[2][:40].decode("latin-1") if st[2] else "eof"
            if st[2].startswith(b"HTTP/1.1 408 "):
                try:
                    err = json.loads(st[2].partition(b"\r\n\r\n")[2])["error"]
                    kind = "408" if err["code"] and err["message"] else "408-bad-body"
                except (ValueError, KeyError, TypeError):
                    kind = "408-bad-body"
            finish(s, kind)
    now = time.monotonic()
    if now >= next_trickle:
        next_trickle = now + trickle
        for s, st in list(conns.items()):
            try:
                s.send(HEAD[st[1]:st[1] + 1]); st[1] += 1
            except BlockingIOError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                finish(s, "reset")
        while len(conns) < n and time.monotonic() < end - 2.5:
            open_one()
still_open = [[time.monotonic() - st[0], st[1]] for st in conns.values()]
print(json.dumps({"closed": closed, "still_open": still_open, "errors": errors[:5]}), flush=True)
"""


# ---------------------------------------------------------------------------- slowloris

def test_slowloris_closed_at_header_timeout_canary_keeps_latency():
    header_ms = 1000
    n_slow = 200
    with tiny_daemon("--header-timeout-ms", str(header_ms), "--max-connections", "1024") as d:
        sid = create(d, tokens=[72, 101, 108, 108, 111])
        http = requests.Session()
        canary_latencies(d, sid, http, 10)                       # warm-up
        baseline = canary_latencies(d, sid, http, 30, min_seconds=1.0)

        duration = 6.0
        att = subprocess.Popen([sys.executable, "-c", ATTACKER, str(d.port), str(n_slow), "0.2",
                                str(duration)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            ready = json.loads(att.stdout.readline() or b"{}")
            assert ready.get("ready") == n_slow, (ready, att.stderr.read()[-2000:])
            t_attack = time.monotonic()
            # through the whole attack: 200 connections opening, trickling, timing out together
            # at ~1 s and being replaced, several waves of them
            attack = canary_latencies(d, sid, http, 30, min_seconds=duration - 2.5)
            canary_s = time.monotonic() - t_attack
            out, err = att.communicate(timeout=duration + 15)
        finally:
            if att.poll() is None:
                att.kill()
                att.wait(5)
        res = json.loads(out.decode().strip().split("\n")[-1])
        closed, still_open = res["closed"], res["still_open"]
        secs = sorted(c[0] for c in closed)
        kinds = {}
        for c in closed:
            kinds[c[1]] = kinds.get(c[1], 0) + 1
        print("slowloris: %d closed (%s), %d still open at the end (ages %s), open->close s "
              "min %.3f median %.3f max %.3f, errors %s" % (
                  len(closed), kinds, len(still_open),
                  [round(a, 2) for a, _ in sorted(still_open)[-3:]],
                  secs[0] if secs else -1, statistics.median(secs) if secs else -1,
                  secs[-1] if secs else -1, res["errors"]))
        b_med, a_med = statistics.median(baseline), statistics.median(attack)
        print("canary: baseline median %.2f ms (n=%d), under attack median %.2f ms (n=%d, "
              "%.1f s of attack while it ran)" % (b_med * 1e3, len(baseline), a_med * 1e3,
                                                 len(attack), canary_s))

        assert not res["errors"], res["errors"]
        # (a) every slow connection is closed at about the header timeout. The first n_slow
        # connections all lived their whole time inside the attack window, so at least that many
        # closes are expected; a 408 with a JSON error body (code + message) or a plain close
        # (eof / reset) both count as "closed"; anything else the server sent is a failure.
        assert len(closed) >= n_slow, (len(closed), kinds)
        assert set(kinds) <= {"408", "eof", "reset"}, kinds
        low, high = header_ms / 1000.0 * 0.9, header_ms / 1000.0 + 1.0
        bad = [s for s in secs if not low <= s <= high]
        assert not bad, "closed outside [%.1f, %.1f] s after the first byte: %s" % (
            low, high, bad[:10])
        # a connection still open when the attack ended must be younger than the timeout + slack
        assert all(age <= high for age, _ in still_open), still_open
        # (b) canary latency under attack within 2x baseline; +2 ms absolute floor because a
        # one-token fold on the tiny model takes ~1 ms and 2 shared cores add scheduler jitter.
        bound = 2 * b_med + 0.002
        assert a_med <= bound, "canary median %.2f ms under attack > 2 x %.2f ms + 2 ms" % (
            a_med * 1e3, b_med * 1e3)
        assert metric(d, "recurd_http_timeouts_total", '{kind="header"}') >= n_slow
        assert healthy(d)


# ---------------------------------------------------------------------------- never-reading client

def test_client_that_never_reads_is_cut_at_send_stall_timeout():
    stall_ms = 1000
    max_tokens = 200000
    with tiny_daemon("--send-stall-timeout-ms", str(stall_ms),
                     "--max-tokens-per-request", str(max_tokens)) as d:
        prompt = [72, 101, 108, 108, 111]
        sid = create(d, tokens=prompt)
        other = create(d, tokens=prompt)
        for _ in range(20):                                     # warm the allocator
            fold(d, other, [1, 2, 3, 4])
        rss0 = d.rss_kib()
        fds0 = fd_count(d.pid)
        for _ in range(6):          # the folds' connections may still be closing on the server
            time.sleep(0.05)
            fds0 = min(fds0, fd_count(d.pid))

        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # before connect: tiny window
        s.settimeout(10)
        s.connect(("127.0.0.1", d.port))
        body = json.dumps({"max_tokens": max_tokens, "seed": 1}).encode()
        s.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (sid.encode(), len(body), body))
        t0 = time.monotonic()
        try:
            # never read s; watch the daemon until the stream is cut (bounded)
            rss_max, cut_at, seen, last_change = rss0, None, [], 0.0
            in_kernel, last_write, before_last_write = -1, 0.0, 0.0
            cport = s.getsockname()[1]
            prev_sample = 0.0
            while time.monotonic() - t0 < 20:
                sample = time.monotonic() - t0
                rss_max = max(rss_max, d.rss_kib())
                st = info(d, sid)
                if not seen or st["tokens_seen"] != seen[-1]:
                    last_change = time.monotonic() - t0
                seen.append(st["tokens_seen"])
                # the server's write progress on this connection = bytes it has handed to the
                # kernel = its socket's send queue + our unread receive queue
                # (only growth counts: once the server resets the connection its socket, and
                # so its send queue, is gone)
                k = tcp_send_queue(d.port, cport) + unread(s)
                if k > in_kernel:
                    in_kernel, last_write, before_last_write = k, sample, prev_sample
                stalls = metric(d, "recurd_http_timeouts_total", '{kind="send_stall"}') or 0
                if stalls >= 1 and st["pending_ops"] == 0:
                    cut_at, before_cut = time.monotonic() - t0, prev_sample
                    break
                prev_sample = sample
                time.sleep(0.05)
            fds_during = fd_count(d.pid)
            print("never-reading client: server write progress last at %.2f s, tokens_seen last "
                  "grew at %.2f s (stream paused), cut at %s s (send_stall_timeout %d ms); "
                  "%d bytes in kernel buffers; tokens_seen samples %s ... %s; RSS baseline %d KiB, "
                  "max while stalled %d KiB (+%d KiB); fds %d -> %d" % (
                      last_write, last_change, None if cut_at is None else round(cut_at, 2),
                      stall_ms, in_kernel, seen[:3], seen[-3:], rss0, rss_max, rss_max - rss0,
                      fds0, fds_during))
            assert cut_at is not None, "stream not cut within 20 s; tokens_seen %s" % seen[-5:]
            # the cut comes stall_ms after the server's writes stopped making progress (the
            # kernel buffers are full; its own queue then fills to the high watermark and the
            # stream pauses: tokens_seen stops growing). Both moments are only known to lie
            # between two polling samples (~50 ms apart, much more on 2 busy cores), so the
            # true stall lies in [before_cut - last_write, cut_at - before_last_write]; that
            # interval must not be wholly below 0.9 x send_stall_timeout (cut too early) nor
            # wholly above 1 x + 0.5 s (cut too late).
            stall_lo, stall_hi = before_cut - last_write, cut_at - before_last_write
            print("stall between %.2f and %.2f s" % (stall_lo, stall_hi))
            assert stall_hi >= stall_ms / 1000.0 * 0.9 and stall_lo <= stall_ms / 1000.0 + 0.5, (
                "cut %.2f..%.2f s after write progress stopped, send_stall_timeout %d ms" % (
                    stall_lo, stall_hi, stall_ms))
            assert last_change <= cut_at, (last_change, cut_at)
            # Under ASan the ~3 MB of stream output churned through malloc/free before the stall
            # sits in the allocator's quarantine, so RSS says nothing there (LeakSanitizer checks
            # leaks at exit); the plain pass asserts the bound.
            if os.environ.get("RECUR_SANITIZE") != "1":
                assert rss_max - rss0 < 8 * 1024, "RSS grew %d KiB while the stream was stalled" % (
                    rss_max - rss0)
            # the connection is gone on the server side: reading it ends (EOF or reset) quickly
            got, ended = 0, False
            try:
                while got < 64 << 20:
                    chunk = s.recv(65536)
                    if not chunk:
                        ended = True
                        break
                    got += len(chunk)
            except ConnectionResetError:
                ended = True
            except socket.timeout:
                pass
            assert ended, "connection still open after the stall cut (%d bytes read)" % got
        finally:
            s.close()

        # tokens_seen is consistent: stable, more than the prompt, less than the whole request,
        # and the session keeps counting exactly from there
        a = info(d, sid)
        time.sleep(0.3)
        b = info(d, sid)
        assert a["tokens_seen"] == b["tokens_seen"] and b["pending_ops"] == 0, (a, b)
        n = b["tokens_seen"]
        assert len(prompt) < n < len(prompt) + max_tokens, n
        assert fold(d, sid, [65, 66, 67])["tokens_seen"] == n + 3
        assert fold(d, other, [1])["done"] is True
        assert healthy(d)
        # the stalled connection's fd is released
        deadline = time.monotonic() + 5
        while fd_count(d.pid) > fds0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fd_count(d.pid) <= fds0, (fds0, fd_count(d.pid))


# ---------------------------------------------------------------------------- connect/close churn

def _cycles(port, n, start=0):
    partial = b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Len"
    full = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    oks = 0
    for i in range(start, start + n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            kind = i % 10
            if kind in (1, 2, 3):
                s.sendall(partial)
            elif kind == 4:
                s.sendall(b"G")
            elif kind == 5:
                s.sendall(full)
                buf = b""
                while b"\r\n\r\n" not in buf or not buf.rstrip().endswith(b"}"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                assert buf.startswith(b"HTTP/1.1 200"), buf[:80]
                oks += 1
            # kinds 0, 6..9: connect and close, nothing sent
        finally:
            s.close()
    return oks


def _settle(d, fds0, timeout=5.0):
    deadline = time.monotonic() + timeout
    fds = fd_count(d.pid)
    while fds > fds0 and time.monotonic() < deadline:
        time.sleep(0.05)
        fds = fd_count(d.pid)
    return fds


def test_10k_connect_close_cycles_leave_fds_and_rss_at_baseline():
    with tiny_daemon() as d:
        sid = create(d, tokens=[1, 2, 3])
        _cycles(d.port, 500)                                    # warm-up
        time.sleep(0.2)
        fds0 = fd_count(d.pid)
        rss0 = d.rss_kib()
        t0 = time.monotonic()
        oks = _cycles(d.port, 10000, start=500)
        took = time.monotonic() - t0
        fds = _settle(d, fds0)
        rss = d.rss_kib()
        print("10k cycles in %.1f s (%d full GET /healthz): fds baseline %d after %d; "
              "RSS baseline %d KiB after %d KiB (%+d KiB)" % (took, oks, fds0, fds, rss0, rss,
                                                             rss - rss0))
        assert oks == 1000
        assert fds <= fds0, "fd count %d above baseline %d 5 s after the cycles" % (fds, fds0)
        # Under ASan (make test SANITIZE=1) freed memory sits in the allocator's quarantine (up to
        # 256 MiB), so RSS says nothing about leaks there; LeakSanitizer checks them at exit
        # instead. The plain pass asserts the bound.
        if os.environ.get("RECUR_SANITIZE") != "1":
            assert rss - rss0 < 2 * 1024, "RSS grew %d KiB over 10k cycles" % (rss - rss0)
        assert healthy(d)
        assert fold(d, sid, [4])["tokens_seen"] == 4
