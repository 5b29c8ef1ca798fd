"""recurd with a model folder holding a real tokenizer (docs/API.md §Text and tokenizers):
/v1/tokenize equals the Python binding's encode, /v1/detokenize round-trips, "text" in create and
fold is encoded with the tokenizer, /v1/model reports it. The tokenizer files are read from
../shared/tokenizers/ (never committed); the model is seeded with tools/export.py."""
import ast
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


# ---------------------------------------------------------------------------- generation (issue 12)
#
# A model whose vocab_size is padded beyond its tokenizer's (GPT-NeoX-20B: 50277 ids, the model
# 51200): generate's text comes from the streaming decoder, stop strings match decoded text
# across tokens, and the padding is never sampled nor shown in top lists (docs/API.md).

PADDED_VOCAB = 51200


def _bytes_to_unicode():
    """GPT-2's byte <-> printable character table (the ByteLevel alphabet), written here from its
    definition: printable Latin-1 bytes stand for themselves, the others for 256 + n."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


class NeoxReference:
    """An independent decoder for GPT-NeoX's tokenizer.json (model BPE + ByteLevel decoder):
    a vocabulary string is mapped back to bytes through the ByteLevel alphabet, an added token
    is its content, ids past the tokenizer are empty; the bytes are read as UTF-8 with U+FFFD for
    each maximal invalid subpart (Python's "replace", the WHATWG rule)."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        back = {c: b for b, c in _bytes_to_unicode().items()}
        self.raw = {}
        for s, i in j["model"]["vocab"].items():
            self.raw[i] = b"".join(bytes([back[c]]) if c in back else c.encode() for c in s)
        for t in j["added_tokens"]:
            self.raw[t["id"]] = t["content"].encode()

    def decode(self, ids):
        return b"".join(self.raw.get(i, b"") for i in ids).decode("utf-8", "replace")


def rwkv_reference_decode(ids):
    """RWKV World decode written here: each id's bytes (the file's Python literals), joined, read
    as UTF-8 with U+FFFD for each maximal invalid subpart."""
    if not hasattr(rwkv_reference_decode, "raw"):
        raw = {}
        with open(RWKV, encoding="utf-8") as f:
            for line in f:
                i, rest = line.rstrip("\n").split(" ", 1)
                v = ast.literal_eval(rest.rsplit(" ", 1)[0])
                raw[int(i)] = v.encode("utf-8") if isinstance(v, str) else v
        rwkv_reference_decode.raw = raw
    return b"".join(rwkv_reference_decode.raw.get(i, b"") for i in ids).decode("utf-8", "replace")


def test_generate_text_is_the_streaming_decode_unpadded(served):
    """The same on both unpadded folders (NeoX and RWKV World, whose tokens are raw bytes, many
    of them pieces of characters): texts concatenate to the one-shot decode, by the binding and
    by a decoder written here."""
    d, tok, kind = served
    ref = NeoxReference(NEOX).decode if kind == "neox" else rwkv_reference_decode
    for seed in range(4):
        sid = _session(d, "Once upon a time, ")
        lines, _, _ = _stream(d, sid, sse=seed % 2 == 1, max_tokens=96, temperature=100.0, seed=seed)
        ids = [l["token"] for l in lines]
        assert "".join(l["text"] for l in lines) == tok.decode(ids) == ref(ids), (kind, seed)


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("neoxpad")
    tok = Tokenizer.load(NEOX)
    d, tok = model_dir(tmp, "neoxpad", NEOX, "tokenizer.json", pad=PADDED_VOCAB - tok.vocab_size)
    with Daemon("--model", d, model_config=None) as dm:
        yield dm, tok, NeoxReference(NEOX)


def _stream(d, sid, sse=False, **body):
    """(token lines, done line, raw line bytes) of one generate."""
    headers = {"Accept": "text/event-stream"} if sse else {}
    r = requests.post(d.url("/v1/sessions/%s/generate" % sid), json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    raw = r.content
    if sse:
        assert raw.endswith(b"data: [DONE]\n\n")
        chunks = [e.split(b"\ndata: ", 1)[1] for e in raw.split(b"\n\n") if e.startswith(b"id: ")]
    else:
        chunks = [x for x in raw.split(b"\n") if x]
    objs = [json.loads(c.decode("utf-8")) for c in chunks]  # every line is whole UTF-8
    assert objs[-1]["done"] is True
    return objs[:-1], objs[-1], chunks


def _session(d, text):
    r = requests.post(d.url("/v1/sessions"), json={"text": text}, timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_generate_text_is_the_streaming_decode(padded):
    """Seeded generations at temperature 100 (near-uniform draws over the vocabulary; 409 of
    NeoX's ids end inside a UTF-8 sequence, so about 9 of these 1152 tokens do): in NDJSON and
    SSE every line is whole UTF-8 and the texts concatenate to the one-shot decode of the
    generated ids, by the binding and by the independent decoder above. A line that cut a
    character would have carried invalid UTF-8 (sent as U+FFFD) and broken the equality."""
    d, tok, ref = padded
    held = 0
    for seed in range(12):
        sse = seed % 2 == 1
        sid = _session(d, "Once upon a time, ")
        lines, done, _ = _stream(d, sid, sse=sse, max_tokens=96, temperature=100.0, seed=seed)
        ids = [l["token"] for l in lines]
        text = "".join(l["text"] for l in lines)
        assert done == {"done": True, "reason": "length", "tokens_seen": done["tokens_seen"]}
        assert text == tok.decode(ids) == ref.decode(ids), (seed, sse)
        held += sum(1 for l in lines if l["text"] == "")
    assert held > 0  # some tokens completed no character: the hold-back was exercised


def test_generate_greedy_matches_fold_top1_and_skips_padding(padded):
    """Greedy is the argmax over the tokenizer's ids: the top-1 of /tokens' top list (which
    never shows padded ids) at every step."""
    d, tok, _ = padded
    sid = _session(d, "The quick brown fox")
    fork = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30).json()["id"]
    lines, _, _ = _stream(d, sid, max_tokens=12, temperature=0)
    ids = [l["token"] for l in lines]
    r = requests.post(d.url("/v1/sessions/%s/tokens" % fork), json={"tokens": ids, "top_k": 1}, timeout=60)
    folded = [json.loads(x) for x in r.content.split(b"\n") if x][:-1]
    for i in range(len(ids) - 1):
        assert folded[i]["top"][0]["token"] == ids[i + 1]
        assert abs(folded[i + 1]["logprob"] - lines[i + 1]["logprob"]) < 1e-4


def test_padded_ids_never_sampled_nor_listed(padded):
    """At temperature 100 the random model's distribution is close to uniform over all 51200
    ids, so without the mask about 923/51200 = 1.8 % of the draws (some 45 of 2400) would be
    padding. None is; and no top list of /tokens shows a padded id (about one per position
    would appear in a top 64 of a uniform-ish distribution). A padded id can still be forced
    as input, where its logprob is the model's and its text is empty."""
    d, tok, _ = padded
    tv = tok.vocab_size
    seen = set()
    for seed in range(24):
        sid = _session(d, "x")
        lines, _, _ = _stream(d, sid, sse=seed % 2 == 1, max_tokens=100, temperature=100.0, seed=seed)
        seen.update(l["token"] for l in lines)
    assert max(seen) < tv, sorted(t for t in seen if t >= tv)
    assert len(seen) > 2000  # near-uniform draws over the vocabulary: the test could have failed
    sid = _session(d, "x")
    forced = [tv, PADDED_VOCAB - 1, 50, tv + 7] + list(range(100, 140))
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": forced, "top_k": 64}, timeout=60)
    assert r.status_code == 200, r.text
    folded = [json.loads(x) for x in r.content.split(b"\n") if x][:-1]
    assert [l["token"] for l in folded] == forced
    assert all(l["logprob"] < 0 for l in folded)
    assert all(len(l["top"]) == 64 and all(t["token"] < tv for t in l["top"]) for l in folded)
    r = requests.post(d.url("/v1/detokenize"), json={"tokens": [tv, 50, PADDED_VOCAB - 1]}, timeout=30)
    assert r.json() == {"text": tok.decode([50])}


def _stop_candidate(lines):
    """A stop string from the run's own text that starts inside one token (not at its start) and
    ends inside a later one, and whose first occurrence in the text is that one: (stop, index of
    the token that completes it). None when the run has no such place."""
    texts = [l["text"] for l in lines]
    full = "".join(texts)
    starts = [sum(len(t) for t in texts[:i]) for i in range(len(texts))]
    for k in range(1, len(texts) - 1):
        a, b = texts[k - 1], texts[k]
        if len(a) < 2 or not b or "\ufffd" in a + b:
            continue
        stop = a[-2:] + b[:2]
        at = starts[k] - 2
        if full.find(stop) == at and len(stop.encode()) <= 64:
            end = at + len(stop)
            j = next(i for i in range(len(texts)) if starts[i] + len(texts[i]) >= end)
            return stop, j
    return None


def test_stop_string_spans_tokens_and_is_not_emitted(padded):
    """A stop string taken from a seeded run (the last two characters of one token's text and
    the first two of the next) stops the same run at the token that completes it: the tokens are
    the run's up to there, every one folded (tokens_seen), and the text is the run's text up to
    the start of the stop string, which itself is not emitted. NDJSON and SSE; the counterpart
    without the stop string ends by length."""
    d, tok, _ = padded
    for seed in range(40):
        base = _session(d, "In the beginning ")
        fork = requests.post(d.url("/v1/sessions/%s/fork" % base), timeout=30).json()["id"]
        fork2 = requests.post(d.url("/v1/sessions/%s/fork" % base), timeout=30).json()["id"]
        before = requests.get(d.url("/v1/sessions/" + base), timeout=30).json()["tokens_seen"]
        lines, done, _ = _stream(d, base, max_tokens=40, temperature=0.7, seed=seed)
        cand = _stop_candidate(lines)
        if cand is None:
            continue
        stop, j = cand
        full = "".join(l["text"] for l in lines)
        want_text = full[:full.find(stop)]
        for sid, sse in ((fork, False), (fork2, True)):
            got, gdone, _ = _stream(d, sid, sse=sse, max_tokens=40, temperature=0.7, seed=seed,
                                    stop=["never-in-this-text", stop])
            assert [l["token"] for l in got] == [l["token"] for l in lines[:j + 1]]
            assert "".join(l["text"] for l in got) == want_text
            assert stop not in "".join(l["text"] for l in got)
            assert gdone == {"done": True, "reason": "stop", "tokens_seen": before + j + 1}
            assert requests.get(d.url("/v1/sessions/" + sid), timeout=30).json()["tokens_seen"] == before + j + 1
        return
    pytest.fail("no seed gave a run with a stop string spanning tokens")


def test_stop_string_beginning_held_back_then_released(padded):
    """Text that could begin a stop string is held back and released with a later token when
    the stop string does not follow: the stream still concatenates to the whole decode."""
    d, tok, _ = padded
    sid = _session(d, "Numbers: ")
    fork = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30).json()["id"]
    lines, _, _ = _stream(d, sid, max_tokens=40, temperature=0.7, seed=5)
    full = "".join(l["text"] for l in lines)
    ids = [l["token"] for l in lines]
    # the last character of a token's text, followed by something the text never holds
    c = next(l["text"][-1] for l in lines if l["text"] and l["text"][-1] != "\ufffd")
    stop = c + "\u2603never"
    assert stop not in full
    got, done, _ = _stream(d, fork, max_tokens=40, temperature=0.7, seed=5, stop=[stop])
    assert [l["token"] for l in got] == ids and done["reason"] == "length"
    assert "".join(l["text"] for l in got) == full == tok.decode(ids)
    held = [i for i, (a, b) in enumerate(zip(lines, got)) if a["text"] != b["text"]]
    assert held  # the character c was held back at least once and came out later
