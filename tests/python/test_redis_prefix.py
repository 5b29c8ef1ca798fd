"""The prefix-state cache shared through Redis (server/prefix_redis.c, docs/SCALING.md "Prefix
cache in Redis"): a real redis-server (tests/python/redis_server.py), recurd nodes talking to it
directly.

A stateless chat client resends its whole conversation every turn, and nginx spreads the OpenAI
routes over the nodes: turn 1 on node A, turn 2 on node B. Checked:
  - B answers turn 2 with the same tokens and bit-identical logprobs as a single node without
    Redis that served both turns (its turn 2 a local prefix-cache hit), and B folded only the
    new tokens: cached_tokens = turn 1's prompt + completion, recurd_tokens_folded_total grew by
    the rest, recurd_redis_prefix_hits_total by 1;
  - an entry in Redis that does not hold the prompt's ids (written by hand under the key of the
    real one, its checksum made valid) or whose bytes are corrupted is a miss, counted
    (recurd_redis_prefix_invalid_total), and the answer is the one a cache-off node gives;
  - two models never share an entry: another model's node finds nothing under its own keys, and
    the first model's bytes copied under its key are refused (fingerprint);
  - Redis down: a plain miss, counted, the request answered.
"""
import json
import struct
import time

import pytest
import requests

from daemon import TINY_MODEL, Daemon
from redis_server import RedisServer
from checksums import fnv1a

TIMEOUT = 60
MAX_TOKENS = 8


