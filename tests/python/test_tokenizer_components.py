"""Tokenizer components the four shipped files do not use, against the same reference.

Each case is a real tokenizer.json with one part replaced (a normalizer, a pre-tokenizer, the
added-token flags, a decoder), encoded by librecur and by @huggingface/tokenizers on 160 kB of
the seeded corpus: ids and decoded text must be identical. Then the API's own rules: load errors
name the construct, Split behaviours the reference does not implement follow the Rust library,
single_word, the model folder lookup, the CLI.
"""
import json
import os
import subprocess

import pytest

from recur_tokenizer import RecurTokenizerError, Tokenizer
import tokenizer_corpus
from test_tokenizer_reference import HF, JS, NODE, RWKV, ROOT

LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def _bytelevel(prefix=False, regex=False):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": False, "use_regex": regex}


def _split(pattern, behavior="Isolated", kind="Regex"):
    return {"type": "Split", "pattern": {kind: pattern}, "behavior": behavior, "invert": False}


CASES = {
    "nfkc_lowercase": ("llama3", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}}),
    "digits_split": ("llama3", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, _split(LLAMA3_RE), _bytelevel()]}}),
    "split_removed": ("llama3", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        _split("\\s+", "Removed"), _bytelevel()]}}),
    "split_string": ("qwen3", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        _split(" ", "Isolated", "String"), _bytelevel()]}}),
    "bytelevel_prefix_regex": ("llama3", {"pre_tokenizer": _bytelevel(prefix=True, regex=True)}),
    "metaspace_always": ("llama2", {"normalizer": None, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
                                    "decoder": {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "\u2581"}, {"type": "ByteFallback"}, {"type": "Fuse"}]}}),
    "metaspace_first": ("llama2", {"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}}),
    "replace_regex": ("llama2", {"normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"Regex": "\\s{2,}"}, "content": " "}, {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}}),
    "lstrip_rstrip": ("neox", {"added_tokens": "strip"}),
}


def _variant(name):
    base, change = CASES[name]
    with open(HF[base], encoding="utf-8") as f:
        t = json.load(f)
    for k, v in change.items():
        if k == "added_tokens":
            for a in t["added_tokens"]:
                if a["content"] == "<|endoftext|>":
                    a["lstrip"] = a["rstrip"] = True
                if a["content"] == "<|padding|>":
                    a["rstrip"] = True
        else:
            t[k] = v
    return t


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    specials = ["<|endoftext|>", "<|padding|>", "<s>", "</s>", "<|im_start|>", "<think>", "<|begin_of_text|>"]
    items = tokenizer_corpus.corpus(specials, seed=5, min_bytes=160_000)
    path = tmp_path_factory.mktemp("tokc") / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for x in items:
            f.write(json.dumps(x) + "\n")
    return items, str(path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_component_matches_reference(name, small_corpus, tmp_path):
    items, path = small_corpus
    tj = tmp_path / "tokenizer.json"
    tj.write_text(json.dumps(_variant(name)), encoding="utf-8")
    out = tmp_path / "ref.jsonl"
    subprocess.run([NODE, os.path.join(JS, "reference.mjs"), str(tj), path, str(out)], check=True, cwd=JS, timeout=600)
    ref = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    tok = Tokenizer.load(str(tj))
    bad = [i for i, x in enumerate(items) if tok.encode(x) != ref[i]["ids"]]
    print(f"{name}: {len(items)} items, id mismatches {len(bad)}")
    assert not bad, [(items[i], tok.encode(items[i]), ref[i]["ids"]) for i in bad[:2]]
    bad = [i for i, x in enumerate(items) if tok.decode(ref[i]["ids"]) != ref[i]["text"]]
    assert not bad, [(items[i], tok.decode(ref[i]["ids"]), ref[i]["text"]) for i in bad[:2]]


# ---------------------------------------------------------------- rules of our own


def _tiny(**over):
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz-,. ")}
    t = {"model": {"type": "BPE", "vocab": vocab, "merges": []}, "normalizer": None, "pre_tokenizer": None,
         "post_processor": None, "decoder": None, "added_tokens": []}
    t.update(over)
    return t


def _load(tmp_path, t):
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(t), encoding="utf-8")
    return Tokenizer.load(str(p))


@pytest.mark.parametrize("field,value,message", [
    ("normalizer", {"type": "BertNormalizer"}, 'normalizer "BertNormalizer" is not implemented'),
    ("pre_tokenizer", {"type": "Whitespace"}, 'pre_tokenizer "Whitespace" is not implemented'),
    ("decoder", {"type": "WordPiece"}, 'decoder "WordPiece" is not implemented'),
    ("post_processor", {"type": "BertProcessing"}, 'post_processor "BertProcessing" is not implemented'),
    ("pre_tokenizer", _split("[a&&b]"), "character-class intersection"),
    ("pre_tokenizer", _split("(x"), "regex does not compile"),
    ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [_bytelevel(), _split("a")]}, "after ByteLevel"),
    ("decoder", {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "ByteFallback"}]}, "after Fuse"),
    ("truncation", {"max_length": 3}, "truncation is not implemented"),
])
def test_unimplemented_construct_is_a_named_load_error(tmp_path, field, value, message):
    with pytest.raises(RecurTokenizerError) as e:
        _load(tmp_path, _tiny(**{field: value}))
    assert message in str(e.value)


