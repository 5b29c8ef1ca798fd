"""Deployment files (docs/OPERATIONS.md "systemd"): the shipped unit passes Debian's
`systemd-analyze verify` with nothing to say, and recurd speaks the sd_notify(3) protocol its
Type=notify needs: READY=1 once it listens, STOPPING=1 when SIGTERM starts the drain."""
import json
import os
import re
import shutil
import socket
import subprocess

import pytest
import requests

from daemon import ROOT, RECURD, Daemon

UNIT = os.path.join(ROOT, "deploy", "systemd", "recurd.service")


def verify(tmp_path, text):
    """systemd-analyze verify on text (the unit, its binary pointed at this build): (rc, output)."""
    path = tmp_path / "recurd.service"
    path.write_text(text.replace("/usr/local/bin/recurd", RECURD))
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True,
                       timeout=60)
    # lines about other units on this machine (not ours) are not the unit's fault
    ours = [l for l in (r.stdout + r.stderr).splitlines() if "recurd" in l]
    return r.returncode, ours


def test_systemd_unit_verifies_cleanly(tmp_path):
    assert shutil.which("systemd-analyze"), "make deps installs systemd"
    text = open(UNIT).read()
    rc, said = verify(tmp_path, text)
    assert rc == 0 and said == [], said
    # the check can fail: a misspelt directive is reported (verify still exits 0 for it)
    rc, said = verify(tmp_path, text.replace("KillMode=mixed", "KillMode=mixed\nTimeoutStopSecs=60"))
    assert any("TimeoutStopSecs" in l for l in said), said


def test_unit_waits_longer_than_the_drain():
    """TimeoutStopSec must cover drain_timeout_ms (default 30 s) + 3 s grace + the final writes."""
    lines = dict(l.split("=", 1) for l in open(UNIT).read().splitlines() if "=" in l and not l.startswith("#"))
    assert lines["Type"] == "notify"
    assert int(lines["TimeoutStopSec"]) >= 30 + 3 + 10


@pytest.mark.parametrize("abstract", [False, True])
def test_sd_notify_ready_then_stopping(tmp_path, monkeypatch, abstract):
    name = "@recurd-test-%d" % os.getpid() if abstract else str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name[1:] if abstract else name)
    sock.settimeout(20)
    monkeypatch.setenv("NOTIFY_SOCKET", name)
    with Daemon() as d:
        assert sock.recv(256) == b"READY=1"
        # ready means listening
        assert requests.get(d.url("/healthz"), timeout=10).status_code == 200
        assert d.terminate() == 0
    assert sock.recv(256) == b"STOPPING=1"
    sock.close()


def test_no_notify_socket_no_datagram(tmp_path, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    with Daemon() as d:
        assert requests.get(d.url("/healthz"), timeout=10).status_code == 200
        assert d.terminate() == 0
    assert not any("sd_notify_failed" in l for l in d.log_lines)


# ---------------------------------------------------------------------------- Docker
# No Docker engine here: the image's command line is run as the ENTRYPOINT spells it, paths
# mapped onto this checkout, with --check-config (validate, print the settings, never bind).

def docker_entrypoint(tmp_path):
    """The Dockerfile's ENTRYPOINT argv with /srv/recurd/... mapped into tmp_path / the build."""
    lines = open(os.path.join(ROOT, "Dockerfile")).read().splitlines()
    entry = json.loads([l for l in lines if l.startswith("ENTRYPOINT ")][-1][len("ENTRYPOINT "):])
    assert [l for l in lines if l.startswith("CMD ")][-1] == "CMD []", "settings belong in ENTRYPOINT"
    assert 'VOLUME ["/srv/recurd/state"]' in lines
    conf = json.load(open(os.path.join(ROOT, "config", "docker.json")))
    assert conf["state_dir"] == "/srv/recurd/state" and conf["host"] == "0.0.0.0"
    conf["model"] = os.path.join(ROOT, "models", "default")
    conf["state_dir"] = str(tmp_path / "state")
    (tmp_path / "docker.json").write_text(json.dumps(conf))
    mapped = {"/usr/local/bin/recurd": RECURD, "/srv/recurd/config/docker.json": str(tmp_path / "docker.json")}
    return [mapped.get(a, a) for a in entry]


def test_docker_flags_appended_keep_host_and_persistence(tmp_path):
    argv = docker_entrypoint(tmp_path) + ["--workers", "1", "--max-sessions", "500", "--check-config"]
    env = dict(os.environ, RECURD_API_KEY="k" * 32, OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    eff = json.loads(r.stdout)
    assert eff["host"] == "0.0.0.0" and eff["port"] == 8080
    assert eff["state_dir"] == str(tmp_path / "state")
    assert eff["workers"] == 1 and eff["max_sessions"] == 500
    assert eff["api_key"] == "(set)" and "k" * 32 not in r.stdout + r.stderr


def test_docker_without_key_refuses_instead_of_falling_back(tmp_path):
    argv = docker_entrypoint(tmp_path) + ["--check-config"]
    env = {k: v for k, v in os.environ.items() if k != "RECURD_API_KEY"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "refusing_insecure_bind" in r.stderr
    assert r.stdout == ""


def test_dockerignore_keeps_outputs_out():
    ignored = open(os.path.join(ROOT, ".dockerignore")).read().split()
    for must in (".git", "build/", "build-san/", "build-fuzz/", "**/node_modules/"):
        assert must in ignored


def test_version_flag():
    r = subprocess.run([RECURD, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and re.fullmatch(r"recurd \d+\.\d+\.\d+\n", r.stdout)