def metric(d, name):
    for line in requests.get(d.url("/metrics"), timeout=TIMEOUT).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def chat(d, msgs):
    model = requests.get(d.url("/v1/models"), timeout=TIMEOUT).json()["data"][0]["id"]
    r = requests.post(d.url("/v1/chat/completions"), timeout=TIMEOUT, json={
        "model": model, "messages": msgs, "max_tokens": MAX_TOKENS, "temperature": 0,
        "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    return r.json()


def answer(resp):
    """(text, [(token bytes, logprob, top)]) of a chat response."""
    c = resp["choices"][0]
    return c["message"]["content"], [(tuple(t["bytes"]), t["logprob"],
                                      [(tuple(x["bytes"]), x["logprob"]) for x in t["top_logprobs"]])
                                     for t in c["logprobs"]["content"]]


def cached(resp):
    return resp["usage"]["prompt_tokens_details"]["cached_tokens"]


def node(redis, *extra, model_config=TINY_MODEL):
    args = ["--prefix-checkpoint-interval", "0"]
    if redis:
        args += ["--redis", redis.url, "--redis-timeout-ms", "2000", "--redis-lease-ms", "5000"]
    return Daemon(*args, *extra, model_config=model_config)


def wait_up(d, timeout=10.0):
    deadline = time.time() + timeout
    while requests.get(d.url("/healthz"), timeout=TIMEOUT).json()["redis"]["reachable"] is not True:
        assert time.time() < deadline, "redis never reachable"
        time.sleep(0.05)


def wait_stores(d, at_least, timeout=20.0):
    """d's entry stores have reached Redis (they follow the response, asynchronously)."""
    deadline = time.time() + timeout
    while metric(d, "recurd_redis_prefix_stores_total") < at_least or \
            metric(d, "recurd_redis_prefix_inflight_bytes") != 0:
        assert time.time() < deadline, "the prefix stores never reached redis"
        time.sleep(0.05)


def entry_keys(redis, fp=None):
    """{n: key} of the prefix-cache entries in Redis (of model fp, or all)."""
    keys = redis.command("KEYS", "recurd:pc:{%s}:e:*" % (fp or "*"))
    return {int(k.decode().rsplit(":", 1)[1][:10], 16): k.decode() for k in keys}


def refusals(d):
    """The reasons of d's redis_prefix_entry_refused log lines so far."""
    out = []
    for line in d.logs():
        if '"redis_prefix_entry_refused"' in line:
            out.append(json.loads(line)["reason"])
    return out


def reseal(b):
    """A prefix-cache entry (RECURPX1: FNV-1a 64 over every byte before it) with its checksum recomputed."""
    return b[:-8] + struct.pack("<Q", fnv1a(b[:-8]))


def conversation(tag):
    return [{"role": "system", "content": "Conversation %s. Be brief." % tag},
            {"role": "user", "content": "Hello, who are you?"}]


def second_turn(msgs, first):
    return msgs + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                   {"role": "user", "content": "And then?"}]


@pytest.fixture(scope="module")
def cluster():
    """redis, nodes A and B on it, a single node C without Redis (the reference)."""
    with RedisServer() as redis, node(redis) as a, node(redis) as b, node(None) as c:
        wait_up(a)
        wait_up(b)
        yield redis, a, b, c


def test_next_turn_on_another_node_hits_redis_and_equals_a_single_node(cluster):
    redis, a, b, c = cluster
    msgs = conversation("one")
    stores0 = metric(a, "recurd_redis_prefix_stores_total")
    first = chat(a, msgs)
    # the reference: both turns on one node without Redis (turn 2 a local prefix-cache hit)
    ref1 = chat(c, msgs)
    assert answer(first) == answer(ref1)
    wait_stores(a, stores0 + 2)  # the prompt's end and the reply's end
    u1 = first["usage"]
    turn1_end = u1["prompt_tokens"] + u1["completion_tokens"]
    assert turn1_end in entry_keys(redis)
    msgs2 = second_turn(msgs, first)
    ref2 = chat(c, msgs2)
    assert cached(ref2) == turn1_end  # the reference's own local hit
    hits0 = metric(b, "recurd_redis_prefix_hits_total")
    tok0 = metric(b, "recurd_redis_prefix_hit_tokens_total")
    folded0 = metric(b, "recurd_tokens_folded_total")
    second = chat(b, msgs2)
    assert answer(second) == answer(ref2)  # same tokens, bit-identical logprobs
    assert cached(second) == turn1_end
    assert metric(b, "recurd_redis_prefix_hits_total") - hits0 == 1
    assert metric(b, "recurd_redis_prefix_hit_tokens_total") - tok0 == turn1_end
    u2 = second["usage"]
    assert u2["prompt_tokens"] == ref2["usage"]["prompt_tokens"]
    assert metric(b, "recurd_tokens_folded_total") - folded0 == u2["prompt_tokens"] - turn1_end
    assert metric(b, "recurd_redis_prefix_bytes_read_total") > 0
    # B keeps the entry in its own cache: turn 3 on B is a local hit (no Redis entry needed)
    msgs3 = second_turn(msgs2, second)
    lhits0 = metric(b, "recurd_prefix_cache_hits_total")
    third = chat(b, msgs3)
    assert cached(third) == u2["prompt_tokens"] + u2["completion_tokens"]
    assert metric(b, "recurd_prefix_cache_hits_total") - lhits0 == 1
    # every prefix key carries the TTL
    for k in entry_keys(redis).values():
        assert 0 < redis.command("PTTL", k) <= 3600000


@pytest.mark.parametrize("damage", ["other_ids", "corrupt"])
def test_a_bad_entry_is_a_miss_not_a_wrong_answer(cluster, damage):
    redis, a, b, c = cluster
    msgs = conversation("bad-" + damage)
    stores0 = metric(a, "recurd_redis_prefix_stores_total")
    first = chat(a, msgs)
    wait_stores(a, stores0 + 2)
    u1 = first["usage"]
    turn1_end = u1["prompt_tokens"] + u1["completion_tokens"]
    key = entry_keys(redis)[turn1_end]
    v = bytearray(redis.command("GET", key))
    assert v[:8] == b"RECURPX1" and struct.unpack_from("<Q", v, 24)[0] == turn1_end
    if damage == "other_ids":
        # the same key, well-formed, but the ids are not the prompt's (one id changed, the
        # checksum made valid again): the hash of its ids no longer matches, and were it a true
        # collision the id-by-id comparison would refuse it
        struct.pack_into("<I", v, 40 + 4 * 3, struct.unpack_from("<I", v, 40 + 4 * 3)[0] ^ 1)
        v = reseal(bytes(v))
    else:
        v[len(v) // 2] ^= 0xff  # a byte of the state blob; checksum left as it was
        v = bytes(v)
    assert redis.command("SET", key, v) == "OK"
    msgs2 = second_turn(msgs, first)
    # the reference: a node without any cache folds the whole prompt
    with node(None, "--prefix-cache-bytes", "0") as off:
        ref2 = chat(off, msgs2)
    inv0 = metric(b, "recurd_redis_prefix_invalid_total")
    hits0 = metric(b, "recurd_redis_prefix_hits_total")
    folded0 = metric(b, "recurd_tokens_folded_total")
    second = chat(b, msgs2)
    assert cached(second) == 0
    assert metric(b, "recurd_redis_prefix_invalid_total") - inv0 == 1
    assert metric(b, "recurd_redis_prefix_hits_total") - hits0 == 0
    assert metric(b, "recurd_tokens_folded_total") - folded0 == second["usage"]["prompt_tokens"]
    assert refusals(b)[-1] == ("prefix_hash" if damage == "other_ids" else "prefix_checksum")
    assert answer(second) == answer(ref2)


def test_two_models_never_share_an_entry(cluster):
    redis, a, b, c = cluster
    msgs = conversation("models")
    stores0 = metric(a, "recurd_redis_prefix_stores_total")
    first = chat(a, msgs)
    wait_stores(a, stores0 + 2)
    u1 = first["usage"]
    turn1_end = u1["prompt_tokens"] + u1["completion_tokens"]
    # another model (same architecture, other weights: seed 8), same Redis, same conversation
    with Daemon("--prefix-checkpoint-interval", "0", "--redis", redis.url, "--redis-timeout-ms", "2000",
                "--redis-lease-ms", "5000", seed=8) as other:
        wait_up(other)
        fp_a = requests.get(a.url("/v1/model"), timeout=TIMEOUT).json()["fingerprint"]
        fp_o = requests.get(other.url("/v1/model"), timeout=TIMEOUT).json()["fingerprint"]
        assert fp_a != fp_o
        msgs2 = second_turn(msgs, first)
        look0 = metric(other, "recurd_redis_prefix_lookups_total")
        second = chat(other, msgs2)
        assert cached(second) == 0
        assert metric(other, "recurd_redis_prefix_lookups_total") - look0 == 1
        assert metric(other, "recurd_redis_prefix_hits_total") == 0
        # A's bytes copied under the other model's key for the same ids: refused by fingerprint
        key_a = entry_keys(redis, fp_a)[turn1_end]
        key_o = key_a.replace("{%s}" % fp_a, "{%s}" % fp_o)
        idx = [k.decode() for k in redis.command("KEYS", "recurd:pc:{%s}:x:*" % fp_a)]
        for k in idx:  # A's index members, under the other model's index keys
            for mbr in redis.command("ZRANGE", k, "0", "-1", "WITHSCORES")[::2]:
                score = int(mbr[:10], 16)
                redis.command("ZADD", k.replace("{%s}" % fp_a, "{%s}" % fp_o), str(score), mbr)
        redis.command("SET", key_o, redis.command("GET", key_a))
        msgs3 = msgs2[:-1] + [{"role": "user", "content": "And then, again?"}]
        inv0 = metric(other, "recurd_redis_prefix_invalid_total")
        third = chat(other, msgs3)
        assert cached(third) == 0
        assert metric(other, "recurd_redis_prefix_invalid_total") - inv0 == 1
        assert refusals(other) == ["othermodel"]


def test_redis_down_is_a_plain_miss():
    with RedisServer() as redis, node(redis) as a:
        wait_up(a)
        redis.kill()
        deadline = time.time() + 10
        while requests.get(a.url("/healthz"), timeout=TIMEOUT).json()["redis"]["reachable"]:
            assert time.time() < deadline
            time.sleep(0.05)
        err0 = metric(a, "recurd_redis_prefix_errors_total")
        r = chat(a, conversation("down"))
        assert r["choices"][0]["message"]["content"] is not None
        assert metric(a, "recurd_redis_prefix_errors_total") - err0 == 1
        assert metric(a, "recurd_redis_prefix_dropped_total") >= 2  # its stores were not sent
