"""--state-dir together with --redis (docs/SCALING.md "State dir with Redis"; server/residency.c,
server/redis_tier.c, server/redis_stamp.h): RAM, then the local state_dir, then Redis.

A state_dir file is a cache of one Redis version: stamped with it (its last 24 bytes: "RECURRV1",
u64 version, u64 checksum), written only while Redis holds exactly the session's state, and used
only after the acquire script said that version is current. What is checked, each against an
independent reference (a single node without Redis or state_dir fed the same tokens: its lines
are the expected ones, compared exactly, logprobs included) and Redis's own keys:
  - resume from the file when Redis agrees: no state bytes read from Redis
    (recurd_redis_bytes_read_total stays 0, recurd_redis_file_hits_total counts it);
  - resume from Redis when another node moved the session on: the stale file is not used
    (recurd_redis_file_stale_total), the answers are bit-identical, the file is rewritten with
    Redis's version at the node's next write;
  - a kill -9 and restart of a node with both: every session comes back with every
    acknowledged token, from its file when current, else from Redis;
  - DELETE removes the file and the keys;
  - a file whose stamp is corrupt or missing is not trusted (recurd_redis_file_rejected_total),
    the state comes from Redis;
  - a fenced node never writes its stale state to its file;
  - the prefix cache spills to state_dir/prefix_cache with --redis too.
"""
import contextlib
import os
import random
import signal
import socket
import json
import struct
import time

import pytest
import requests

from daemon import Daemon, read_to_eof
from persist_helpers import metrics
from redis_server import RedisServer
from test_metrics_format import promtool_check
from test_redis_tier import (LEASE_MS, PROMPT, STEPS, TIMEOUT, create, fold, fold_ok, info, metric,
                             node, until_served, wait_redis_up)

STAMP = b"RECURRV1"


@pytest.fixture(scope="module")
def reference():
    """The lines a single node without Redis gives for PROMPT then STEPS."""
    with Daemon() as d:
        sid = create(d, PROMPT)
        return [fold_ok(d, sid, s) for s in STEPS]


def sd_node(redis, state_dir, *extra, name="node-a", **kw):
    d = node(redis, "--state-dir", str(state_dir), *extra, name=name, **kw).start()
    wait_redis_up(d)
    return d


@contextlib.contextmanager
def running(redis, state_dir, *extra, **kw):
    """sd_node, stopped at the end (a sanitizer report fails the test)."""
    d = sd_node(redis, state_dir, *extra, **kw)
    try:
        yield d
    finally:
        d.stop()


def snap(state_dir, sid):
    return state_dir / ("%s.snap" % sid)


def stamp_of(path):
    """The version a file is stamped with (None: no stamp)."""
    b = path.read_bytes()
    if len(b) < 24 or b[-24:-16] != STAMP:
        return None
    return struct.unpack("<Q", b[-16:-8])[0]


def redis_version(redis, sid):
    keys = [k.decode() for k in redis.command("KEYS", "recurd:*%s}:ver" % sid)]
    assert len(keys) == 1, keys
    return int(redis.command("GET", keys[0]))


def redis_keys(redis, sid):
    return redis.command("KEYS", "recurd:*%s}:*" % sid)


def test_resume_from_the_file_when_redis_agrees(tmp_path, reference):
    with RedisServer() as redis:
        with running(redis, tmp_path) as a:
            sid = create(a, PROMPT)
            got = [fold_ok(a, sid, STEPS[0]), fold_ok(a, sid, STEPS[1])]
            assert a.terminate() == 0  # SIGTERM: committed, then written with its version
        v = redis_version(redis, sid)
        assert stamp_of(snap(tmp_path, sid)) == v == 3  # create + two folds
        with running(redis, tmp_path) as a:
            assert metric(a, "recurd_sessions_stored") == 1
            got.append(fold_ok(a, sid, STEPS[2]))
            got.append(fold_ok(a, sid, STEPS[3]))
            assert got == reference  # bit for bit
            assert metric(a, "recurd_redis_file_hits_total") == 1
            assert metric(a, "recurd_redis_hits_total") == 0
            assert metric(a, "recurd_redis_bytes_read_total") == 0  # no state bytes from Redis
            assert metric(a, "recurd_redis_file_stale_total") == 0
            assert redis_version(redis, sid) == 5
            page = requests.get(a.url("/metrics"), timeout=TIMEOUT).text
            rc, out = promtool_check(page)  # the tier's and persistence's blocks together
            assert rc == 0 and out == "", out
            assert "recurd_redis_file_rejected_total 0" in page


