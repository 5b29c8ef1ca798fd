"""The OpenAI routes (docs/API.md "OpenAI API") driven by the official openai SDK (node, pinned in
tests/js_openai/) against a running recurd, checked against an independent reference: the session
API of the same daemon (a session created with the same prompt, forked, and generated on with the
same seed gives the same tokens and bit-identical logprobs), plus raw-HTTP checks of the SSE framing
and of refused fields."""
import json
import os
import socket
import subprocess
import time

import pytest
import requests

from daemon import Daemon, ROOT, read_to_eof

JS_DIR = os.path.join(ROOT, "tests", "js_openai")
NODE = "/usr/bin/node"
DEFAULT_MODEL = os.path.join(ROOT, "models", "default")


def sdk(d, case, model, key="none", **args):
    """Run one case of tests/js_openai/sdk_case.js; its JSON result."""
    p = subprocess.run([NODE, os.path.join(JS_DIR, "sdk_case.js"), case, d.url("/v1"), key, model,
                        json.dumps(args)], capture_output=True, timeout=120, cwd=JS_DIR)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def d():
    with Daemon("--model", DEFAULT_MODEL, model_config=None) as dm:
        dm.model = requests.get(dm.url("/v1/models"), timeout=10).json()["data"][0]["id"]
        yield dm


