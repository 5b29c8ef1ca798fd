"""HTTP conventions users expect of a server they deploy (issue 15; docs/API.md "HTTP
conventions"): HEAD on every GET route, /health beside /healthz, OPTIONS with Allow, CORS
(--cors-origin) with its preflight, and a JSON body labelled text/plain (what a browser's
fetch(url, {body: JSON.stringify(x)}) sends) accepted as JSON."""
import json
import socket
import subprocess

import pytest
import requests

from daemon import RECURD, Daemon, read_to_eof


def raw(port, request, timeout=10):
    """Send request bytes, read until the server closes (Connection: close): the whole answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(request)
    return read_to_eof(s)


def head_and_body(answer):
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), hdrs, body


@pytest.fixture(scope="module")
def d():
    with Daemon() as dm:
        yield dm


def session(d):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": [1, 2, 3]}, timeout=10)
    assert r.status_code == 201
    return r.json()["id"]


@pytest.mark.parametrize("path", ["/healthz", "/health", "/metrics", "/v1/model", "/v1/models",
                                  "/v1/sessions/{id}", "/v1/sessions/{id}/state"])
def test_head_answers_every_get_route_with_the_get_head_and_no_body(d, path):
    path = path.replace("{id}", session(d))
    g = raw(d.port, b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path.encode())
    h = raw(d.port, b"HEAD %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path.encode())
    gs, gh, gb = head_and_body(g)
    hs, hh, hb = head_and_body(h)
    assert gs == hs == 200
    assert hb == b"", "HEAD must carry no body bytes"
    assert hh.get("content-type") == gh.get("content-type")
    if path != "/metrics":  # the metrics text moves between the two requests
        assert hh.get("content-length") == gh.get("content-length") == str(len(gb))


def test_head_on_unknown_path_is_404_and_on_post_only_route_is_405(d):
    s, _, b = head_and_body(raw(d.port, b"HEAD /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    assert s == 404 and b == b""
    s, h, _ = head_and_body(raw(d.port, b"HEAD /v1/tokenize HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    assert s == 405 and h["allow"] == "POST, OPTIONS"


def test_health_is_healthz(d):
    a, b = requests.get(d.url("/health"), timeout=10), requests.get(d.url("/healthz"), timeout=10)
    assert a.status_code == b.status_code == 200 and a.json() == b.json()


def test_options_lists_the_methods_and_405_allow_agrees(d):
    sid = session(d)
    r = requests.options(d.url("/v1/sessions/%s" % sid), timeout=10)
    assert r.status_code == 204 and r.content == b""
    assert r.headers["Allow"] == "GET, HEAD, DELETE, OPTIONS"
    assert "Access-Control-Allow-Origin" not in r.headers  # CORS is off by default
    r405 = requests.put(d.url("/v1/sessions/%s" % sid), data=b"x", timeout=10)
    assert r405.status_code == 405 and r405.headers["Allow"] == r.headers["Allow"]
    assert requests.options(d.url("/nope"), timeout=10).status_code == 404


def test_text_plain_json_body_is_accepted_as_json(d):
    r = requests.post(d.url("/v1/sessions"), data=json.dumps({"tokens": [5, 6]}),
                      headers={"Content-Type": "text/plain;charset=UTF-8"}, timeout=10)
    assert r.status_code == 201 and r.json()["tokens_seen"] == 2
    # still strict JSON whatever the label
    bad = requests.post(d.url("/v1/sessions"), data='{"tokens": [5,]}',
                        headers={"Content-Type": "text/plain"}, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    other = requests.post(d.url("/v1/sessions"), data=json.dumps({"tokens": [5]}),
                          headers={"Content-Type": "text/html"}, timeout=10)
    assert other.status_code == 415


def test_cors_off_adds_no_header_even_with_an_origin(d):
    r = requests.get(d.url("/v1/model"), headers={"Origin": "http://page.example"}, timeout=10)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers


def test_cors_list_echoes_a_listed_origin_only_and_preflight_needs_no_key():
    origins = "http://a.example,http://localhost:3000"
    with Daemon("--cors-origin", origins, "--api-key", "sekrit") as d:
        auth = {"Authorization": "Bearer sekrit"}
        ok = requests.get(d.url("/v1/model"), headers=dict(auth, Origin="http://localhost:3000"), timeout=10)
        assert ok.status_code == 200
        assert ok.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
        assert ok.headers["Vary"] == "Origin"
        other = requests.get(d.url("/v1/model"), headers=dict(auth, Origin="http://evil.example"), timeout=10)
        assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers
        # errors carry it too, so a page can read why it was refused
        denied = requests.get(d.url("/v1/model"), headers={"Origin": "http://a.example"}, timeout=10)
        assert denied.status_code == 401
        assert denied.headers["Access-Control-Allow-Origin"] == "http://a.example"
        pre = requests.options(d.url("/v1/sessions"), timeout=10, headers={
            "Origin": "http://a.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status_code == 204  # no key on a preflight
        assert pre.headers["Access-Control-Allow-Origin"] == "http://a.example"
        assert pre.headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
        allowed = {h.strip().lower() for h in pre.headers["Access-Control-Allow-Headers"].split(",")}
        assert {"authorization", "content-type"} <= allowed
        assert int(pre.headers["Access-Control-Max-Age"]) > 0


def test_cors_star_allows_any_origin_and_streams_carry_it():
    with Daemon("--cors-origin", "*") as d:
        sid = session(d)
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [1]},
                          headers={"Origin": "http://x.example"}, timeout=10)
        assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
        assert "Vary" not in r.headers
        r = requests.get(d.url("/healthz"), timeout=10)  # no Origin: not a CORS request
        assert "Access-Control-Allow-Origin" not in r.headers


@pytest.mark.parametrize("bad", ["http://a.example, http://b.example", "http://a\r\nX-Injected: 1",
                                 "http://a.example,,http://b", "*,http://a.example"])
def test_bad_cors_origin_is_refused_at_start(bad):
    r = subprocess.run([RECURD, "--config", "", "--cors-origin", bad, "--check-config"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "cors_origin" in r.stderr
