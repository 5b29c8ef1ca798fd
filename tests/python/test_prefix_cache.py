"""The exact prefix-state cache (issue 14, docs/API.md "Prefix cache"), against real daemons.

Reference: a daemon with the cache off (--prefix-cache-bytes 0). A hit restores the state the
storing session had, so a cached create equals, bit for bit, a cache-off session that folded the
same tokens split at the same place (create with the prefix, then /tokens with the rest); against
one cache-off request for the whole prompt it agrees within 1e-5 (the chunkwise prefill rounds
differently when split elsewhere) with the same greedy tokens."""
import json
import random
import threading

import pytest
import requests

from daemon import Daemon
from persist_helpers import metrics, pd
from state_helpers import create, fold, generate

RND = random.Random(1414)


def toks(n):
    return [RND.randrange(256) for _ in range(n)]


def pc(d):
    m = metrics(d)
    return {k[len("recurd_prefix_cache_"):]: v for k, v in m.items() if k.startswith("recurd_prefix_cache_")}


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


@pytest.fixture(scope="module")
def on():
    with Daemon("--prefix-checkpoint-interval", "256") as d:
        yield d


@pytest.fixture(scope="module")
def off():
    with Daemon("--prefix-cache-bytes", "0") as d:
        yield d


def test_hit_equals_cache_off_bit_for_bit(on, off):
    p, q, r = toks(300), toks(77), toks(30)
    assert create(on, p)["cached_tokens"] == 0
    before = pc(on)
    s = create(on, p + q)
    assert s["cached_tokens"] == len(p) and s["tokens_seen"] == len(p) + len(q)
    dm = delta(pc(on), before)
    assert dm["hits_total"] == 1 and dm["hit_tokens_total"] == len(p) and dm["misses_total"] == 0
    got, _ = fold(on, s["id"], r)
    gen_on, _ = generate(on, s["id"], max_tokens=10, temperature=0)
    # the same split on a cache-off daemon: identical
    ref = create(off, p, prefix_cache=False)["id"]
    fold(off, ref, q)
    assert fold(off, ref, r)[0] == got
    assert generate(off, ref, max_tokens=10, temperature=0)[0] == gen_on
    # the whole prompt in one cache-off request: within 1e-5, same greedy tokens
    one = create(off, p + q, prefix_cache=False)["id"]
    ref1, _ = fold(off, one, r)
    for a, b in zip(got, ref1):
        assert a["token"] == b["token"]
        assert abs(a["logprob"] - b["logprob"]) <= 1e-5, (a, b)
        assert [t["token"] for t in a["top"]] == [t["token"] for t in b["top"]]
    assert [g["token"] for g in generate(off, one, max_tokens=10, temperature=0)[0]] == \
        [g["token"] for g in gen_on]


@pytest.mark.parametrize("where", [0, 150, 299])
def test_a_prefix_that_differs_in_one_token_is_not_reused(on, off, where):
    p = toks(300)
    create(on, p)
    edited = list(p)
    edited[where] = (edited[where] + 1) % 256
    s = create(on, edited + [7])
    # the longest stored prefix of the edited prompt ends before the edit: the interval store at
    # 256 (when the edit is after it), never the 300-token entry
    assert s["cached_tokens"] == (256 if where >= 256 else 0), (where, s)
    got, _ = fold(on, s["id"], [1, 2, 3])
    ref = create(off, edited + [7], prefix_cache=False)["id"]
    for a, b in zip(got, fold(off, ref, [1, 2, 3])[0]):
        assert abs(a["logprob"] - b["logprob"]) <= 1e-5


def test_interval_checkpoints_resume_near_an_edit():
    with Daemon("--prefix-checkpoint-interval", "128", "--max-tokens-per-request", "4096") as d:
        p = toks(2000)
        create(d, p)
        before = pc(d)
        edited = p[:1500] + [(p[1500] + 1) % 256] + p[1501:]
        s = create(d, edited)
        assert s["cached_tokens"] == 1408  # the last multiple of 128 before position 1500
        m = metrics(d)
        dm = delta(pc(d), before)
        assert dm["hit_tokens_total"] == 1408
        # entries: 15 interval stores + the end of the first prompt; the edit adds 4 + its end
        assert pc(d)["entries"] == 15 + 1 + 4 + 1
        assert m["recurd_tokens_folded_total"] == 2000 + (2000 - 1408)


def test_completion_is_stored_for_the_next_turn(on, off):
    """Turn 2 of a stateless chat resends prompt + completion + new text: all of turn 1 is cached."""
    p = toks(90)
    s = create(on, p)
    gl, done = generate(on, s["id"], max_tokens=12, temperature=0)
    completion = [g["token"] for g in gl]
    assert done["tokens_seen"] == len(p) + 12
    turn2 = p + completion + toks(20)
    before = pc(on)
    s2 = create(on, turn2)
    assert s2["cached_tokens"] == len(p) + 12
    assert delta(pc(on), before)["hit_tokens_total"] == len(p) + 12
    got, _ = fold(on, s2["id"], [5, 6])
    # reference: the same computation path without any cache (prompt, generation, fold)
    r = create(off, p, prefix_cache=False)["id"]
    assert generate(off, r, max_tokens=12, temperature=0)[0] == gl
    fold(off, r, turn2[len(p) + 12:])
    assert fold(off, r, [5, 6])[0] == got
    # and a fold on a tracking session stores its end too
    fold(on, s2["id"], [9, 9, 9])
    s3 = create(on, turn2 + [5, 6, 9, 9, 9, 4])
    assert s3["cached_tokens"] == len(turn2) + 5


