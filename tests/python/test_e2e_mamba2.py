"""recurd serving a Mamba-2 Hugging Face folder (docs/MODELS.md "Mamba-2") end to end: a seeded tiny
Mamba-2 (tools/export_mamba2.py, the vocabulary padded past the tokenizer's as state-spaces pads
it) with the GPT-NeoX tokenizer.json (read from ../shared/tokenizers/, never committed). Text in,
decoded text out, NDJSON and SSE generation, fork, state download / upload and a restart with
--state-dir, each checked against the Python binding on the same folder (same bits)."""
import json
import os

import numpy as np
import pytest
import requests

import export_mamba2 as ex
import mamba2_model as mm
import recur_model as rm
from daemon import Daemon, ROOT
from persist_helpers import get_state, info, pd
from recur_tokenizer import Tokenizer

NEOX = os.path.join(ROOT, "..", "shared", "tokenizers", "gpt-neox-20b_tokenizer.json")
TEXT = "The quick brown fox — ünïcödé 🙂 jumps"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tok = Tokenizer.load(NEOX)
    raw = ex.raw_config(hidden_size=16, layers=2, state_size=8, head_dim=8, n_groups=2,
                        vocab=tok.vocab_size, pad_vocab_multiple=16, tied=True,
                        dt_limit=(0.0, float("inf")))
    params = ex.random_params(mm.resolve_config(raw), seed=5, std=0.5)
    out = str(tmp_path_factory.mktemp("m2") / "m2")
    ex.write_folder(out, raw, params, "BF16", 2, NEOX)
    return out, tok


@pytest.fixture(scope="module")
def served(folder):
    with Daemon("--model", folder[0], model_config=None) as d:
        yield d, folder[1], folder[0]


def post(d, path, body, **kw):
    r = requests.post(d.url(path), json=body, timeout=60, **kw)
    assert r.status_code in (200, 201), r.text
    return r


def lines_of(r):
    return [json.loads(l) for l in r.text.splitlines() if l]


def test_model_and_tokenizer(served, folder):
    d, tok, path = served
    m = requests.get(d.url("/v1/model"), timeout=30).json()
    local = rm.Model.load(path)
    assert m["vocab_size"] == local.vocab > tok.vocab_size  # padded vocabulary
    assert m["tokenizer"]["kind"] == "huggingface" and m["tokenizer"]["vocab_size"] == tok.vocab_size
    r = post(d, "/v1/tokenize", {"text": TEXT})
    assert r.json()["tokens"] == list(tok.encode(TEXT))


def test_text_in_logits_as_the_binding(served):
    d, tok, path = served
    ids = list(tok.encode(TEXT))
    s = post(d, "/v1/sessions", {"text": TEXT}).json()
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


def test_generate_text_and_sse(served):
    d, tok, _ = served
    s = post(d, "/v1/sessions", {"text": TEXT}).json()
    t = post(d, "/v1/sessions", {"text": TEXT}).json()
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
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    objs = [json.loads(e.split("\ndata: ", 1)[1]) for e in events[:-1]]
    assert objs == lines


def test_fork_and_state_round_trip(served):
    d, tok, _ = served
    s = post(d, "/v1/sessions", {"text": TEXT}).json()
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


def test_restart_with_state_dir(folder, tmp_path):
    path, tok = folder
    sd = tmp_path / "state"
    with pd(sd, "--model", path, model_config=None) as d:
        s = post(d, "/v1/sessions", {"text": TEXT}).json()
        post(d, "/v1/sessions/%s/tokens" % s["id"], {"text": " and more"})
        before = (info(d, s["id"])["tokens_seen"], get_state(d, s["id"]))
        assert d.terminate() == 0
    with pd(sd, "--model", path, model_config=None) as d:
        assert (info(d, s["id"])["tokens_seen"], get_state(d, s["id"])) == before
        r = post(d, "/v1/sessions/%s/generate" % s["id"], {"max_tokens": 5, "seed": 1})
        assert lines_of(r)[-1]["done"]
