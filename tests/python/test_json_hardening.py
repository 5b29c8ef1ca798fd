"""JSON request hardening (issue 10 items 8, 9, 16) against the real daemon on loopback:
NUL (\\u0000) is a byte like any other in "text" and "stop"; bodies RFC 8259 forbids (leading
zeros, "1.", raw control bytes in strings, lone surrogates, ...) are 400 invalid_json; and four
clients sending 1 MiB bodies do not stall the event loop for other clients (a /healthz canary's
p99 stays <= 5 ms), while large bodies decoded off the loop keep per-session order. Every
socket has a timeout, every wait is bounded, the daemon is killed at teardown."""
import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest
import requests

from daemon import Daemon, ROOT
from session_helpers import info

TINY = os.path.join(ROOT, "tests", "fixtures", "tiny_model.json")


@pytest.fixture(scope="module")
def d():
    # the 8192-token bodies below are ~1 MiB: the limit is pinned where they test it
    with Daemon("--max-tokens-per-request", "8192", model_config=TINY, seed=1) as daemon:
        yield daemon


def create(d, body=None):
    r = requests.post(d.url("/v1/sessions"), data=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def post_raw(d, path, body):
    """POST exactly these body bytes (no re-encoding by a JSON library)."""
    return requests.post(d.url(path), data=body, timeout=30,
                         headers={"Content-Type": "application/json"})


def lines(r):
    return [json.loads(l) for l in r.text.strip().split("\n")]


def error_code(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()["error"]["code"]


def tokens_error(d, sid, body, status):
    """POST body to the session's /tokens, asserted to answer status: the error code."""
    return error_code(post_raw(d, "/v1/sessions/%s/tokens" % sid, body), status)


# ---------------------------------------------------------------------------- item 8: NUL

def test_nul_in_text_is_a_byte_token(d):
    sid = create(d)
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"text":"a\\u0000b"}')
    assert r.status_code == 200, r.text
    got = [l["token"] for l in lines(r) if "token" in l]
    assert got == [97, 0, 98], r.text
    assert info(d, sid)["tokens_seen"] == 3


def test_nul_in_text_at_create_and_same_as_tokens(d):
    a = create(d, b'{"text":"\\u0000x\\u0000"}')
    b = create(d, b'{"tokens":[0,120,0]}')
    assert info(d, a)["tokens_seen"] == 3
    ra = post_raw(d, "/v1/sessions/%s/tokens" % a, b'{"tokens":[1],"top_k":3}')
    rb = post_raw(d, "/v1/sessions/%s/tokens" % b, b'{"tokens":[1],"top_k":3}')
    assert ra.status_code == rb.status_code == 200
    assert lines(ra) == lines(rb)  # same bytes folded, same state, same prediction


def test_nul_in_stop_string_is_matched_whole(d):
    """A stop string " \\u0000zzz" must not stop at the space alone: with greedy decoding on this
    model the stream contains spaces; the full 5-byte stop never matches, so the generation runs
    to max_tokens. Before the fix it stopped at the first space."""
    sid = create(d, b'{"text":"hello world"}')
    fork = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30).json()["id"]
    # Which bytes does greedy decoding produce? Find one that occurs, then use it + NUL + zzz.
    r = post_raw(d, "/v1/sessions/%s/generate" % sid, b'{"max_tokens":40,"temperature":0}')
    assert r.status_code == 200, r.text
    toks = [l["token"] for l in lines(r) if "token" in l]
    assert len(toks) == 40
    first = toks[5]
    stop = '"\\u%04x\\u0000zzz"' % first
    body = ('{"max_tokens":40,"temperature":0,"stop":[%s]}' % stop).encode()
    r2 = post_raw(d, "/v1/sessions/%s/generate" % fork, body)
    assert r2.status_code == 200, r2.text
    toks2 = [l["token"] for l in lines(r2) if "token" in l]
    assert toks2 == toks, (toks, toks2)  # never stopped early at the lone byte


def test_nul_in_key_is_not_the_field(d):
    sid = create(d)
    assert tokens_error(d, sid, b'{"tokens\\u0000x":[1]}', 422) == "unknown_field"
    assert tokens_error(d, sid, b'{"tokens":[1],"tokens\\u0000":[2]}', 422) == "unknown_field"
    assert info(d, sid)["tokens_seen"] == 0


# ---------------------------------------------------------------------------- item 9: strict JSON