def test_model_type_and_bytelevel_pairing_errors(tmp_path):
    t = _tiny()
    t["model"]["type"] = "WordPiece"
    with pytest.raises(RecurTokenizerError, match='model "WordPiece" is not implemented'):
        _load(tmp_path, t)
    with pytest.raises(RecurTokenizerError, match="needs the ByteLevel decoder"):
        _load(tmp_path, _tiny(pre_tokenizer=_bytelevel()))


def test_split_behaviours_follow_the_rust_library(tmp_path):
    # "the-final--countdown" split on "-", as the tokenizers documentation gives it
    text = "the-final--countdown"
    for behavior in ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
        # pieces are observable through merges that span piece boundaries: add the merge "e -"
        t = _tiny(pre_tokenizer=_split("-", behavior, "String"))
        t["model"]["vocab"]["e-"] = 100
        t["model"]["vocab"]["-c"] = 101
        t["model"]["vocab"]["--"] = 102
        t["model"]["merges"] = ["e -", "- c", "- -"]
        tok = _load(tmp_path, t)
        ids = tok.encode(text)
        got = (100 in ids, 101 in ids, 102 in ids)
        want = {"Isolated": (False, False, False), "Removed": (False, False, False),
                "MergedWithPrevious": (True, False, False), "MergedWithNext": (False, True, False),
                "Contiguous": (False, False, True)}[behavior]
        assert got == want, behavior