def metric(d, name):
    for line in requests.get(d.url("/metrics"), timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def wait_sessions_zero(d, timeout=10.0):
    end = time.time() + timeout
    while metric(d, "recurd_sessions") != 0:
        assert time.time() < end, "ephemeral sessions were not removed"
        time.sleep(0.05)


# ---------------------------------------------------------------- the reference: the session API

def reference(d, prompt_tokens, n, seed, **gen):
    """Choice j of an OpenAI request as the session API computes it: a session created with the
    prompt, forked for j > 0, generated on with seed + j. [(bytes, [token], [logprob])]"""
    s = requests.post(d.url("/v1/sessions"), json={"tokens": prompt_tokens}, timeout=30).json()
    forks = [requests.post(d.url("/v1/sessions/%s/fork" % s["id"]), timeout=30).json()["id"]
             for _ in range(n - 1)]
    out = []
    for j, sid in enumerate([s["id"]] + forks):
        r = requests.post(d.url("/v1/sessions/%s/generate" % sid),
                          json=dict(gen, seed=seed + j), timeout=60)
        lines = [json.loads(l) for l in r.text.splitlines() if l]
        toks = [l for l in lines if "token" in l]
        out.append((bytes(t["token"] for t in toks), [t["token"] for t in toks],
                    [t["logprob"] for t in toks]))
        requests.delete(d.url("/v1/sessions/%s" % sid), timeout=10)
    return out


def text_bytes(s):
    return s.encode("utf-8")


# ---------------------------------------------------------------- models

def test_models_list_and_retrieve(d):
    r = sdk(d, "models", d.model)
    assert [m["id"] for m in r["list"]] == [d.model]
    assert r["one"]["id"] == d.model and r["one"]["object"] == "model"
    e = sdk(d, "model_missing", d.model)
    assert e["isNotFound"] and e["status"] == 404 and e["code"] == "model_not_found"


# ---------------------------------------------------------------- completions

PROMPT = "Once upon a time"


def test_completion_equals_session_api_with_forks(d):
    """n = 2 with a seed: each choice's tokens and logprobs equal those of a session created with
    the prompt, forked, and generated on with seed + j (bit-identical logprobs)."""
    r = sdk(d, "completion", d.model, prompt=PROMPT, n=2, seed=11, max_tokens=24, temperature=0.8,
            logprobs=3)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    ref = reference(d, list(PROMPT.encode()), 2, 11, max_tokens=24, temperature=0.8)
    assert [c["index"] for c in r["choices"]] == [0, 1]
    for c, (b, toks, lps) in zip(r["choices"], ref):
        assert c["finish_reason"] == "length"
        lp = c["logprobs"]
        assert lp["token_logprobs"] == lps  # same function, same bits
        assert "".join(lp["tokens"]).encode() == b.decode("utf-8", "replace").encode() or \
            len(lp["tokens"]) == len(toks)
        assert text_bytes(c["text"]) == b.decode("utf-8", "replace").encode()
        assert lp["text_offset"][0] == 0
        for top, lpv in zip(lp["top_logprobs"], lps):
            assert 1 <= len(top) <= 3
            assert max(top.values()) >= lpv  # the sampled token is never above the best one
    u = r["usage"]
    assert u["prompt_tokens"] == len(PROMPT.encode())
    assert u["completion_tokens"] == 48
    assert u["total_tokens"] == u["prompt_tokens"] + 48
    assert u["prompt_tokens_details"]["cached_tokens"] == 0


def test_completion_stream_equals_non_streamed(d):
    args = dict(prompt=PROMPT, seed=5, max_tokens=20, stream_options={"include_usage": True})
    full = sdk(d, "completion", d.model, **{k: v for k, v in args.items() if k != "stream_options"})
    st = sdk(d, "completion_stream", d.model, **args)["chunks"]
    body = [c for c in st if c["choices"]]
    assert all(c["object"] == "text_completion" and c["id"] == st[0]["id"] for c in st)
    assert "".join(c["choices"][0]["text"] for c in body) == full["choices"][0]["text"]
    assert body[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in body[:-1])
    assert st[-1]["choices"] == [] and st[-1]["usage"]["completion_tokens"] == 20
    assert all(c["usage"] is None for c in st[:-1])


def test_same_seed_same_text_other_seed_other_text(d):
    a = sdk(d, "completion", d.model, prompt=PROMPT, seed=1234, max_tokens=32)
    b = sdk(d, "completion", d.model, prompt=PROMPT, seed=1234, max_tokens=32)
    c = sdk(d, "completion", d.model, prompt=PROMPT, seed=4321, max_tokens=32)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["choices"][0]["text"] != c["choices"][0]["text"]


def test_prompt_forms(d):
    """A string, token ids, a list of strings and a list of id lists: the same prompt is the
    same text whatever its form (the byte model's ids are the bytes)."""
    ids = list(PROMPT.encode())
    base = sdk(d, "completion", d.model, prompt=PROMPT, seed=3, max_tokens=8)["choices"][0]["text"]
    assert sdk(d, "completion", d.model, prompt=ids, seed=3, max_tokens=8)["choices"][0]["text"] == base
    r = sdk(d, "completion", d.model, prompt=[PROMPT, "Hello"], seed=3, max_tokens=8, n=2)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert r["choices"][0]["text"] == base  # prompt 0, choice 0: seed + 0
    assert r["usage"]["prompt_tokens"] == len(ids) + 5
    r2 = sdk(d, "completion", d.model, prompt=[ids, list(b"Hello")], seed=3, max_tokens=8, n=2)
    assert [c["text"] for c in r2["choices"]] == [c["text"] for c in r["choices"]]


def test_echo_prepends_the_prompt(d):
    r = sdk(d, "completion", d.model, prompt=PROMPT, seed=3, max_tokens=8, echo=True)
    base = sdk(d, "completion", d.model, prompt=PROMPT, seed=3, max_tokens=8)
    assert r["choices"][0]["text"] == PROMPT + base["choices"][0]["text"]


def test_greedy_penalties_and_bias_match_a_reference(d):
    """temperature 0 with frequency/presence penalties and a logit bias: every token is the
    argmax of the model's log-probabilities (from /tokens top_k=64, an independent path) minus
    count * frequency + [count > 0] * presence, plus the bias."""
    freq, pres, bias = 0.7, 0.4, {str(ord("e")): -3.0, str(ord(" ")): 1.5}
    r = sdk(d, "completion", d.model, prompt=PROMPT, max_tokens=12, temperature=0,
            frequency_penalty=freq, presence_penalty=pres, logit_bias=bias)
    got = list(r["choices"][0]["text"].encode())
    s = requests.post(d.url("/v1/sessions"), json={}, timeout=30).json()["id"]
    toks, counts, out = list(PROMPT.encode()), {}, []
    for step in range(12):
        lines = requests.post(d.url("/v1/sessions/%s/tokens" % s), json={"tokens": toks, "top_k": 64},
                              timeout=30).text.splitlines()
        top = [json.loads(l) for l in lines if l and "top" in json.loads(l)][-1]["top"]
        best = max(top, key=lambda t: (t["logprob"] - counts.get(t["token"], 0) * freq
                                       - (pres if counts.get(t["token"]) else 0)
                                       + bias.get(str(t["token"]), 0.0), -t["token"]))
        tok = best["token"]
        out.append(tok)
        counts[tok] = counts.get(tok, 0) + 1
        toks = [tok]
    requests.delete(d.url("/v1/sessions/%s" % s), timeout=10)
    assert got == out
    plain = sdk(d, "completion", d.model, prompt=PROMPT, max_tokens=12, temperature=0)
    assert plain["choices"][0]["text"] != r["choices"][0]["text"]  # the adjustment mattered


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("case,extra,param,code", [
    ("completion", {"suffix": "x"}, "suffix", "unsupported_parameter"),
    ("completion", {"best_of": 2}, "best_of", "unsupported_parameter"),
    ("completion", {"frobnicate": 1}, "frobnicate", "unknown_parameter"),
    ("completion", {"temperature": 3}, "temperature", "invalid_value"),
    ("completion", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
    ("completion", {"n": 17}, "n", "max_choices_per_request"),
    ("chat", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "unsupported_parameter"),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "unsupported_parameter"),
    ("chat", {"tool_choice": "auto"}, "tool_choice", "unsupported_parameter"),
])
def test_refused_fields_are_typed_sdk_errors(d, case, extra, param, code):
    base = {"prompt": PROMPT} if case == "completion" else {"messages": [{"role": "user", "content": "Hi"}]}
    e = sdk(d, case, d.model, **base, **extra)
    assert e.get("isBadRequest"), e
    assert e["status"] == 400 and e["param"] == param and e["code"] == code
    assert param in e["message"]


def test_unknown_model_is_not_found(d):
    e = sdk(d, "completion", "no-such-model", prompt=PROMPT)
    assert e["isNotFound"] and e["code"] == "model_not_found"


def test_api_key():
    with Daemon("--model", DEFAULT_MODEL, "--api-key", "s3cret", model_config=None) as dm:
        model = requests.get(dm.url("/v1/models"), headers={"Authorization": "Bearer s3cret"},
                             timeout=10).json()["data"][0]["id"]
        e = sdk(dm, "completion", model, key="wrong", prompt=PROMPT, max_tokens=2)
        assert e["isAuth"] and e["status"] == 401
        r = sdk(dm, "completion", model, key="s3cret", prompt=PROMPT, max_tokens=2)
        assert r["usage"]["completion_tokens"] == 2


def raw_post(d, path, body):
    """The raw response bytes of a POST on a fresh connection (Connection: close)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    return read_to_eof(s)


def dechunk(body):
    out, i = bytearray(), 0
    while True:
        j = body.index(b"\r\n", i)
        n = int(body[i:j], 16)
        if n == 0:
            return bytes(out)
        out += body[j + 2:j + 2 + n]
        i = j + 2 + n + 2


def test_raw_sse_framing(d):
    raw = raw_post(d, "/v1/completions", {"model": d.model, "prompt": PROMPT, "max_tokens": 3,
                                          "seed": 1, "stream": True})
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Content-Type: text/event-stream" in head and b"Transfer-Encoding: chunked" in head
    events = dechunk(body).split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    objs = [json.loads(e[len(b"data: "):]) for e in events[:-2]]
    assert all(e.startswith(b"data: {") and b"\n" not in e for e in events[:-2])
    assert len(objs) == 4  # three tokens, then the finish chunk
    assert [o["choices"][0]["finish_reason"] for o in objs] == [None, None, None, "length"]
    assert all("usage" not in o for o in objs)  # not asked for


def test_raw_error_shape(d):
    raw = raw_post(d, "/v1/completions", {"model": d.model, "prompt": PROMPT, "tools": []})
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 400")
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == "tools" and err["code"] == "unsupported_parameter"
    assert err["type"] == "invalid_request_error"


def test_client_leaving_mid_stream_frees_everything(d):
    before = metric(d, "recurd_streams_cancelled_total")
    data = json.dumps({"model": d.model, "prompt": PROMPT, "max_tokens": 8000, "n": 2,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
              % (len(data), data))
    got = b""
    while got.count(b"data: ") < 10:
        got += s.recv(65536)
    s.close()
    wait_sessions_zero(d)
    assert metric(d, "recurd_streams_cancelled_total") > before


def test_stop_sequences_cut_the_text_streamed_or_not(d):
    """The text ends before the first occurrence of a stop sequence (found in the run without
    one: same seed, same tokens up to there), finish_reason "stop", streamed or not."""
    full = sdk(d, "completion", d.model, prompt=PROMPT, seed=7, max_tokens=40)["choices"][0]["text"]
    stop = full[6:8]
    want = full[:full.index(stop)]
    r = sdk(d, "completion", d.model, prompt=PROMPT, seed=7, max_tokens=40, stop=[stop, "\x00zz"])
    assert r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop"
    st = sdk(d, "completion_stream", d.model, prompt=PROMPT, seed=7, max_tokens=40, stop=stop)["chunks"]
    assert "".join(c["choices"][0]["text"] for c in st) == want
    assert st[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["text"] for c in st[:-1])  # no empty chunks while text is held


# ---------------------------------------------------------------- chat

def chatml(messages):
    """The chatml built-in's rendering (core/chat_template_builtin.c) for a chat that starts with
    a system message, with the generation prompt: the byte model's prompt tokens."""
    return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in messages) + \
        "<|im_start|>assistant\n"


