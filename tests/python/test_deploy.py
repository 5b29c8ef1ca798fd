"""Deployment files (docs/OPERATIONS.md "systemd"): the shipped unit passes Debian's
`systemd-analyze verify` with nothing to say, and recurd speaks the sd_notify(3) protocol its
Type=notify needs: READY=1 once it listens, STOPPING=1 when SIGTERM starts the drain."""
import os
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
