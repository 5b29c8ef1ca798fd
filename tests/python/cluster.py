"""A recurd cluster for tests and benchmarks: Debian's nginx running the shipped
deploy/nginx/recurd.conf (its node list, listen address, log path and, on request, timeouts
rewritten for loopback) in front of recurd nodes. Not a test module itself.

nginx runs in the foreground under a temporary prefix (`-p DIR -c DIR/nginx.conf -e
DIR/error.log -g 'daemon off; pid DIR/nginx.pid;'`), on a free loopback port, with its access log
in DIR/access.log (the shipped `recurd_upstream` format: one line per request with the node(s)
that answered it). stop() ends it (SIGQUIT, then SIGKILL); every process is stopped at the end
even when a test fails."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import requests

from daemon import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHIPPED_CONF = os.path.join(ROOT, "deploy", "nginx", "recurd.conf")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def render_site_conf(text, node_ports, listen_port, access_log, overrides=None):
    """The shipped site file with its upstream servers replaced by node_ports (each server's
    parameters kept), its listen address by 127.0.0.1:listen_port, its access log by access_log,
    and each directive named in overrides ({"proxy_read_timeout": "2s", ...}) given that value.
    Refuses (ValueError) when a rewrite finds nothing to rewrite: a test never runs against a
    config that silently differs from the shipped one in some other way."""
    overrides = dict(overrides or {})

    def upstream(m):
        head, body, tail = m.group(1), m.group(2), m.group(3)
        servers = re.findall(r"^\s*server\s+\S+(.*);\s*$", body, re.M)
        if not servers:
            raise ValueError("upstream block without server lines")
        params = servers[0]
        body = re.sub(r"^\s*server\s+\S+.*;\s*\n", "", body, flags=re.M)
        lines = "".join("    server 127.0.0.1:%d%s;\n" % (p, params) for p in node_ports)
        return head + lines + body + tail

    out, n = re.subn(r"(upstream\s+\w+\s*\{\n(?:\s*(?:hash|least_conn)[^\n]*\n)?)(.*?)(\})",
                     upstream, text, flags=re.S)
    if n != 2:
        raise ValueError("expected 2 upstream blocks in the shipped config, found %d" % n)
    out, n = re.subn(r"^(\s*)listen\s+[^;]+;", r"\g<1>listen 127.0.0.1:%d;" % listen_port, out,
                     flags=re.M)
    if n != 1:
        raise ValueError("expected one listen directive, found %d" % n)
    out, n = re.subn(r"^(\s*)access_log\s+\S+\s+recurd_upstream;",
                     r"\g<1>access_log %s recurd_upstream;" % access_log, out, flags=re.M)
    if n != 1:
        raise ValueError("expected one access_log directive, found %d" % n)
    for name, value in overrides.items():
        out, n = re.subn(r"^(\s*%s)\s+[^;]+;" % re.escape(name), r"\g<1> %s;" % value, out,
                         flags=re.M)
        if n == 0:
            raise ValueError("directive %s is not in the shipped config" % name)
    return out


class Nginx:
    """Debian's nginx with the shipped recurd.conf in front of node_ports."""

    def __init__(self, node_ports, workdir, overrides=None, conf_text=None):
        self.node_ports = list(node_ports)
        self.dir = workdir
        self.overrides = overrides
        self.conf_text = conf_text  # the shipped file unless a test passes a variant
        self.port = None
        self.proc = None

    def start(self, timeout=20.0, port=None):
        """port: listen there (a restart on the same address), else a free port."""
        os.makedirs(self.dir, exist_ok=True)
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        self.port = port or free_port()
        self.access_log = os.path.join(self.dir, "access.log")
        self.error_log = os.path.join(self.dir, "error.log")
        text = self.conf_text
        if text is None:
            with open(SHIPPED_CONF) as f:
                text = f.read()
        site = render_site_conf(text, self.node_ports, self.port, self.access_log, self.overrides)
        with open(os.path.join(self.dir, "recurd.conf"), "w") as f:
            f.write(site)
        # As root, nginx would switch its worker to "nobody", which cannot enter the test's
        # temporary directory: keep the worker as the user running the test.
        user = "user root root;\n" if os.geteuid() == 0 else ""
        main = (user + "worker_processes 1;\n"
                "error_log %(d)s/error.log info;\n"
                "events { worker_connections 1024; }\n"
                "http {\n"
                "    client_body_temp_path %(d)s/body;\n"
                "    proxy_temp_path %(d)s/proxy;\n"
                "    fastcgi_temp_path %(d)s/fastcgi;\n"
                "    uwsgi_temp_path %(d)s/uwsgi;\n"
                "    scgi_temp_path %(d)s/scgi;\n"
                "    include %(d)s/recurd.conf;\n"
                "}\n") % {"d": self.dir}
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(main)
        argv = [NGINX, "-p", self.dir, "-c", self.conf, "-e", self.error_log,
                "-g", "daemon off; pid %s/nginx.pid;" % self.dir]
        check = subprocess.run(argv + ["-t"], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError("nginx -t refused the rendered config:\n" + check.stderr)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited at start:\n" + self.errors())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not listen in time:\n" + self.errors())

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def errors(self):
        try:
            with open(self.error_log) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def access_lines(self):
        """The access log as dicts: id (the X-Request-Id sent to the node), method, uri
        (session ids cut to 8 hex digits), status, upstreams (the node ports tried, in order),
        ustatus."""
        out = []
        try:
            with open(self.access_log) as f:
                lines = f.readlines()
        except OSError:
            return out
        for line in lines:
            m = re.search(r'id=(\S+) "(\S+) (\S+)" (\d+) \d+ upstream="([^"]*)" ustatus="([^"]*)"',
                          line)
            if not m:
                continue
            ups = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", m.group(5))]
            out.append({"id": m.group(1), "method": m.group(2), "uri": m.group(3),
                        "status": int(m.group(4)), "upstreams": ups, "ustatus": m.group(6),
                        "raw": line.rstrip("\n")})
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: the master waits for its worker
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def stop_all(ngx, nodes):
    """Stop nginx, then every node: SIGCONT first (a stopped node cannot take SIGTERM)."""
    if ngx:
        ngx.stop()
    for n in nodes:
        if n.proc and n.proc.poll() is None:
            try:
                os.kill(n.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        n.stop()


def wait_logged(ngx, predicate, timeout=5.0):
    """nginx writes an access-log line when a request ends: wait for one matching predicate."""
    deadline = time.monotonic() + timeout
    while True:
        hits = [l for l in ngx.access_lines() if predicate(l)]
        if hits or time.monotonic() > deadline:
            return hits
        time.sleep(0.05)


def routed_to_creator(ngx, nodes, per_node=1, tries=200):
    """Sessions created directly on each node whose id nginx's ring routes back to that node
    (without a shared store, the only sessions a by-id request through nginx can find):
    {node index: [ids]} with per_node ids each. Each candidate is probed with GET through nginx;
    the others are deleted."""
    found = {i: [] for i in range(len(nodes))}
    for _ in range(tries):
        if all(len(v) >= per_node for v in found.values()):
            return found
        for i, d in enumerate(nodes):
            if len(found[i]) >= per_node:
                continue
            node = "http://127.0.0.1:%d" % d.port  # a test's Daemon or a benchmark's Server
            r = requests.post(node + "/v1/sessions", timeout=30)
            assert r.status_code == 201, r.text
            sid = r.json()["id"]
            if requests.get(ngx.url("/v1/sessions/" + sid), timeout=30).status_code == 200:
                found[i].append(sid)
            else:
                requests.delete(node + "/v1/sessions/" + sid, timeout=30)
    raise AssertionError("the ring never routed %d ids to each node: %r" % (per_node, found))