def test_resume_from_redis_when_another_node_moved_it_on(tmp_path, reference):
    with RedisServer() as redis:
        with running(redis, tmp_path) as a:
            sid = create(a, PROMPT)
            got = [fold_ok(a, sid, STEPS[0])]
            assert a.terminate() == 0  # gives the lease back; the file holds version 2
        assert stamp_of(snap(tmp_path, sid)) == 2
        with running(redis, tmp_path / "b", name="node-b") as b:
            got.append(fold_ok(b, sid, STEPS[1]))
            got.append(fold_ok(b, sid, STEPS[2]))
            assert metric(b, "recurd_redis_hits_total") == 1
            assert b.terminate() == 0
        assert redis_version(redis, sid) == 4
        with running(redis, tmp_path) as a:
            got.append(fold_ok(a, sid, STEPS[3]))
            assert got == reference  # the stale file was not used
            assert metric(a, "recurd_redis_file_stale_total") == 1
            assert metric(a, "recurd_redis_file_hits_total") == 0
            assert metric(a, "recurd_redis_bytes_read_total") > 0
            assert a.terminate() == 0  # its next write: the file gets Redis's version
        assert stamp_of(snap(tmp_path, sid)) == redis_version(redis, sid) == 5


def test_kill9_and_restart_with_both_loses_nothing_acknowledged(tmp_path, reference):
    n = 6
    with RedisServer() as redis:
        sids = []
        with running(redis, tmp_path, "--snapshot-interval-ms", "100") as a:
            for _ in range(n):
                sid = create(a, PROMPT)
                fold_ok(a, sid, STEPS[0])
                sids.append(sid)
            deadline = time.time() + 10
            while sum(stamp_of(snap(tmp_path, s)) == 2 if snap(tmp_path, s).exists() else 0
                      for s in sids) < n:
                assert time.time() < deadline, "the periodic round never wrote the files"
                time.sleep(0.05)
            for sid in sids[:3]:  # acknowledged (redis_sync), maybe not in the file
                fold_ok(a, sid, STEPS[1])
            a.kill()
        with running(redis, tmp_path) as a:  # the same name: its own leases are its own
            for i, sid in enumerate(sids):
                want = len(PROMPT) + len(STEPS[0]) + (len(STEPS[1]) if i < 3 else 0)
                assert info(a, sid)["tokens_seen"] == want, (i, sid)
            hits = metric(a, "recurd_redis_file_hits_total")
            stale = metric(a, "recurd_redis_file_stale_total")
            assert hits >= 3 and hits + stale == n, (hits, stale)
            # one continues bit-identically
            assert [fold_ok(a, sids[0], STEPS[2]), fold_ok(a, sids[0], STEPS[3])] == reference[2:]


