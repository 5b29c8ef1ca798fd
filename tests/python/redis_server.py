"""A real redis-server (Debian's redis-server package) for tests: a free loopback port, its own
temp directory, AOF on with fsync of every write (appendfsync always), no RDB snapshots, bounded
in time and stopped at the end. restart() starts it again on the same port and directory (the
AOF brings the data back). Not a test module itself."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from daemon import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def _read_reply(f):
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise RuntimeError("unexpected reply %r" % line)


class RedisServer:
    """Use as a context manager, or start() / stop()."""

    def __init__(self, start_timeout=10.0, appendfsync="always"):
        self.appendfsync = appendfsync  # the benchmark compares "everysec" too
        self.dir = tempfile.mkdtemp(prefix="recurd-redis-")
        self.port = free_port()
        self.proc = None
        self.start_timeout = start_timeout

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def start(self):
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
               "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "",
               "--daemonize", "no", "--protected-mode", "yes", "--logfile", "redis.log"]
        self.proc = subprocess.Popen(cmd, cwd=self.dir, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited at start (code %s)" % self.proc.returncode)
            try:
                if self.command("PING") == "PONG":
                    return self
            except (OSError, RuntimeError):
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("redis-server did not answer PING")

    def command(self, *args):
        """One command on a fresh connection; the decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(_resp(*args))
            with s.makefile("rb") as f:
                return _read_reply(f)

    def kill(self):
        """kill -9 (what a crash does): AOF with fsync always keeps every acknowledged write."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self):
        self.kill()
        return self.start()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
