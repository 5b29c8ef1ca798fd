"""recurd serving a Mamba-2 Hugging Face folder (docs/MODELS.md "Mamba-2") end to end: a seeded tiny
Mamba-2 (tools/export_mamba2.py, the vocabulary padded past the tokenizer's as state-spaces pads
it) with the GPT-NeoX tokenizer.json (read from ../shared/tokenizers/, never committed). Text in,
decoded text out, NDJSON and SSE generation, fork, state download / upload and a restart with
--state-dir, each checked against the Python binding on the same folder (same bits)."""
import os

import pytest
import requests

import e2e_family_checks as ec
import export_mamba2 as ex
import mamba2_model as mm
import recur_model as rm
from daemon import Daemon, ROOT
from e2e_family_checks import post
from recur_tokenizer import Tokenizer

NEOX = os.path.join(ROOT, "..", "shared", "tokenizers", "gpt-neox-20b_tokenizer.json")
TEXT = ec.E2EChecks.TEXT


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


def test_model_and_tokenizer(served, folder):
    d, tok, path = served
    m = requests.get(d.url("/v1/model"), timeout=30).json()
    local = rm.Model.load(path)
    assert m["vocab_size"] == local.vocab > tok.vocab_size  # padded vocabulary
    assert m["tokenizer"]["kind"] == "huggingface" and m["tokenizer"]["vocab_size"] == tok.vocab_size
    r = post(d, "/v1/tokenize", {"text": TEXT})
    assert r.json()["tokens"] == list(tok.encode(TEXT))


class TestServed(ec.E2EChecks):
    pass
