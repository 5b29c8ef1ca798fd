"""build/recur-load against the real daemon (both modes) and against fake servers that prove
its checks can fail. Every subprocess is bounded by a timeout; the daemon is killed at teardown."""
import json
import os
import re
import socketserver
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from daemon import BUILD, RECURD, ROOT, Daemon

LOAD = os.path.join(BUILD, "recur-load")
MODEL_CONFIG = os.path.join(ROOT, "tests", "fixtures", "loadgen_model.json")

REPORT_FIELDS = [
    "tool", "config", "model", "ok", "exit_code", "aborted", "setup_error", "elapsed_s", "tokens",
    "tokens_per_s", "requests", "requests_per_s", "requests_sent", "requests_failed", "latency_ms",
    "ttfc_ms", "gap_ms", "status_counts", "errors_by_status", "check_failures", "checks",
    "failure_examples", "sessions", "server", "memory",
]
DIST_FIELDS = ["count", "mean", "p50", "p90", "p99", "p999", "max"]
CHECK_NAMES = ["status", "framing", "json", "count", "token", "pos", "logprob", "top",
               "tokens_seen", "transport"]
MEMORY_FIELDS = ["rss_metric", "state_metric", "samples", "scrape_errors", "rss_start", "rss_end",
                 "rss_max", "proc_rss_start", "proc_rss_end", "proc_rss_max", "state_bytes_end"]

pytestmark = pytest.mark.skipif(not os.path.exists(LOAD), reason="build/recur-load not built")


def run_load(args, json_path, timeout=90):
    cmd = [LOAD, "--json", str(json_path)] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    report = None
    if os.path.exists(json_path):
        with open(json_path) as f:
            report = json.load(f)
    return p, report


# ---------------------------------------------------------------- the real daemon

@pytest.fixture(scope="module")
def daemon():
    if not os.path.exists(RECURD):
        pytest.skip("build/recurd not built")
    with Daemon(model_config=MODEL_CONFIG, seed=7) as d:
        yield d


def assert_report_shape(report):
    for k in REPORT_FIELDS:
        assert k in report, f"report lacks {k}"
    for d in ("latency_ms", "ttfc_ms", "gap_ms"):
        for k in DIST_FIELDS:
            assert k in report[d], f"{d} lacks {k}"
    for k in CHECK_NAMES:
        assert k in report["checks"]
    for k in MEMORY_FIELDS:
        assert k in report["memory"], f"memory lacks {k}"
    for k in ("cpu_s", "cpu_us_per_request", "pid"):
        assert k in report["server"]
    for k in ("requested", "created", "deleted"):
        assert k in report["sessions"]