def test_chat_plain_template_streamed_and_not(d):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    r = sdk(d, "chat", d.model, messages=msgs, max_tokens=12, seed=9, logprobs=True, top_logprobs=2)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    c = r["choices"][0]
    assert c["message"]["role"] == "assistant" and c["finish_reason"] == "length"
    # the plain built-in: "role: content\n" per message, then "assistant: "
    prompt = "system: Be brief.\nuser: Hi there\nassistant: "
    assert r["usage"]["prompt_tokens"] == len(prompt.encode())
    ref = reference(d, list(prompt.encode()), 1, 9, max_tokens=12)[0]
    assert c["message"]["content"] == ref[0].decode("utf-8", "replace")
    lp = c["logprobs"]["content"]
    assert [t["logprob"] for t in lp] == ref[2]
    assert all(len(t["top_logprobs"]) == 2 and t["top_logprobs"][0]["logprob"] >= t["logprob"]
               for t in lp)
    assert all(bytes(t["bytes"]) == t["token"].encode() for t in lp)
    st = sdk(d, "chat_stream", d.model, messages=msgs, max_tokens=12, seed=9, n=2)["chunks"]
    assert all(ch["object"] == "chat.completion.chunk" for ch in st)
    for i in (0, 1):
        mine = [ch["choices"][0] for ch in st if ch["choices"][0]["index"] == i]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert all("role" not in m["delta"] for m in mine[1:])
        assert mine[-1]["delta"] == {} and mine[-1]["finish_reason"] == "length"
        text = "".join(m["delta"].get("content", "") for m in mine)
        if i == 0:
            assert text == c["message"]["content"]


