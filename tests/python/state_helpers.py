"""Helpers shared by test_prefix_cache.py, test_checkpoints.py and the state tests: session requests and their
streamed lines, on top of persist_helpers (metrics, info, the daemon with a state dir)."""
import json

import requests

TIMEOUT = 60


def post(d, path, body=None):
    """(status, JSON body or text) of a POST with a JSON body."""
    r = requests.post(d.url(path), data=None if body is None else json.dumps(body), timeout=TIMEOUT)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


def create(d, tokens, prefix_cache=True):
    """A new session prefilled with tokens; its 201 body."""
    body = {"tokens": list(tokens)}
    if prefix_cache:
        body["prefix_cache"] = True
    st, b = post(d, "/v1/sessions", body)
    assert st == 201, b
    return b


def lines(text):
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def fold(d, sid, tokens, **extra):
    """(token lines, done line) of POST /tokens."""
    body = dict({"tokens": list(tokens), "top_k": 5}, **extra)
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), data=json.dumps(body), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    ls = lines(r.text)
    assert ls[-1].get("done") is True, ls[-1]
    return ls[:-1], ls[-1]


def generate(d, sid, **body):
    """(token lines, done line) of POST /generate."""
    r = requests.post(d.url("/v1/sessions/%s/generate" % sid), data=json.dumps(body), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    ls = lines(r.text)
    assert ls[-1].get("done") is True, ls[-1]
    return ls[:-1], ls[-1]


def error_code(r):
    """The error code of a refused request (requests.Response)."""
    return r.json()["error"]["code"]
