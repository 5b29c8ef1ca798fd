#!/usr/bin/env python3
"""make_tokenizer_corpus.py — seed corpora of the tokenizer fuzz targets (synthetic; no data file
from elsewhere is copied): tests/fuzz/corpus/tokenizer_load/ and tokenizer_encode/.

Load seeds: byte 0 = format (0 tokenizer.json, 1 RWKV vocab), then a small file; valid files
exercising every component and near-misses (one thing wrong each). Encode seeds: byte 0 selects
the tokenizer of fuzz_tokenizers.h (see fuzz_tokenizer_encode.c), then text or ids.

    python3 tests/fuzz/make_tokenizer_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def bytechar(b):
    keep = [x for x in range(256) if 33 <= x <= 126 or 161 <= x <= 172 or 174 <= x <= 255]
    extra = [x for x in range(256) if x not in keep]
    return chr(b) if b in keep else chr(256 + extra.index(b))


def base(byte_level=True):
    vocab = {}
    for b in range(256):
        vocab[bytechar(b) if byte_level else f"<0x{b:02X}>"] = len(vocab)
    merges = []
    for w in ["the", "hello", " world", "ing", "tion"]:
        acc = ""
        for ch in w.encode():
            c = bytechar(ch) if byte_level else chr(ch)
            vocab.setdefault(c, len(vocab))
            if acc:
                merges.append(f"{acc} {c}")
                vocab.setdefault(acc + c, len(vocab))
            acc += c
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": merges}}


def seeds_load():
    out = {}
    t = base()
    out["json-bytelevel"] = t
    t2 = json.loads(json.dumps(t))
    t2["added_tokens"] = [{"id": 400, "content": "<|eot|>", "special": True, "lstrip": True, "rstrip": True, "single_word": False, "normalized": False},
                          {"id": 401, "content": "  ", "special": False, "normalized": True}]
    t2["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}, {"type": "Replace", "pattern": {"Regex": "\\s{3,}"}, "content": " "}]}
    t2["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]}
    t2["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|eot|>", "type_id": 0}}],
                            "pair": [], "special_tokens": {"<|eot|>": {"id": "<|eot|>", "ids": [400], "tokens": ["<|eot|>"]}}}
    t2["model"]["ignore_merges"] = True
    out["json-bytelevel-full"] = t2
    s = base(False)
    for c in "abcdefghijklmnopqrstuvwxyz\u2581":
        s["model"]["vocab"].setdefault(c, len(s["model"]["vocab"]))
    s["model"].update({"unk_token": "<0x00>", "byte_fallback": True, "fuse_unk": True})
    s["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    s["pre_tokenizer"] = None
    s["decoder"] = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    out["json-sentencepiece"] = s
    m = json.loads(json.dumps(s))
    m["normalizer"] = {"type": "NFKC"}
    m["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"},
                                                                {"type": "Split", "pattern": {"String": "-"}, "behavior": "Contiguous"}]}
    m["decoder"] = {"type": "Metaspace", "replacement": "\u2581"}
    m["model"]["merges"] = [[a, b] for a, b in (x.split(" ", 1) for x in m["model"]["merges"])]
    out["json-metaspace-pairs"] = m
    # near-misses: each names one rule
    bad = {
        "json-unknown-normalizer": ("normalizer", {"type": "BertNormalizer"}),
        "json-unknown-pretok": ("pre_tokenizer", {"type": "Whitespace"}),
        "json-unknown-decoder": ("decoder", {"type": "WordPiece"}),
        "json-unknown-post": ("post_processor", {"type": "RobertaProcessing"}),
        "json-bad-regex": ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "(unclosed[a-"}, "behavior": "Isolated"}),
        "json-intersection": ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "[a-z&&[^aeiou]]"}, "behavior": "Isolated"}),
        "json-truncation": ("truncation", {"max_length": 5}),
    }
    for k, (field, v) in bad.items():
        x = json.loads(json.dumps(t))
        x[field] = v
        out[k] = x
    x = json.loads(json.dumps(t)); x["model"]["type"] = "Unigram"; out["json-unigram"] = x
    x = json.loads(json.dumps(t)); x["model"]["merges"] = x["model"]["merges"] * 3 + ["t h", "th t", "h h"]; out["json-dup-merges"] = x
    x = json.loads(json.dumps(t)); x["model"]["vocab"]["dup"] = 5; out["json-dup-id"] = x
    x = json.loads(json.dumps(t)); x["model"]["vocab"]["big"] = 1 << 30; out["json-huge-id"] = x
    x = json.loads(json.dumps(t)); x["added_tokens"] = [{"id": -1, "content": "x"}]; out["json-neg-added"] = x
    res = {k: b"\x00" + json.dumps(v, ensure_ascii=(i % 2 == 0)).encode() for i, (k, v) in enumerate(out.items())}
    res["json-truncated"] = res["json-bytelevel"][:200]
    res["json-not-object"] = b"\x00[1, 2, 3]"
    # the strict scan of model.vocab / model.merges (core/tokenizer_jscan.c)
    bl = res["json-bytelevel"]
    res["json-scan-model-first"] = b"\x00" + json.dumps({"model": t["model"], "decoder": t["decoder"], "pre_tokenizer": t["pre_tokenizer"]}).encode()
    res["json-scan-escapes"] = b"\x00" + json.dumps(t, ensure_ascii=True).replace('"the"', '"\\u0074he"').replace(': 5,', ': 5.0e0,').encode()
    res["json-scan-dup-vocab"] = bl.replace(b'"merges"', b'"vocab": {}, "merges"', 1)
    res["json-scan-trailing-comma"] = bl.replace(b'"merges": [', b'"merges": [1, ', 1).replace(b']', b', ]', 1)
    res["json-scan-surrogate"] = bl.replace(b'"vocab": {', b'"vocab": {"\\ud83d\\ude00": 999, "\\udc00": 998, ', 1)
    res["json-scan-deep"] = b"\x00" + b'{"x": ' + b"[" * 600 + b"]" * 600 + b"}"
    lines = [f"{i + 1} {'b' if b >= 128 else ''}'\\x{b:02x}' 1" for i, b in enumerate(range(256))]
    lines += ["257 'the' 3", "258 ' the' 4", "259 '\\u00e9' 2", "260 b'\\xe2\\x82' 2", "261 \"it's\" 4", "262 '\\t\\n' 2"]
    rw = "\n".join(lines) + "\n"
    res["rwkv-valid"] = b"\x01" + rw.encode()
    res["rwkv-bad-length"] = b"\x01" + rw.replace("257 'the' 3", "257 'the' 4").encode()
    res["rwkv-dup-id"] = b"\x01" + (rw + "257 'xyz' 3\n").encode()
    res["rwkv-missing-byte"] = b"\x01" + "\n".join(lines[1:]).encode()
    res["rwkv-bad-escape"] = b"\x01" + (rw + "300 '\\q' 1\n").encode()
    return res


def seeds_encode():
    texts = ["Hello world, it's 12345!", "  leading spaces\n\ttabs\r\n", "naïve café 日本語 привет 👍🏽 👨‍👩‍👧",
             "<|eot|> <mask> word words sword <s></s> [SEP]", "e\u0301 ﬁ Ａ ² \u0085\ufeff\u3000", "x-y--z,a.b yxx 123 4567",
             "\xff\xfe invalid \xc3 utf8 \xe2\x82"]
    res = {}
    for v in range(6):
        for i, t in enumerate(texts):
            data = t.encode("latin-1") if "invalid" in t else t.encode()
            res[f"text-tok{v}-{i}"] = bytes([v | (8 if i % 2 else 0)]) + data
        ids = list(range(0, 300, 7)) + [3 + 0xE2, 3 + 0x82, 3 + 0xAC, 3 + 0xF0, 100000]
        res[f"ids-tok{v}"] = bytes([v | 16]) + b"".join(struct.pack("<i", i) for i in ids)
    return res


def write(name, seeds):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for k, v in seeds.items():
        with open(os.path.join(d, "seed-" + k), "wb") as f:
            f.write(v)


if __name__ == "__main__":
    write("tokenizer_load", seeds_load())
    write("tokenizer_encode", seeds_encode())
