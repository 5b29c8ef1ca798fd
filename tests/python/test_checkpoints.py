"""Checkpoints on the session API (issue 14, docs/API.md "Checkpoints"), against a real daemon:
rollback then the same request answers bit for bit what it answered the first time; limits and
unknown ids get named errors and change nothing; checkpoints are copied by fork and survive a
restart with --state-dir (and an eviction to disk)."""
import json
import random

import pytest
import requests

from daemon import Daemon
from persist_helpers import info, pd
from state_helpers import create, error_code, fold, generate, post

RND = random.Random(14)
PROMPT = [RND.randrange(256) for _ in range(40)]
MORE = [RND.randrange(256) for _ in range(25)]


def take(d, sid):
    st, b = post(d, "/v1/sessions/%s/checkpoints" % sid)
    assert st == 201, b
    assert set(b) == {"checkpoint", "tokens_seen"}, b
    return b


def listing(d, sid):
    r = requests.get(d.url("/v1/sessions/%s/checkpoints" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["checkpoints"]


def rollback(d, sid, cid):
    return requests.post(d.url("/v1/sessions/%s/rollback" % sid),
                         data=json.dumps({"checkpoint": cid}), timeout=30)


@pytest.fixture(scope="module")
def d():
    with Daemon("--max-checkpoints-per-session", "3") as dm:
        yield dm


def test_rollback_then_the_same_fold_is_bit_identical(d):
    sid = create(d, PROMPT, prefix_cache=False)["id"]
    ck = take(d, sid)
    assert ck["tokens_seen"] == len(PROMPT)
    first, done1 = fold(d, sid, MORE)
    g1, gd1 = generate(d, sid, max_tokens=12, temperature=0.8, seed=5)
    r = rollback(d, sid, ck["checkpoint"])
    assert r.status_code == 200, r.text
    assert r.json()["tokens_seen"] == len(PROMPT) and info(d, sid)["tokens_seen"] == len(PROMPT)
    again, done2 = fold(d, sid, MORE)
    g2, gd2 = generate(d, sid, max_tokens=12, temperature=0.8, seed=5)
    assert again == first and done2 == done1  # every logprob and candidate, exactly
    assert g2 == g1 and gd2 == gd1
    # and against a session that never rolled back (an independent computation of the same path)
    ref = create(d, PROMPT, prefix_cache=False)["id"]
    assert fold(d, ref, MORE)[0] == first


def test_checkpoint_at_the_end_of_a_fold_and_a_generation(d):
    sid = create(d, PROMPT, prefix_cache=False)["id"]
    _, done = fold(d, sid, MORE, checkpoint=True)
    assert done["tokens_seen"] == len(PROMPT) + len(MORE)
    cid_fold = done["checkpoint"]
    gl, gdone = generate(d, sid, max_tokens=6, temperature=0, checkpoint=True)
    assert gdone["tokens_seen"] == len(PROMPT) + len(MORE) + 6
    lst = listing(d, sid)
    assert [c["checkpoint"] for c in lst] == [cid_fold, gdone["checkpoint"]]
    assert [c["tokens_seen"] for c in lst] == [len(PROMPT) + len(MORE), gdone["tokens_seen"]]
    # back to the fold's end: the same greedy tokens come again
    assert rollback(d, sid, cid_fold).status_code == 200
    gl2, _ = generate(d, sid, max_tokens=6, temperature=0)
    assert gl2 == gl
    # forward again to the generation's end: a checkpoint is a whole state
    assert rollback(d, sid, gdone["checkpoint"]).json()["tokens_seen"] == gdone["tokens_seen"]
    # SSE framing carries it in the done event too
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), data=json.dumps({"tokens": [1], "checkpoint": True}),
                      headers={"Accept": "text/event-stream"}, timeout=30)
    assert '"checkpoint":"' in r.text.split("id: done")[1]


def test_limit_is_a_named_409_and_changes_nothing(d):
    sid = create(d, PROMPT, prefix_cache=False)["id"]
    ids = [take(d, sid)["checkpoint"] for _ in range(3)]
    st, b = post(d, "/v1/sessions/%s/checkpoints" % sid)
    assert st == 409 and b["error"]["code"] == "max_checkpoints_per_session", b
    assert "3" in b["error"]["message"]
    before = info(d, sid)["tokens_seen"]
    for path, body in (("tokens", {"tokens": MORE, "checkpoint": True}),
                       ("generate", {"max_tokens": 4, "checkpoint": True})):
        r = requests.post(d.url("/v1/sessions/%s/%s" % (sid, path)), data=json.dumps(body), timeout=30)
        assert r.status_code == 409 and error_code(r) == "max_checkpoints_per_session", r.text
        assert info(d, sid)["tokens_seen"] == before  # nothing folded, nothing generated
    assert [c["checkpoint"] for c in listing(d, sid)] == ids
    # deleting one makes room
    r = requests.delete(d.url("/v1/sessions/%s/checkpoints/%s" % (sid, ids[1])), timeout=30)
    assert r.status_code == 204
    assert [c["checkpoint"] for c in listing(d, sid)] == [ids[0], ids[2]]
    take(d, sid)


