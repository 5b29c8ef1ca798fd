"""End-to-end tests of recurd's HTTP API (docs/DESIGN.md §5) against the real daemon on loopback."""
import contextlib
import json
import os
import random
import re
import socket
import subprocess
import threading
import time

import pytest
import requests

from daemon import Daemon, RECURD, ROOT, TINY_MODEL, read_to_eof
from session_helpers import info

JSON = {"Content-Type": "application/json"}
TOL = 1e-4


# ---------------------------------------------------------------------------- fixtures / helpers

@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def create(d, tokens=None, text=None, expect=201):
    body = {}
    if tokens is not None:
        body["tokens"] = tokens
    if text is not None:
        body["text"] = text
    r = requests.post(d.url("/v1/sessions"), json=body if body else None, timeout=30)
    assert r.status_code == expect, r.text
    return r.json()


def parse_lines(text):
    lines = [json.loads(x) for x in text.split("\n") if x]
    return lines


def fold(d, sid, tokens, top_k=None, session=None):
    body = {"tokens": tokens}
    if top_k is not None:
        body["top_k"] = top_k
    r = (session or requests).post(d.url("/v1/sessions/%s/tokens" % sid), json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    lines = parse_lines(r.text)
    assert lines[-1]["done"] is True
    return lines[:-1], lines[-1]


def generate(d, sid, session=None, **params):
    r = (session or requests).post(d.url("/v1/sessions/%s/generate" % sid), json=params, timeout=60)
    assert r.status_code == 200, r.text
    lines = parse_lines(r.content.decode("utf-8"))  # streams are UTF-8 (no charset to guess from)
    assert lines[-1]["done"] is True
    return lines[:-1], lines[-1]


def error_of(r, status, code=None):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


def next_logprobs(d, sid, probe=(65, 66)):
    """Fold probe tokens into a *fork* of sid and return their logprobs (sid is unchanged)."""
    r = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30)
    assert r.status_code == 201, r.text
    fid = r.json()["id"]
    lines, _ = fold(d, fid, list(probe), top_k=5)
    requests.delete(d.url("/v1/sessions/%s" % fid), timeout=30)
    return [(l["logprob"], [(t["token"], t["logprob"]) for t in l["top"]]) for l in lines]


def assert_close_lines(a, b, tol=TOL):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x["pos"] == y["pos"] and x["token"] == y["token"]
        if x["logprob"] is None or y["logprob"] is None:
            assert x["logprob"] is None and y["logprob"] is None
        else:
            assert abs(x["logprob"] - y["logprob"]) <= tol, (x, y)
        assert len(x["top"]) == len(y["top"])
        for p, q in zip(x["top"], y["top"]):
            assert abs(p["logprob"] - q["logprob"]) <= tol, (p, q)


def assert_close_probes(a, b, tol=TOL):
    for (lp1, top1), (lp2, top2) in zip(a, b):
        assert abs(lp1 - lp2) <= tol, (lp1, lp2)
        for (t1, v1), (t2, v2) in zip(top1, top2):
            assert abs(v1 - v2) <= tol


def rand_tokens(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(256) for _ in range(n)]


# ---------------------------------------------------------------------------- basic endpoints