NOT_JSON = [
    b'{"tokens":[01,00,1.]}',
    b'{"tokens":[01]}',
    b'{"tokens":[-01]}',
    b'{"tokens":[1.]}',
    b'{"tokens":[.5]}',
    b'{"tokens":[1e]}',
    b'{"tokens":[+1]}',
    b'{"tokens":[0x1]}',
    b'{"tokens":[1,]}',
    b'{"tokens":[1],}',
    b'{"text":"a\tb"}',
    b'{"text":"a\x01b"}',
    b'{"text":"a\nb"}',
    b'{"text":"a\x00b"}',
    b'{"text":"\\ud800"}',
    b'{"text":"\\udc00x"}',
    b'{"text":"\\ud800\\u0041"}',
    b'{"text":"\\x41"}',
    b'{"text":"\\u00g0"}',
    b"{'text':'a'}",
    b'{"text":"a"',
    b'{"tokens":[NaN]}',
    b'{"tokens":[Infinity]}',
    b'{"tokens":[1] /* c */}',
    b'{"tokens":[tru]}',
    b'\xef\xbb\xbf{"tokens":[1]}',
    b'{"tokens":[1]}\x00',
    b'{"tokens":[1]} x',
    b'{"text":"\xc0\xaf"}',
    b'\x0b{"tokens":[1]}',
]


@pytest.mark.parametrize("body", NOT_JSON, ids=lambda b: repr(b)[:40])
def test_non_json_is_invalid_json(d, body):
    sid = create(d)
    assert tokens_error(d, sid, body, 400) == "invalid_json", body
    assert info(d, sid)["tokens_seen"] == 0
    r = post_raw(d, "/v1/sessions", body)
    assert error_code(r, 400) == "invalid_json", body
    r = post_raw(d, "/v1/sessions/%s/generate" % sid, body)
    assert error_code(r, 400) == "invalid_json", body


def test_strict_json_still_accepts_what_rfc8259_allows(d):
    sid = create(d)
    body = b' \r\n\t{ "tokens" : [ 0 , -0 , 1.0 , 1e0 , 10E-1 , 2.5e+0e0 ] }'
    assert tokens_error(d, sid, body, 400) == "invalid_json"  # "2.5e+0e0" is not a number
    body = b' \r\n\t{ "tokens" : [ 0 , -0 , 1.0 , 1e0 , 10E-1 , 0.3e1 ] } \n'
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, body)
    assert r.status_code == 200, r.text
    assert [l["token"] for l in lines(r) if "token" in l] == [0, 0, 1, 1, 1, 3]
    # escapes, a surrogate pair and raw UTF-8 all give the UTF-8 bytes
    body = '{"text":"\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\u00e9"}'.encode()
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, body)
    assert r.status_code == 200, r.text
    want = list(b'"\\/\b\f\n\r\t') + list("\u00e9\U0001F600\u00e9".encode())
    assert [l["token"] for l in lines(r) if "token" in l] == want


def test_duplicate_and_depth_rules_kept(d):
    sid = create(d)
    assert tokens_error(d, sid, b'{"tokens":[1],"\\u0074okens":[2]}', 400) == "duplicate_key"
    assert tokens_error(d, sid, b'{"tokens":[1],"x":{"a":1,"a":2}}', 400) == "duplicate_key"
    # a syntax error anywhere wins over a duplicate key (the body is not JSON at all)
    assert tokens_error(d, sid, b'{"a":1,"a":2,"b":01}', 400) == "invalid_json"
    deep = b'{"x":' + b"[" * 2000 + b"]" * 2000 + b"}"
    assert tokens_error(d, sid, deep, 400) == "invalid_json"
    ok_depth = b'{"tokens":[1],"x":' + b"[" * 100 + b"]" * 100 + b"}"
    assert tokens_error(d, sid, ok_depth, 422) == "unknown_field"
    assert info(d, sid)["tokens_seen"] == 0


# ---------------------------------------------------------------------------- item 16: the loop

LOADER = r"""
import http.client, sys, time
import os
port, path, stop, kind = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
body = open(sys.argv[5], "rb").read()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
n = 0
codes = set()
end = time.monotonic() + 120  # a bound: the test stops the loaders long before
while time.monotonic() < end and not os.path.exists(stop):
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    codes.add(r.status)
    n += 1
print(n, ",".join(str(c) for c in sorted(codes)), flush=True)
"""