def test_delete_removes_the_file_and_the_keys(tmp_path):
    with RedisServer() as redis:
        with running(redis, tmp_path) as a:
            s1, s2 = create(a, PROMPT), create(a, PROMPT)
            fold_ok(a, s1, STEPS[0])
            fold_ok(a, s2, STEPS[0])
            assert a.terminate() == 0
        assert snap(tmp_path, s1).exists() and snap(tmp_path, s2).exists()
        with running(redis, tmp_path) as a:
            fold_ok(a, s2, STEPS[1])  # s2 resident (from its file), s1 on disk only
            for sid in (s1, s2):
                assert len(redis_keys(redis, sid)) > 0
                r = requests.delete(a.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
                assert r.status_code == 204, r.text
                assert redis_keys(redis, sid) == []
                assert not snap(tmp_path, sid).exists()
                r = requests.get(a.url("/v1/sessions/%s" % sid), timeout=TIMEOUT)
                assert r.status_code == 404
            # a session deleted (or expired) in Redis behind the node's back: 404, its file removed
            s3 = create(a, PROMPT)
            assert a.terminate() == 0
        assert snap(tmp_path, s3).exists()
        redis.command("DEL", *redis_keys(redis, s3))
        with running(redis, tmp_path) as a:
            r = requests.get(a.url("/v1/sessions/%s" % s3), timeout=TIMEOUT)
            assert r.status_code == 404, r.text
            assert not snap(tmp_path, s3).exists()


def test_a_file_with_a_bad_or_no_stamp_is_not_trusted(tmp_path, reference):
    with RedisServer() as redis:
        with running(redis, tmp_path) as a:
            bad, none = create(a, PROMPT), create(a, PROMPT)
            got = {s: [fold_ok(a, s, STEPS[0]), fold_ok(a, s, STEPS[1])] for s in (bad, none)}
            assert a.terminate() == 0
        # the version flipped (the checksum no longer matches); the stamp cut off
        p = snap(tmp_path, bad)
        b = bytearray(p.read_bytes())
        b[-16] ^= 1
        p.write_bytes(bytes(b))
        p = snap(tmp_path, none)
        p.write_bytes(p.read_bytes()[:-24])
        with running(redis, tmp_path) as a:
            for s in (bad, none):
                got[s] += [fold_ok(a, s, STEPS[2]), fold_ok(a, s, STEPS[3])]
                assert got[s] == reference
            assert metric(a, "recurd_redis_file_rejected_total") == 2
            assert metric(a, "recurd_redis_file_hits_total") == 0
            assert metric(a, "recurd_redis_hits_total") == 2  # both from Redis
        # the bad stamp was quarantined by the rule it broke; the unstamped file was left
        q = list((tmp_path / "quarantine").iterdir())
        assert any(bad in f.name and "stamp_checksum" in f.name for f in q), q


def test_a_fenced_node_never_writes_its_stale_state(tmp_path):
    slow = ("--write-high-watermark", "1024", "--write-low-watermark", "512",
            "--max-tokens-per-request", "1000000", "--snapshot-interval-ms", "100")
    with RedisServer() as redis:
        with running(redis, tmp_path, *slow) as a, running(redis, tmp_path / "b", name="node-b") as b:
            sid = create(a, PROMPT)
            deadline = time.time() + 10
            while not (snap(tmp_path, sid).exists() and stamp_of(snap(tmp_path, sid)) == 1):
                assert time.time() < deadline, "the periodic round never wrote the file"
                time.sleep(0.05)
            # a long generation on A that its reader does not read (A renews its lease)
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", a.port))
            body = json.dumps({"max_tokens": 1000000, "seed": 1}).encode()
            s.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                      % (sid.encode(), len(body), body))
            time.sleep(2 * LEASE_MS / 1000.0)
            os.kill(a.pid, signal.SIGSTOP)
            try:
                time.sleep(1.5 * LEASE_MS / 1000.0)
                until_served(b, sid, [1, 2, 3])  # B takes it over
            finally:
                os.kill(a.pid, signal.SIGCONT)
            s.settimeout(30)
            assert s.recv(4096)
            s.close()  # the cancelled generation's commit is refused
            deadline = time.time() + 20
            while metric(a, "recurd_redis_fenced_commits_total") < 1:
                assert time.time() < deadline, "A's commit was never refused"
                time.sleep(0.05)
            time.sleep(0.5)  # periodic rounds on A meanwhile
            assert a.terminate() == 0  # and SIGTERM's: nothing of A's generation is written
        assert stamp_of(snap(tmp_path, sid)) == 1
    # the file, loaded without Redis (the stamp is taken off): the create's state, nothing more
    with Daemon("--state-dir", str(tmp_path)) as d:
        assert info(d, sid)["tokens_seen"] == len(PROMPT)


def test_prefix_cache_spills_with_redis(tmp_path):
    rnd = random.Random(16)
    with RedisServer() as redis:
        with running(redis, tmp_path, "--prefix-cache-bytes", "60000",
                     "--prefix-checkpoint-interval", "0", "--redis-prefix-max-entries", "0") as d:
            prompts = [[rnd.randrange(256) for _ in range(30)] for _ in range(8)]
            for p in prompts:
                r = requests.post(d.url("/v1/sessions"), json={"tokens": p, "prefix_cache": True},
                                  timeout=TIMEOUT)
                assert r.status_code == 201, r.text
            m = metrics(d)
            assert m["recurd_prefix_cache_spill_writes_total"] >= 1
            r = requests.post(d.url("/v1/sessions"), json={"tokens": prompts[0] + [1], "prefix_cache": True},
                              timeout=TIMEOUT)
            assert r.status_code == 201 and r.json()["cached_tokens"] == 30, r.text
            assert metrics(d)["recurd_prefix_cache_spill_loads_total"] >= 1
            assert any((tmp_path / "prefix_cache").glob("*.snap"))