def test_concurrent_requests_sharing_a_prefix_both_hit(on):
    p = toks(400)
    create(on, p)
    out = []

    def one(i):
        out.append(create(on, p + [i, i + 1]))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [o["cached_tokens"] for o in out] == [400] * 4


def test_bytes_never_exceed_the_bound_and_lru_evicts():
    bound = 120000  # a few tiny-model entries (each about 17.5 KB of state + ids + bookkeeping)
    with Daemon("--prefix-cache-bytes", str(bound), "--prefix-checkpoint-interval", "0") as d:
        prompts = [toks(50) for _ in range(12)]
        for i, p in enumerate(prompts):
            create(d, p)
            m = pc(d)
            assert 0 < m["bytes"] <= bound, m
            # every entry costs the same (50 ids, one state blob): the counts add up exactly
            assert m["evictions_total"] == i + 1 - m["entries"], m
            assert m["bytes"] % m["entries"] == 0, m
        assert m["entries"] == bound // (m["bytes"] // m["entries"])  # as many as fit
        # the most recent prompts hit, the oldest were evicted (no state_dir: dropped)
        assert create(d, prompts[-1] + [1])["cached_tokens"] == 50
        assert create(d, prompts[0] + [1])["cached_tokens"] == 0
        assert pc(d)["disk_bytes"] == 0


def test_cache_off_and_not_asked():
    with Daemon("--prefix-cache-bytes", "0") as d:
        p = toks(60)
        create(d, p)
        assert create(d, p + [1])["cached_tokens"] == 0
        m = pc(d)
        assert m["entries"] == 0 and m["bytes"] == 0 and m["hits_total"] == 0
    with Daemon() as d:
        p = toks(60)
        create(d, p, prefix_cache=False)  # not asked: never stored, never looked up
        s = create(d, p + [1], prefix_cache=False)
        assert "cached_tokens" not in s
        assert pc(d)["entries"] == 0 and pc(d)["misses_total"] == 0
        r = requests.post(d.url("/v1/sessions"), data=json.dumps({"tokens": [1], "prefix_cache": 1}), timeout=30)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_prefix_cache"


def test_restart_with_state_dir_keeps_hits_and_refuses_bad_files(tmp_path):
    p, q = toks(200), toks(200)
    with pd(tmp_path, "--prefix-checkpoint-interval", "0") as d1:
        create(d1, p)
        create(d1, q)
        s = create(d1, p + [3])
        ref = fold(d1, s["id"], [4])[0] + fold(d1, s["id"], [5, 6])[0]
        assert d1.terminate() == 0
    files = sorted((tmp_path / "prefix_cache").glob("*.snap"))
    assert len(files) == 5  # p, q, p + [3], and the folds' ends p + [3, 4], p + [3, 4, 5, 6]
    with pd(tmp_path) as d2:
        before = pc(d2)
        assert before["entries"] == 0 and before["disk_bytes"] > 0
        s2 = create(d2, p + [3])
        assert s2["cached_tokens"] == len(p) + 1
        assert delta(pc(d2), before)["spill_loads_total"] == 1
        got = fold(d2, s2["id"], [4])[0] + fold(d2, s2["id"], [5, 6])[0]
        assert got == ref  # bit-identical to the session before the restart
        assert d2.terminate() == 0
    # corrupt q's file: refused (quarantined), a miss, and the answer is still right
    qfile = [f for f in (tmp_path / "prefix_cache").glob("*.snap") if f.name.startswith("%010x" % 200)]
    bad = None
    for f in qfile:
        data = bytearray(f.read_bytes())
        if bytes(data[40:40 + 4 * len(q)]) == b"".join(t.to_bytes(4, "little") for t in q):
            data[len(data) // 2] ^= 0x10
            f.write_bytes(bytes(data))
            bad = f
    assert bad is not None
    with pd(tmp_path) as d3:
        s3 = create(d3, q + [1])
        assert s3["cached_tokens"] == 0
        m = pc(d3)
        assert m["quarantined_total"] == 1 and m["spill_loads_total"] == 0
        assert any(x.name.startswith(bad.name) for x in (tmp_path / "prefix_cache" / "quarantine").iterdir())
        assert create(d3, p + [9])["cached_tokens"] == len(p)  # the sound files still hit


def test_spill_when_memory_is_full(tmp_path):
    bound = 60000
    with pd(tmp_path, "--prefix-cache-bytes", str(bound), "--prefix-checkpoint-interval", "0") as d:
        prompts = [toks(30) for _ in range(8)]
        for p in prompts:
            create(d, p)
            assert pc(d)["bytes"] <= bound
        m = pc(d)
        assert m["evictions_total"] >= 4
        # evicted entries come back from their files
        assert create(d, prompts[0] + [1])["cached_tokens"] == 30
        assert pc(d)["spill_loads_total"] >= 1
