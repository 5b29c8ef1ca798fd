"""Issue 10 items 10, 11, 14, 15, 17 against the real daemon on loopback: the API key from the
environment is never truncated, Expect: 100-continue is answered only after the key is checked,
several chunk extensions are accepted, --host names are resolved (or refused by the loopback
rule), and SSE streams carry ids and Cache-Control and a reconnect (Last-Event-ID) does not fold
again. Raw sockets where the framing matters; every socket has a timeout, every daemon is
stopped at teardown."""
import json
import os
import socket
import subprocess
import time

import requests

from daemon import Daemon, RECURD, ROOT, TINY_MODEL, read_to_eof

KEY = "s3cret-key"


# ---------------------------------------------------------------------------- helpers

def connect(d):
    return socket.create_connection(("127.0.0.1", d.port), timeout=10)


def read_head(sock):
    """Bytes up to and including the first blank line (one response head), and what followed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, sep, rest = data.partition(b"\r\n\r\n")
    return head + sep, rest


def status_of(head):
    return int(head.split(b" ", 2)[1])


def create(d, headers=None, **body):
    r = requests.post(d.url("/v1/sessions"), json=body or None, headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def run_recurd(args, env_extra=None, timeout=20.0):
    """Runs recurd expecting it to exit at start; returns (exit code, stderr). A recurd that is
    still running after `timeout` is killed and reported as None."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    cmd = [RECURD, "--config", "", "--port", "0", "--model-config", TINY_MODEL] + list(args)
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=timeout)
        return p.returncode, err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate(timeout=10)
        return None, err.decode("utf-8", "replace")


# ---------------------------------------------------------------------------- item 10

def test_env_api_key_longer_than_255_bytes_is_refused_at_start():
    code, err = run_recurd(["--host", "127.0.0.1"], {"RECURD_API_KEY": "k" * 300}, timeout=10.0)
    assert code == 2, "recurd started with a 300-byte RECURD_API_KEY (code %r):\n%s" % (code, err)
    assert "RECURD_API_KEY" in err and "too long" in err, err


def test_env_api_key_of_255_bytes_authenticates_whole():
    key = "".join(chr(ord("a") + i % 26) for i in range(255))
    old = os.environ.get("RECURD_API_KEY")
    os.environ["RECURD_API_KEY"] = key
    try:
        with Daemon() as d:
            ok = requests.post(d.url("/v1/sessions"), headers={"Authorization": "Bearer " + key},
                               timeout=30)
            assert ok.status_code == 201, ok.text
            short = requests.post(d.url("/v1/sessions"),
                                  headers={"Authorization": "Bearer " + key[:254]}, timeout=30)
            assert short.status_code == 401, short.text
    finally:
        if old is None:
            os.environ.pop("RECURD_API_KEY", None)
        else:
            os.environ["RECURD_API_KEY"] = old


# ---------------------------------------------------------------------------- item 11

def expect_100_request(auth, length=200):
    h = b"POST /v1/sessions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    if auth is not None:
        h += b"Authorization: Bearer " + auth.encode() + b"\r\n"
    return h + b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % length


def test_expect_100_continue_waits_for_the_api_key():
    with Daemon("--api-key", KEY) as d:
        for auth in (None, "wrong", KEY + "x"):
            s = connect(d)
            s.sendall(expect_100_request(auth))
            head, rest = read_head(s)
            assert status_of(head) == 401, "auth %r got %r before the key was checked" % (auth, head)
            assert b"\r\nWWW-Authenticate: Bearer\r\n" in head, head
            assert b"\r\nConnection: close\r\n" in head, head
            rest += read_to_eof(s)  # closed without reading a body: no 100 anywhere
            assert b"100 Continue" not in head + rest
            assert b'"code":"unauthorized"' in rest, rest
        # the right key: 100 Continue, then the body is read and the session created
        body = b"{}" + b" " * 198
        s = connect(d)
        s.sendall(expect_100_request(KEY, len(body)))
        head, rest = read_head(s)
        assert status_of(head) == 100, head
        s.sendall(body)
        head, rest = read_head(s)
        assert status_of(head) == 201, head + rest
        s.close()