def test_a_file_makes_no_session_exist(tmp_path):
    """Files are caches: they do not count against max_sessions, and nothing answers from one
    before Redis checked its version (Redis down: 503, the file kept, then used once Redis is
    back)."""
    with RedisServer() as redis:
        with running(redis, tmp_path) as a:
            olds = [create(a, PROMPT) for _ in range(2)]
            assert a.terminate() == 0
        assert all(snap(tmp_path, s).exists() for s in olds)
        with running(redis, tmp_path, "--max-sessions", "2") as a:
            assert metric(a, "recurd_sessions_stored") == 2
            news = [create(a, PROMPT) for _ in range(2)]  # the two files take no slot
            assert len(set(news)) == 2
            redis.kill()
            wait_redis_up(a, up=False)
            r = requests.get(a.url("/v1/sessions/%s" % olds[0]), timeout=TIMEOUT)
            assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable", r.text
            assert snap(tmp_path, olds[0]).exists()
            redis.restart()
            wait_redis_up(a)
            # room for it: the budget evicts a committed session of this node (written first)
            assert info(a, olds[0])["tokens_seen"] == len(PROMPT)
            assert metric(a, "recurd_redis_file_hits_total") == 1


def test_requests_held_across_the_read_and_the_version_check(tmp_path, reference):
    """Two folds sent at once for a session whose file is read by a reader thread: one read, one
    version check with Redis, both folds applied once each, in one of their two orders."""
    with RedisServer() as redis:
        with running(redis, tmp_path) as a:
            sid = create(a, PROMPT)
            fold_ok(a, sid, STEPS[0])
            fold_ok(a, sid, STEPS[1])
            assert a.terminate() == 0
        with running(redis, tmp_path, "--resume-cached-on-loop", "false") as a:
            socks = []
            for steps in (STEPS[2], STEPS[3]):
                s = socket.create_connection(("127.0.0.1", a.port))
                body = json.dumps({"tokens": steps, "top_k": 3}).encode()
                s.sendall(b"POST /v1/sessions/%s/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                          % (sid.encode(), len(body), body))
                socks.append(s)
            for s in socks:
                s.settimeout(30)
                data = read_to_eof(s)
                assert data.startswith(b"HTTP/1.1 200"), data[:200]
            assert info(a, sid)["tokens_seen"] == len(PROMPT) + sum(map(len, STEPS))
            assert metric(a, "recurd_session_disk_reads_total") == 1
            assert metric(a, "recurd_redis_file_hits_total") == 1
            assert metric(a, "recurd_redis_hits_total") == 0
            assert redis_version(redis, sid) == 5


def test_budget_evictions_write_stamped_files_that_resumes_use(tmp_path, reference):
    """max_resident_sessions 2, four sessions: each eviction writes the session stamped with the
    version Redis holds, and each later request resumes it from that file (no state bytes read
    from Redis), bit-identically."""
    def writes_done(d):
        deadline = time.time() + 10
        while metric(d, "recurd_snapshot_writes_in_flight") != 0:
            assert time.time() < deadline, "eviction writes never finished"
            time.sleep(0.02)

    with RedisServer() as redis:
        with running(redis, tmp_path, "--max-resident-sessions", "2") as a:
            sids = []
            for _ in range(4):
                sids.append(create(a, PROMPT))
                writes_done(a)
            got = {s: [] for s in sids}
            for step in STEPS[:2]:
                for sid in sids:
                    got[sid].append(fold_ok(a, sid, step))
                    writes_done(a)
            for sid in sids:
                assert got[sid] == reference[:2], sid
            # LRU over four sessions used in turn: two evictions by the creates, then each
            # request loads its session from the file and evicts the least recently used one
            assert metric(a, "recurd_sessions_evicted_total") == 10
            assert metric(a, "recurd_redis_file_hits_total") == 8
            for sid in sids[:2]:  # evicted last after their second fold: the current version
                assert stamp_of(snap(tmp_path, sid)) == redis_version(redis, sid) == 3
            assert metric(a, "recurd_redis_hits_total") == 0
            assert metric(a, "recurd_redis_bytes_read_total") == 0