@pytest.mark.parametrize("mode,sse", [("tokens", False), ("generate", False), ("generate", True)])
def test_loadgen_against_recurd(daemon, tmp_path, mode, sse):
    out = tmp_path / f"{mode}.json"
    args = ["--port", daemon.port, "--sessions", 8, "--connections", 4, "--mode", mode,
            "--duration", 3 if sse else 5, "--max-tokens", 8, "--metrics-interval", 250,
            "--server-pid", daemon.proc.pid, "--max-time", 60, "--seed", 3] + (["--sse"] if sse else [])
    p, report = run_load(args, out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert report is not None
    assert_report_shape(report)
    assert report["ok"] is True and report["exit_code"] == 0
    assert report["check_failures"] == 0, report["failure_examples"]
    assert all(v == 0 for v in report["checks"].values())
    assert report["tokens"] > 0 and report["tokens_per_s"] > 0
    assert report["requests"] > 0 and report["latency_ms"]["count"] == report["requests"]
    assert report["latency_ms"]["p50"] <= report["latency_ms"]["p99"] <= report["latency_ms"]["max"]
    assert report["ttfc_ms"]["count"] > 0
    assert report["sessions"]["created"] == 8 and report["sessions"]["deleted"] == 8
    assert report["errors_by_status"] == {}
    assert report["model"]["vocab_size"] == 256
    samples = report["memory"]["samples"]
    assert len(samples) >= 5
    assert all(s["proc_rss_bytes"] and s["proc_rss_bytes"] > 0 for s in samples)
    if mode == "generate":
        assert report["gap_ms"]["count"] > 0
        assert report["tokens"] == 8 * report["requests"]
    else:
        assert report["tokens"] == report["requests"]


@pytest.mark.parametrize("sse", [False, True])
def test_loadgen_token_count_and_batches(daemon, tmp_path, sse):
    """--tokens N folds exactly N verified tokens, with several tokens per request."""
    out = tmp_path / "count.json"
    args = ["--port", daemon.port, "--sessions", 3, "--tokens", 600, "--batch", 7, "--top-k", 3,
            "--max-time", 60, "--metrics-interval", 0] + (["--sse"] if sse else [])
    p, report = run_load(args, out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert report["check_failures"] == 0, report["failure_examples"]
    assert report["tokens"] == 600
    assert report["config"]["sse"] is sse


def test_loadgen_session_reuse(daemon, tmp_path):
    """--session ID continues an existing session from its tokens_seen and keeps it."""
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{daemon.port}/v1/sessions",
                                 data=json.dumps({"tokens": [1, 2, 3]}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        sid = json.loads(r.read())["id"]
    p, report = run_load(["--port", daemon.port, "--session", sid, "--tokens", 50, "--batch", 5,
                          "--max-time", 60, "--metrics-interval", 0], tmp_path / "reuse.json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert report["tokens"] == 50 and report["sessions"]["deleted"] == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/v1/sessions/{sid}", timeout=10) as r:
        assert json.loads(r.read())["tokens_seen"] == 53


# ---------------------------------------------------------------- fake servers: the checker can fail

class FakeHandler(BaseHTTPRequestHandler):
    """Answers recurd's shapes; `skew` is added to every tokens_seen of /tokens answers."""
    protocol_version = "HTTP/1.1"
    skew = 0
    sessions = {}
    lock = threading.Lock()

    def log_message(self, *a):
        pass

    def _json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}") if n else {}

    def do_GET(self):
        if self.path == "/v1/model":
            self._json(200, {"name": "fake", "vocab_size": 256, "state_bytes": 1024, "n_layers": 1})
        elif self.path == "/metrics":
            body = b"process_resident_memory_bytes 1048576\nrecurd_state_bytes 4096\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"error": {"code": "not_found", "message": "no"}})

    def do_DELETE(self):
        self.send_response(204)
        self.end_headers()

    def do_POST(self):
        body = self._body()
        if self.path == "/v1/sessions":
            with self.lock:
                sid = "%032x" % (len(self.sessions) + 1)
                self.sessions[sid] = len(body.get("tokens", []))
            self._json(201, {"id": sid, "tokens_seen": self.sessions[sid], "state_bytes": 1024})
            return
        m = re.fullmatch(r"/v1/sessions/([0-9a-f]+)/tokens", self.path)
        if not m or m.group(1) not in self.sessions:
            self._json(404, {"error": {"code": "not_found", "message": "no"}})
            return
        sid = m.group(1)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        lp = -5.545177444479562  # uniform over 256
        lines = []
        for t in body["tokens"]:
            pos = self.sessions[sid]
            self.sessions[sid] += 1
            lines.append({"pos": pos, "token": t, "logprob": None if pos == 0 else lp,
                          "top": [{"token": 0, "logprob": lp}]})
        lines.append({"done": True, "tokens_seen": self.sessions[sid] + self.skew})
        for obj in lines:
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")


class FakeServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def fake_server():
    servers = []

    def start(skew):
        handler = type("H", (FakeHandler,), {"skew": skew, "sessions": {}, "lock": threading.Lock()})
        srv = FakeServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv.server_address[1]

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_loadgen_passes_a_correct_fake(fake_server, tmp_path):
    """The fake below is correct when skew is 0: the checks do not fail everything."""
    port = fake_server(0)
    p, report = run_load(["--port", port, "--sessions", 2, "--duration", 1, "--max-time", 30],
                         tmp_path / "good.json", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert report["check_failures"] == 0 and report["tokens"] > 0
    assert report["memory"]["rss_end"] == 1048576


def test_loadgen_detects_wrong_tokens_seen(fake_server, tmp_path):
    port = fake_server(1)  # every answer claims one token more than was folded
    p, report = run_load(["--port", port, "--sessions", 2, "--duration", 1, "--max-time", 30],
                         tmp_path / "bad.json", timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert report["ok"] is False
    assert report["checks"]["tokens_seen"] > 0
    assert report["check_failures"] > 0
    assert report["tokens"] == 0, "throughput must never count wrong answers"
    assert any("tokens_seen" in e for e in report["failure_examples"])
    assert "FAILED" in p.stdout


def test_loadgen_refuses_non_loopback(tmp_path):
    p = subprocess.run([LOAD, "--host", "192.0.2.1", "--duration", "1"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2
    assert "loopback" in p.stderr


def test_loadgen_unreachable_server_is_bounded(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    t0 = time.time()
    p, report = run_load(["--port", port, "--duration", 1, "--max-time", 10], tmp_path / "x.json",
                         timeout=30)
    assert p.returncode == 3
    assert report["setup_error"]
    assert time.time() - t0 < 15
