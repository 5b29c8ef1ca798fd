"""recurd serving an RWKV-7 Hugging Face folder (docs/MODELS.md "RWKV-7") end to end: a seeded tiny
RWKV-7 (tools/export_rwkv7.py: 2 layers, head size 64, BF16) with the RWKV World vocabulary
(rwkv_vocab_v20230424.txt, read from ../shared/tokenizers/, never committed). Text in, decoded
text out, NDJSON and SSE generation, fork, state download / upload, a restart with --state-dir,
and the OpenAI chat route with the RWKV chat template (chosen by default for an RWKV World folder),
each checked against the Python binding on the same folder (same bits)."""
import json
import os

import numpy as np
import pytest
import requests

import export_rwkv7 as ex
import recur_model as rm
import rwkv7_model as tw
from daemon import Daemon, ROOT
from persist_helpers import get_state, info, pd
from recur_tokenizer import Tokenizer

RWKV_VOCAB = os.path.join(ROOT, "..", "shared", "tokenizers", "rwkv_vocab_v20230424.txt")
TEXT = "The quick brown fox — ünïcödé 🙂 jumps"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tok = Tokenizer.load(RWKV_VOCAB)
    raw = ex.raw_config(hidden_size=64, layers=2, head_dim=64, vocab=65536, ff=128,  # RWKV-7's padded vocabulary
                        ranks=(16, 16, 8, 32))
    params = tw.random_params(tw.resolve_config(raw), seed=5, std=0.5)
    out = str(tmp_path_factory.mktemp("rw7") / "rw7")
    ex.write_folder(out, raw, params, "BF16", RWKV_VOCAB)
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


def test_model_and_tokenizer(served):
    d, tok, path = served
    m = requests.get(d.url("/v1/model"), timeout=30).json()
    local = rm.Model.load(path)
    assert m["vocab_size"] == local.vocab == 65536 > tok.vocab_size  # padded, as RWKV-LM's models are
    assert m["mixers"] == ["rwkv7", "rwkv7"]
    assert m["tokenizer"]["kind"] == "rwkv"
    r = post(d, "/v1/tokenize", {"text": TEXT})
    assert r.json()["tokens"] == list(tok.encode(TEXT))


def test_text_in_logits_as_the_binding(served):
    d, tok, path = served
    ids = list(tok.encode(TEXT))
    s = post(d, "/v1/sessions", {"text": TEXT}).json()
    assert s["tokens_seen"] == len(ids)
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
    assert all(t < tok.vocab_size for t in toks)  # the padded rows are never sampled
    assert "".join(l["text"] for l in gen) == tok.decode(toks)
    assert post(d, "/v1/detokenize", {"tokens": toks}).json()["text"] == tok.decode(toks)
    r = requests.post(d.url("/v1/sessions/%s/generate" % t["id"]), json={"max_tokens": 12, "seed": 3,
                      "temperature": 0.9}, headers={"Accept": "text/event-stream"}, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = [e for e in r.content.decode("utf-8").split("\n\n") if e]  # SSE is UTF-8 by definition
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


def test_chat_route_uses_the_rwkv_template(served):
    """No tokenizer_config.json in the folder, an RWKV World vocabulary: the rwkv built-in; the
    answer is what the binding generates greedily after the rendered prompt."""
    d, tok, path = served
    model = requests.get(d.url("/v1/models"), timeout=10).json()["data"][0]["id"]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    r = post(d, "/v1/chat/completions", {"model": model, "messages": msgs, "max_tokens": 6,
                                         "temperature": 0}).json()
    prompt = "System: Be brief.\n\nUser: Hi there\n\nAssistant:"
    ids = list(tok.encode(prompt))
    assert r["usage"]["prompt_tokens"] == len(ids)
    local = rm.Model.load(path)
    st = local.state()
    logits = local.prefill(st, ids)[-1]
    out = []
    for _ in range(6):
        t = int(np.argmax(logits))
        out.append(t)
        logits = local.step(st, t)
    assert r["choices"][0]["message"]["content"] == tok.decode(out)


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
