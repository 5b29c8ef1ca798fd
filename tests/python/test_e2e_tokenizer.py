"""recurd with a model folder holding a real tokenizer (docs/API.md §Text and tokenizers):
/v1/tokenize equals the Python binding's encode, /v1/detokenize round-trips, "text" in create and
fold is encoded with the tokenizer, /v1/model reports it. The tokenizer files are read from
../shared/tokenizers/ (never committed); the model is seeded with tools/export.py."""
import json
import os
import shutil
import subprocess

import pytest
import requests

from daemon import Daemon, ROOT
from recur_tokenizer import Tokenizer

SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")
NEOX = os.path.join(SHARED, "gpt-neox-20b_tokenizer.json")
RWKV = os.path.join(SHARED, "rwkv_vocab_v20230424.txt")
TEXT = "Hello, wörld — ünïcödé 日本語 🙂 tokens!"


def model_dir(tmp_path, name, tok_file, dest_name, pad=0):
    tok = Tokenizer.load(tok_file)
    cfg = {"name": name, "vocab_size": tok.vocab_size + pad, "d_model": 16, "n_layers": 1,
           "n_heads": 1, "head_k": 16, "head_v": 16, "d_ff": 32, "mixers": ["gated_deltanet"],
           "tied_embeddings": True, "max_context": 4096, "norm_eps": 1e-5}
    cfg_path = tmp_path / (name + ".json")
    cfg_path.write_text(json.dumps(cfg))
    out = tmp_path / name
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "export.py"), "--config",
                    str(cfg_path), "--seed", "3", "--out", str(out)], check=True, timeout=300)
    shutil.copy(tok_file, out / dest_name)
    return str(out), tok


@pytest.fixture(scope="module", params=["neox", "rwkv"])
def served(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "neox":
        d, tok = model_dir(tmp, "neox", NEOX, "tokenizer.json")
    else:
        d, tok = model_dir(tmp, "rwkv", RWKV, "rwkv_vocab_v20230424.txt")
    with Daemon("--model", d, model_config=None) as dm:
        yield dm, tok, request.param


def test_tokenize_equals_binding_and_detokenize_round_trips(served):
    d, tok, _ = served
    r = requests.post(d.url("/v1/tokenize"), json={"text": TEXT}, timeout=30)
    assert r.status_code == 200, r.text
    ids = r.json()["tokens"]
    assert ids == list(tok.encode(TEXT))
    assert len(ids) < len(TEXT.encode())  # not the byte tokenizer
    r = requests.post(d.url("/v1/detokenize"), json={"tokens": ids}, timeout=30)
    assert r.status_code == 200 and r.json() == {"text": tok.decode(ids)} == {"text": TEXT}


def test_tokenize_strict_body(served):
    d, _, _ = served
    for body, status, code in [({"text": "a", "extra": 1}, 422, "unknown_field"),
                               ({}, 422, "missing_text"), ({"text": 5}, 422, "invalid_text"),
                               ({"text": "a", "add_special_tokens": 1}, 422, "invalid_add_special_tokens")]:
        r = requests.post(d.url("/v1/tokenize"), json=body, timeout=30)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    r = requests.post(d.url("/v1/detokenize"), json={"tokens": [0], "text": ""}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_field"
    r = requests.post(d.url("/v1/detokenize"), json={"tokens": [-1]}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_token"


def test_text_in_folds_the_encoded_tokens(served):
    d, tok, _ = served
    ids = list(tok.encode(TEXT))
    a = requests.post(d.url("/v1/sessions"), json={"text": TEXT}, timeout=60).json()
    b = requests.post(d.url("/v1/sessions"), json={"tokens": ids}, timeout=60).json()
    assert a["tokens_seen"] == b["tokens_seen"] == len(ids)
    ra = requests.post(d.url("/v1/sessions/%s/tokens" % a["id"]), json={"text": TEXT}, timeout=60)
    rb = requests.post(d.url("/v1/sessions/%s/tokens" % b["id"]), json={"tokens": ids}, timeout=60)
    assert ra.status_code == rb.status_code == 200
    assert ra.text == rb.text
    sa = requests.get(d.url("/v1/sessions/" + a["id"]), timeout=30).json()
    assert sa["tokens_seen"] == 2 * len(ids)


def test_model_reports_tokenizer(served):
    d, tok, kind = served
    m = requests.get(d.url("/v1/model"), timeout=30).json()
    t = m["tokenizer"]
    assert t["kind"] == {"neox": "huggingface", "rwkv": "rwkv"}[kind]
    assert t["vocab_size"] == tok.vocab_size == m["vocab_size"]
    want = [{"id": i, "content": c} for i, c, special in tok.added_tokens if special] \
        if kind == "neox" else []
    assert t["special_tokens"] == want


def test_byte_model_reports_byte_tokenizer():
    with Daemon() as d:
        m = requests.get(d.url("/v1/model"), timeout=30).json()
        assert m["tokenizer"] == {"kind": "bytes", "vocab_size": 256, "special_tokens": []}
        r = requests.post(d.url("/v1/tokenize"), json={"text": "hé"}, timeout=30)
        assert r.json() == {"tokens": list("hé".encode())}
