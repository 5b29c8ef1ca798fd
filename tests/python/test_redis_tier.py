"""The Redis tier (server/redis_tier.c, docs/SCALING.md "Redis tier"): a real redis-server
(Debian's package; temp dir, free loopback port, AOF with fsync always) and two recurd nodes
talking to it directly (no nginx).

What is checked, each against an independent reference (a single recurd without Redis fed the
same tokens: its lines are the expected ones, compared exactly, logprobs included):
  - a session created and folded on node A is served by node B after A is killed -9: the same
    predictions bit for bit, no acknowledged fold lost with redis_sync;
  - without redis_sync the loss is at most the last request's commit (the stated window);
  - fencing: A SIGSTOPped past its lease with a request open, B takes the session over; when A
    resumes, its commit is refused (session_fenced, recurd_redis_fenced_commits_total) and B's
    state is what Redis keeps;
  - a session leased by a live node is answered 409 session_leased with the holder's name;
  - redis-server killed: 503 store_unavailable with Retry-After, /healthz degraded; restarted
    on its AOF: the nodes reconnect and no acknowledged fold is lost;
  - DELETE removes the keys; the keys carry the model fingerprint and a hash tag; TTL = idle_ttl;
  - a lease never expires in Redis (a deadline against Redis's clock, the key kept with the
    session's TTL): a resume after it ran out writes nothing to the AOF, expires no key;
  - config refusals name their rule.
The resume-from-Redis latency (p99) and Redis bytes per session are printed (docs/SCALING.md has
the figures); the bound asserted is loose (machine load), the figure is reported.
"""
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import time

import pytest
import requests

from daemon import RECURD, ROOT, TINY_MODEL, Daemon
from redis_server import RedisServer

TIMEOUT = 30
LEASE_MS = 1000


def node(redis, *extra, sync=True, name=None, model_config=TINY_MODEL, lease_ms=LEASE_MS,
         timeout_ms=300):
    args = ["--redis", redis.url, "--redis-lease-ms", str(lease_ms), "--redis-timeout-ms", str(timeout_ms),
            "--redis-sync", "true" if sync else "false"]
    if name:
        args += ["--node-name", name]
    return Daemon(*args, *extra, model_config=model_config)


@contextlib.contextmanager
def two_nodes(redis, a_args=(), sync=True, names=("node-a", "node-b"), model_config=TINY_MODEL,
              **kw):
    """Nodes A and B on redis, both connected; stopped (or their kill -9 reaped) at the end.
    kw: lease_ms, timeout_ms of both."""
    a = node(redis, *a_args, sync=sync, name=names[0], model_config=model_config, **kw).start()
    b = None
    try:
        b = node(redis, sync=sync, name=names[1], model_config=model_config, **kw).start()
        wait_redis_up(a)
        wait_redis_up(b)
        yield a, b
    finally:
        a.stop()
        if b:
            b.stop()


def wait_redis_up(d, up=True, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        h = requests.get(d.url("/healthz"), timeout=TIMEOUT).json()
        if h["redis"]["reachable"] == up:
            return h
        time.sleep(0.05)
    raise AssertionError("redis reachable never became %s: %s" % (up, h))


def create(d, tokens):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens}, timeout=TIMEOUT)
    assert r.status_code == 201, r.text
    return r.json()["session"] if "session" in r.json() else r.json()["id"]


def fold(d, sid, tokens):
    """(status, lines) of a fold; lines parsed."""
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": tokens, "top_k": 3},
                      timeout=TIMEOUT)
    if r.status_code != 200:
        return r.status_code, r.json()
    return 200, [json.loads(l) for l in r.text.splitlines() if l.strip()]


def fold_ok(d, sid, tokens):
    st, ls = fold(d, sid, tokens)
    assert st == 200, ls
    assert ls[-1].get("done") is True, ls[-1]
    return ls


