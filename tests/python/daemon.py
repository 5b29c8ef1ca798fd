"""Start build/recurd for end-to-end tests: a free loopback port (--port 0, read back from the
JSON log line), a small seeded model (tests/fixtures/tiny_model.json), bounded in time, and
killed at teardown. Not a test module itself."""
import json
import os
import signal
import socket
import subprocess
import threading

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("RECUR_BUILD", os.path.join(ROOT, "build"))
RECURD = os.path.join(BUILD, "recurd")
TINY_MODEL = os.path.join(ROOT, "tests", "fixtures", "tiny_model.json")


def python_env(**extra):
    """The environment for a child /usr/bin/python3 that loads librecur: under SANITIZE=1
    (RECUR_SANITIZE=1) build-san/librecur.so needs the ASan runtime loaded first, as pytest itself
    had it (Makefile, SANITIZE); the interpreter's own leaks are not ours."""
    env = dict(os.environ, **extra)
    if os.environ.get("RECUR_SANITIZE") == "1":
        rt = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True,
                            text=True).stdout.strip()
        env.update(LD_PRELOAD=rt, ASAN_OPTIONS="detect_leaks=0")
    return env


def free_port():
    """A loopback port free at the time of the call, for a server that cannot take --port 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One recurd process. Use as a context manager, or call start() / stop()."""

    def __init__(self, *args, model_config=TINY_MODEL, seed=7, start_timeout=20.0):
        self.args = list(args)
        self.model_config = model_config
        self.seed = seed
        self.start_timeout = start_timeout
        self.proc = None
        self.port = None
        self.log_lines = []
        self._lock = threading.Lock()
        self._port_event = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    def start(self):
        cmd = [RECURD, "--config", "", "--host", "127.0.0.1", "--port", "0"]
        if self.model_config:
            cmd += ["--model-config", self.model_config, "--model-seed", str(self.seed)]
        cmd += self.args
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        if not self._port_event.wait(self.start_timeout):
            self.kill()
            raise RuntimeError("recurd did not log its port; log:\n" + "\n".join(self.log_lines))
        if self.port is None:
            raise RuntimeError("recurd exited at start; log:\n" + "\n".join(self.log_lines))
        return self

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lock:
                self.log_lines.append(line)
            if self.port is None:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if obj.get("event") == "listening" and "port" in obj:
                    self.port = int(obj["port"])
                    self._port_event.set()
        self._port_event.set()  # exited

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    @property
    def pid(self):
        return self.proc.pid

    def terminate(self, timeout=30.0):
        """SIGTERM and wait; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._reader.join(5)  # the last lines (e.g. "exit") are in logs() once terminate returns
        return code

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        """SIGTERM (kill if it hangs); then fail if a sanitizer reported anything (SANITIZE=1
        builds: point RECUR_BUILD at build-san)."""
        if self.proc and self.proc.poll() is None:
            try:
                self.terminate(10.0)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        if self.proc:
            self._reader.join(5)
        bad = [l for l in self.logs() if "Sanitizer" in l or "runtime error:" in l]
        if bad:
            raise AssertionError("sanitizer report from recurd:\n" + "\n".join(self.logs()[-60:]))

    def logs(self):
        with self._lock:
            return list(self.log_lines)

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def check_config(*flags):
    """recurd --check-config on the tiny seeded model with these flags: (exit code, its output)."""
    p = subprocess.run([RECURD, "--config", "", "--port", "0", "--model-config", TINY_MODEL, *flags,
                        "--check-config"], cwd=ROOT, capture_output=True, timeout=20)
    return p.returncode, p.stderr + p.stdout


def read_to_eof(sock):
    """Everything the peer sends until it closes the connection; closes sock."""
    data = bytearray()
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return bytes(data)
