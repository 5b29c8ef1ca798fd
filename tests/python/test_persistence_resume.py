"""Resuming sessions from state_dir on a reader thread (residency.h srv_residency_resume,
readpool.h): with `resume_cached_on_loop false` every resume is read and checked off the loop
thread, which is the path a snapshot that is not in the page cache takes. Checked against the
loop-thread path (the default for a file in the page cache) on a copy of the same directory:
same state bytes, same fold results; a corrupt file still answers 404 and is quarantined; per-
session order holds for requests that arrive while the read is in flight (folds, DELETE)."""
import json
import os
import shutil
import socket
import threading

import requests

from daemon import read_to_eof
from persist_helpers import get_state, info, metrics, pd

VOCAB = 256
OFF_LOOP = ("--resume-cached-on-loop", "false")


def create(d, tokens):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def fold(d, sid, tok):
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [tok], "top_k": 5},
                      timeout=30)
    return r.status_code, r.text  # NDJSON: a line per folded token, then the summary


def make_sessions(sd, n):
    """n sessions written to sd by a clean shutdown; returns {id: state bytes}."""
    with pd(sd) as d:
        ids = [create(d, [(7 * i + k) % VOCAB for k in range(3 + i % 5)]) for i in range(n)]
        states = {sid: get_state(d, sid) for sid in ids}
        assert d.terminate() == 0
    return states


def test_reader_thread_resume_matches_the_loop_path(tmp_path):
    sd = tmp_path / "state"
    states = make_sessions(sd, 6)
    shutil.copytree(sd, tmp_path / "copy")
    with pd(sd, *OFF_LOOP) as off, pd(tmp_path / "copy") as ref:
        for i, (sid, blob) in enumerate(states.items()):
            assert get_state(off, sid) == blob  # decoded on a reader, serialized back: same bytes
            assert fold(off, sid, i) == fold(ref, sid, i)  # same fold on the loop-thread path
        m, mref = metrics(off), metrics(ref)
        assert m["recurd_session_disk_reads_total"] == len(states)
        assert m["recurd_sessions_loaded_total"] == len(states)
        assert mref["recurd_sessions_loaded_total"] == len(states)
        # the reference read every file from the page cache (just written): on the loop thread
        assert mref["recurd_session_disk_reads_total"] == 0


def test_corrupt_file_read_off_the_loop_is_quarantined(tmp_path):
    sd = tmp_path / "state"
    states = make_sessions(sd, 3)
    bad, good = list(states)[0], list(states)[1:]
    path = sd / (bad + ".snap")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 3] ^= 0x10  # one flipped bit in the payload
    open(path, "wb").write(data)
    with pd(sd, *OFF_LOOP) as d:
        st, body = fold(d, bad, 1)
        assert st == 404 and json.loads(body)["error"]["code"] == "session_not_found", body
        assert info(d, bad) == 404  # and stays gone: no second read
        q = os.listdir(sd / "quarantine")
        assert len(q) == 1 and q[0].startswith(bad + ".snap."), q
        for sid in good:  # the others are untouched
            assert get_state(d, sid) == states[sid]
        m = metrics(d)
        assert m["recurd_snapshots_quarantined_total"] == 1
        assert m["recurd_session_disk_reads_total"] == 3


def raw_request(port, method, path, body=None):
    """One request on a connection of its own; (status, body)."""
    data = json.dumps(body).encode() if body is not None else b""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" % (method, path, len(data))).encode()
              + data)
    head, _, rest = read_to_eof(s).partition(b"\r\n\r\n")
    if not head:  # the daemon closed the connection before answering (e.g. during a shutdown)
        raise ConnectionResetError("connection closed with no response")
    return int(head.split()[1]), rest


def test_requests_during_the_read_keep_their_order(tmp_path):
    """Each on-disk session gets a fold and then a DELETE (and a second fold on another session)
    at the same moment, on connections of their own, while its read is on a reader thread: every
    outcome is one of the orders the requests could have had — never a fold lost or applied to a
    deleted session — and a deleted session stays deleted after a restart."""
    sd = tmp_path / "state"
    states = make_sessions(sd, 12)
    ids = list(states)
    results = {}
    with pd(sd, *OFF_LOOP) as d:
        def go(key, method, path, body=None):
            results[key] = raw_request(d.port, method, path, body)

        threads = []
        for i, sid in enumerate(ids):
            if i % 2 == 0:  # fold racing a DELETE
                threads.append(threading.Thread(target=go, args=(("fold", sid), "POST",
                               "/v1/sessions/%s/tokens" % sid, {"tokens": [3]})))
                threads.append(threading.Thread(target=go, args=(("delete", sid), "DELETE",
                               "/v1/sessions/%s" % sid)))
            else:  # two folds racing each other
                for k in range(2):
                    threads.append(threading.Thread(target=go, args=(("fold%d" % k, sid), "POST",
                                   "/v1/sessions/%s/tokens" % sid, {"tokens": [4 + k]})))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        seen = {}
        for i, sid in enumerate(ids):
            if i % 2 == 0:
                fst, _ = results[("fold", sid)]
                dst, _ = results[("delete", sid)]
                assert dst in (200, 204), dst  # the session existed: the DELETE always finds it
                assert fst in (200, 404), fst  # folded before the DELETE, or after it (gone)
                assert info(d, sid) == 404
                assert not os.path.exists(sd / (sid + ".snap"))
            else:
                for k in range(2):
                    assert results[("fold%d" % k, sid)][0] == 200
                seen[sid] = info(d, sid)["tokens_seen"]
                assert seen[sid] == 3 + i % 5 + 2  # its prompt, then both folds, once each
        assert d.terminate() == 0
    with pd(sd) as d:
        for i, sid in enumerate(ids):
            if i % 2 == 0:
                assert info(d, sid) == 404  # not brought back by a write or a read in flight
            else:
                assert info(d, sid)["tokens_seen"] == seen[sid]


def test_sigterm_with_reads_in_flight(tmp_path):
    """SIGTERM while resumes are on the reader threads: they are settled (answered) and the
    daemon exits 0 with every file intact."""
    sd = tmp_path / "state"
    states = make_sessions(sd, 16)
    d = pd(sd, *OFF_LOOP).start()
    try:
        def get(sid):
            try:
                raw_request(d.port, "GET", "/v1/sessions/%s" % sid)
            except OSError:
                pass  # refused or closed by the shutdown: allowed; the files are what is checked

        threads = [threading.Thread(target=get, args=(sid,)) for sid in states]
        for t in threads:
            t.start()
        assert d.terminate() == 0
        for t in threads:
            t.join(30)
    finally:
        d.stop()
    with pd(sd) as d:
        for sid, blob in states.items():
            assert get_state(d, sid) == blob