def test_unknown_and_malformed_ids(d):
    sid = create(d, PROMPT, prefix_cache=False)["id"]
    cid = take(d, sid)["checkpoint"]
    fold(d, sid, MORE)
    state = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30).content
    for bad in ("0000000000000000", cid[:-1], cid + "0", "x" * 64, cid.upper()):
        r = rollback(d, sid, bad)
        assert r.status_code == 404 and error_code(r) == "checkpoint_not_found", (bad, r.text)
        r = requests.delete(d.url("/v1/sessions/%s/checkpoints/%s" % (sid, bad)), timeout=30)
        assert r.status_code == 404 and error_code(r) == "checkpoint_not_found", (bad, r.text)
    for body, code in ((b"{}", "missing_checkpoint"), (b'{"checkpoint":5}', "invalid_checkpoint"),
                       (b'{"checkpoint":""}', "invalid_checkpoint"),
                       (b'{"checkpoint":"%s\\u0000x"}' % cid.encode(), "invalid_checkpoint"),
                       (b'{"checkpoint":"%s","x":1}' % cid.encode(), "unknown_field"),
                       (b'', "invalid_json")):
        r = requests.post(d.url("/v1/sessions/%s/rollback" % sid), data=body, timeout=30)
        assert r.status_code in (400, 422) and error_code(r) == code, (body, r.text)
    r = requests.post(d.url("/v1/sessions/%s/checkpoints" % sid), data=b'{"a":1}', timeout=30)
    assert r.status_code == 422 and error_code(r) == "unknown_field"
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), data=b'{"tokens":[1],"checkpoint":1}', timeout=30)
    assert r.status_code == 422 and error_code(r) == "invalid_checkpoint"
    # nothing changed: same state bytes, same single checkpoint
    assert requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30).content == state
    assert [c["checkpoint"] for c in listing(d, sid)] == [cid]
    r = requests.get(d.url("/v1/sessions/%s/checkpoints" % ("0" * 32)), timeout=30)
    assert r.status_code == 404 and error_code(r) == "session_not_found"
    r = requests.put(d.url("/v1/sessions/%s/checkpoints" % sid), timeout=30)
    assert r.status_code == 405 and "GET" in r.headers["Allow"] and "POST" in r.headers["Allow"]


def test_fork_copies_checkpoints(d):
    sid = create(d, PROMPT, prefix_cache=False)["id"]
    cid = take(d, sid)["checkpoint"]
    first, _ = fold(d, sid, MORE)
    st, f = post(d, "/v1/sessions/%s/fork" % sid)
    assert st == 201
    fid = f["id"]
    assert listing(d, fid) == listing(d, sid)
    assert rollback(d, fid, cid).json()["tokens_seen"] == len(PROMPT)
    assert fold(d, fid, MORE)[0] == first
    # independent from then on
    assert requests.delete(d.url("/v1/sessions/%s/checkpoints/%s" % (fid, cid)), timeout=30).status_code == 204
    assert [c["checkpoint"] for c in listing(d, sid)] == [cid]
    assert info(d, sid)["tokens_seen"] == len(PROMPT) + len(MORE)


def test_checkpoints_survive_restart_and_eviction(tmp_path):
    with pd(tmp_path, "--max-resident-sessions", "1") as d1:
        sid = create(d1, PROMPT, prefix_cache=False)["id"]
        cid = take(d1, sid)["checkpoint"]
        first, done = fold(d1, sid, MORE, checkpoint=True)
        # a second session evicts the first to disk (max_resident_sessions 1), then it comes back
        other = create(d1, MORE, prefix_cache=False)["id"]
        assert len(listing(d1, sid)) == 2
        assert len(listing(d1, other)) == 0
        expected_ids = [cid, done["checkpoint"]]
        assert d1.terminate() == 0
    with pd(tmp_path) as d2:
        lst = listing(d2, sid)
        assert [c["checkpoint"] for c in lst] == expected_ids
        assert [c["tokens_seen"] for c in lst] == [len(PROMPT), len(PROMPT) + len(MORE)]
        assert rollback(d2, sid, cid).json()["tokens_seen"] == len(PROMPT)
        assert fold(d2, sid, MORE)[0] == first  # bit-identical after the restart
    # a checkpoint section with a flipped bit: the file is quarantined, never half-loaded
    snap = tmp_path / ("%s.snap" % sid)
    data = bytearray(snap.read_bytes())
    i = data.index(b"RECURCK1")
    data[i + 40] ^= 1
    snap.write_bytes(bytes(data))
    with pd(tmp_path) as d3:
        r = requests.get(d3.url("/v1/sessions/%s" % sid), timeout=30)
        assert r.status_code == 404
        q = list((tmp_path / "quarantine").iterdir())
        assert any(p.name.startswith(sid) and "checkpoints" in p.name for p in q), q
