"""Constant memory: one session folds 1,000,000 tokens through the HTTP API (requests of 10,000
tokens, chunkwise prefill) and the daemon's resident memory (VmRSS) grows by less than 1 MiB
between 10k and 1M tokens. Uses the tiny seeded model so it stays well under a few minutes on
two busy cores."""
import json
import random
import time

import requests

from daemon import Daemon

TOTAL = 1_000_000
PER_REQUEST = 10_000


def fold_chunk(http, d, sid, body):
    """POST one request, read the whole NDJSON stream, return (lines, last object)."""
    r = http.post(d.url("/v1/sessions/%s/tokens" % sid), data=body,
                  headers={"Content-Type": "application/json"}, timeout=120, stream=True)
    assert r.status_code == 200, r.text
    data = b"".join(r.iter_content(65536))
    lines = data.split(b"\n")
    assert lines[-1] == b""
    return len(lines) - 1, json.loads(lines[-2])


def test_rss_flat_over_one_million_tokens():
    rng = random.Random(0)
    bodies = []
    for k in range(4):  # a few distinct request bodies, reused (the client's memory is not the point)
        toks = [rng.randrange(256) for _ in range(PER_REQUEST)]
        bodies.append(json.dumps({"tokens": toks, "top_k": 0}).encode())
    with Daemon("--max-tokens-per-request", str(PER_REQUEST), "--workers", "1") as d:
        with requests.Session() as http:
            sid = http.post(d.url("/v1/sessions"), timeout=30).json()["id"]
            folded = 0
            rss = {}
            t0 = time.time()
            while folded < TOTAL:
                n_lines, done = fold_chunk(http, d, sid, bodies[(folded // PER_REQUEST) % 4])
                assert n_lines == PER_REQUEST + 1
                folded += PER_REQUEST
                assert done == {"done": True, "tokens_seen": folded}
                if folded in (10_000, 100_000, 500_000, TOTAL):
                    rss[folded] = d.rss_kib()
            elapsed = time.time() - t0
            st = http.get(d.url("/v1/sessions/%s" % sid), timeout=30).json()
            assert st["tokens_seen"] == TOTAL
            # the state did not grow either: same snapshot size as a session that folded one token
            # (snapshot_bytes counts the logits trailer, which a session has once it folded any)
            fresh = http.post(d.url("/v1/sessions"), json={"tokens": [1]}, timeout=30).json()
            assert st["snapshot_bytes"] == fresh["snapshot_bytes"]
        growth = rss[TOTAL] - rss[10_000]
        print("\nRSS KiB at 10k/100k/500k/1M tokens: %s; growth 10k->1M: %d KiB; %.1f s, %.0f tokens/s"
              % ([rss[k] for k in sorted(rss)], growth, elapsed, TOTAL / elapsed))
        assert growth < 1024, rss
