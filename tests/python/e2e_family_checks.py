"""The end-to-end checks a checkpoint family's HTTP test makes on a daemon serving its folder with
a real tokenizer (test_e2e_mamba2.py, test_e2e_rwkv7.py): text in and the binding's logits out,
NDJSON and SSE generation with decoded text, fork, state download / upload, and a restart with
--state-dir. Each compares with the Python binding on the same folder, or with itself (same bits)."""
import json

import numpy as np
import requests

import recur_model as rm
from persist_helpers import get_state, info, pd


def post(d, path, body, **kw):
    r = requests.post(d.url(path), json=body, timeout=60, **kw)
    assert r.status_code in (200, 201), r.text
    return r


def lines_of(r):
    return [json.loads(l) for l in r.text.splitlines() if l]


def text_in_logits_as_the_binding(d, tok, path, text):
    ids = list(tok.encode(text))
    s = post(d, "/v1/sessions", {"text": text}).json()
    assert s["tokens_seen"] == len(ids)
    # the fold line's logprob and candidates are the binding's on the same folder (the server
    # may cut the prefill into other slices: equal to rounding)
    r = post(d, "/v1/sessions/%s/tokens" % s["id"], {"tokens": [ids[0]], "top_k": 1})
    line = lines_of(r)[0]
    local = rm.Model.load(path)
    st = local.state()
    before = local.prefill(st, ids)[-1]
    after = local.step(st, ids[0])
    assert abs(line["logprob"] - float(rm.log_softmax(before)[ids[0]])) < 1e-4
    assert line["top"][0]["token"] == int(np.argmax(after))


def generate_text_and_sse(d, tok, text):
    s = post(d, "/v1/sessions", {"text": text}).json()
    t = post(d, "/v1/sessions", {"text": text}).json()
    r = post(d, "/v1/sessions/%s/generate" % s["id"], {"max_tokens": 12, "seed": 3, "temperature": 0.9})
    lines = lines_of(r)
    gen, done = lines[:-1], lines[-1]
    assert done["done"] and len(gen) == 12
    toks = [l["token"] for l in gen]
    # decoded text out; the padded rows past the tokenizer's vocabulary are never sampled
    assert all(t < tok.vocab_size for t in toks)
    assert "".join(l["text"] for l in gen) == tok.decode(toks)
    assert post(d, "/v1/detokenize", {"tokens": toks}).json()["text"] == tok.decode(toks)
    r = requests.post(d.url("/v1/sessions/%s/generate" % t["id"]), json={"max_tokens": 12, "seed": 3,
                      "temperature": 0.9}, headers={"Accept": "text/event-stream"}, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = [e for e in r.content.decode("utf-8").split("\n\n") if e]  # SSE is UTF-8 by definition
    assert events[-1] == "data: [DONE]"
    objs = [json.loads(e.split("\ndata: ", 1)[1]) for e in events[:-1]]
    assert objs == lines


def fork_and_state_round_trip(d, tok, text):
    s = post(d, "/v1/sessions", {"text": text}).json()
    f = post(d, "/v1/sessions/%s/fork" % s["id"], None).json()
    cont = list(tok.encode(" over the lazy dog"))
    a = post(d, "/v1/sessions/%s/tokens" % s["id"], {"tokens": cont}).text
    b = post(d, "/v1/sessions/%s/tokens" % f["id"], {"tokens": cont}).text
    assert a == b
    blob = get_state(d, s["id"])
    n = post(d, "/v1/sessions", {}).json()
    r = requests.put(d.url("/v1/sessions/%s/state" % n["id"]), data=blob,
                     headers={"Content-Type": "application/octet-stream"}, timeout=30)
    assert r.status_code in (200, 201), r.text
    ga = post(d, "/v1/sessions/%s/generate" % s["id"], {"max_tokens": 8, "seed": 4}).text
    gb = post(d, "/v1/sessions/%s/generate" % n["id"], {"max_tokens": 8, "seed": 4}).text
    assert ga == gb
    assert get_state(d, s["id"]) == get_state(d, n["id"])


def restart_with_state_dir(path, state_dir, text):
    with pd(state_dir, "--model", path, model_config=None) as d:
        s = post(d, "/v1/sessions", {"text": text}).json()
        post(d, "/v1/sessions/%s/tokens" % s["id"], {"text": " and more"})
        before = (info(d, s["id"])["tokens_seen"], get_state(d, s["id"]))
        assert d.terminate() == 0
    with pd(state_dir, "--model", path, model_config=None) as d:
        assert (info(d, s["id"])["tokens_seen"], get_state(d, s["id"])) == before
        r = post(d, "/v1/sessions/%s/generate" % s["id"], {"max_tokens": 5, "seed": 1})
        assert lines_of(r)[-1]["done"]


class E2EChecks:
    """The checks above as tests, for a test class of a family's file (class TestServed(E2EChecks))
    whose module has the fixtures `folder` (path, tokenizer) and `served` (daemon, tokenizer, path)."""
    TEXT = "The quick brown fox — ünïcödé 🙂 jumps"

    def test_text_in_logits_as_the_binding(self, served):
        d, tok, path = served
        text_in_logits_as_the_binding(d, tok, path, self.TEXT)

    def test_generate_text_and_sse(self, served):
        d, tok, _ = served
        generate_text_and_sse(d, tok, self.TEXT)

    def test_fork_and_state_round_trip(self, served):
        d, tok, _ = served
        fork_and_state_round_trip(d, tok, self.TEXT)

    def test_restart_with_state_dir(self, folder, tmp_path):
        restart_with_state_dir(folder[0], tmp_path / "state", self.TEXT)