def test_plain_template_second_turn_resumes_at_the_reply_end():
    """The plain built-in renders an assistant message as the generation prompt plus the reply
    ("assistant: " + reply), so a stateless client's next turn hits the state stored at the end of
    the previous reply: cached_tokens = previous prompt + completion, only the rest is folded."""
    with Daemon("--model", DEFAULT_MODEL, "--prefix-checkpoint-interval", "0", model_config=None) as dm:
        model = requests.get(dm.url("/v1/models"), timeout=10).json()["data"][0]["id"]
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
        post = lambda m: requests.post(dm.url("/v1/chat/completions"), timeout=60, json={  # noqa: E731
            "model": model, "messages": m, "max_tokens": 10, "temperature": 0}).json()
        first = post(msgs)
        u1 = first["usage"]
        msgs += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "And then?"}]
        folded0 = metric(dm, "recurd_tokens_folded_total")
        second = post(msgs)
        u2 = second["usage"]
        assert u2["prompt_tokens_details"]["cached_tokens"] == u1["prompt_tokens"] + u1["completion_tokens"]
        assert u2["prompt_tokens"] == len("".join("%s: %s\n" % (m["role"], m["content"])
                                                  for m in msgs).encode() + b"assistant: ")
        assert metric(dm, "recurd_tokens_folded_total") - folded0 == \
            u2["prompt_tokens"] - u2["prompt_tokens_details"]["cached_tokens"]  # only the new ones


def run_turns(d, model, n_turns, **params):
    msgs = [{"role": "system", "content": "You are a storyteller."}]
    users = ["Tell me about turn %d." % i for i in range(n_turns)]
    return msgs, sdk(d, "conversation", model, system=msgs[0]["content"], users=users,
                     params=dict(params))["turns"]