def test_single_word_and_lstrip_rstrip(tmp_path):
    added = [{"id": 50, "content": "ab", "single_word": True, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
             {"id": 51, "content": "zz", "single_word": False, "lstrip": True, "rstrip": True, "normalized": False, "special": True}]
    tok = _load(tmp_path, _tiny(added_tokens=added))
    assert tok.encode("ab") == [50]
    assert tok.encode("x ab.") == [23, 29, 50, 28]
    assert 50 not in tok.encode("xab") and 50 not in tok.encode("abx")
    assert tok.encode("a  zz  b") == [0, 51, 1]
    assert tok.vocab_size == 52


def test_folder_lookup_and_byte_fallback_kinds(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(_tiny()), encoding="utf-8")
    assert Tokenizer.load(str(tmp_path)).kind == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    t = Tokenizer.load(str(empty))
    assert t.kind == 0 and t.vocab_size == 256 and t.encode("hé") == [104, 0xC3, 0xA9]
    assert t.decode([104, 0xC3]) == "h\ufffd"
    assert Tokenizer.load(RWKV).kind == 2


def test_decode_padded_and_negative_ids():
    tok = Tokenizer.load(HF["llama3"])
    assert tok.decode([9906, tok.vocab_size, tok.vocab_size + 100, 1917]) == "Hello world"
    with pytest.raises(RecurTokenizerError):
        tok.decode([-1])


def test_cli_tokenize_round_trip(tmp_path):
    cli = os.path.join(os.environ["RECUR_BUILD"], "recur")
    text = "Hello wörld 👍🏽 <|endoftext|>\n"
    for path in (HF["qwen3"], RWKV):
        ids = subprocess.run([cli, "tokenize", path], input=text.encode(), capture_output=True, check=True, timeout=60).stdout
        assert [int(x) for x in ids.split()] == Tokenizer.load(path).encode(text)
        back = subprocess.run([cli, "tokenize", path, "--decode"], input=ids, capture_output=True, check=True, timeout=60).stdout
        assert back.decode() == text
    ids = subprocess.run([cli, "tokenize", HF["llama2"], "--special"], input=b"hi", capture_output=True, check=True, timeout=60).stdout
    assert ids.split()[0] == b"1"
    r = subprocess.run([cli, "tokenize", str(tmp_path / "missing.json")], input=b"", capture_output=True, timeout=60)
    assert r.returncode == 1 and b"missing.json" in r.stderr


# ---------------------------------------------------------------- the JSON scan (core/tokenizer_jscan.c)

def _tiny_text(**over):
    return json.dumps(_tiny(**over))


def _load_text(tmp_path, text):
    p = tmp_path / "tokenizer.json"
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return Tokenizer.load(str(p))


_BASE = _tiny_text()


def _key(k):
    return _BASE.replace('"a": 0', k + ": 0")


def _id(v):
    return _BASE.replace('"a": 0', '"a": ' + v)


def _merges(m):
    return _BASE.replace('"merges": []', '"merges": ' + m)


# the named error (the message, byte positions left out) -> texts that must give it
_MALFORMED = {
    "not valid JSON (expected a string": [_merges("[],")],
    "not valid JSON (unexpected character": [_merges("[1,]"), _id("tru"), "/* c */" + _BASE],
    "lone UTF-16 surrogate": [_key('"\\ud800"'), _key('"\\udc00x"')],
    "invalid escape": [_key('"\\q"')],
    "\\u without four hex digits": [_key('"\\u12"')],
    "control character inside a string": [_key('"a\tb"')],
    "expected ',' or '}'": [_id("01")],
    "malformed number": [_id("-"), _id("1."), _id("1e")],
    "content after the JSON value": [_BASE + " {}"],
    "not valid JSON": [_BASE[:-1], _BASE.replace('"vocab": {', '"vocab": [').replace('" ": 29}', '" ": 29]')],
    'the key "vocab" appears twice': [_merges('[], "vocab": {}')],
    'the key "merges" appears twice': [_merges('[], "merges": []')],
    'the key "model" appears twice': [_BASE[:-1] + ', "model": {}}'],
    "nested too deep": [_BASE.replace('"decoder": null', '"decoder": null, "x": ' + "[" * 600 + "]" * 600)],
    "not a JSON object": ["[1]", "7"],
    "not valid JSON (expected a value": ["", "  \n"],
    "vocab ids must be integers": [_id("1.5"), _id('"0"'), _id("16777216"), _id("-1")],
    "merge 0 is neither": [_merges("[1]"), _merges('[["a"]]'), _merges('[["a", "b", "c"]]'), _merges('[["a", 1]]')],
    "merges must be an array": [_merges("{}")],
    "vocab must be an object": [_BASE.replace('"vocab": {"a": 0, ', '"vocab": 7, "v": {')],
    "vocab key is not valid UTF-8": [_key('"a@"').encode().replace(b"@", b"\xff")],
}


@pytest.mark.parametrize("message", sorted(_MALFORMED))
def test_json_is_strict_and_errors_are_named(tmp_path, message):
    for text in _MALFORMED[message]:
        with pytest.raises(RecurTokenizerError) as e:
            _load_text(tmp_path, text)
        assert message in str(e.value), (text[:80], str(e.value))


def test_json_scan_reads_what_json_parse_reads(tmp_path):
    """Escapes, both merge forms, integral numbers written as floats, keys in another order: the
    same tokenizer as the plain file (JSON.parse's reading of both texts is the same object)."""
    t = _tiny()
    t["model"]["vocab"].update({"ab": 40, "abc": 41, "\U0001F44D": 42, '"q\\': 43})
    t["model"]["merges"] = ["a b", "ab c"]
    plain = _load_text(tmp_path, json.dumps(t))
    last = {k: v for k, v in t.items() if k != "model"}
    last["model"] = t["model"]                                     # the model after the other members
    text = json.dumps(last, ensure_ascii=True)                     # \uXXXX escapes, surrogate pairs
    text = text.replace('"ab": 40', '"\\u0061\\u0062": 4.0e1').replace('"abc": 41', '"abc": 41.000')
    text = text.replace('"merges": ["a b", "ab c"]', '"merges"  :\n[ ["a","b"] ,\t"ab c" ]')
    assert '"\\u0061\\u0062": 4.0e1' in text and '[ ["a","b"]' in text and "\\ud83d\\udc4d" in text
    other = _load_text(tmp_path, text)
    for s in ("abc ab a", "\U0001F44D", '"q\\', "xyz"):
        assert other.encode(s) == plain.encode(s)
    assert plain.encode("abc") == [41] and other.decode([43]) == plain.decode([43]) == '"q\\'
    assert other.vocab_size == plain.vocab_size == 44