def test_healthz(d):
    r = requests.get(d.url("/healthz"), timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_model_info(d):
    r = requests.get(d.url("/v1/model"), timeout=10)
    assert r.status_code == 200
    m = r.json()
    assert m["name"] == "e2e-tiny-seed7"  # seeded weights are not a trained "e2e-tiny"
    assert m["vocab_size"] == 256 and m["d_model"] == 64 and m["n_layers"] == 2
    assert m["n_heads"] == 2
    assert m["mixers"] == ["gated_deltanet", "gated_deltanet"]
    assert m["state_bytes"] == 2 * 2 * 32 * 32 * 4
    # a seeded model is fp32 in memory: at least 4 bytes per parameter (panels padded to 16 rows)
    assert m["weights_dtype"] == "F32" and 4 * m["n_params"] <= m["weight_bytes"] < 5 * m["n_params"]
    # the kernel path (RECUR_ISA forces one; test_cli checks detection and refusal)
    assert m["isa"] == (os.environ.get("RECUR_ISA") or m["isa"]) and m["isa"] in ("avx512", "avx2", "portable")


def test_model_info_half_weights_stay_half():
    """The shipped F16 model is held as F16: under 2.2 bytes per parameter (norms and the
    embedding table stay fp32)."""
    with Daemon("--model", os.path.join(ROOT, "models", "default"), model_config=None) as d:
        m = requests.get(d.url("/v1/model"), timeout=10).json()
        assert m["weights_dtype"] == "F16" and m["weight_bytes"] < 2.2 * m["n_params"]


def test_create_get_delete(d):
    a = create(d)
    b = create(d)
    for s in (a, b):
        assert re.fullmatch(r"[0-9a-f]{32}", s["id"])
        assert s["tokens_seen"] == 0 and s["state_bytes"] > 0
    assert a["id"] != b["id"]
    assert info(d, a["id"])["tokens_seen"] == 0
    r = requests.delete(d.url("/v1/sessions/%s" % a["id"]), timeout=10)
    assert r.status_code == 204 and r.content == b""
    error_of(requests.get(d.url("/v1/sessions/%s" % a["id"]), timeout=10), 404, "session_not_found")
    error_of(requests.delete(d.url("/v1/sessions/%s" % a["id"]), timeout=10), 404)
    assert info(d, b["id"])["tokens_seen"] == 0


def test_create_with_prefill(d):
    s = create(d, tokens=[1, 2, 3, 4])
    assert s["tokens_seen"] == 4
    t = create(d, text="hello, world")
    assert t["tokens_seen"] == 12
    # the text is its bytes: the same state as the byte tokens
    u = create(d, tokens=list(b"hello, world"))
    assert_close_probes(next_logprobs(d, t["id"]), next_logprobs(d, u["id"]))


def test_unknown_session_everywhere(d):
    sid = "0" * 32
    for method, path in [("GET", ""), ("DELETE", ""), ("POST", "/tokens"), ("POST", "/generate"),
                         ("POST", "/fork"), ("GET", "/state"), ("PUT", "/state")]:
        kw = {}
        if path == "/tokens":
            kw["json"] = {"tokens": [1]}
        if method == "PUT":
            kw["data"] = b"x"
            kw["headers"] = {"Content-Type": "application/octet-stream"}
        r = requests.request(method, d.url("/v1/sessions/%s%s" % (sid, path)), timeout=10, **kw)
        error_of(r, 404)
    error_of(requests.get(d.url("/v1/sessions/not-an-id"), timeout=10), 404)


def test_404_and_405(d):
    error_of(requests.get(d.url("/nope"), timeout=10), 404, "not_found")
    error_of(requests.get(d.url("/v1/nope"), timeout=10), 404, "not_found")
    s = create(d)
    error_of(requests.get(d.url("/v1/sessions/%s/bogus" % s["id"]), timeout=10), 404)
    r = requests.delete(d.url("/v1/model"), timeout=10)
    error_of(r, 405, "method_not_allowed")
    assert "GET" in r.headers.get("Allow", "")
    error_of(requests.get(d.url("/v1/sessions"), timeout=10), 405)
    error_of(requests.get(d.url("/v1/sessions/%s/tokens" % s["id"]), timeout=10), 405)
    error_of(requests.post(d.url("/v1/sessions/%s/state" % s["id"]), timeout=10), 405)
    error_of(requests.post(d.url("/healthz"), timeout=10), 405)



def test_allow_lists_every_method_of_the_path(d):
    """405's Allow names exactly the methods the route table has for the path (routes.c)."""
    s = create(d)
    base = "/v1/sessions/%s" % s["id"]
    # every GET route answers HEAD too, and every known path OPTIONS (issue 15)
    for method, path, allow in [("PATCH", base, "GET, HEAD, DELETE, OPTIONS"),
                                ("POST", base + "/", "GET, HEAD, DELETE, OPTIONS"),
                                ("DELETE", base + "/state", "GET, HEAD, PUT, OPTIONS"),
                                ("PUT", base + "/tokens", "POST, OPTIONS"),
                                ("GET", base + "/fork", "POST, OPTIONS"),
                                ("GET", "/v1/sessions/", "POST, OPTIONS"),
                                ("POST", "/metrics", "GET, HEAD, OPTIONS")]:
        r = requests.request(method, d.url(path), timeout=10)
        e = error_of(r, 405, "method_not_allowed")
        assert r.headers["Allow"] == allow, (method, path, r.headers)
        assert e["message"] == "method not allowed; allowed: " + allow
    # a trailing slash names the same resource for the session and the collection only
    assert requests.get(d.url(base + "/"), timeout=10).json()["id"] == s["id"]
    error_of(requests.get(d.url("/v1/model/"), timeout=10), 404, "not_found")
    error_of(requests.post(d.url(base + "/tokens/"), json={"tokens": [1]}, timeout=10), 404,
             "not_found")
    error_of(requests.get(d.url("/v1/sessions/" + "a" * 65), timeout=10), 404, "not_found")
    error_of(requests.get(d.url("/v1/sessions//state"), timeout=10), 404, "not_found")
    # the resource comes first on every session route: 404 before 422, fork included
    error_of(requests.post(d.url("/v1/sessions/%s/fork" % ("0" * 32)), data=b"[1]",
                           headers={"Content-Type": "application/json"}, timeout=10), 404,
             "session_not_found")

# ---------------------------------------------------------------------------- folding tokens

def test_tokens_lines(d):
    s = create(d)
    toks = [10, 20, 30]
    lines, done = fold(d, s["id"], toks)
    assert [l["pos"] for l in lines] == [0, 1, 2]
    assert [l["token"] for l in lines] == toks
    assert lines[0]["logprob"] is None  # the session's very first token
    for l in lines:
        assert len(l["top"]) == 5
        lps = [t["logprob"] for t in l["top"]]
        assert lps == sorted(lps, reverse=True)
        assert all(lp <= 0 for lp in lps)
    for l in lines[1:]:
        assert l["logprob"] <= 0
    assert done == {"done": True, "tokens_seen": 3}
    # logprob of token i+1 is consistent with line i's prediction when it is in the top list
    lines2, _ = fold(d, s["id"], [lines[-1]["top"][0]["token"]], top_k=0)
    assert abs(lines2[0]["logprob"] - lines[-1]["top"][0]["logprob"]) <= 1e-5
    assert lines2[0]["top"] == [] and lines2[0]["pos"] == 3
    assert info(d, s["id"])["tokens_seen"] == 4


def test_tokens_text_and_top_k(d):
    s = create(d)
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), json={"text": "ab", "top_k": 64},
                      timeout=10)
    assert r.status_code == 200
    lines = parse_lines(r.text)
    assert [l["token"] for l in lines[:-1]] == [97, 98]
    assert all(len(l["top"]) == 64 for l in lines[:-1])
    assert lines[-1]["tokens_seen"] == 2
    # empty list folds nothing
    lines, done = fold(d, s["id"], [])
    assert lines == [] and done["tokens_seen"] == 2


def test_token_by_token_equals_one_request(d):
    toks = rand_tokens(300, 1)  # crosses a prefill slice boundary (256)
    a = create(d)
    bulk, done = fold(d, a["id"], toks)
    assert done["tokens_seen"] == 300
    b = create(d)
    single = []
    with requests.Session() as http:
        for t in toks:
            lines, _ = fold(d, b["id"], [t], session=http)
            single += lines
    assert_close_lines(bulk, single)
    # mixed request sizes give the same too
    c = create(d)
    mixed = []
    i = 0
    for n in [1, 2, 7, 1, 100, 189]:
        lines, _ = fold(d, c["id"], toks[i:i + n])
        mixed += lines
        i += n
    assert i == 300
    assert_close_lines(bulk, mixed)


def test_sessions_are_isolated(d):
    toks = rand_tokens(20, 2)
    solo = create(d)
    ref, _ = fold(d, solo["id"], toks)
    a = create(d)
    b = create(d, tokens=rand_tokens(50, 3))
    got = []
    for i, t in enumerate(toks):  # interleave a with another session's traffic
        lines, _ = fold(d, a["id"], [t])
        got += lines
        fold(d, b["id"], rand_tokens(3, 100 + i))
    assert_close_lines(ref, got)
    # a different history gives different predictions
    pa = next_logprobs(d, a["id"])
    pb = next_logprobs(d, b["id"])
    assert abs(pa[0][0] - pb[0][0]) > 1e-6


# ---------------------------------------------------------------------------- validation

def test_invalid_token_in_the_middle_folds_nothing(d):
    s = create(d, tokens=[5, 6, 7])
    before = next_logprobs(d, s["id"])
    for bad in ["256", "-1", "1.5", '"3"', "null", "true", "[1]", '{"a":1}', "1e400", "3e9",
                "-0.5", "255.0000001"]:
        r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), headers=JSON,
                          data='{"tokens":[1,2,%s,4]}' % bad, timeout=10)
        e = error_of(r, 422, "invalid_token")
        assert "tokens[2]" in e["message"]
        assert info(d, s["id"])["tokens_seen"] == 3
    # Infinity / NaN literals are not JSON at all
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), headers=JSON,
                      data='{"tokens":[1, NaN]}', timeout=10)
    error_of(r, 400, "invalid_json")
    assert info(d, s["id"])["tokens_seen"] == 3
    assert_close_probes(before, next_logprobs(d, s["id"]), tol=0)
    # an integral float is an integer
    lines, done = fold(d, s["id"], [1.0, 2])
    assert [l["token"] for l in lines] == [1, 2] and done["tokens_seen"] == 5