MIB = 1024 * 1024


def mib_bodies(tmp_path):
    """Bodies just under max_body (1 MiB): a tokens array, a text string, and an array of small
    objects under an unknown field. All are answered 422 (too many tokens / unknown field), after
    the whole body has been decoded."""
    rng = random.Random(5)
    toks = []
    size = len(b'{"tokens":[]}')
    while True:
        t = str(rng.randrange(256)).encode()
        if size + len(t) + 1 > MIB - 16:
            break
        toks.append(t)
        size += len(t) + 1
    bodies = {
        "tokens": b'{"tokens":[' + b",".join(toks) + b"]}",
        "text": b'{"text":"' + b"ab\\u0041" * ((MIB - 32) // 8) + b'"}',
        "objects": b'{"x":[' + b",".join([b'{"a":1,"b":[2,"c"]}'] * ((MIB - 32) // 20)) + b"]}",
    }
    paths = {}
    for k, v in bodies.items():
        assert len(v) <= MIB, (k, len(v))
        p = tmp_path / ("body_%s.json" % k)
        p.write_bytes(v)
        paths[k] = str(p)
    return paths


def canary_window(port, seconds):
    """GET /healthz on one keep-alive connection, one at a time, for `seconds`; latencies in ms."""
    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s
    s = connect()
    req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    lat = []
    end = time.monotonic() + seconds
    n_on_conn = 0
    while time.monotonic() < end:
        if n_on_conn == 500:  # well under max_requests_per_conn (1000): reconnect between polls
            s.close()
            s = connect()
            n_on_conn = 0
        n_on_conn += 1
        t0 = time.perf_counter()
        s.sendall(req)
        buf = b""
        while True:
            chunk = s.recv(4096)
            assert chunk, "canary connection closed"
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                clen = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
                        if l.lower().startswith(b"content-length:")][0]
                if len(rest) >= clen:
                    break
        lat.append((time.perf_counter() - t0) * 1000.0)
        assert head.startswith(b"HTTP/1.1 200"), head
        time.sleep(0.002)
    s.close()
    return lat


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100.0))]


def test_mib_bodies_do_not_stall_the_loop(d, tmp_path):
    """Four clients (separate processes, so no GIL is shared with the canary) send 1 MiB JSON
    bodies back to back while a canary polls /healthz; the canary's p99 must be <= 5 ms
    (issue 10 item 16: on main, with cJSON on the loop, p50 was 118-195 ms and p99 191-254 ms
    under this load).

    The machine is a noisy 2-core box shared with other jobs, whose bursts stall any process for
    tens of ms: a window can only be made slower by outside load, never faster. So the load runs
    throughout and the canary is measured in consecutive 2 s windows; the test passes at the
    first window whose p99 meets the bound and gives up after 20 windows (40 s). Work on the loop
    thread is intrinsic to every window, so a loop that decodes 1 MiB bodies itself fails all of
    them. Under SANITIZE=1 (RECUR_SANITIZE=1) ASan makes the loop's own work (reading, copying,
    parsing HTTP) much slower: on a quiet machine the ASan build's canary measured p50 9 ms and
    p99 23-25 ms in every window (2026-12-02), so the bound there is 50 ms, still several times
    below what a loop decoding the bodies itself shows even without ASan; the plain build keeps
    5 ms."""
    bound = 50.0 if os.environ.get("RECUR_SANITIZE") == "1" else 5.0
    bodies = mib_bodies(tmp_path)
    sid = create(d)
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    stop = tmp_path / "stop"
    kinds = ["tokens", "tokens", "text", "objects"]
    path = {"tokens": "/v1/sessions/%s/tokens" % sid, "text": "/v1/sessions/%s/tokens" % sid,
            "objects": "/v1/sessions"}
    base = canary_window(d.port, 1.0)
    procs = [subprocess.Popen([sys.executable, str(script), str(d.port), path[k], str(stop), k,
                               bodies[k]], stdout=subprocess.PIPE) for k in kinds]
    results = []
    try:
        time.sleep(0.5)  # every loader has its first body in flight
        for window in range(20):
            lat = canary_window(d.port, 2.0)
            p50, p99, mx = pct(lat, 50), pct(lat, 99), max(lat)
            results.append((p99, p50, mx, len(lat)))
            print("canary /healthz under 4 x 1 MiB bodies, window %d: p50 %.2f ms p99 %.2f ms "
                  "max %.2f ms (%d polls; idle before the load: p50 %.2f p99 %.2f ms)"
                  % (window, p50, p99, mx, len(lat), pct(base, 50), pct(base, 99)))
            if p99 <= bound:
                break
    finally:
        stop.write_text("")
        done = []
        for p in procs:
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0
            n, codes = out.decode().split()
            done.append(int(n))
            assert codes == "422", codes  # every big body decoded, then refused
    print("big bodies answered: %s" % done)
    assert min(done) >= 2, done  # the load was real: every client got through
    best = min(results)
    assert best[0] <= bound, "canary p99 %.2f ms > %.1f ms in every window: %s" % (
        best[0], bound, results)
    assert info(d, sid)["tokens_seen"] == 0  # every big body was refused whole


