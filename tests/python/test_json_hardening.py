"""JSON request hardening (issue 10 items 8, 9) against the real daemon on loopback:
NUL (\\u0000) is a byte like any other in "text" and "stop"; bodies RFC 8259 forbids (leading
zeros, "1.", raw control bytes in strings, lone surrogates, ...) are 400 invalid_json. Every
socket has a timeout, every wait is bounded, the daemon is killed at teardown."""
import json
import os

import pytest
import requests

from daemon import Daemon, ROOT

TINY = os.path.join(ROOT, "tests", "fixtures", "tiny_model.json")


@pytest.fixture(scope="module")
def d():
    with Daemon(model_config=TINY, seed=1) as daemon:
        yield daemon


def create(d, body=None):
    r = requests.post(d.url("/v1/sessions"), data=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def info(d, sid):
    r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def post_raw(d, path, body):
    """POST exactly these body bytes (no re-encoding by a JSON library)."""
    return requests.post(d.url(path), data=body, timeout=30,
                         headers={"Content-Type": "application/json"})


def lines(r):
    return [json.loads(l) for l in r.text.strip().split("\n")]


def error_code(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()["error"]["code"]


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
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"tokens\\u0000x":[1]}')
    assert error_code(r, 422) == "unknown_field"
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"tokens":[1],"tokens\\u0000":[2]}')
    assert error_code(r, 422) == "unknown_field"
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
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, body)
    assert error_code(r, 400) == "invalid_json", body
    assert info(d, sid)["tokens_seen"] == 0
    r = post_raw(d, "/v1/sessions", body)
    assert error_code(r, 400) == "invalid_json", body
    r = post_raw(d, "/v1/sessions/%s/generate" % sid, body)
    assert error_code(r, 400) == "invalid_json", body


def test_strict_json_still_accepts_what_rfc8259_allows(d):
    sid = create(d)
    body = b' \r\n\t{ "tokens" : [ 0 , -0 , 1.0 , 1e0 , 10E-1 , 2.5e+0e0 ] }'
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, body)
    assert error_code(r, 400) == "invalid_json"  # "2.5e+0e0" is not a number
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
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"tokens":[1],"\\u0074okens":[2]}')
    assert error_code(r, 400) == "duplicate_key"
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"tokens":[1],"x":{"a":1,"a":2}}')
    assert error_code(r, 400) == "duplicate_key"
    # a syntax error anywhere wins over a duplicate key (the body is not JSON at all)
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, b'{"a":1,"a":2,"b":01}')
    assert error_code(r, 400) == "invalid_json"
    deep = b'{"x":' + b"[" * 2000 + b"]" * 2000 + b"}"
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, deep)
    assert error_code(r, 400) == "invalid_json"
    ok_depth = b'{"tokens":[1],"x":' + b"[" * 100 + b"]" * 100 + b"}"
    r = post_raw(d, "/v1/sessions/%s/tokens" % sid, ok_depth)
    assert error_code(r, 422) == "unknown_field"
    assert info(d, sid)["tokens_seen"] == 0