def test_bad_text_token_for_small_vocab(tmp_path):
    cfg = json.load(open(TINY_MODEL))
    cfg["vocab_size"] = 100
    path = str(tmp_path / "vocab100.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    with Daemon(model_config=path) as d:
        r = requests.post(d.url("/v1/sessions"), json={"text": "az"}, timeout=10)  # 'z' = 122
        error_of(r, 422, "invalid_token")
        r = requests.post(d.url("/v1/sessions"), json={"tokens": [99, 100]}, timeout=10)
        error_of(r, 422, "invalid_token")
        body = requests.get(d.url("/metrics"), timeout=10).text
        assert re.search(r"^recurd_sessions 0$", body, re.M)


def test_wrong_types_name_the_field(d):
    s = create(d)
    u = d.url("/v1/sessions/%s/tokens" % s["id"])
    cases = [
        ({"tokens": 5}, "invalid_tokens"),
        ({"tokens": "abc"}, "invalid_tokens"),
        ({"text": 5}, "invalid_text"),
        ({"text": ["a"]}, "invalid_text"),
        ({"tokens": [1], "top_k": "5"}, "invalid_top_k"),
        ({"tokens": [1], "top_k": 65}, "invalid_top_k"),
        ({"tokens": [1], "top_k": -1}, "invalid_top_k"),
        ({"tokens": [1], "text": "a"}, "conflicting_fields"),
        ({"top_k": 3}, "missing_tokens"),
        ({"tokens": [1], "extra": 1}, "unknown_field"),
        ({"Tokens": [1]}, "unknown_field"),  # keys are case-sensitive
    ]
    for body, code in cases:
        error_of(requests.post(u, json=body, timeout=10), 422, code)
    g = d.url("/v1/sessions/%s/generate" % s["id"])
    for body, code in [
        ({"max_tokens": -1}, "invalid_max_tokens"),
        ({"max_tokens": 2.5}, "invalid_max_tokens"),
        ({"max_tokens": "3"}, "invalid_max_tokens"),
        ({"temperature": "hot"}, "invalid_temperature"),
        ({"temperature": -0.5}, "invalid_temperature"),
        ({"top_p": 0}, "invalid_top_p"),
        ({"top_p": 1.5}, "invalid_top_p"),
        ({"top_k": -2}, "invalid_top_k"),
        ({"seed": 1.5}, "invalid_seed"),
        ({"seed": -1}, "invalid_seed"),
        ({"stop": 5}, "invalid_stop"),
        ({"stop": [""]}, "invalid_stop"),
        ({"stop": ["x"] * 17}, "invalid_stop"),
        ({"bogus": 1}, "unknown_field"),
    ]:
        error_of(requests.post(g, json=body, timeout=10), 422, code)
    assert info(d, s["id"])["tokens_seen"] == 0


def test_malformed_json(d):
    s = create(d, tokens=[1])
    u = d.url("/v1/sessions/%s/tokens" % s["id"])
    for raw in ['{"tokens": [1,2', '{"tokens": [1]} x', "nope", "", '{"tokens":[1],}',
                b'{"text": "\xff\xfe"}'.decode("latin-1"),  # JSON text must be UTF-8
                b'{"text": "\xed\xa0\x80"}'.decode("latin-1")]:  # a surrogate
        r = requests.post(u, data=raw.encode("latin-1"), headers=JSON, timeout=10)
        error_of(r, 400, "invalid_json")
    error_of(requests.post(u, data='{"tokens":[1],"tokens":[2]}', headers=JSON, timeout=10), 400,
             "duplicate_key")
    error_of(requests.post(u, data='{"a":{"b":1,"b":2}}', headers=JSON, timeout=10), 400,
             "duplicate_key")
    error_of(requests.post(u, data='[1,2,3]', headers=JSON, timeout=10), 422, "invalid_body")
    error_of(requests.post(d.url("/v1/sessions"), data="{", headers=JSON, timeout=10), 400,
             "invalid_json")
    assert info(d, s["id"])["tokens_seen"] == 1


def test_content_type_415(d):
    s = create(d)
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), data='{"tokens":[1]}',
                      headers={"Content-Type": "text/html"}, timeout=10)
    error_of(r, 415, "unsupported_media_type")
    # text/plain is a browser's label for fetch(url, {body: JSON.stringify(x)}): JSON (issue 15)
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), data='{"tokens":[1]}',
                      headers={"Content-Type": "text/plain"}, timeout=10)
    assert r.status_code == 200
    r = requests.put(d.url("/v1/sessions/%s/state" % s["id"]), data=b"xx",
                     headers={"Content-Type": "application/json"}, timeout=10)
    error_of(r, 415)
    # curl's default label for -d / --data-binary is accepted (README examples use it)
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), data='{"tokens":[1]}',
                      headers={"Content-Type": "application/x-www-form-urlencoded"}, timeout=10)
    assert r.status_code == 200
    # parameters are fine
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), data='{"tokens":[1]}',
                      headers={"Content-Type": "application/json; charset=utf-8"}, timeout=10)
    assert r.status_code == 200
    assert info(d, s["id"])["tokens_seen"] == 3  # the text/plain, the curl-labelled and the application/json folds


def test_body_too_large_413(d):
    s = create(d)
    r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), headers=JSON,
                      data=b'{"tokens":[' + b"1," * 600000 + b"1]}", timeout=30)
    assert r.status_code == 413
    assert info(d, s["id"])["tokens_seen"] == 0


