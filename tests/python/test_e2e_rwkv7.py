"""recurd serving an RWKV-7 Hugging Face folder (docs/MODELS.md "RWKV-7") end to end: a seeded tiny
RWKV-7 (tools/export_rwkv7.py: 2 layers, head size 64, BF16) with the RWKV World vocabulary
(rwkv_vocab_v20230424.txt, read from ../shared/tokenizers/, never committed). Text in, decoded
text out, NDJSON and SSE generation, fork, state download / upload, a restart with --state-dir,
and the OpenAI chat route with the RWKV chat template (chosen by default for an RWKV World folder),
each checked against the Python binding on the same folder (same bits)."""
import os

import numpy as np
import pytest
import requests

import e2e_family_checks as ec
import export_rwkv7 as ex
import recur_model as rm
import rwkv7_model as tw
from daemon import Daemon, ROOT
from e2e_family_checks import post
from recur_tokenizer import Tokenizer

RWKV_VOCAB = os.path.join(ROOT, "..", "shared", "tokenizers", "rwkv_vocab_v20230424.txt")
TEXT = ec.E2EChecks.TEXT


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


def test_model_and_tokenizer(served):
    d, tok, path = served
    m = requests.get(d.url("/v1/model"), timeout=30).json()
    local = rm.Model.load(path)
    assert m["vocab_size"] == local.vocab == 65536 > tok.vocab_size  # padded, as RWKV-LM's models are
    assert m["mixers"] == ["rwkv7", "rwkv7"]
    assert m["tokenizer"]["kind"] == "rwkv"
    r = post(d, "/v1/tokenize", {"text": TEXT})
    assert r.json()["tokens"] == list(tok.encode(TEXT))


class TestServed(ec.E2EChecks):
    pass


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