def test_unauthenticated_upload_refused_before_max_body_and_before_reading():
    with Daemon("--api-key", KEY, "--max-body", "4096") as d:
        s = connect(d)
        # far above max_body: the key, not the size, is the first rule
        s.sendall(b"PUT /v1/sessions/x/state HTTP/1.1\r\nHost: t\r\nContent-Length: 90000000\r\n\r\n")
        head, _ = read_head(s)
        assert status_of(head) == 401, head
        s.close()
        # a chunked upload without a key: 401 at once, the chunks are never read
        s = connect(d)
        s.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        head, _ = read_head(s)
        assert status_of(head) == 401, head
        s.close()
        # a bodiless request without a key keeps its connection (a plain 401)
        s = connect(d)
        s.sendall(b"GET /v1/model HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        head, rest = read_head(s)
        assert status_of(head) == 401, head
        assert b"Connection: close" not in head
        s.close()


# ---------------------------------------------------------------------------- item 14

def chunked_create(d, ext_data, ext_last=b""):
    body = b'{"tokens":[1,2,3]}'
    s = connect(d)
    s.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
              b"%x" % 5 + ext_data + b"\r\n" + body[:5] + b"\r\n" +
              b"%x" % (len(body) - 5) + ext_data + b"\r\n" + body[5:] + b"\r\n" +
              b"0" + ext_last + b"\r\n\r\n")
    resp = read_to_eof(s)
    head, _, payload = resp.partition(b"\r\n\r\n")
    return status_of(head), payload


def test_several_chunk_extensions_are_accepted():
    with Daemon() as d:
        for ext in (b";a=1;b=2", b";a;b", b';a="x;y";b=2', b";a=1;b=2;c=3;d", b";a=1"):
            status, payload = chunked_create(d, ext, ext)
            assert status == 201, (ext, payload)
            assert json.loads(payload)["tokens_seen"] == 3, payload


def test_chunk_extensions_still_bounded_and_malformed_ones_named():
    with Daemon("--max-chunk-ext-bytes", "64") as d:
        status, payload = chunked_create(d, b";abcd=efgh" * 10)  # 80 name/value bytes > 64
        assert status == 413, payload
        assert json.loads(payload)["error"]["code"] == "chunk_extension_too_large"
        status, payload = chunked_create(d, b";a=@")
        assert status == 400, payload
        assert json.loads(payload)["error"]["code"] == "invalid_chunk_extension"


# ---------------------------------------------------------------------------- item 15

def test_host_localhost_is_resolved_and_served():
    # Daemon passes --host 127.0.0.1 first; a later --host replaces it (flags: last one wins)
    with Daemon("--host", "localhost") as d:
        listening = [json.loads(l) for l in d.logs() if '"listening"' in l][0]
        assert listening["host"] == "localhost"
        assert listening["address"] in ("127.0.0.1", "::1"), listening
        host = listening["address"] if ":" not in listening["address"] else "[::1]"
        r = requests.get("http://%s:%d/healthz" % (host, d.port), timeout=10)
        assert r.status_code == 200, r.text


def test_host_that_does_not_resolve_is_refused_with_a_clear_message():
    code, err = run_recurd(["--host", "no-such-host.invalid"], timeout=30.0)
    assert code == 2, (code, err)
    assert "host_unresolvable" in err and "no-such-host.invalid" in err, err
    assert "listen_failed" not in err


def test_non_loopback_host_still_needs_a_key():
    code, err = run_recurd(["--host", "0.0.0.0"], timeout=10.0)
    assert code == 2, (code, err)
    assert "refusing_insecure_bind" in err, err


# ---------------------------------------------------------------------------- item 17

def sse_events(text):
    """[(id or None, data)] of an event stream (the fields recurd writes: id and data)."""
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        eid, data = None, None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "id":
                eid = value
            elif field == "data":
                data = value
        out.append((eid, data))
    return out


def tokens_seen(d, sid):
    r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens_seen"]


def test_sse_events_have_ids_and_no_cache():
    with Daemon() as d:
        sid = create(d, text="sse ids")["id"]
        n0 = tokens_seen(d, sid)
        r = requests.post(d.url("/v1/sessions/%s/generate" % sid), json={"max_tokens": 3, "seed": 1},
                          headers={"Accept": "text/event-stream"}, timeout=30)
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        assert r.headers.get("Cache-Control") == "no-cache", r.headers
        ev = sse_events(r.text)
        assert ev[-1] == ("done", "[DONE]") or ev[-1][1] == "[DONE]"
        tokens = [(i, json.loads(data)) for i, data in ev[:-2]]
        assert len(tokens) == 3
        for i, obj in tokens:
            assert i == str(obj["pos"]), (i, obj)
        assert [obj["pos"] for _, obj in tokens] == [n0, n0 + 1, n0 + 2]
        assert ev[-2][0] == "done" and json.loads(ev[-2][1])["done"] is True
        # /tokens too
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [5, 6]},
                          headers={"Accept": "text/event-stream"}, timeout=30)
        ev = sse_events(r.text)
        assert [e[0] for e in ev[:-1]] == [str(n0 + 3), str(n0 + 4), "done"], ev
        assert r.headers.get("Cache-Control") == "no-cache"
        # NDJSON streams carry no ids
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [7]}, timeout=30)
        assert r.headers["Content-Type"].startswith("application/x-ndjson")
        assert "id:" not in r.text