def _raw(port, data, wait=None, timeout=10):
    """Send raw bytes, optionally pause, return everything the server sends until it closes
    (or the first complete response head + body when it keeps the connection)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(data)
    if wait:
        time.sleep(wait)
    out = bytearray()
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
            head, sep, rest = bytes(out).partition(b"\r\n\r\n")
            m = re.search(rb"content-length: *(\d+)", head, re.I)
            if sep and m and len(rest) >= int(m.group(1)):
                break
    except socket.timeout:
        pass
    sock.close()
    return bytes(out)


def test_http_limits_414_431_408():
    with Daemon("--header-timeout-ms", "300") as d:
        r = _raw(d.port, b"GET /v1/model?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert r.startswith(b"HTTP/1.1 414"), r[:80]
        r = _raw(d.port, b"GET /v1/model HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20000 + b"\r\n\r\n")
        assert r.startswith(b"HTTP/1.1 431"), r[:80]
        r = _raw(d.port, b"GET /v1/model HTTP/1.1\r\nHost: x\r\n", wait=0.8)
        assert r.startswith(b"HTTP/1.1 408"), r[:80]
        body = r.partition(b"\r\n\r\n")[2]
        assert json.loads(body)["error"]["code"]
        r = _raw(d.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert r.startswith(b"HTTP/1.1 200")


def test_limits_name_the_limit():
    with Daemon("--max-tokens-per-request", "16", "--max-sessions", "3") as d:
        s = create(d)
        r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), json={"tokens": [1] * 17},
                          timeout=10)
        e = error_of(r, 422, "too_many_tokens")
        assert "max_tokens_per_request" in e["message"]
        r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), json={"text": "x" * 17},
                          timeout=10)
        error_of(r, 422, "too_many_tokens")
        r = requests.post(d.url("/v1/sessions"), json={"tokens": [1] * 17}, timeout=10)
        error_of(r, 422, "too_many_tokens")
        fold(d, s["id"], [1] * 16)
        r = requests.post(d.url("/v1/sessions/%s/generate" % s["id"]), json={"max_tokens": 17},
                          timeout=10)
        e = error_of(r, 422, "too_many_tokens")
        assert "max_tokens_per_request" in e["message"]
        assert info(d, s["id"])["tokens_seen"] == 16
        # max_sessions -> 503 with Retry-After, for create and fork
        create(d)
        create(d)
        r = requests.post(d.url("/v1/sessions"), timeout=10)
        e = error_of(r, 503, "max_sessions")
        assert "max_sessions" in e["message"] and r.headers.get("Retry-After")
        r = requests.post(d.url("/v1/sessions/%s/fork" % s["id"]), timeout=10)
        error_of(r, 503, "max_sessions")
        assert r.headers.get("Retry-After")
        requests.delete(d.url("/v1/sessions/%s" % s["id"]), timeout=10)
        create(d)


def test_generate_needs_context_409(d):
    s = create(d)
    error_of(requests.post(d.url("/v1/sessions/%s/generate" % s["id"]), json={}, timeout=10),
             409, "no_context")
    assert info(d, s["id"])["tokens_seen"] == 0


def test_queued_ops_limit_429():
    with Daemon("--max-queued-ops-per-session", "1") as d:
        s = create(d, tokens=[1, 2, 3])
        with requests.post(d.url("/v1/sessions/%s/generate" % s["id"]),
                           json={"max_tokens": 8192, "temperature": 0}, stream=True,
                           timeout=30) as g:
            assert g.status_code == 200
            it = g.iter_lines()
            next(it)
            r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), json={"tokens": [1]},
                              timeout=10)
            e = error_of(r, 429, "max_queued_ops_per_session")
            assert "max_queued_ops_per_session" in e["message"]
        # the stream was abandoned; the session settles and accepts requests again
        deadline = time.time() + 10
        while time.time() < deadline:
            r = requests.get(d.url("/v1/sessions/%s" % s["id"]), timeout=10)
            if r.status_code == 200 and r.json()["pending_ops"] == 0:
                break
            time.sleep(0.05)
        fold(d, s["id"], [1])


def test_api_key():
    with Daemon("--api-key", "s3cret-key") as d:
        assert requests.get(d.url("/healthz"), timeout=10).status_code == 200
        r = requests.get(d.url("/v1/model"), timeout=10)
        error_of(r, 401, "unauthorized")
        assert r.headers.get("WWW-Authenticate", "").startswith("Bearer")
        for h in ["Bearer wrong", "Bearer s3cret-ke", "Bearer s3cret-keyy", "Basic s3cret-key",
                  "s3cret-key"]:
            error_of(requests.get(d.url("/v1/model"), headers={"Authorization": h}, timeout=10), 401)
        # rejected before the body is used: a malformed body still gets 401
        r = requests.post(d.url("/v1/sessions"), data="{", headers=JSON, timeout=10)
        error_of(r, 401)
        ok = {"Authorization": "Bearer s3cret-key"}
        assert requests.get(d.url("/v1/model"), headers=ok, timeout=10).status_code == 200
        r = requests.post(d.url("/v1/sessions"), headers=ok, timeout=10)
        assert r.status_code == 201
        body = requests.get(d.url("/metrics"), timeout=10).text
        assert re.search(r"^recurd_sessions 1$", body, re.M)
        assert "s3cret" not in "\n".join(d.logs())


def test_refuses_public_bind_without_key():
    p = subprocess.run([RECURD, "--config", "", "--host", "0.0.0.0", "--port", "0",
                        "--model-config", TINY_MODEL], cwd=ROOT, capture_output=True, timeout=20)
    assert p.returncode == 2
    assert b"refusing_insecure_bind" in p.stderr


def test_help_lists_every_flag():
    p = subprocess.run([RECURD, "--help"], capture_output=True, timeout=10)
    assert p.returncode == 0
    out = p.stdout.decode()
    cfg = json.load(open(os.path.join(ROOT, "config", "recurd.json")))
    for key in cfg:
        assert "--" + key.replace("_", "-") in out, key
    for flag in ["--config", "--host", "--port", "--model", "--model-config", "--model-seed",
                 "--state-dir", "--api-key", "--workers", "--max-tokens-per-request",
                 "--max-sessions", "--idle-ttl-ms", "--max-queued-ops-per-session",
                 "--drain-timeout-ms", "--max-body", "--header-timeout-ms"]:
        assert flag in out, flag
    p = subprocess.run([RECURD, "--config", "", "--no-such-flag", "1"], capture_output=True,
                       timeout=10)
    assert p.returncode == 2


# ---------------------------------------------------------------------------- generation

def test_generate_ndjson(d):
    s = create(d, text="The ")
    lines, done = generate(d, s["id"], max_tokens=7, seed=3)
    assert len(lines) == 7
    assert [l["pos"] for l in lines] == list(range(4, 11))
    for l in lines:
        assert set(l) == {"pos", "token", "text", "logprob"}
        assert 0 <= l["token"] < 256 and l["logprob"] <= 0 and isinstance(l["text"], str)
    assert done == {"done": True, "reason": "length", "tokens_seen": 11}
    assert info(d, s["id"])["tokens_seen"] == 11
    # max_tokens 0 folds nothing
    lines, done = generate(d, s["id"], max_tokens=0)
    assert lines == [] and done["reason"] == "length" and done["tokens_seen"] == 11


def test_generate_is_reproducible_and_logprobs_match_fold(d):
    a = create(d, text="seed")
    fa = requests.post(d.url("/v1/sessions/%s/fork" % a["id"]), timeout=10).json()
    la, _ = generate(d, a["id"], max_tokens=20, seed=42, temperature=0.8, top_k=40, top_p=0.95)
    lb, _ = generate(d, fa["id"], max_tokens=20, seed=42, temperature=0.8, top_k=40, top_p=0.95)
    assert [l["token"] for l in la] == [l["token"] for l in lb]
    # the reported logprob is the model's: folding the same tokens reports the same values
    c = create(d, text="seed")
    lc, _ = fold(d, c["id"], [l["token"] for l in la])
    for g, f in zip(la, lc):
        assert abs(g["logprob"] - f["logprob"]) <= TOL


def test_generate_greedy_and_stop(d):
    s = create(d, text="abc")
    f = requests.post(d.url("/v1/sessions/%s/fork" % s["id"]), timeout=10).json()
    lines, done = generate(d, s["id"], max_tokens=12, temperature=0)
    toks = [l["token"] for l in lines]
    # greedy = the top-1 of each position
    c = create(d, text="abc")
    folded, _ = fold(d, c["id"], toks, top_k=1)
    first = next_logprobs(d, f["id"], probe=(toks[0],))
    for i in range(1, len(toks)):
        assert folded[i - 1]["top"][0]["token"] == toks[i]
    # stop: a byte string the greedy run produces at position 5..6 stops the same run there
    stop = bytes(toks[5:7]).decode("latin-1")
    raw = bytes(toks[5:7])
    lines2, done2 = generate(d, f["id"], max_tokens=12, temperature=0,
                             stop=[raw.decode("utf-8", "replace")] if _is_utf8(raw) else [])
    if _is_utf8(raw):
        assert done2["reason"] == "stop"
        got = [l["token"] for l in lines2]
        assert got == toks[:len(got)]
        assert bytes(got).endswith(raw)
    else:
        assert done2["reason"] == "length"
    del stop, first


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return 0 not in b
    except UnicodeDecodeError:
        return False


def test_generate_text_is_utf8(d):
    s = create(d, text="x")
    lines, _ = generate(d, s["id"], max_tokens=64, seed=9, temperature=1.5)
    text = "".join(l["text"] for l in lines)
    text.encode("utf-8")  # valid
    ascii_only = [l for l in lines if l["token"] < 128]
    for l in ascii_only:  # an ASCII byte completes its own text (after a U+FFFD, if it
        assert l["text"] in (chr(l["token"]), "\ufffd" + chr(l["token"]))  # broke a sequence)


def test_generate_sse(d):
    s = create(d, text="sse")
    r = requests.post(d.url("/v1/sessions/%s/generate" % s["id"]), json={"max_tokens": 4, "seed": 1},
                      headers={"Accept": "text/event-stream"}, timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = [e for e in r.content.decode("utf-8").split("\n\n") if e]  # SSE is UTF-8
    # "id: <pos>" / "id: done" then "data: {...}" (issue 10 item 17); [DONE] has no id of its own
    assert all(e.startswith("id: ") and "\ndata: " in e for e in events[:-1])
    assert events[-1] == "data: [DONE]"
    objs = [json.loads(e.split("\ndata: ", 1)[1]) for e in events[:-1]]
    assert len(objs) == 5 and objs[-1]["reason"] == "length" and objs[-1]["tokens_seen"] == 7
    # identical objects to the NDJSON stream with the same seed
    t = create(d, text="sse")
    lines, done = generate(d, t["id"], max_tokens=4, seed=1)
    assert lines + [done] == objs


def test_streaming_with_curl(d):
    s = create(d, text="curl")
    p = subprocess.run(["curl", "-sS", "-N", "-X", "POST", "-H", "Content-Type: application/json",
                        "-H", "Accept: text/event-stream", "-d", '{"max_tokens":5,"seed":2}',
                        d.url("/v1/sessions/%s/generate" % s["id"])],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    events = [e for e in p.stdout.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and len(events) == 7
    p = subprocess.run(["curl", "-sS", "-N", "-i", "-X", "POST", "-H",
                        "Content-Type: application/json", "-d", '{"tokens":[1,2,3]}',
                        d.url("/v1/sessions/%s/tokens" % s["id"])], capture_output=True, timeout=30)
    out = p.stdout.decode()
    assert "Transfer-Encoding: chunked" in out or "transfer-encoding: chunked" in out.lower()
    body = out.split("\r\n\r\n", 1)[1]
    lines = parse_lines(body)
    assert lines[-1] == {"done": True, "tokens_seen": 12}


def test_readme_curl_flow(d, tmp_path):
    """The README's curl lines, verbatim in shape: -d without a Content-Type, --data-binary."""
    def curl(*args):
        p = subprocess.run(["curl", "-sS", "-N"] + list(args), capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return p.stdout
    s = json.loads(curl("-XPOST", d.url("/v1/sessions"), "-d", '{"text":"Hello, "}'))
    sid = s["id"]
    lines = parse_lines(curl("-XPOST", d.url("/v1/sessions/%s/tokens" % sid), "-d",
                             '{"text":"world"}').decode())
    assert lines[-1] == {"done": True, "tokens_seen": 12}
    blob = str(tmp_path / "s.bin")
    curl(d.url("/v1/sessions/%s/state" % sid), "-o", blob)
    other = json.loads(curl("-XPOST", d.url("/v1/sessions")))["id"]
    put = json.loads(curl("-XPUT", d.url("/v1/sessions/%s/state" % other), "--data-binary",
                          "@" + blob))
    assert put["tokens_seen"] == 12
    g1 = curl("-XPOST", d.url("/v1/sessions/%s/generate" % sid), "-d", '{"max_tokens":5,"seed":1}')
    g2 = curl("-XPOST", d.url("/v1/sessions/%s/generate" % other), "-d", '{"max_tokens":5,"seed":1}')
    assert g1 == g2 and len(parse_lines(g1.decode())) == 6
    assert curl("-XDELETE", "-w", "%{http_code}", d.url("/v1/sessions/%s" % sid)) == b"204"


# ---------------------------------------------------------------------------- fork / state

def assert_same_continuation(d, a, b, cont, **gen):
    """Sessions a and b generate the same tokens (generate's gen), then fold cont alike."""
    ga, _ = generate(d, a, **gen)
    gb, _ = generate(d, b, **gen)
    assert ga == gb
    la, _ = fold(d, a, cont)
    lb, _ = fold(d, b, cont)
    assert la == lb


def test_fork_gives_identical_continuations(d):
    s = create(d, tokens=rand_tokens(40, 5))
    r = requests.post(d.url("/v1/sessions/%s/fork" % s["id"]), timeout=10)
    assert r.status_code == 201
    f = r.json()
    assert f["id"] != s["id"] and f["tokens_seen"] == 40
    assert_same_continuation(d, s["id"], f["id"], rand_tokens(10, 6), max_tokens=16, temperature=0)
    # and they are independent afterwards
    fold(d, s["id"], [1, 2, 3])
    assert info(d, s["id"])["tokens_seen"] == 69 and info(d, f["id"])["tokens_seen"] == 66


def test_state_roundtrip(d):
    s = create(d, tokens=rand_tokens(70, 7))
    r = requests.get(d.url("/v1/sessions/%s/state" % s["id"]), timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/octet-stream"
    blob = r.content
    assert blob[:8] == b"RECURST1"
    n = create(d)
    r = requests.put(d.url("/v1/sessions/%s/state" % n["id"]), data=blob,
                     headers={"Content-Type": "application/octet-stream"}, timeout=10)
    assert r.status_code in (200, 201), r.text
    assert r.json()["tokens_seen"] == 70 and info(d, n["id"])["tokens_seen"] == 70
    # identical continuation: generation (needs the next-token logits) and folding
    assert_same_continuation(d, s["id"], n["id"], rand_tokens(5, 8), max_tokens=10, seed=11)
    # the state after the continuation is byte-identical too
    sa = requests.get(d.url("/v1/sessions/%s/state" % s["id"]), timeout=10).content
    sb = requests.get(d.url("/v1/sessions/%s/state" % n["id"]), timeout=10).content
    assert sa == sb


def test_bad_snapshots_are_400_and_change_nothing(d):
    s = create(d, tokens=rand_tokens(30, 9))
    good = requests.get(d.url("/v1/sessions/%s/state" % s["id"]), timeout=10).content
    t = create(d, tokens=[1, 2, 3])
    before = next_logprobs(d, t["id"])
    flipped = bytearray(good)
    flipped[60] ^= 0x01
    core_len = 48 + int.from_bytes(good[32:40], "little")
    bad_trailer = bytearray(good)
    bad_trailer[core_len + 20] ^= 0x40
    with Daemon(seed=8) as other:  # same architecture, other weights
        o = create(other, tokens=[1, 2])
        foreign = requests.get(other.url("/v1/sessions/%s/state" % o["id"]), timeout=10).content
    cases = [b"", b"garbage", good[:10], good[:len(good) // 2], good[:core_len - 1], bytes(flipped),
             bytes(bad_trailer), good + b"x", good[:core_len] + b"RECURLG1", foreign,
             foreign[:48 + int.from_bytes(foreign[32:40], "little")]]
    for blob in cases:
        r = requests.put(d.url("/v1/sessions/%s/state" % t["id"]), data=blob,
                         headers={"Content-Type": "application/octet-stream"}, timeout=10)
        error_of(r, 400)
        assert info(d, t["id"])["tokens_seen"] == 3
    assert_close_probes(before, next_logprobs(d, t["id"]), tol=0)
    # a plain core snapshot (no logits trailer) is accepted: folding continues identically,
    # the first logprob after it is unknown (null)
    u = create(d)
    r = requests.put(d.url("/v1/sessions/%s/state" % u["id"]), data=good[:core_len],
                     headers={"Content-Type": "application/octet-stream"}, timeout=10)
    assert r.status_code == 200 and r.json()["tokens_seen"] == 30
    la, _ = fold(d, s["id"], [4, 5, 6])
    lb, _ = fold(d, u["id"], [4, 5, 6])
    assert lb[0]["logprob"] is None
    assert la[1:] == lb[1:] and la[0]["top"] == lb[0]["top"]


def test_softmax_hybrid_context_limit_and_state():
    """A model with a softmax layer: the state grows with tokens up to max_context (64 here)."""
    hybrid = os.path.join(ROOT, "tests", "fixtures", "tiny_hybrid.json")
    with Daemon(model_config=hybrid) as d:
        m = requests.get(d.url("/v1/model"), timeout=10).json()
        assert m["mixers"] == ["gated_deltanet", "softmax"] and m["max_context"] == 64
        s = create(d, tokens=rand_tokens(40, 1))
        small = create(d, tokens=[1])
        assert info(d, s["id"])["snapshot_bytes"] > info(d, small["id"])["snapshot_bytes"]
        # token-by-token equals one request here too
        a, _ = fold(d, small["id"], rand_tokens(20, 2))
        b = create(d, tokens=[1])
        one = []
        for t in rand_tokens(20, 2):
            one += fold(d, b["id"], [t])[0]
        assert_close_lines(a, one)
        # over max_context: 422, nothing folded
        r = requests.post(d.url("/v1/sessions/%s/tokens" % s["id"]), json={"tokens": [1] * 25},
                          timeout=10)
        error_of(r, 422, "max_context")
        assert info(d, s["id"])["tokens_seen"] == 40
        # state round trip of a variable-size snapshot
        blob = requests.get(d.url("/v1/sessions/%s/state" % s["id"]), timeout=10).content
        n = create(d)
        r = requests.put(d.url("/v1/sessions/%s/state" % n["id"]), data=blob, timeout=10)
        assert r.status_code == 200 and r.json()["tokens_seen"] == 40
        ga, _ = generate(d, s["id"], max_tokens=10, seed=5)
        gb, _ = generate(d, n["id"], max_tokens=10, seed=5)
        assert ga == gb
        # generation stops at max_context with reason "length"
        lines, done = generate(d, s["id"], max_tokens=100, seed=5)
        assert done["reason"] == "length" and done["tokens_seen"] == 64 and len(lines) == 14


# ---------------------------------------------------------------------------- disconnects, batching

def test_client_disconnect_mid_generation(d):
    prompt = rand_tokens(8, 12)
    s = create(d, tokens=prompt)
    sock = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    body = json.dumps({"max_tokens": 8000, "temperature": 0}).encode()
    sock.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (s["id"].encode(), len(body), body))
    got = b""
    while got.count(b'"pos"') < 5:
        chunk = sock.recv(65536)
        assert chunk
        got += chunk
    sock.close()
    deadline = time.time() + 20
    while True:
        st = info(d, s["id"])
        if st["pending_ops"] == 0:
            break
        assert time.time() < deadline
        time.sleep(0.02)
    # stopped early: some tokens folded, far fewer than asked
    m = st["tokens_seen"] - len(prompt)
    assert 5 <= m < 8000
    # consistent: a replay that folds the same m greedy tokens predicts exactly the same
    r = create(d, tokens=prompt)
    lines, done = generate(d, r["id"], max_tokens=m, temperature=0)
    assert done["tokens_seen"] == st["tokens_seen"]
    assert_close_probes(next_logprobs(d, s["id"]), next_logprobs(d, r["id"]), tol=0)


def test_concurrent_sessions_match_sequential_runs(d):
    n_sessions, n_steps = 8, 25
    prompts = [rand_tokens(5, 200 + i) for i in range(n_sessions)]
    conts = [rand_tokens(n_steps, 300 + i) for i in range(n_sessions)]

    def run(i, out):
        s = create(d, tokens=prompts[i])
        lines = []
        with requests.Session() as http:
            for t in conts[i]:
                l, _ = fold(d, s["id"], [t], session=http)
                lines += l
            g, _ = generate(d, s["id"], session=http, max_tokens=10, seed=i)
        out[i] = (lines, g)

    seq = {}
    for i in range(n_sessions):
        run(i, seq)
    before = _metric(d, "recurd_decode_batched_tokens_total")
    conc = {}
    threads = [threading.Thread(target=run, args=(i, conc)) for i in range(n_sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # Tokens are identical; logprobs agree to float rounding (recur_model_step_batch's sgemm
    # takes different kernel paths for different batch sizes: differences ~5e-7 were seen).
    for i in range(n_sessions):
        assert_close_lines(seq[i][0], conc[i][0], tol=1e-5)
        assert [x["token"] for x in seq[i][1]] == [x["token"] for x in conc[i][1]]
        for a, b in zip(seq[i][1], conc[i][1]):
            assert abs(a["logprob"] - b["logprob"]) <= 1e-5
    after = _metric(d, "recurd_decode_batched_tokens_total")
    assert after - before >= n_sessions * (n_steps + 10)


def raw_generate_all(d, calls):
    """calls: [(session id, generate params)]. Sends every /generate, each on its own
    connection, before reading any answer (so the generations overlap even when each one is
    fast), then reads every stream. Returns [(generated tokens, done line)] in call order."""
    socks = []
    for sid, params in calls:
        body = json.dumps(params).encode()
        sk = socket.create_connection(("127.0.0.1", d.port), timeout=60)
        sk.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (sid.encode(), len(body), body))
        socks.append(sk)
    out = []
    for sk in socks:
        data = read_to_eof(sk)
        objs = [json.loads(m) for m in re.findall(rb"^\{.*\}$", bytes(data), re.M)]
        out.append(([(o["token"], o["logprob"]) for o in objs if "token" in o], objs[-1]))
    return out


def test_concurrent_generations_are_batched():
    """8 generations at once on one worker: their decode steps share batched model steps
    (batch size > 1 seen in /metrics) and each gives the tokens and logprobs of its run alone,
    bit for bit (a batched step is exactly the single-session step)."""
    with Daemon("--workers", "1") as d:
        prompts = [rand_tokens(4, 400 + i) for i in range(8)]
        alone = []
        for i in range(8):
            s = create(d, tokens=prompts[i])
            alone.append([(l["token"], l["logprob"])
                          for l in generate(d, s["id"], max_tokens=1000, seed=i)[0]])
        assert _metric(d, "recurd_decode_batch_size_max") == 1
        sids = [create(d, tokens=prompts[i])["id"] for i in range(8)]
        # A generation steps on the workers without a loop round trip per token, so with the
        # tiny model it is fast: the 8 requests are all sent before any answer is read.
        got = raw_generate_all(d, [(sids[i], {"max_tokens": 1000, "seed": i}) for i in range(8)])
        assert [toks for toks, _ in got] == alone
        assert all(done["reason"] == "length" for _, done in got)
        assert _metric(d, "recurd_decode_batch_size_max") >= 2


def test_concurrent_folds_give_the_logprobs_of_folding_alone():
    """48 sessions of the shipped model fold the same 20 single-token requests (top_k 5) first
    one session at a time (every step a batch of 1), then all at once from 48 threads (steps
    batched with whatever else is ready): every line -- logprob and the top-5 logprobs -- is
    identical, not merely close (the build of 8e76139, sgemv for one row and sgemm for a batch,
    fails this); the second run did batch (batch size > 1 in /metrics)."""
    n_sess, n_tok = 48, 20
    prompts = [rand_tokens(5, 700 + i) for i in range(n_sess)]
    feeds = [rand_tokens(n_tok, 800 + i) for i in range(n_sess)]

    def drive(d, sid, feed):
        with requests.Session() as http:
            return [fold(d, sid, [t], top_k=5, session=http)[0][0] for t in feed]

    with Daemon("--workers", "1", "--model", os.path.join(ROOT, "models", "default"),
                model_config=None) as d:
        alone = []
        for i in range(n_sess):
            sid = create(d, tokens=prompts[i])["id"]
            alone.append(drive(d, sid, feeds[i]))
        assert _metric(d, "recurd_decode_batch_size_max") == 1
        sids = [create(d, tokens=prompts[i])["id"] for i in range(n_sess)]
        together = [None] * n_sess
        start = threading.Barrier(n_sess)

        def worker(i):
            start.wait()
            together[i] = drive(d, sids[i], feeds[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_sess)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert together == alone
        assert _metric(d, "recurd_decode_batch_size_max") >= 2


def test_pipelined_requests_apply_in_arrival_order(d):
    """20 folds pipelined in one write on one connection, then a generate and a GET: answered in
    order, each fold at the next position."""
    s = create(d)
    reqs = b""
    for i in range(20):
        body = json.dumps({"tokens": [i + 1], "top_k": 0}).encode()
        reqs += (b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: %d\r\n\r\n%s" % (s["id"].encode(), len(body), body))
    body = b'{"max_tokens":3,"seed":1}'
    reqs += (b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
             % (s["id"].encode(), len(body), body))
    reqs += b"GET /v1/sessions/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % s["id"].encode()
    sock = socket.create_connection(("127.0.0.1", d.port), timeout=20)
    sock.sendall(reqs)
    data = read_to_eof(sock)
    objs = [json.loads(m) for m in re.findall(rb"^\{.*\}$", bytes(data), re.M)]
    folds = [o for o in objs if "top" in o]
    assert [(o["pos"], o["token"]) for o in folds] == [(i, i + 1) for i in range(20)]
    gen = [o for o in objs if "text" in o]
    assert [o["pos"] for o in gen] == [20, 21, 22]
    assert objs[-1]["tokens_seen"] == 23 and objs[-1]["id"] == s["id"]


def test_prefill_does_not_starve_decode():
    """While one session folds 100k tokens (prefill slices), another session's single-token
    requests keep completing: all of them finish before the long fold does."""
    with Daemon("--max-tokens-per-request", "100000", "--workers", "1") as d:
        a = create(d)
        b = create(d, tokens=[1])
        body = json.dumps({"tokens": rand_tokens(100000, 21), "top_k": 0})
        result = {}

        def long_fold():
            r = requests.post(d.url("/v1/sessions/%s/tokens" % a["id"]), data=body, headers=JSON,
                              timeout=120)
            result["done_at"] = time.monotonic()
            result["last"] = parse_lines(r.text)[-1]

        t = threading.Thread(target=long_fold)
        t.start()
        while info(d, a["id"])["tokens_seen"] == 0:  # the prefill is under way
            time.sleep(0.005)
        with requests.Session() as http:
            for tok in rand_tokens(30, 22):
                fold(d, b["id"], [tok], session=http)
        b_done = time.monotonic()
        mid = info(d, a["id"])["tokens_seen"]
        t.join(120)
        assert result["last"] == {"done": True, "tokens_seen": 100000}
        assert b_done < result["done_at"] and mid < 100000, (mid, b_done, result)
        assert info(d, b["id"])["tokens_seen"] == 31


def _metric(d, name):
    body = requests.get(d.url("/metrics"), timeout=10).text
    m = re.search(r"^%s (\d+)$" % re.escape(name), body, re.M)
    assert m, name
    return int(m.group(1))


def test_metrics(d):
    s = create(d, tokens=[1, 2, 3])
    fold(d, s["id"], [4, 5])
    generate(d, s["id"], max_tokens=3, seed=1)
    r = requests.get(d.url("/metrics"), timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    body = r.text
    for name in ["recurd_http_responses_total{class=\"2xx\"}", "recurd_tokens_folded_total",
                 "recurd_tokens_generated_total", "recurd_sessions", "recurd_state_bytes",
                 "recurd_connections_open", "process_resident_memory_bytes"]:
        assert re.search(r"^%s \d+$" % re.escape(name), body, re.M), name
    assert _metric(d, "recurd_tokens_generated_total") >= 3
    assert _metric(d, "recurd_tokens_folded_total") >= 5
    sessions = _metric(d, "recurd_sessions")
    assert _metric(d, "recurd_state_bytes") == sessions * _metric(d, "recurd_state_bytes_per_session")
    assert s["id"] not in body
    # the text format: a name, optional labels (histogram buckets: le="0.001" .. "+Inf"; build
    # info: version="0.2.0"), a decimal value (counters and gauges of seconds are fractional)
    sample = re.compile(r'[a-z_]+(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? '
                        r'(\d+(\.\d+)?([eE][-+]?\d+)?|\+Inf)')
    for line in body.splitlines():
        assert line.startswith("#") or sample.fullmatch(line), line


def test_logs_are_json_without_ids(d):
    s = create(d, tokens=[1])
    lines = d.logs()
    assert lines
    for l in lines:
        obj = json.loads(l)
        assert "event" in obj and "level" in obj and "ts" in obj
        assert s["id"] not in l


def test_slow_reader_pauses_the_stream(d):
    """Backpressure: a client that does not read stops the fold at the write high watermark
    (plus socket buffers) instead of making the daemon buffer ~17 MB of lines."""
    s = create(d, tokens=[1, 2, 3])
    toks = rand_tokens(8192, 13)
    body = json.dumps({"tokens": toks, "top_k": 64}).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", d.port))
    sock.sendall(b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (s["id"].encode(), len(body), body))
    time.sleep(1.5)
    a = info(d, s["id"])
    time.sleep(0.5)
    b = info(d, s["id"])
    assert a["pending_ops"] == 1 and b["pending_ops"] == 1
    assert a["tokens_seen"] == b["tokens_seen"] < 3 + 8192  # paused, not finished
    # reading resumes it; every line arrives
    data = bytearray()
    while not data.endswith(b"0\r\n\r\n"):
        chunk = sock.recv(1 << 20)
        assert chunk
        data += chunk
    sock.close()
    data = bytes(data)
    assert data.count(b'"pos"') == 8192
    assert b'{"done":true,"tokens_seen":8195}' in data
    assert info(d, s["id"])["tokens_seen"] == 8195


def test_idle_sessions_expire():
    with Daemon("--idle-ttl-ms", "300") as d:
        s = create(d, tokens=[1])
        t = create(d)
        for _ in range(6):  # t stays busy
            time.sleep(0.1)
            info(d, t["id"])
        assert info(d, t["id"])["tokens_seen"] == 0
        time.sleep(1.0)
        error_of(requests.get(d.url("/v1/sessions/%s" % s["id"]), timeout=10), 404)
        assert _metric(d, "recurd_sessions_expired_total") >= 1


# ---------------------------------------------------------------------------- shutdown

@contextlib.contextmanager
def killed_at_end(*args):
    """A daemon the test stops itself (by signals): killed at the end whatever happened."""
    d = Daemon(*args).start()
    try:
        yield d
    finally:
        d.kill()


def test_sigterm_exits_0():
    with killed_at_end() as d:
        s = create(d, tokens=[1, 2])
        generate(d, s["id"], max_tokens=2, seed=1)
        assert d.terminate(30) == 0
        assert any('"event":"exit"' in l for l in d.logs())


def test_second_sigterm_exits_at_once():
    with killed_at_end("--drain-timeout-ms", "60000") as d:
        s = create(d, tokens=[1, 2])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", d.port))
        body = json.dumps({"tokens": rand_tokens(8192, 1), "top_k": 64}).encode()
        sock.sendall(b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (s["id"].encode(), len(body), body))
        time.sleep(0.5)  # the stream is now paused on a reader that does not read
        d.proc.send_signal(15)
        time.sleep(0.3)
        assert d.proc.poll() is None  # draining: waits for the stream
        t0 = time.time()
        d.proc.send_signal(15)
        code = d.proc.wait(10)
        assert time.time() - t0 < 2 and code != 0
        sock.close()


def test_sigterm_drains_inflight_stream():
    with killed_at_end("--drain-timeout-ms", "300") as d:
        s = create(d, tokens=[1, 2])
        with requests.post(d.url("/v1/sessions/%s/generate" % s["id"]),
                           json={"max_tokens": 8192, "temperature": 0}, stream=True,
                           timeout=30) as g:
            it = g.iter_lines()
            next(it)
            d.proc.send_signal(15)
            lines = [json.loads(x) for x in it if x]
        assert lines[-1]["done"] is True and lines[-1]["reason"] in ("cancelled", "length")
        assert d.proc.wait(30) == 0
