"""librecur's tokenizer against the reference, id for id (issue 12).

The reference is @huggingface/tokenizers (tests/js/package-lock.json pins it and the @lenml
packages whose tokenizer.json files are tested), run by tests/js/reference.mjs with /usr/bin/node;
`make test` installs it (test-js-deps). GPT-NeoX-20B's tokenizer and the RWKV World vocabulary are
read from ../shared/tokenizers/. The corpus (tests/python/tokenizer_corpus.py) is >= 1 MB,
generated from a fixed seed. RWKV World is checked against the greedy rule written here.
"""
import ast
import json
import os
import random
import subprocess

import pytest

from recur_tokenizer import Tokenizer
import tokenizer_corpus

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
JS = os.path.join(ROOT, "tests", "js")
SHARED = os.path.join(ROOT, "..", "shared", "tokenizers")
NODE = "/usr/bin/node"

HF = {
    "llama2": os.path.join(JS, "node_modules", "@lenml", "tokenizer-llama2", "models", "tokenizer.json"),
    "llama3": os.path.join(JS, "node_modules", "@lenml", "tokenizer-llama3", "models", "tokenizer.json"),
    "qwen3": os.path.join(JS, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json"),
    "neox": os.path.join(SHARED, "gpt-neox-20b_tokenizer.json"),
}
RWKV = os.path.join(SHARED, "rwkv_vocab_v20230424.txt")


def _specials():
    out = set()
    for path in HF.values():
        with open(path, encoding="utf-8") as f:
            out.update(t["content"] for t in json.load(f)["added_tokens"])
    return sorted(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    for path in HF.values():
        assert os.path.exists(path), f"{path} missing: run `make test-js-deps` (npm ci in tests/js)"
    items = tokenizer_corpus.corpus(_specials())
    assert sum(len(x.encode()) for x in items) >= 1 << 20
    path = tmp_path_factory.mktemp("tok") / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for x in items:
            f.write(json.dumps(x) + "\n")
    return items, str(path)


def _reference(name, corpus_path, out_dir, special=False):
    out = os.path.join(out_dir, f"{name}{'_special' if special else ''}.jsonl")
    cmd = [NODE, os.path.join(JS, "reference.mjs"), HF[name], corpus_path, out] + (["--special"] if special else [])
    subprocess.run(cmd, check=True, cwd=JS, timeout=900)
    with open(out, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("name", sorted(HF))
def test_ids_and_decode_match_reference(name, corpus, tmp_path):
    items, path = corpus
    ref = _reference(name, path, str(tmp_path))
    assert len(ref) == len(items)
    tok = Tokenizer.load(HF[name])
    id_mismatch, text_mismatch, roundtrip, ref_roundtrip = [], [], 0, 0
    for i, (x, r) in enumerate(zip(items, ref)):
        ids = tok.encode(x)
        if ids != r["ids"]:
            id_mismatch.append(i)
            continue
        text = tok.decode(ids)
        if text != r["text"]:
            text_mismatch.append(i)
        if r["text"] == x:
            ref_roundtrip += 1
            roundtrip += text == x
    print(f"{name}: {len(items)} items, {sum(len(x.encode()) for x in items)} bytes, "
          f"id mismatches {len(id_mismatch)}, decode mismatches {len(text_mismatch)}, "
          f"round-trips {roundtrip}/{ref_roundtrip} (where the reference round-trips)")
    detail = [(items[i], tok.encode(items[i]), ref[i]["ids"]) for i in id_mismatch[:3]]
    assert not id_mismatch, f"{len(id_mismatch)} of {len(items)} items differ, first: {detail}"
    assert not text_mismatch, [(items[i], ref[i]["text"]) for i in text_mismatch[:3]]
    assert roundtrip == ref_roundtrip


@pytest.mark.parametrize("name", sorted(HF))
def test_special_tokens_template_matches_reference(name, corpus, tmp_path):
    items, path = corpus
    few = str(tmp_path / "few.jsonl")
    sample = items[:200:7] + [""]
    with open(few, "w", encoding="utf-8") as f:
        for x in sample:
            f.write(json.dumps(x) + "\n")
    ref = _reference(name, few, str(tmp_path), special=True)
    tok = Tokenizer.load(HF[name])
    assert [tok.encode(x, add_special_tokens=True) for x in sample[:-1]] == [r["ids"] for r in ref[:-1]]


# ---------------------------------------------------------------- RWKV World


def _rwkv_reference():
    """The greedy rule, from the file with Python's own literal parser."""
    trie = {}
    with open(RWKV, encoding="utf-8") as f:
        for line in f:
            i, rest = line.rstrip("\n").split(" ", 1)
            lit, n = rest.rsplit(" ", 1)
            v = ast.literal_eval(lit)
            b = v.encode("utf-8") if isinstance(v, str) else v
            assert len(b) == int(n)
            node = trie
            for c in b:
                node = node.setdefault(c, {})
            node[-1] = int(i)

    def encode(data):
        out, i = [], 0
        while i < len(data):
            node, best, j = trie, None, i
            while j < len(data) and data[j] in node:
                node = node[data[j]]
                j += 1
                if -1 in node:
                    best = (node[-1], j)
            assert best is not None
            out.append(best[0])
            i = best[1]
        return out

    return encode


def test_rwkv_world_matches_greedy_reference(corpus):
    items, _ = corpus
    tok = Tokenizer.load(RWKV)
    assert tok.vocab_size == 65530
    ref = _rwkv_reference()
    bad = [x for x in items if tok.encode(x) != ref(x.encode("utf-8"))]
    print(f"rwkv: {len(items)} items, id mismatches {len(bad)}")
    assert not bad, bad[:3]
    assert all(tok.decode(tok.encode(x)) == x for x in items)
    assert 0 not in tok.encode("<|endoftext|>") and tok.encode("<|endoftext|>") == ref(b"<|endoftext|>")


# ---------------------------------------------------------------- streaming


def _random_ids(rng, tok, n):
    v = tok.vocab_size
    added = [a[0] for a in tok.added_tokens]
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.1 and added:
            out.append(rng.choice(added))
        elif r < 0.4:
            out.append(rng.randrange(min(v, 600)))  # bytes, byte-fallback tokens, short pieces
        elif r < 0.45:
            out.append(v + rng.randrange(64))  # a padded model vocabulary: empty text
        else:
            out.append(rng.randrange(v))
    return out


@pytest.mark.parametrize("name", sorted(HF) + ["rwkv", "bytes"])
def test_stream_equals_one_shot_at_every_split(name):
    tok = Tokenizer.bytes() if name == "bytes" else Tokenizer.load(RWKV if name == "rwkv" else HF[name])
    rng = random.Random(7)
    for _ in range(40):
        ids = _random_ids(rng, tok, rng.randint(1, 40))
        full = tok.decode(ids)
        st = tok.stream()
        pieces = [st.push(i) for i in ids]  # push() decodes strictly: no piece holds broken UTF-8
        assert "".join(pieces) + st.finish() == full
        for k in range(len(ids) + 1):
            st = tok.stream()
            got = "".join(st.push(i) for i in ids[:k]) + st.finish()
            assert got == tok.decode(ids[:k])


def test_stream_holds_an_unfinished_sequence():
    tok = Tokenizer.load(HF["llama2"])
    # "€" = E2 82 AC through byte-fallback tokens <0xE2> <0x82> <0xAC> (ids 3 + byte)
    st = tok.stream()
    assert [st.push(3 + b) for b in (0xE2, 0x82, 0xAC)] == ["", "", "€"]
    st = tok.stream()
    assert [st.push(3 + b) for b in (0xE2, 0x82)] == ["", ""]
    assert st.push(3 + 0x41) == "\ufffdA"  # proven invalid: one U+FFFD (WHATWG), then the byte
    st = tok.stream()
    assert st.push(3 + 0xF0) == "" and st.finish() == "\ufffd"