# ---------------------------------------------------------------------------- order behind a held body

def requests_parsed(d):
    text = requests.get(d.url("/metrics"), timeout=10).text
    for line in text.splitlines():
        if line.startswith("recurd_http_requests_total "):
            return int(float(line.split()[1]))
    raise AssertionError("no recurd_http_requests_total")


def send_big_then(d, sid, big, then):
    """Send `big` to /tokens of sid on its own connection; once the daemon has parsed it (the
    parsed-requests counter counts it; each poll counts itself too), run then() while the big
    body is still being decoded on the threadpool. Returns (A's status, A's lines, then())."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    v0 = requests_parsed(d)
    conn.request("POST", "/v1/sessions/%s/tokens" % sid, body=big,
                 headers={"Content-Type": "application/json"})
    polls = 0
    deadline = time.monotonic() + 30
    while True:
        polls += 1
        if requests_parsed(d) >= v0 + polls + 1:
            break
        assert time.monotonic() < deadline, "the big request was never parsed"
    got = then()
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    return r.status, [json.loads(l) for l in text.strip().split("\n")], got


def slow_tokens_body(n=8192):
    """n tokens, each written as a 120-byte number ("65.000…0"): ~1 MiB that takes the decoder
    milliseconds (every token goes through strtod), so it is decoded off the loop."""
    tok = b"65." + b"0" * 117
    body = b'{"tokens":[' + b",".join([tok] * n) + b"]}"
    assert 16384 < len(body) <= MIB
    return body


def test_held_body_keeps_per_session_order(d):
    """A fold sent after a large one (on another connection, once the large one was parsed) is
    applied after it: per-session arrival order holds while the large body is decoded off the
    loop."""
    sid = create(d)
    status, a_lines, b = send_big_then(
        d, sid, slow_tokens_body(),
        lambda: post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"tokens":[7]}'))
    assert status == 200
    assert b.status_code == 200, b.text
    assert a_lines[-1] == {"done": True, "tokens_seen": 8192}
    assert lines(b)[-1] == {"done": True, "tokens_seen": 8193}
    assert info(d, sid)["tokens_seen"] == 8193


def test_delete_waits_for_held_body(d):
    sid = create(d)
    status, a_lines, r = send_big_then(
        d, sid, slow_tokens_body(),
        lambda: requests.delete(d.url("/v1/sessions/%s" % sid), timeout=30))
    assert status == 200 and a_lines[-1] == {"done": True, "tokens_seen": 8192}
    assert r.status_code == 204, r.text
    assert requests.get(d.url("/v1/sessions/%s" % sid), timeout=30).status_code == 404


def test_refused_held_body_changes_nothing(d):
    sid = create(d)
    big = slow_tokens_body(8193)  # one over max_tokens_per_request
    status, a_lines, b = send_big_then(
        d, sid, big, lambda: post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"tokens":[7]}'))
    assert status == 422 and a_lines[0]["error"]["code"] == "too_many_tokens"
    assert lines(b)[-1] == {"done": True, "tokens_seen": 1}
    big = b'{"tokens":[1],"x":' + b"[" * 1001 + b"]" * 1001 + b" " * 40000 + b"}"
    status, a_lines, _ = send_big_then(d, sid, big, lambda: None)
    assert status == 400 and a_lines[0]["error"]["code"] == "invalid_json"
    # a large create body is decoded off the loop too
    r = post_raw(d, "/v1/sessions", b'{"text":"ab"' + b" " * 40000 + b"}")
    assert r.status_code == 201, r.text
    assert info(d, r.json()["id"])["tokens_seen"] == 2
    assert info(d, sid)["tokens_seen"] == 1
