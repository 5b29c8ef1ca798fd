"""End-to-end tests of /generate as the workers run it: a generation steps on the worker threads
without a loop round trip per token (server/generation.h), and must still honour the contract —
cancellation when the client leaves, backpressure, batching with other sessions' traffic without
changing the seeded tokens, stop strings, the drain."""
import json
import re
import socket
import threading
import time

import pytest
import requests

from daemon import Daemon, read_to_eof

from test_e2e_api import create, fold, generate, info, next_logprobs, assert_close_probes, \
    rand_tokens, _metric


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def start_generate(d, sid, rcvbuf=None, **params):
    """A raw connection with a /generate request sent and nothing read yet."""
    sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sk.settimeout(30)
    sk.connect(("127.0.0.1", d.port))
    body = json.dumps(params).encode()
    sk.sendall(b"POST /v1/sessions/%s/generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (sid.encode(), len(body), body))
    return sk


def json_lines(data):
    return [json.loads(m) for m in re.findall(rb"^\{.*\}$", bytes(data), re.M)]


def wait_idle(d, sid, timeout=20):
    deadline = time.time() + timeout
    while True:
        st = info(d, sid)
        if st["pending_ops"] == 0:
            return st
        assert time.time() < deadline, st
        time.sleep(0.01)


def generations(d, reason):
    body = requests.get(d.url("/metrics"), timeout=10).text
    return int(re.search(r'^recurd_generations_total\{reason="%s"\} (\d+)$' % reason, body,
                         re.M).group(1))


# ---------------------------------------------------------------------------- cancellation

def test_cancel_mid_stream_tokens_seen_matches_what_was_streamed(d):
    """The client reads some lines and leaves: the generation stops promptly, every streamed
    token is folded, tokens_seen counts exactly the tokens generated (a replay of that many
    greedy tokens gives the same state), and the stream is counted as cancelled."""
    prompt = rand_tokens(6, 77)
    s = create(d, tokens=prompt)
    cancelled0 = generations(d, "cancelled")
    sk = start_generate(d, s["id"], max_tokens=8000, temperature=0)
    got = b""
    while got.count(b'"pos"') < 20:
        chunk = sk.recv(65536)
        assert chunk
        got += chunk
    streamed = [o for o in json_lines(got[:got.rindex(b"\n") + 1]) if "pos" in o]
    sk.close()
    st = wait_idle(d, s["id"])
    m = st["tokens_seen"] - len(prompt)
    assert len(streamed) <= m < 8000
    assert [o["pos"] for o in streamed] == list(range(len(prompt), len(prompt) + len(streamed)))
    time.sleep(0.2)
    assert info(d, s["id"])["tokens_seen"] == st["tokens_seen"]  # stopped for good
    assert generations(d, "cancelled") == cancelled0 + 1
    # the streamed tokens are the first of the m folded ones, and the state is that of m tokens
    r = create(d, tokens=prompt)
    lines, done = generate(d, r["id"], max_tokens=m, temperature=0)
    assert [l["token"] for l in lines[:len(streamed)]] == [o["token"] for o in streamed]
    assert done["tokens_seen"] == st["tokens_seen"]
    assert_close_probes(next_logprobs(d, s["id"]), next_logprobs(d, r["id"]), tol=0)


# ---------------------------------------------------------------------------- backpressure

def test_reader_that_stops_pauses_the_generation_and_others_are_served():
    """A client that does not read: once the connection's output is over write_high_watermark,
    the generation pauses (tokens_seen stops advancing, far below max_tokens), other sessions
    are served meanwhile, and when the client reads again the stream resumes and completes."""
    # The kernel's send buffer of a loopback socket grows to tcp_wmem's maximum (4 MiB here),
    # so the stream must be longer than that for the daemon's own bound to matter.
    n = 100000
    with Daemon("--write-high-watermark", "4096", "--write-low-watermark", "1024",
                "--max-tokens-per-request", str(n)) as d:
        s = create(d, tokens=[1, 2, 3])
        other = create(d, tokens=[4, 5])
        sk = start_generate(d, s["id"], rcvbuf=4096, max_tokens=n, seed=11)
        # wait until it stalls
        seen, last_change = info(d, s["id"])["tokens_seen"], time.time()
        deadline = time.time() + 20
        while time.time() - last_change < 0.5:
            assert time.time() < deadline, "the generation never paused"
            time.sleep(0.05)
            now = info(d, s["id"])["tokens_seen"]
            if now != seen:
                seen, last_change = now, time.time()
        paused_at = seen
        assert 3 < paused_at < 3 + n
        assert info(d, s["id"])["pending_ops"] == 1
        # the daemon stays responsive: another session folds and generates
        t0 = time.time()
        with requests.Session() as http:
            for t in range(20):
                fold(d, other["id"], [t], session=http)
            generate(d, other["id"], session=http, max_tokens=50, seed=1)
        assert time.time() - t0 < 5
        assert info(d, s["id"])["tokens_seen"] == paused_at  # still paused
        # read everything: it resumes and ends normally
        data = read_to_eof(sk)
        objs = json_lines(data)
        gen = [o for o in objs if "pos" in o]
        assert len(gen) == n
        assert [o["pos"] for o in gen] == list(range(3, 3 + n))
        assert objs[-1] == {"done": True, "reason": "length", "tokens_seen": 3 + n}
        # the same tokens as an uninterrupted run with the same seed
        r = create(d, tokens=[1, 2, 3])
        lines, _ = generate(d, r["id"], max_tokens=n, seed=11)
        assert [l["token"] for l in lines] == [o["token"] for o in gen]


# ---------------------------------------------------------------------------- batching, seeds

def test_generation_interleaved_with_other_traffic_is_reproducible(d):
    """A seeded generation gives the same tokens alone and while other sessions fold, generate
    and prefill at the same time (its steps share batches with theirs)."""
    prompt = rand_tokens(10, 5)
    params = dict(max_tokens=600, seed=1234, temperature=0.9, top_k=50, top_p=0.9)
    a = create(d, tokens=prompt)
    alone, done_alone = generate(d, a["id"], **params)
    batched0 = _metric(d, "recurd_decode_batched_tokens_total")
    batches0 = _metric(d, "recurd_decode_batches_total")
    stop = threading.Event()
    errors = []

    def traffic(i):
        try:
            s = create(d, tokens=rand_tokens(3, 900 + i))
            with requests.Session() as http:
                k = 0
                while not stop.is_set():
                    if k % 7 == 3:
                        fold(d, s["id"], rand_tokens(100, k), session=http)  # a prefill slice
                    elif k % 5 == 4:
                        generate(d, s["id"], session=http, max_tokens=20, seed=k)
                    else:
                        fold(d, s["id"], [k % 256], session=http)
                    k += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=traffic, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    try:
        results = []
        for _ in range(3):
            b = create(d, tokens=prompt)
            results.append(generate(d, b["id"], **params))
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[:3]
    for lines, done in results:
        assert [l["token"] for l in lines] == [l["token"] for l in alone]
        for x, y in zip(lines, alone):
            assert abs(x["logprob"] - y["logprob"]) <= 1e-5
        assert done == done_alone
    # the steps really were batched with others
    nb = _metric(d, "recurd_decode_batches_total") - batches0
    nt = _metric(d, "recurd_decode_batched_tokens_total") - batched0
    assert nt > nb


def test_long_prefill_does_not_stall_a_running_generation(d):
    """Prefill slices and a running generation alternate: a generation started before a big
    prefill keeps producing while the prefill runs, and both finish."""
    g = create(d, tokens=[9, 9])
    p = create(d)
    out = {}

    def prefill():
        out["fold"] = fold(d, p["id"], rand_tokens(8000, 3), top_k=0)

    sk = start_generate(d, g["id"], max_tokens=3000, seed=2)
    t = threading.Thread(target=prefill)
    t.start()
    data = read_to_eof(sk)
    t.join(60)
    objs = json_lines(data)
    assert objs[-1]["reason"] == "length" and objs[-1]["tokens_seen"] == 3002
    assert out["fold"][1]["tokens_seen"] == 8000


# ---------------------------------------------------------------------------- stop strings

def _printable(bs):
    return all(32 <= b < 127 and b not in (34, 92) for b in bs)


def test_stop_string_stops_exactly_at_its_first_occurrence(d):
    """With a stop string taken from the middle of a greedy run, the same run stops right after
    the token that first completes it: lines are the run's prefix up to there, reason "stop",
    and tokens_seen counts the stop string's tokens as folded."""
    prompt = [ord(c) for c in "Once upon a time "]
    ref_s = create(d, tokens=prompt)
    ref, _ = generate(d, ref_s["id"], max_tokens=200, temperature=0)
    toks = [l["token"] for l in ref]
    cand = [k for k in range(20, 190) if _printable(toks[k:k + 3])]
    if not cand:
        pytest.skip("the greedy run has no printable 3-byte window")
    k = cand[0]
    stop = bytes(toks[k:k + 3])
    end = next(j for j in range(len(toks)) if bytes(toks[:j + 1]).endswith(stop))
    for framing in ("ndjson", "sse"):
        s = create(d, tokens=prompt)
        headers = {"Accept": "text/event-stream"} if framing == "sse" else {}
        r = requests.post(d.url("/v1/sessions/%s/generate" % s["id"]), headers=headers,
                          json={"max_tokens": 200, "temperature": 0,
                                "stop": ["zzzz-never", stop.decode()]}, timeout=60)
        assert r.status_code == 200
        objs = json_lines(r.text.replace("data: ", "").encode())
        gen = [o for o in objs if "pos" in o]
        assert [o["token"] for o in gen] == toks[:end + 1]
        assert objs[-1] == {"done": True, "reason": "stop", "tokens_seen": len(prompt) + end + 1}
        assert info(d, s["id"])["tokens_seen"] == len(prompt) + end + 1
    # the counters follow: every generated token counted once, one more "stop"
    stops0, gen0 = generations(d, "stop"), _metric(d, "recurd_tokens_generated_total")
    s = create(d, tokens=prompt)
    r = requests.post(d.url("/v1/sessions/%s/generate" % s["id"]),
                      json={"max_tokens": 200, "temperature": 0, "stop": [stop.decode()]}, timeout=60)
    assert r.status_code == 200
    assert generations(d, "stop") == stops0 + 1
    assert _metric(d, "recurd_tokens_generated_total") == gen0 + end + 1


# ---------------------------------------------------------------------------- drain

def test_sigterm_drain_timeout_ends_running_generation_as_cancelled():
    """SIGTERM while a generation runs on the workers (read as it comes, so never paused): after
    drain_timeout_ms the stream ends with reason "cancelled" and a tokens_seen that matches its
    lines; the daemon exits 0."""
    # The default model (~10k tokens/s here): a client reading in Python keeps up with it, so
    # the stream is never held by backpressure and the drain must stop it on the workers.
    n = 100000
    with Daemon("--drain-timeout-ms", "300", "--max-tokens-per-request", str(n),
                model_config=None) as d:
        s = create(d, tokens=[1, 2])
        sk = start_generate(d, s["id"], max_tokens=n, seed=3)
        got = bytearray()
        while got.count(b'"pos"') < 10:
            chunk = sk.recv(65536)
            assert chunk
            got += chunk
        d.proc.send_signal(15)
        got += read_to_eof(sk)
        objs = json_lines(got)
        gen = [o for o in objs if "pos" in o]
        done = objs[-1]
        assert done["reason"] == "cancelled", done
        assert done["tokens_seen"] == 2 + len(gen)
        assert [o["pos"] for o in gen] == list(range(2, 2 + len(gen)))
        assert d.proc.wait(20) == 0