def test_eventsource_reconnect_gets_204_and_does_not_fold_again():
    """What an EventSource does when a stream ends: reconnect with Last-Event-ID (here the same
    POST, as EventSource polyfills that POST do). recurd answers 204, which stops the
    reconnecting, and folds nothing."""
    with Daemon() as d:
        sid = create(d, text="reconnect")["id"]
        hdr = {"Accept": "text/event-stream"}
        r = requests.post(d.url("/v1/sessions/%s/generate" % sid), json={"max_tokens": 4}, headers=hdr,
                          timeout=30)
        ids = [e[0] for e in sse_events(r.text) if e[0]]
        last_id = ids[-1]
        assert last_id == "done"
        seen = tokens_seen(d, sid)
        for path, body in (("generate", {"max_tokens": 4}), ("tokens", {"tokens": [1, 2, 3]})):
            for lei in (last_id, ids[0], "x"):
                rr = requests.post(d.url("/v1/sessions/%s/%s" % (sid, path)), json=body,
                                   headers=dict(hdr, **{"Last-Event-ID": lei}), timeout=30)
                assert rr.status_code == 204, (path, lei, rr.status_code, rr.text[:200])
                assert rr.content == b""
        assert tokens_seen(d, sid) == seen, "a reconnect folded again"
        # a reconnect for a session that is gone: 404 (also stops an EventSource)
        rr = requests.post(d.url("/v1/sessions/%s/generate" % ("0" * 32)), json={},
                           headers={"Last-Event-ID": "done"}, timeout=30)
        assert rr.status_code == 404


def test_accept_media_ranges_and_q_values_choose_the_framing():
    cases = [
        ("text/event-stream, */*", "text/event-stream"),
        ("*/*;q=0.8, text/event-stream", "text/event-stream"),
        ("text/event-stream;q=0, */*", "application/x-ndjson"),
        ("text/event-stream;q=0.5, application/x-ndjson", "application/x-ndjson"),
        ("application/x-ndjson;q=0, */*", "text/event-stream"),
        ("text/*", "text/event-stream"),
        (None, "application/x-ndjson"),
    ]
    with Daemon() as d:
        sid = create(d)["id"]
        for accept, want in cases:
            headers = {"Accept": accept} if accept else {}
            r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [1]},
                              headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            assert r.headers["Content-Type"].startswith(want), (accept, r.headers["Content-Type"])


# ---------------------------------------------------------------------------- item 18 (behaviour)

HYBRID = os.path.join(ROOT, "tests", "fixtures", "tiny_hybrid.json")


def test_snapshot_bytes_is_the_length_of_get_state():
    with Daemon() as d:
        def check(sid):
            info = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30).json()
            blob = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30).content
            assert info["snapshot_bytes"] == len(blob), (info, len(blob))
            return blob

        empty = create(d)
        core = check(empty["id"])                      # no logits yet: the core snapshot alone
        assert empty["snapshot_bytes"] == len(core)
        s = create(d, text="abc")
        full = check(s["id"])                          # core + logits trailer
        assert s["snapshot_bytes"] == len(full) == len(core) + 16 + 4 * 256 + 8
        r = requests.post(d.url("/v1/sessions/%s/fork" % s["id"]), timeout=30)
        assert r.json()["snapshot_bytes"] == len(full)
        # a PUT of the core alone (no trailer): the session has no logits, its GET is the core
        r = requests.put(d.url("/v1/sessions/%s/state" % s["id"]), data=full[:len(core)],
                         headers={"Content-Type": "application/octet-stream"}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["snapshot_bytes"] == len(core)
        check(s["id"])


def test_model_info_names_seeded_weights_and_max_context_only_where_it_applies():
    with Daemon() as d:  # tiny_model.json, seed 7: recurrent-only
        m = requests.get(d.url("/v1/model"), timeout=30).json()
        assert m["name"] == "e2e-tiny-seed7", m["name"]
        assert m["max_context"] is None
        listening = [json.loads(l) for l in d.logs() if '"listening"' in l][0]
        assert listening["model"] == "e2e-tiny-seed7"
    with Daemon(model_config=HYBRID, seed=3) as d:
        m = requests.get(d.url("/v1/model"), timeout=30).json()
        assert isinstance(m["max_context"], int) and m["max_context"] > 0
        assert m["name"].endswith("-seed3")


def test_help_says_max_sessions_counts_every_session():
    p = subprocess.run([RECURD, "--help"], capture_output=True, timeout=30)
    assert p.returncode == 0
    text = p.stdout.decode()
    i = text.index("--max-sessions")
    assert "in total" in text[i:i + 200] and "resident sessions ->" not in text[i:i + 200], text[i:i + 200]