def test_thirty_turn_chat_folds_only_new_tokens_and_equals_cache_off():
    """A stateless client's 30-turn chat (chatml template, greedy, with logprobs): from turn 2 on
    cached_tokens is the previous prompt + completion and the daemon folds only the rest
    (recurd_tokens_folded_total); every answer's tokens equal a cache-off daemon's, and their
    logprobs agree within 1e-5 (not bit-identical: the cached state was reached through decode
    steps, the cache-off prompt through the chunkwise prefill)."""
    params = dict(max_tokens=6, temperature=0, logprobs=True)
    args = ("--model", DEFAULT_MODEL, "--chat-template", "chatml", "--prefix-checkpoint-interval", "0")
    with Daemon(*args, model_config=None) as on, \
            Daemon(*args, "--prefix-cache-bytes", "0", model_config=None) as off:
        model = requests.get(on.url("/v1/models"), timeout=10).json()["data"][0]["id"]
        folded0 = metric(on, "recurd_tokens_folded_total")
        sysmsg, t_on = run_turns(on, model, 30, **params)
        folded = metric(on, "recurd_tokens_folded_total") - folded0
        _, t_off = run_turns(off, model, 30, **params)
        msgs = list(sysmsg)
        prev = 0
        for i, (a, b) in enumerate(zip(t_on, t_off)):
            msgs.append({"role": "user", "content": "Tell me about turn %d." % i})
            u = a["usage"]
            assert u["prompt_tokens"] == len(chatml(msgs).encode())
            assert u["prompt_tokens_details"]["cached_tokens"] == prev, i
            assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            ca, cb = a["choices"][0], b["choices"][0]
            assert ca["message"]["content"] == cb["message"]["content"], i
            la = [t["logprob"] for t in ca["logprobs"]["content"]]
            lb = [t["logprob"] for t in cb["logprobs"]["content"]]
            assert [t["bytes"] for t in ca["logprobs"]["content"]] == \
                [t["bytes"] for t in cb["logprobs"]["content"]]
            diff = max(abs(x - y) for x, y in zip(la, lb))
            assert diff <= 1e-5, (i, la, lb)
            prev = u["prompt_tokens"] + u["completion_tokens"]
            msgs.append({"role": "assistant", "content": ca["message"]["content"]})
        assert folded == sum(t["usage"]["prompt_tokens"] - t["usage"]["prompt_tokens_details"]["cached_tokens"]
                             for t in t_on)
        assert metric(on, "recurd_sessions") == 0

        # editing message k resumes from the longest stored prefix at or before the edit: the end
        # of the last turn (prompt or prompt + completion) that ends before it
        k = 2 * 12 + 1  # the user message of turn 12
        edited = msgs[:k] + [{"role": "user", "content": "Something else."}]
        ends, pm = [], list(sysmsg)
        for i, t in enumerate(t_on):
            pm.append({"role": "user", "content": "Tell me about turn %d." % i})
            ends += [t["usage"]["prompt_tokens"], t["usage"]["prompt_tokens"] + t["usage"]["completion_tokens"]]
            pm.append(msgs[len(pm)])
        a, b = chatml(edited).encode(), chatml(msgs[:k + 1]).encode()
        diverge = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
        r = sdk(on, "chat", model, messages=edited, **params)
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == max(e for e in ends if e <= diverge)


def test_restart_with_state_dir_keeps_the_cache_hit(tmp_path):
    params = dict(max_tokens=6, temperature=0)
    args = ("--model", DEFAULT_MODEL, "--chat-template", "chatml", "--state-dir", str(tmp_path))
    with Daemon(*args, model_config=None) as dm:
        model = requests.get(dm.url("/v1/models"), timeout=10).json()["data"][0]["id"]
        msgs, turns = run_turns(dm, model, 2, **params)
    u = turns[-1]["usage"]
    msgs += [{"role": "user", "content": "Tell me about turn 0."},
             {"role": "assistant", "content": turns[0]["choices"][0]["message"]["content"]},
             {"role": "user", "content": "Tell me about turn 1."},
             {"role": "assistant", "content": turns[1]["choices"][0]["message"]["content"]},
             {"role": "user", "content": "And then?"}]
    with Daemon(*args, model_config=None) as dm:
        r = sdk(dm, "chat", model, messages=msgs, **params)
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        assert r["usage"]["prompt_tokens"] == len(chatml(msgs).encode())