def metric(d, name):
    for line in requests.get(d.url("/metrics"), timeout=TIMEOUT).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def until_served(d, sid, tokens, timeout=10.0):
    """Fold on d, retrying while another node's lease is still live (409 session_leased)."""
    deadline = time.time() + timeout
    while True:
        st, ls = fold(d, sid, tokens)
        if st == 200:
            return ls
        assert st == 409 and ls["error"]["code"] == "session_leased", (st, ls)
        assert time.time() < deadline, "the lease was never released"
        time.sleep(0.05)


def info(d, sid):
    r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


PROMPT = [5, 17, 3, 99, 42, 7, 7, 120]
STEPS = [[11, 12], [13], [200, 201, 202, 9], [4]]


@pytest.fixture(scope="module")
def reference():
    """The lines a single node without Redis gives for PROMPT then STEPS."""
    with Daemon() as d:
        sid = create(d, PROMPT)
        return [fold_ok(d, sid, s) for s in STEPS]


def test_config_refusals():
    cases = [
        (["--redis", "http://127.0.0.1:6379"], "redis://HOST:PORT"),
        (["--redis", "rediss://127.0.0.1:6379"], "TLS"),
        (["--redis", "redis://127.0.0.1:70000"], "port"),
        (["--redis", "redis://127.0.0.1:6379/99"], "database"),
        (["--redis", "redis://u:p@127.0.0.1:6379"], "credentials"),
        (["--redis-key-prefix", "a:b"], "redis_key_prefix"),
        (["--node-name", "a b"], "node_name"),
        (["--redis-lease-ms", "500", "--redis-timeout-ms", "300"], "redis_lease_ms"),
        (["--redis-timeout-ms", "5"], "redis_timeout_ms"),
    ]
    for args, word in cases:
        p = subprocess.run([RECURD, "--config", ""] + args, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert word in p.stderr, (args, p.stderr)


def test_kill9_failover_sync_is_bit_identical(reference):
    with RedisServer() as redis, two_nodes(redis) as (a, b):
        sid = create(a, PROMPT)
        got = [fold_ok(a, sid, STEPS[0]), fold_ok(a, sid, STEPS[1])]
        # the keys: fingerprint and a hash tag; the state expires with idle_ttl_ms
        keys = sorted(k.decode() for k in redis.command("KEYS", "recurd:*"))
        # state, ver, lease, idem (the last commit's token: a late commit is recognised)
        assert len(keys) == 4 and all(":%s}:" % sid in k for k in keys), keys
        fp = keys[0].split("{")[1].split(":")[0]
        assert len(fp) == 16 and all(k.startswith("recurd:{%s:%s}:" % (fp, sid)) for k in keys)
        # the lease: "<node> <deadline, ms of Redis's clock>", no TTL of its own (the state's)
        node_name, deadline = redis.command("GET", "recurd:{%s:%s}:lease" % (fp, sid)).split()
        now_ms = int(redis.command("TIME")[0]) * 1000
        assert node_name == b"node-a" and 0 < int(deadline) - now_ms <= LEASE_MS + 1000, deadline
        assert 0 < redis.command("PTTL", "recurd:{%s:%s}:state" % (fp, sid)) <= 3600000
        # B refuses while A's lease is live, and names A
        st, body = fold(b, sid, STEPS[2])
        assert st == 409 and body["error"]["code"] == "session_leased", body
        assert "node-a" in body["error"]["message"]
        a.kill()  # kill -9
        got.append(until_served(b, sid, STEPS[2]))
        got.append(fold_ok(b, sid, STEPS[3]))
        assert got == reference  # every line, logprobs and top-k included, bit for bit
        assert info(b, sid)["tokens_seen"] == len(PROMPT) + sum(map(len, STEPS))
        assert metric(b, "recurd_redis_hits_total") == 1


def test_async_loses_at_most_the_last_commit(reference):
    with RedisServer() as redis, two_nodes(redis, sync=False) as (a, b):
        sid = create(a, PROMPT)
        fold_ok(a, sid, STEPS[0])
        time.sleep(0.2)  # well past one commit round trip: this fold is in Redis
        fold_ok(a, sid, STEPS[1])
        a.kill()
        seen = None
        deadline = time.time() + 10
        while time.time() < deadline:
            r = requests.get(b.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
            if r.status_code == 200:
                seen = r.json()["tokens_seen"]
                break
            assert r.status_code == 409, r.text
            time.sleep(0.05)
        # the window: the last request's commit may be lost, nothing before it
        after0 = len(PROMPT) + len(STEPS[0])
        assert seen in (after0, after0 + len(STEPS[1])), seen


def test_fencing_paused_node_commit_refused():
    slow = ("--write-high-watermark", "1024", "--write-low-watermark", "512",
            "--max-tokens-per-request", "1000000")
    with RedisServer() as redis, two_nodes(redis, a_args=slow) as (a, b):
        sid = create(a, PROMPT)
        # a long generation on A whose reader does not read: it pauses on backpressure and
        # A keeps renewing its lease meanwhile
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        s.connect(("127.0.0.1", a.port))
        body = json.dumps({"max_tokens": 1000000, "seed": 1}).encode()
        s.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                  % (sid.encode(), len(body), body))
        time.sleep(3 * LEASE_MS / 1000.0)  # renewed twice at least while paused
        st, ls = fold(b, sid, [1])
        assert st == 409, ls  # A still holds it
        os.kill(a.pid, signal.SIGSTOP)
        try:
            time.sleep(1.5 * LEASE_MS / 1000.0)
            ls_b = until_served(b, sid, [1, 2, 3])
            seen_b = ls_b[-1]["tokens_seen"]
        finally:
            os.kill(a.pid, signal.SIGCONT)
        # A's generation goes on; its end is a commit, refused: B has moved the session on.
        # Read a little of the stream (A is alive again), then leave: the cancelled
        # generation commits what it generated, and that commit is refused too.
        s.settimeout(30)
        assert s.recv(4096)
        s.close()
        deadline = time.time() + 20
        while metric(a, "recurd_redis_fenced_commits_total") < 1:
            assert time.time() < deadline, "A's commit was never refused"
            time.sleep(0.05)
        # Redis keeps B's state: the prompt and B's three tokens, nothing of A's generation
        assert seen_b == len(PROMPT) + 3
        assert info(b, sid)["tokens_seen"] == seen_b
        # A dropped its copy: it names B as the holder now
        st, body2 = fold(a, sid, [4])
        assert st == 409 and "node-b" in body2["error"]["message"], body2


def test_redis_killed_and_restarted(reference):
    with RedisServer() as redis, two_nodes(redis) as (a, b):
        sid = create(a, PROMPT)
        got = [fold_ok(a, sid, STEPS[0])]
        redis.kill()
        h = wait_redis_up(a, up=False)
        assert h["status"] == "degraded" and h["redis"]["error"], h
        r = requests.post(a.url("/v1/sessions/%s/tokens" % sid), json={"tokens": STEPS[1]},
                          timeout=TIMEOUT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert r.headers.get("Retry-After") == "1"
        r = requests.post(a.url("/v1/sessions"), json={"tokens": [1]}, timeout=TIMEOUT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert info(a, sid)["tokens_seen"] == len(PROMPT) + len(STEPS[0])  # reads go on
        redis.start()  # same port, same directory: the AOF brings every commit back
        wait_redis_up(a)
        got.append(fold_ok(a, sid, STEPS[1]))
        a.kill()
        wait_redis_up(b)
        got.append(until_served(b, sid, STEPS[2]))
        got.append(fold_ok(b, sid, STEPS[3]))
        assert got == reference


def test_delete_removes_keys_and_unknown_is_404():
    with RedisServer() as redis:
        with node(redis) as a:
            wait_redis_up(a)
            sid = create(a, PROMPT)
            # state, ver, idem (the commit's token); a create takes no lease
            assert len(redis.command("KEYS", "recurd:*")) == 3
            r = requests.delete(a.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
            assert r.status_code == 204
            assert redis.command("KEYS", "recurd:*") == []
            r = requests.get(a.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
            assert r.status_code == 404
            r = requests.get(a.url("/v1/sessions/%s" % ("0" * 32)), timeout=TIMEOUT)
            assert r.status_code == 404
            assert metric(a, "recurd_redis_misses_total") >= 1


def test_resume_from_redis_latency_and_bytes():
    """Sessions of the default model committed by A, then resumed on B from Redis alone (first
    request on B: lease + state in one round trip, restored): p50/p99 printed beside the same
    request once resident; bytes per session = the state value."""
    n = 200
    # timeouts far from a loaded machine's stalls: this test measures, it does not time out
    with RedisServer() as redis, two_nodes(redis, model_config=None, lease_ms=10000,
                                           timeout_ms=3000) as (a, b):
        sids = [create(a, PROMPT) for _ in range(n)]
        a.kill()
        time.sleep(1.2 * LEASE_MS / 1000.0)
        sess = requests.Session()
        times = []
        for sid in sids:
            t0 = time.perf_counter()
            r = sess.get(b.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
        times.sort()
        p50, p99 = times[n // 2], times[int(n * 0.99) - 1]
        resident = []
        for sid in sids:  # the same requests once resident: the HTTP round trip alone
            t0 = time.perf_counter()
            sess.get(b.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
            resident.append(time.perf_counter() - t0)
        resident.sort()
        state = redis.command("STRLEN", [k for k in redis.command("KEYS", "recurd:*:state")][0])
        print("\nresume from Redis (models/default), client side: p50 %.2f ms p99 %.2f ms "
              "(resident: p50 %.2f ms p99 %.2f ms), %d bytes per session"
              % (p50 * 1e3, p99 * 1e3, resident[n // 2] * 1e3, resident[int(n * 0.99) - 1] * 1e3,
                 state))
        # server side (B's access log, first byte to last byte): each id's first GET resumed it
        # from Redis, its second found it resident
        deadline = time.time() + 5
        while True:  # the access log is written in batches
            gets = [json.loads(l)["duration_s"] for l in b.logs() if '"event":"access"' in l
                    and '"route":"/v1/sessions/{id}"' in l and '"status":200' in l]
            if len(gets) >= 2 * n or time.time() > deadline:
                break
            time.sleep(0.1)
        assert len(gets) == 2 * n, len(gets)
        srv_resume, srv_resident = sorted(gets[:n]), sorted(gets[n:])
        print("server side: resume p50 %.3f ms p99 %.3f ms; resident p50 %.3f ms p99 %.3f ms"
              % (srv_resume[n // 2] * 1e3, srv_resume[int(n * 0.99) - 1] * 1e3,
                 srv_resident[n // 2] * 1e3, srv_resident[int(n * 0.99) - 1] * 1e3))
        assert p99 < 0.25, p99  # loose: a loaded 2-core machine; the figure is reported
        assert metric(b, "recurd_redis_hits_total") == n


def post_key(d, path, body, key, **headers):
    h = {"Idempotency-Key": key}
    h.update(headers)
    return requests.post(d.url(path), data=json.dumps(body), headers=h, timeout=TIMEOUT)


def last_line(r):
    return json.loads([l for l in r.text.splitlines() if l.strip()][-1])


def test_idempotency_key_single_node_rules():
    """Without Redis the records live with the session: a retry is answered from its record."""
    with Daemon() as d:
        sid = create(d, PROMPT)
        path = "/v1/sessions/%s/tokens" % sid
        r1 = post_key(d, path, {"tokens": STEPS[0]}, "k-1")
        assert r1.status_code == 200 and "Idempotency-Replayed" not in r1.headers
        seen = info(d, sid)["tokens_seen"]
        r2 = post_key(d, path, {"tokens": STEPS[0]}, "k-1")
        assert r2.status_code == 200 and r2.headers["Idempotency-Replayed"] == "true"
        assert [l for l in r2.text.splitlines() if l.strip()] == [r1.text.splitlines()[-1]]
        assert info(d, sid)["tokens_seen"] == seen  # folded once
        # SSE framing of the replay
        r3 = post_key(d, path, {"tokens": STEPS[0]}, "k-1", Accept="text/event-stream")
        assert r3.status_code == 200 and r3.text.startswith("id: done\ndata: {\"done\":true")
        # the same key for another kind of request on this session
        r = post_key(d, "/v1/sessions/%s/checkpoints" % sid, {}, "k-1")
        assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused"
        # checkpoints: the retry gets the same checkpoint, and there is one
        c1 = post_key(d, "/v1/sessions/%s/checkpoints" % sid, {}, "c-1")
        c2 = post_key(d, "/v1/sessions/%s/checkpoints" % sid, {}, "c-1")
        assert c1.status_code == c2.status_code == 201 and c1.json() == c2.json()
        lst = requests.get(d.url("/v1/sessions/%s/checkpoints" % sid), timeout=TIMEOUT).json()
        assert len(lst["checkpoints"]) == 1
        # refusals, nothing changed by them
        for key, code in [("", "invalid_idempotency_key"), ("a b", "invalid_idempotency_key"),
                          ("x" * 129, "invalid_idempotency_key")]:
            r = post_key(d, path, {"tokens": [1]}, key)
            assert r.status_code == 400 and r.json()["error"]["code"] == code, (key, r.text)
        r = post_key(d, "/v1/sessions", {"tokens": [1]}, "k-2")
        assert r.status_code == 400 and r.json()["error"]["code"] == "idempotency_key_unsupported"
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n"
                  b"Content-Length: 2\r\n\r\n{}" % path.encode())
        assert b"duplicate_idempotency_key" in s.recv(4096)
        s.close()
        assert info(d, sid)["tokens_seen"] == seen


def test_idempotent_retry_on_another_node_folds_once(reference):
    with RedisServer() as redis, two_nodes(redis) as (a, b):
        sid = create(a, PROMPT)
        fold_ok(a, sid, STEPS[0])
        path = "/v1/sessions/%s/tokens" % sid
        r1 = post_key(a, path, {"tokens": STEPS[1], "top_k": 3}, "retry-1")
        assert r1.status_code == 200
        g1 = post_key(a, "/v1/sessions/%s/generate" % sid, {"max_tokens": 5, "seed": 3}, "gen-1")
        assert g1.status_code == 200
        gen_tokens = [l["token"] for l in map(json.loads, g1.text.splitlines()[:-1])]
        a.kill()  # the client saw no answer (say): it retries both on another node
        deadline = time.time() + 10
        while True:
            r2 = post_key(b, path, {"tokens": STEPS[1], "top_k": 3}, "retry-1")
            if r2.status_code != 409:
                break
            assert time.time() < deadline
            time.sleep(0.05)
        assert r2.status_code == 200 and r2.headers["Idempotency-Replayed"] == "true", r2.text
        assert last_line(r2) == last_line(r1)
        g2 = post_key(b, "/v1/sessions/%s/generate" % sid, {"max_tokens": 5, "seed": 3}, "gen-1")
        assert g2.status_code == 200 and g2.headers["Idempotency-Replayed"] == "true"
        assert last_line(g2)["tokens"] == gen_tokens
        assert last_line(g2)["tokens_seen"] == last_line(g1)["tokens_seen"]
        # folded once: B's session is exactly A's, and goes on like the reference
        assert info(b, sid)["tokens_seen"] == len(PROMPT) + len(STEPS[0]) + len(STEPS[1]) + 5
        # the two records and the last commit's token
        assert redis.command("HLEN", [k for k in redis.command("KEYS", "recurd:*:idem")][0]) == 3


def test_sigterm_gives_leases_back():
    """A node stopped gracefully commits and releases its leases: another node serves its
    sessions at once (no 409 until redis_lease_ms)."""
    with RedisServer() as redis:
        a = node(redis, name="a", sync=False).start()
        b = node(redis, name="b", sync=False).start()
        try:
            wait_redis_up(a)
            wait_redis_up(b)
            sid = create(a, PROMPT)
            fold_ok(a, sid, STEPS[0])
            assert a.terminate() == 0
            st, ls = fold(b, sid, STEPS[1])
            assert st == 200, ls
            assert ls[-1]["tokens_seen"] == len(PROMPT) + len(STEPS[0]) + len(STEPS[1])
        finally:
            a.stop()
            b.stop()


def test_create_takes_no_lease(reference):
    """nginx sends a create to any node and the session's requests to its ring owner: the
    creating node keeps no lease, so the owner serves the next request at once (no 409)."""
    with RedisServer() as redis, two_nodes(redis) as (a, b):
        sid = create(a, PROMPT)
        assert fold_ok(b, sid, STEPS[0]) == reference[0]  # at once, bit-identical
        fork = requests.post(b.url("/v1/sessions/%s/fork" % sid), timeout=TIMEOUT).json()["id"]
        assert fold_ok(a, fork, STEPS[1]) == reference[1]  # the fork's maker holds no lease either
        st, body = fold(a, sid, STEPS[1])  # but b holds sid's, taken by its fold
        assert st == 409 and "node-b" in body["error"]["message"], body


def test_a_resume_after_the_lease_ran_out_writes_nothing_to_the_aof():
    """A lease never expires in Redis (a run-out one stays until taken over, its key lives as
    long as the session's): an expiring key is written to the AOF as a DEL, fsynced with
    appendfsync always before Redis answers the next command — the resume in flight, or the
    resume that read the key lazily expired. Node B takes over a session whose lease (A's) ran
    out: Redis expired nothing and its AOF did not grow."""
    with RedisServer() as redis, two_nodes(redis) as (a, b):
        sid = create(a, PROMPT)
        fold_ok(a, sid, STEPS[0])  # A's lease, taken by its commit
        lease_key = [k for k in redis.command("KEYS", "recurd:*:lease")][0]
        state_key = lease_key[:-len(b"lease")] + b"state"
        assert redis.command("PTTL", lease_key) > 10 * LEASE_MS  # the session's TTL, not the lease's
        assert abs(redis.command("PTTL", lease_key) - redis.command("PTTL", state_key)) < 1000
        time.sleep(1.5 * LEASE_MS / 1000.0)
        aof = lambda: int(dict(l.split(":", 1) for l in redis.command("INFO", "persistence")  # noqa: E731
                               .decode().splitlines() if ":" in l)["aof_current_size"])
        aof0 = aof()
        assert info(b, sid)["tokens_seen"] == len(PROMPT) + len(STEPS[0])  # B resumes it
        assert aof() == aof0
        stats = redis.command("INFO", "stats").decode()
        assert "expired_keys:0\r\n" in stats, stats
        assert redis.command("GET", lease_key).split()[0] == b"node-b"
        st, body = fold(a, sid, STEPS[1])  # A's copy: B holds the lease now
        assert st == 409 and "node-b" in body["error"]["message"], body


def redis_tokens_seen(redis, sid):
    """tokens_seen of the session state Redis holds (the snapshot header: u64 at byte 24), or
    None when it holds none."""
    keys = redis.command("KEYS", "recurd:*%s}:state" % sid)
    if not keys:
        return None
    blob = redis.command("GET", keys[0])
    return None if blob is None else struct.unpack_from("<Q", blob, 24)[0]


def test_paused_redis_recovers_within_the_backoff_bound():
    """redis_sync off, redis_timeout_ms 300, the default model (~200 KB per commit): Redis paused
    (SIGSTOP) while 60 sessions fold; each fold is answered (async), the node sees Redis down
    and says so. Once Redis runs again (SIGCONT) the node must be up within the reconnect bound
    (backoff <= 2 s, one PING round trip) and stay up while it sends the burst of 60 commits
    (~12 MB): the rule resets a connection only when no reply came for redis_timeout_ms, not
    when a command waited that long behind a burst Redis is answering. Before that, the burst
    itself timed out, was re-sent on the new connection, and timed out again (2026-12-02: a node
    saw Redis as down for minutes under load). Bound asserted loosely (a loaded machine); the
    measured figure is printed."""
    n = 60
    with RedisServer() as redis:
        # a lease longer than the test: the folds during the pause need no Redis round trip
        with node(redis, sync=False, name="pause-a", model_config=None, lease_ms=120000) as a:
            wait_redis_up(a)
            sess = requests.Session()
            sids = [create(a, PROMPT) for _ in range(n)]
            for sid in sids:
                r = sess.post(a.url("/v1/sessions/%s/tokens" % sid), json={"tokens": STEPS[0]},
                              timeout=TIMEOUT)
                assert r.status_code == 200, r.text
            expected = len(PROMPT) + len(STEPS[0])
            deadline = time.time() + 60
            while any(redis_tokens_seen(redis, s) != expected for s in sids):
                assert time.time() < deadline, "the commits never reached Redis"
                time.sleep(0.1)
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                for sid in sids:  # answered at once: the commits wait for Redis
                    r = sess.post(a.url("/v1/sessions/%s/tokens" % sid),
                                  json={"tokens": STEPS[1]}, timeout=TIMEOUT)
                    assert r.status_code == 200, r.text
                h = wait_redis_up(a, up=False, timeout=30)
                assert h["status"] == "degraded", h
                time.sleep(1.0)  # connects meanwhile reach the kernel's listen queue only
                assert requests.get(a.url("/healthz"), timeout=TIMEOUT).json()["status"] == \
                    "degraded"  # a TCP connect to a stopped Redis is not "up"
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            t0 = time.time()
            wait_redis_up(a, timeout=60)
            t_up = time.time() - t0
            expected += len(STEPS[1])
            deadline = time.time() + 60
            while any(redis_tokens_seen(redis, s) != expected for s in sids):
                assert time.time() < deadline, "the commits sent after the pause never landed"
                time.sleep(0.1)
            t_all = time.time() - t0
            reconnects = metric(a, "recurd_redis_reconnects_total")
            # (no "stays up" assertion: on a loaded machine Redis may truly be silent 300 ms)
            print("\nRedis resumed: node up after %.2f s, all %d commits in Redis after %.2f s, "
                  "%d reconnects in all" % (t_up, n, t_all, reconnects))
            assert t_up < 15, t_up  # the bound is 2 s + one round trip; loose for the load
            for sid in sids:  # the node serves every session with what Redis holds
                assert info(a, sid)["tokens_seen"] == expected


def test_a_commit_applied_after_its_timeout_is_not_fenced():
    """A commit whose connection was reset (no answer within redis_timeout_ms) may still be
    applied: its bytes were in Redis's socket when Redis stalled. The node's next commit of that
    session expects the version before it: without more, Redis refuses it (version moved on), the
    node drops its copy and the changes made since are lost (an acknowledged fold, redis_sync
    off). The commit script recognises its own late commit (the last commit's token) and commits
    over it: nothing is fenced, Redis ends with the node's state."""
    with RedisServer() as redis:
        with node(redis, sync=False, name="late-a", lease_ms=120000) as a:
            wait_redis_up(a)
            sid = create(a, PROMPT)
            fold_ok(a, sid, STEPS[0])
            want = len(PROMPT) + len(STEPS[0])
            deadline = time.time() + 30
            while redis_tokens_seen(redis, sid) != want:
                assert time.time() < deadline, "the commit never reached Redis"
                time.sleep(0.05)
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                fold_ok(a, sid, STEPS[1])  # its commit waits in Redis's socket
                wait_redis_up(a, up=False, timeout=30)  # reset: its answer is lost
                fold_ok(a, sid, STEPS[2])  # changed again while Redis is down
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            want += len(STEPS[1]) + len(STEPS[2])
            wait_redis_up(a, timeout=60)
            deadline = time.time() + 60
            while redis_tokens_seen(redis, sid) != want:
                assert time.time() < deadline, (redis_tokens_seen(redis, sid), want)
                time.sleep(0.05)
            assert metric(a, "recurd_redis_fenced_commits_total") == 0
            assert info(a, sid)["tokens_seen"] == want
