"""The access log (issue 15; docs/OPERATIONS.md "Access log"): one JSON line per request with
the route template, status, bytes, duration, time to first byte of a stream, tokens, a short
hash of the session (never its id, never the API key), the rule of a refusal; a file reopened on
SIGHUP (logrotate) without losing a line; a writer that drops and counts lines instead of
stalling requests when its output does not keep up."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import requests

from daemon import RECURD, ROOT, TINY_MODEL, Daemon, read_to_eof

KEY = "k3y-" + "s" * 28
AUTH = {"Authorization": "Bearer " + KEY}


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"" or data.endswith(b"\n"), "a partial line: %r" % data[-200:]
    return [json.loads(l) for l in data.decode().splitlines()]


def wait_lines(paths, n, timeout=20.0):
    """Lines of the files once they hold n in all (the writer thread is asynchronous)."""
    end = time.time() + timeout
    while True:
        lines = [l for p in paths for l in read_lines(p)]
        if len(lines) >= n or time.time() > end:
            return lines
        time.sleep(0.05)


def by_id(lines):
    out = {}
    for l in lines:
        assert l["request_id"] not in out, "two lines for %s" % l["request_id"]
        out[l["request_id"]] = l
    return out


def raw(port, request):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(request)
    return read_to_eof(s)


def metric(d, name):
    body = requests.get(d.url("/metrics"), timeout=30).text
    m = re.search(r"^%s (\d+)$" % name, body, re.M)
    assert m, name
    return int(m.group(1))


def test_one_line_per_request_with_its_fields(tmp_path):
    path = str(tmp_path / "access.log")
    with Daemon("--access-log", path, "--api-key", KEY) as d:
        def h(rid):
            return dict(AUTH, **{"X-Request-Id": rid})

        t0 = time.time()
        r = requests.post(d.url("/v1/sessions"), json={"tokens": [1, 2, 3]}, headers=h("create"),
                          timeout=30)
        assert r.status_code == 201
        sid = r.json()["id"]
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [4, 5, 6, 7]},
                          headers=h("fold"), timeout=30)
        assert r.status_code == 200 and len(r.text.splitlines()) == 5  # 4 tokens + done
        t_gen = time.time()
        r = requests.post(d.url("/v1/sessions/%s/generate" % sid), json={"max_tokens": 40},
                          headers=h("gen"), timeout=60)
        gen_wall = time.time() - t_gen
        assert r.status_code == 200
        # refusals: the application's (422, 404, 405, 401) and the HTTP layer's (413 at the head)
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [999999]},
                          headers=h("bad-token"), timeout=30)
        assert r.status_code == 422
        bad_rule = r.json()["error"]["code"]
        assert requests.get(d.url("/v1/nope"), headers=h("nope"), timeout=30).status_code == 404
        assert requests.patch(d.url("/v1/sessions/%s" % sid), headers=h("patch"),
                              timeout=30).status_code == 405
        assert requests.get(d.url("/v1/model"), timeout=30,
                            headers={"Authorization": "Bearer wrong-key", "X-Request-Id": "unauth"}
                            ).status_code == 401
        big = raw(d.port, b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Request-Id: toolarge\r\n"
                          b"Authorization: Bearer " + KEY.encode() +
                          b"\r\nContent-Length: 999999999\r\n\r\n")
        assert big.startswith(b"HTTP/1.1 413")
        # exact bytes both ways, on a raw socket
        req = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: raw\r\nConnection: close\r\n\r\n"
        answer = raw(d.port, req)
        assert answer.startswith(b"HTTP/1.1 200")
        assert requests.head(d.url("/health"), headers={"X-Request-Id": "head"},
                             timeout=30).status_code == 200
        # a generated id when the client sends none (or one that is not [A-Za-z0-9._:-]{1,64})
        assert requests.get(d.url("/healthz"), headers={"X-Request-Id": "bad id!"},
                            timeout=30).status_code == 200
        wall = time.time() - t0
        n = 11
        lines = wait_lines([path], n)
        assert len(lines) == n, lines
        got = by_id(lines)
        text = open(path).read()
        assert sid not in text and KEY not in text and "wrong-key" not in text

        for l in lines:
            assert l["event"] == "access" and l["level"] == "info" and l["ts"].endswith("Z")
            assert l["remote"].startswith("127.0.0.1:")
            assert 0 <= l["duration_s"] <= wall + 1
            assert l["aborted"] is False

        c = got["create"]
        assert (c["method"], c["route"], c["status"], c["tokens_in"], c["error"]) == \
            ("POST", "/v1/sessions", 201, 3, None)
        assert re.fullmatch(r"[0-9a-f]{12}", c["session"])
        f = got["fold"]
        assert (f["route"], f["status"], f["tokens_in"], f["tokens_out"]) == \
            ("/v1/sessions/{id}/tokens", 200, 4, 0)
        assert f["session"] == c["session"]  # the same session, the same short hash
        assert 0 < f["ttfb_s"] <= f["duration_s"]
        g = got["gen"]
        assert (g["route"], g["status"], g["tokens_out"], g["session"]) == \
            ("/v1/sessions/{id}/generate", 200, 40, c["session"])
        assert 0 < g["ttfb_s"] <= g["duration_s"] <= gen_wall
        assert g["bytes_out"] > len(r.content)  # the 40 lines, chunk framing and the head
        b = got["bad-token"]
        assert (b["status"], b["error"], b["route"], b["tokens_in"]) == \
            (422, bad_rule, "/v1/sessions/{id}/tokens", 0)
        assert (got["nope"]["status"], got["nope"]["route"], got["nope"]["error"]) == \
            (404, None, "not_found")
        assert (got["patch"]["status"], got["patch"]["route"], got["patch"]["error"]) == \
            (405, "/v1/sessions/{id}", "method_not_allowed")
        assert (got["unauth"]["status"], got["unauth"]["error"]) == (401, "unauthorized")
        t = got["toolarge"]  # refused by the HTTP layer at the head: no route, the rule
        assert (t["method"], t["status"], t["error"], t["route"]) == \
            ("POST", 413, "body_too_large", None)
        rw = got["raw"]
        assert (rw["bytes_in"], rw["bytes_out"], rw["route"]) == (len(req), len(answer), "/healthz")
        assert (got["head"]["method"], got["head"]["route"]) == ("HEAD", "/health")
        generated = [k for k in got if k not in (
            "create", "fold", "gen", "bad-token", "nope", "patch", "unauth", "toolarge", "raw",
            "head")]
        assert len(generated) == 1 and all(re.fullmatch(r"[0-9a-f]{8}-\d+", k) for k in generated)
        assert metric(d, "recurd_access_log_dropped_total") == 0
        assert metric(d, "recurd_access_log_lines_total") >= n


def test_a_client_that_leaves_mid_stream_is_logged_aborted(tmp_path):
    path = str(tmp_path / "access.log")
    with Daemon("--access-log", path) as d:
        sid = requests.post(d.url("/v1/sessions"), json={"tokens": [1]}, timeout=30).json()["id"]
        # a fold answering 64 alternatives a token: ~17 MB of lines, far past the socket buffers
        body = json.dumps({"tokens": [i % 256 for i in range(8192)], "top_k": 64}).encode()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", d.port))
        s.sendall(b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: x\r\nX-Request-Id: left\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (sid.encode(), len(body), body))
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(0.5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST
        lines = wait_lines([path], 2)
        left = by_id(lines)["left"]
        assert left["aborted"] is True and left["status"] == 200
        assert 0 < left["tokens_in"] < 8192
        assert left["bytes_in"] > len(body)
        assert left["ttfb_s"] <= left["duration_s"]


def test_sighup_after_rename_starts_a_new_file_and_loses_nothing(tmp_path):
    path = str(tmp_path / "access.log")
    with Daemon("--access-log", path) as d:
        sent = []
        stop = threading.Event()

        def client(k):
            s = requests.Session()
            i = 0
            while not stop.is_set():
                rid = "c%d-%d" % (k, i)
                assert s.get(d.url("/healthz"), headers={"X-Request-Id": rid},
                             timeout=30).status_code == 200
                sent.append(rid)
                i += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        os.rename(path, path + ".1")  # logrotate: rename, then HUP
        os.kill(d.pid, signal.SIGHUP)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        lines = wait_lines([path + ".1", path], len(sent))
        assert sorted(by_id(lines)) == sorted(sent)  # every request, exactly once
        old, new = read_lines(path + ".1"), read_lines(path)
        assert old and new, (len(old), len(new))
        assert metric(d, "recurd_access_log_reopens_total") == 1
        assert any(l.get("event") == "access_log_reopened" for l in map(json.loads, d.logs()))
        assert d.proc.poll() is None  # SIGHUP no longer ends the process


def test_a_stalled_output_drops_and_counts_lines_never_requests(tmp_path):
    """The access log is a FIFO whose reader does not read: after the pipe's 64 KiB and the
    4 KiB buffer, lines are dropped and counted, and requests go on at full speed."""
    fifo = str(tmp_path / "access.fifo")
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader exists, and never reads (yet)
    try:
        with Daemon("--access-log", fifo, "--access-log-buffer-bytes", "4096") as d:
            s = requests.Session()
            n = 600  # ~330 bytes a line: well past 64 KiB + 4 KiB
            for i in range(n):
                assert s.get(d.url("/healthz"), headers={"X-Request-Id": "q%d" % i},
                             timeout=10).status_code == 200
            t = time.time()
            for i in range(50):
                assert s.get(d.url("/healthz"), timeout=10).status_code == 200
            assert time.time() - t < 10  # not blocked behind the log (generous: loaded machine)
            dropped = metric(d, "recurd_access_log_dropped_total")
            assert dropped > 0
            buffered = metric(d, "recurd_access_log_lines_total")
            # the metrics requests themselves are logged too: at least n + 50 lines in all
            assert buffered + dropped >= n + 50
            # now read: what was buffered arrives, whole lines only
            os.set_blocking(rfd, True)
            data = b""
            end = time.time() + 20
            while data.count(b"\n") < buffered and time.time() < end:
                os.set_blocking(rfd, False)
                try:
                    chunk = os.read(rfd, 1 << 16)
                except BlockingIOError:
                    chunk = None
                if chunk:
                    data += chunk
                else:
                    time.sleep(0.05)
            lines = [json.loads(l) for l in data.decode().splitlines()]
            assert len(lines) >= buffered
            assert lines[0]["request_id"] == "q0"
            # stalled again, then SIGTERM: the writer blocked in write() does not keep the
            # daemon from exiting (it is given 2 s)
            for i in range(n):
                assert s.get(d.url("/healthz"), timeout=10).status_code == 200
            t = time.time()
            assert d.terminate(30) == 0
            assert time.time() - t < 15
            assert any('"access_log_flush_timeout"' in l for l in d.logs())
    finally:
        os.close(rfd)


def test_stderr_at_info_by_default_and_off_above_it():
    with Daemon() as d:
        assert requests.get(d.url("/healthz"), headers={"X-Request-Id": "dflt"},
                            timeout=30).status_code == 200
        end = time.time() + 10
        while time.time() < end and not any('"dflt"' in l for l in d.logs()):
            time.sleep(0.05)
        access = [json.loads(l) for l in d.logs() if '"event":"access"' in l]
        assert [a["request_id"] for a in access] == ["dflt"]
    with Daemon("--access-log", "") as d:  # off
        assert requests.get(d.url("/healthz"), timeout=30).status_code == 200
        time.sleep(0.3)
        assert not any('"access"' in l for l in d.logs())
        assert "recurd_access_log_lines_total" not in requests.get(d.url("/metrics"), timeout=30).text
    # at log_level warn, "-" (stderr) logs nothing: the daemon logs no "listening" line either,
    # so it gets a port of ours and is polled
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    p = subprocess.Popen([RECURD, "--config", "", "--port", str(port), "--log-level", "warn",
                          "--model-config", TINY_MODEL, "--model-seed", "7"], cwd=ROOT,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        end = time.time() + 20
        while True:
            try:
                r = requests.get("http://127.0.0.1:%d/healthz" % port, timeout=5)
                break
            except requests.ConnectionError:
                assert time.time() < end and p.poll() is None
                time.sleep(0.05)
        assert r.status_code == 200
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=30)[1].decode()
        assert p.returncode == 0 and '"access"' not in err, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_an_unusable_path_refuses_to_start(tmp_path):
    d = Daemon("--access-log", str(tmp_path / "no" / "such" / "dir" / "access.log"))
    try:
        d.start()
        raise AssertionError("recurd started")
    except RuntimeError:
        pass
    finally:
        d.kill()
    assert d.proc.wait(10) == 1
    assert any('"access_log_unusable"' in l for l in d.logs())
