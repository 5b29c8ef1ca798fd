"""Long inputs (issue 15; docs/API.md "Long inputs"): a 128k-token default limit, a fold that
answers only its last position ("output": "last") — bit-identical to the last line of a full
answer, state and logits included — and progress lines every N tokens ("progress": N), with the
session's tokens_seen advancing while a long fold runs."""
import json
import random
import socket
import time

import requests

from daemon import Daemon

SLICE = 256


def create(d, tokens):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def fold(d, sid, body):
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.content, [json.loads(l) for l in r.text.splitlines()]


def state(d, sid):
    r = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30)
    assert r.status_code == 200
    return r.content


def info(d, sid):
    return requests.get(d.url("/v1/sessions/%s" % sid), timeout=30).json()


def test_last_only_is_the_last_line_of_a_full_answer_bit_for_bit():
    rng = random.Random(5)
    with Daemon("--prefill-slice", str(SLICE)) as d:
        # 1 token (a decode step), 2, a whole slice, a slice + 1 (the last token a step after a
        # tail-only slice), several slices
        for n in (1, 2, SLICE, SLICE + 1, 3000):
            toks = [rng.randrange(256) for _ in range(n)]
            a, b = create(d, [7, 8]), create(d, [7, 8])
            body_a, lines_a = fold(d, a, {"tokens": toks, "top_k": 8})
            body_b, lines_b = fold(d, b, {"tokens": toks, "top_k": 8, "output": "last"})
            assert len(lines_a) == n + 1 and len(lines_b) == 2, (n, len(lines_b))
            assert lines_b[0] == lines_a[-2], n  # the same numbers, to the last bit of the JSON
            assert lines_b[0]["pos"] == 2 + n - 1 and lines_b[0]["logprob"] is not None
            assert lines_b[1] == lines_a[-1] == {"done": True, "tokens_seen": 2 + n}
            # the session's state and next-token logits (the state blob) are the same bytes
            assert state(d, a) == state(d, b), n
            if n == 3000:
                assert len(body_b) * 100 < len(body_a), (len(body_b), len(body_a))
            # and what follows is the same
            g = {"max_tokens": 5, "temperature": 0}
            ga = requests.post(d.url("/v1/sessions/%s/generate" % a), json=g, timeout=30).text
            gb = requests.post(d.url("/v1/sessions/%s/generate" % b), json=g, timeout=30).text
            assert ga == gb
            for sid in (a, b):
                requests.delete(d.url("/v1/sessions/%s" % sid), timeout=30)


def test_a_create_with_a_long_prompt_equals_create_then_fold():
    """A create folds with the LM head on its last position only: the same state blob, bit for
    bit, as an empty create followed by a full fold of the same tokens (the same slices)."""
    toks = [random.Random(9).randrange(256) for _ in range(1000)]
    with Daemon("--prefill-slice", str(SLICE)) as d:
        a = create(d, toks)
        e = create(d, [])
        fold(d, e, {"tokens": toks})
        assert info(d, a)["tokens_seen"] == info(d, e)["tokens_seen"] == 1000
        assert state(d, a) == state(d, e)


def test_progress_lines_every_n_tokens():
    with Daemon("--prefill-slice", str(SLICE)) as d:
        sid = create(d, [1, 2, 3])
        toks = [i % 256 for i in range(3000)]
        _, lines = fold(d, sid, {"tokens": toks, "progress": 1000})
        prog = [l for l in lines if "progress" in l]
        # slices end at 256, 512, ...: a line after the slice that crosses 1000 and 2000
        # (none at the end: the done line says it)
        assert [p["folded"] for p in prog] == [1024, 2048]
        for p in prog:
            assert p == {"progress": True, "folded": p["folded"], "of": 3000,
                         "tokens_seen": 3 + p["folded"]}
            # it follows the lines of the tokens it counts
            i = lines.index(p)
            assert lines[i - 1]["pos"] == 3 + p["folded"] - 1 and lines[i + 1]["pos"] == 3 + p["folded"]
        assert len([l for l in lines if "pos" in l]) == 3000 and lines[-1]["done"]
        # with "output": "last": progress lines, then the last token's line
        _, lines = fold(d, sid, {"tokens": toks, "progress": 500, "output": "last"})
        assert [l.get("folded") for l in lines[:-2]] == [512, 1024, 1536, 2048, 2560]
        assert lines[-2]["pos"] == 3 + 3000 + 3000 - 1 and lines[-1]["tokens_seen"] == 6003


def test_tokens_seen_advances_while_a_long_fold_runs():
    """A client that reads slowly pauses its fold (backpressure); the session's tokens_seen
    meanwhile says how far it got."""
    with Daemon() as d:
        sid = create(d, [1])
        body = json.dumps({"tokens": [i % 256 for i in range(20000)], "top_k": 64,
                           "progress": 256}).encode()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", d.port))
        s.sendall(b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (sid.encode(), len(body), body))
        got = b""
        while b'"progress":true' not in got:
            got += s.recv(4096)
        time.sleep(0.5)
        seen = info(d, sid)["tokens_seen"]
        assert 1 + 256 <= seen < 1 + 20000, seen
        s.close()


def test_default_limit_takes_a_128k_prompt_and_names_itself_above():
    with Daemon() as d:
        sid = create(d, [1])
        n = 131072
        ids = ",".join(str(i % 256) for i in range(n))
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid),
                          data='{"tokens":[%s],"output":"last","top_k":0}' % ids, timeout=300)
        assert r.status_code == 200, r.text[:300]
        lines = [json.loads(l) for l in r.text.splitlines()]
        assert len(lines) == 2 and lines[-1] == {"done": True, "tokens_seen": 1 + n}
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid),
                          data='{"tokens":[%s,1],"output":"last"}' % ids, timeout=60)
        assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_tokens"
        assert "max_tokens_per_request is 131072" in r.json()["error"]["message"]
        assert info(d, sid)["tokens_seen"] == 1 + n


def test_bad_output_and_progress_are_refused_and_change_nothing():
    with Daemon() as d:
        sid = create(d, [1, 2])
        before = state(d, sid)
        for body, code in (({"tokens": [3], "output": "first"}, "invalid_output"),
                           ({"tokens": [3], "output": True}, "invalid_output"),
                           ({"tokens": [3], "progress": -1}, "invalid_progress"),
                           ({"tokens": [3], "progress": 1.5}, "invalid_progress"),
                           ({"tokens": [3], "progress": "10"}, "invalid_progress")):
            r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json=body, timeout=30)
            assert r.status_code == 422 and r.json()["error"]["code"] == code, (body, r.text)
        assert state(d, sid) == before
        # the create route does not take them
        r = requests.post(d.url("/v1/sessions"), json={"tokens": [1], "output": "last"}, timeout=30)
        assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_field"
