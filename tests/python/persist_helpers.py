"""Helpers shared by the persistence suites (test_persistence.py, test_durability_hardening.py):
a daemon with a state dir, session info, state download, metrics, log events, polling."""
import json
import time

import requests

from daemon import Daemon


def pd(state_dir, *args, **kw):
    """A daemon with persistence in state_dir."""
    return Daemon("--state-dir", str(state_dir), *args, **kw)


def info(d, sid):
    r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30)
    return r.json() if r.status_code == 200 else r.status_code


def get_state(d, sid):
    r = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def metrics(d):
    out = {}
    for line in requests.get(d.url("/metrics"), timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def events(d, name):
    """The daemon's JSON log lines whose event is name."""
    out = []
    for line in d.logs():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("event") == name:
            out.append(obj)
    return out


def wait_for(cond, timeout=10.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)
