#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/NAME/).

Seeds are small and meaningful: valid inputs and near-misses (one thing wrong each). Every file
name says what the seed is. Snapshot seeds need the model fingerprints, so they are made with
librecur ($RECUR_BUILD/librecur.so, default build/) through core/python/recur_model.py;
everything else is plain bytes.

    python3 tests/fuzz/make_corpus.py            # rewrites every corpus directory
    python3 tests/fuzz/make_corpus.py snapshot server   # only these targets
    python3 tests/fuzz/make_corpus.py weights_cache     # quantized-weights cache files (librecur writes the valid ones)

The tiny model configs are read from fuzz_configs.h, so the C targets and the seeds agree.
Snapshot payloads are forward-pass results, so their float bytes depend on how the library was
compiled (FMA contraction); the fingerprints, which hash the seeded weights, do not. A rerun may
therefore rewrite snapshot seeds with other payload bytes that load just as well.
Reproduction inputs of fixed crashes live in corpus/NAME/crash-* and are never touched here.
"""
import json
import math
import os
import random
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(HERE, "corpus")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from checksums import as_version, snapshot_sum, trailer_sum  # noqa: E402  (the formats' checksums)

# ---------------------------------------------------------------- helpers


def reset_dir(name):
    d = os.path.join(CORPUS, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.unlink(os.path.join(d, f))
    return d


def write_seeds(name, seeds):
    d = reset_dir(name)
    seen = set()
    for label, data in seeds:
        assert label not in seen, label
        seen.add(label)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        with open(os.path.join(d, "seed-" + safe), "wb") as f:
            f.write(data)
    print("%-14s %3d seeds" % (name, len(seeds)))


def load_configs():
    """The C string literals of fuzz_configs.h, FUZZ_CONFIG_0..N."""
    text = open(os.path.join(HERE, "fuzz_configs.h")).read()
    out = []
    for m in re.finditer(r"#define FUZZ_CONFIG_(\d+) \\\n((?:\s*\".*\"\s*\\?\n)+)", text):
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
        out.append(json.loads("".join(parts).encode().decode("unicode_escape")))
    return out


# ---------------------------------------------------------------- safetensors

SUFFIX = ["attn_norm.weight", "mixer.q_proj.weight", "mixer.k_proj.weight", "mixer.v_proj.weight",
          "mixer.gk_proj.weight", "mixer.b_proj.weight", "mixer.a_proj.weight", "mixer.A_log",
          "mixer.dt_bias", "mixer.g_proj.weight", "mixer.o_norm.weight", "mixer.o_proj.weight",
          "mlp_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]


def tensor_table(c):
    """(name, shape) in the order of core/model.c's recur__weight (the native family's tensors) (docs/MODEL.md)."""
    d, H, K, V, ff = c["d_model"], c["n_heads"], c["head_k"], c["head_v"], c["d_ff"]
    out = [("embed.weight", [c["vocab_size"], d]), ("norm_f.weight", [d])]
    if not c.get("tied_embeddings", True):
        out.append(("lm_head.weight", [c["vocab_size"], d]))
    for l, kind in enumerate(c["mixers"]):
        gla, delta, gdn = kind == "gla", kind in ("deltanet", "gated_deltanet"), kind == "gated_deltanet"
        shapes = [[d], [H * K, d], [H * K, d], [H * V, d], [H * K, d] if gla else None,
                  [H, d] if delta else None, [H, d] if gdn else None, [H] if gdn else None,
                  [H] if gdn else None, [H * V, d], [V], [d, H * V], [d], [ff, d], [ff, d], [d, ff]]
        for suf, shp in zip(SUFFIX, shapes):
            if shp is not None:
                out.append(("layers.%d.%s" % (l, suf), shp))
    return out


def pack(vals, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "F16":
        return struct.pack("<%de" % len(vals), *vals)
    # BF16: top half of the fp32 bits
    return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in vals)


def safetensors(c, dtype="F32", rng=None, mutate=None, meta=True, order=None):
    """A valid file for config c; mutate(header_dict, data) may alter it before packing."""
    rng = rng or random.Random(1)
    table = tensor_table(c)
    if order == "reverse":
        table = table[::-1]
    elsize = 4 if dtype == "F32" else 2
    header, data, off = {}, b"", 0
    for name, shape in table:
        n = math.prod(shape)
        vals = [1.0 if name.endswith("norm.weight") else rng.uniform(-0.05, 0.05) for _ in range(n)]
        blob = pack(vals, dtype)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n * elsize]}
        data += blob
        off += len(blob)
    if meta:
        header["__metadata__"] = {"format": "pt"}
    if mutate:
        r = mutate(header, data)
        if r is not None:
            header, data = r
    hdr = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(hdr)) + hdr + data


def seeds_safetensors(configs):
    s = []
    for i, c in enumerate(configs):
        sel = bytes([i])
        for dt in ("F32", "F16", "BF16"):
            s.append(("cfg%d-valid-%s" % (i, dt.lower()), sel + safetensors(c, dt)))
    c, sel = configs[0], b"\x00"
    first = tensor_table(c)[0][0]

    def m_missing(h, d):
        del h["norm_f.weight"]

    def m_extra(h, d):
        h["extra.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}

    def m_shape(h, d):
        h[first]["shape"] = h[first]["shape"][::-1] + [1]

    def m_dtype(h, d):
        h[first]["dtype"] = "F64"

    def m_overlap(h, d):
        h["norm_f.weight"]["data_offsets"] = [0, h["norm_f.weight"]["data_offsets"][1] -
                                              h["norm_f.weight"]["data_offsets"][0]]

    def m_past_end(h, d):
        e = h["norm_f.weight"]["data_offsets"]
        h["norm_f.weight"]["data_offsets"] = [len(d), len(d) + e[1] - e[0]]

    def m_nan(h, d):
        return h, b"\x00\x00\xc0\x7f" + d[4:]

    def m_unknown_key(h, d):
        h[first]["extra"] = 1

    def m_float_offset(h, d):
        h[first]["data_offsets"][1] += 0.5

    def m_neg_offset(h, d):
        h[first]["data_offsets"][0] = -4

    def m_meta_str(h, d):
        h["__metadata__"] = "x"

    for label, how in (("missing-tensor", {"mutate": m_missing}), ("extra-tensor", {"mutate": m_extra}),
                       ("wrong-shape", {"mutate": m_shape}), ("wrong-dtype", {"mutate": m_dtype}),
                       ("overlap", {"mutate": m_overlap}), ("past-end", {"mutate": m_past_end}),
                       ("nan-weight", {"mutate": m_nan}), ("unknown-key", {"mutate": m_unknown_key}),
                       ("frac-offset", {"mutate": m_float_offset}), ("neg-offset", {"mutate": m_neg_offset}),
                       ("meta-string", {"mutate": m_meta_str}), ("no-metadata", {"meta": False}),
                       ("reverse-order", {"order": "reverse"})):
        s.append(("cfg0-" + label, sel + safetensors(c, **how)))
    good = safetensors(c)
    s.append(("cfg0-truncated-data", sel + good[:-1]))
    s.append(("cfg0-trailing-byte", sel + good + b"\x00"))
    hlen = struct.unpack("<Q", good[:8])[0]
    s.append(("cfg0-header-len-huge", sel + struct.pack("<Q", 1 << 40) + good[8:]))
    s.append(("cfg0-header-len-past-end", sel + struct.pack("<Q", len(good)) + good[8:]))
    s.append(("cfg0-header-trailing-garbage", sel + struct.pack("<Q", hlen + 2) + good[8:8 + hlen] + b" x" + good[8 + hlen:]))
    s.append(("cfg0-header-only", sel + good[:8 + hlen]))
    s.append(("short", sel + b"\x02\x00\x00"))
    s.append(("empty-object", sel + struct.pack("<Q", 2) + b"{}"))
    s.append(("cfg1-as-cfg0", sel + safetensors(configs[1])))
    s.append(("cfg2-f16-subnormal-inf", b"\x02" + safetensors(configs[2], "F16",
                                                               mutate=lambda h, d: (h, b"\x01\x00\x00\x7c" + d[4:]))))
    return s


# ---------------------------------------------------------------- snapshot


def snapshot(cfg, seed, tokens, state_dtype="f32"):
    """The snapshot of a seeded model's state after folding tokens (core/python/recur_model.py):
    version 4, or 5 for a half state_dtype."""
    sys.path.insert(0, os.path.join(ROOT, "core", "python"))
    import recur_model
    m = recur_model.Model.init_seed(cfg, seed, max_batch=1, state_dtype=state_dtype)
    st = m.state()
    if tokens:
        m.prefill(st, tokens, want_logits=False)
    return st.snapshot()


def snap(cfg, n_tokens, state_dtype="f32"):
    """The snapshot seeds' state: seed 1, tokens 1, 8, 15, ... (mod vocab)."""
    return snapshot(cfg, 1, [(7 * i + 1) % cfg["vocab_size"] for i in range(n_tokens)], state_dtype)


def fix_core_checksum(b):
    """b with its core's checksum recomputed by its version's rule (what follows the core kept)."""
    P = struct.unpack("<Q", b[32:40])[0]
    return b[:40 + P] + struct.pack("<Q", snapshot_sum(b[:40 + P])) + b[48 + P:]


def trailer(core, vocab, logits=None):
    """A logits trailer after core, its checksum by the core's version's rule."""
    logits = logits or [0.5 * i - 1.0 for i in range(vocab)]
    t = b"RECURLG1" + struct.pack("<II", vocab, 0) + struct.pack("<%df" % vocab, *logits)
    return t + struct.pack("<Q", trailer_sum(core, t))


def seeds_snapshot(configs):
    s = []
    for i, c in enumerate(configs):
        for n in (0, 3, 5):
            b = snap(c, n)
            s.append(("cfg%d-n%d-valid" % (i, n), bytes([i]) + b))
            s.append(("cfg%d-n%d-blob-trailer" % (i, n), bytes([i | 8]) + b + trailer(b, c["vocab_size"])))
        b = snap(c, 3)
        flip = bytearray(b)
        flip[44] ^= 0x01
        s.append(("cfg%d-flipped-bit" % i, bytes([i]) + bytes(flip)))
        s.append(("cfg%d-flipped-bit-fixsum" % i, bytes([i | 4]) + bytes(flip)))
        s.append(("cfg%d-blob-plain" % i, bytes([i | 8]) + b))
    c0 = configs[0]
    b = snap(c0, 3)
    P = struct.unpack("<Q", b[32:40])[0]
    sel = b"\x00"
    t0 = trailer(b, c0["vocab_size"])
    nan = bytearray(b)
    nan[40:44] = b"\x00\x00\xc0\x7f"
    s.append(("cfg0-nan-payload-fixsum", b"\x04" + fix_core_checksum(bytes(nan))))
    inf = bytearray(b)
    inf[40:44] = b"\x00\x00\x80\x7f"
    s.append(("cfg0-inf-payload-fixsum", b"\x04" + fix_core_checksum(bytes(inf))))
    # the value rule (docs/MODEL.md "State values"): past 2^40, the 3e38, a negative z
    big = bytearray(b)
    big[40:44] = struct.pack("<f", 2.0 ** 41)
    s.append(("cfg0-range-payload-fixsum", b"\x04" + fix_core_checksum(bytes(big))))
    s.append(("cfg0-range-all-3e38-fixsum", b"\x04" + fix_core_checksum(
        b[:40] + struct.pack("<f", 3e38) * (P // 4) + b[40 + P:])))
    edge = fix_core_checksum(b[:40] + struct.pack("<f", 2.0 ** 40) * (P // 4) + b[40 + P:])
    s.append(("cfg0-at-bound-fixsum", b"\x04" + edge))
    s.append(("cfg0-blob-at-bound-trailer", b"\x18" + edge + trailer(edge, c0["vocab_size"])))
    c1 = configs[1]  # linear first: S [1][4][2] then z [1][4]
    b1 = snap(c1, 3)
    negz = bytearray(b1)
    negz[40 + 4 * 8:40 + 4 * 9] = struct.pack("<f", -1.0)
    s.append(("cfg1-linear-negative-z-fixsum", b"\x05" + fix_core_checksum(bytes(negz))))
    s.append(("cfg2-tokens-2p64-fixsum", b"\x06" + fix_core_checksum(
        snap(configs[2], 3)[:24] + struct.pack("<Q", (1 << 64) - 1) + snap(configs[2], 3)[32:])))
    s.append(("cfg0-blob-trailer-range-logit", b"\x08" + b + trailer(b, c0["vocab_size"], [3e38] * c0["vocab_size"])))
    flipt = bytearray(b + t0)
    flipt[44] ^= 0x01  # a flipped core bit under a valid trailer checksum: the core's checksum
    s.append(("cfg0-blob-core-flip-trailer-fix", b"\x18" + bytes(flipt)))
    s.append(("cfg0-truncated", sel + b[:-1]))
    s.append(("cfg0-header-only", sel + b[:40]))
    s.append(("cfg0-trailing-byte", sel + b + b"\x00"))
    s.append(("cfg0-bad-magic", sel + b"RECURST2" + b[8:]))
    s.append(("cfg0-version2", sel + b[:8] + struct.pack("<I", 2) + b[12:]))  # 2 sums with FNV-1a
    # versions 1-3 (FNV-1a) still read; 5 (a half state) converts into the targets' f32 states
    for v in (1, 2):
        old = as_version(b, v)
        s.append(("cfg0-v%d-fnv-valid" % v, sel + old))
        s.append(("cfg0-v%d-fnv-blob-trailer" % v, b"\x08" + old + trailer(old, c0["vocab_size"])))
    s.append(("cfg0-v2-fnv-flipped-bit-fixsum", b"\x04" + old[:44] + bytes([old[44] ^ 1]) + old[45:]))
    s.append(("cfg0-v4-as-v2-lanesum", sel + b[:8] + struct.pack("<I", 2) + b[12:-8] +
              struct.pack("<Q", snapshot_sum(b[:-8]))))
    # byte 0 bits 5-6: the state's dtype (fuzz_snapshot.c: 0 f32, 1 f16 = 0x20, 2 bf16 = 0x40)
    F16, BF16 = 0x20, 0x40
    for i, c in enumerate(configs):
        h = snap(c, 3, "bf16")
        s.append(("cfg%d-bf16-v5-valid" % i, bytes([i | BF16]) + h))
        s.append(("cfg%d-bf16-v5-into-f32" % i, bytes([i]) + h))
        s.append(("cfg%d-bf16-v5-blob-trailer" % i, bytes([i | 8 | BF16]) + h + trailer(h, c["vocab_size"])))
        old = as_version(h, 3)
        s.append(("cfg%d-bf16-v3-fnv-valid" % i, bytes([i | BF16]) + old))
        s.append(("cfg%d-bf16-v3-fnv-into-f16" % i, bytes([i | F16]) + old))
        s.append(("cfg%d-bf16-v3-fnv-blob-trailer" % i, bytes([i | 8 | BF16]) + old + trailer(old, c["vocab_size"])))
        s.append(("cfg%d-v4-into-bf16" % i, bytes([i | BF16]) + snap(c, 3)))
    h = snap(c0, 3, "f16")
    s.append(("cfg0-f16-v5-valid", bytes([F16]) + h))
    s.append(("cfg0-f16-v5-into-bf16", bytes([BF16]) + h))
    s.append(("cfg0-f16-v5-dtype-word-fixsum", bytes([4 | F16]) + h[:40] + struct.pack("<I", 3) + h[44:]))
    s.append(("cfg0-v4-range-into-f16-fixsum", bytes([4 | F16]) + fix_core_checksum(
        b[:40] + struct.pack("<f", 70000.0) + b[44:])))
    s.append(("cfg0-layers3", sel + b[:12] + struct.pack("<I", 3) + b[16:]))
    s.append(("cfg0-fingerprint", sel + b[:16] + struct.pack("<Q", 1) + b[24:]))
    s.append(("cfg0-beyond-context", b"\x04" + b[:24] + struct.pack("<Q", 7) + b[32:]))
    s.append(("cfg0-tokens-mismatch", b"\x04" + b[:24] + struct.pack("<Q", 4) + b[32:]))
    s.append(("cfg0-payload-len-huge", b"\x04" + b[:32] + struct.pack("<Q", 1 << 62) + b[40:]))
    s.append(("cfg0-other-model", sel + snap(configs[1], 3)))
    s.append(("empty", sel))
    s.append(("magic-only", sel + b"RECURST1"))
    t = trailer(b, c0["vocab_size"])
    s.append(("cfg0-blob-trailer-badsum", b"\x08" + b + t[:-1] + bytes([t[-1] ^ 1])))
    s.append(("cfg0-blob-trailer-badsum-fix", b"\x18" + b + t[:-1] + bytes([t[-1] ^ 1])))
    s.append(("cfg0-blob-trailer-vocab", b"\x18" + b + b"RECURLG1" + struct.pack("<II", 17, 0) + t[16:]))
    s.append(("cfg0-blob-trailer-short", b"\x08" + b + t[:-4]))
    s.append(("cfg0-blob-trailer-nan-logit", b"\x08" + b + trailer(b, c0["vocab_size"], [float("nan")] * c0["vocab_size"])))
    return s


# ---------------------------------------------------------------- http_async
# byte 0: split mode (see fuzz_client.h): low 2 bits 0 = one write, 1 = chunks of 1 + (b >> 2)
# bytes, 2 = a write per line, 3 = pseudo-random sizes seeded by b.

def seeds_http():
    s = []

    def add(label, mode, text):
        s.append((label, bytes([mode]) + (text if isinstance(text, bytes) else text.encode())))

    def echo_post(headers, body=""):
        """POST /echo with these header lines (each ending in CRLF) and body."""
        return "POST /echo HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body

    def echo_chunked(body):
        return echo_post("Transfer-Encoding: chunked\r\n", body)

    get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    post = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"tokens\":[]}"
    chunked = ("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
    for mode, name in ((0, "whole"), (1 << 2 | 1, "by2"), (0 << 2 | 1, "by1"), (2, "lines"), (0x53, "random")):
        add("get-" + name, mode, get)
        add("post-" + name, mode, post)
        add("chunked-" + name, mode, chunked)
    add("pipelined-3", 0, get + post + "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    add("pipelined-async", 2, "GET /async HTTP/1.1\r\nHost: x\r\n\r\n" + get + "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    add("stream", 0, "GET /stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    add("head", 0, "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
    add("http10", 0, "GET / HTTP/1.0\r\n\r\n")
    add("http10-keepalive", 0, "GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + get)
    add("conn-close", 0, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + get)
    add("expect-100", 2, echo_post("Expect: 100-continue\r\nContent-Length: 2\r\n", "{}"))
    add("query", 0, "GET /a/b?x=1&y=%20 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n")
    add("leading-crlf", 0, "\r\n\r\n" + get)
    add("absolute-uri", 0, "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n")
    add("asterisk", 0, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
    # near-misses: the compensating checks (docs/HARDENING.md C1-C9) and limits
    add("bare-lf", 0, "GET / HTTP/1.1\nHost: x\n\n")
    add("bare-cr", 0, "GET / HTTP/1.1\rHost: x\r\n\r\n")
    add("nul-in-header", 0, b"GET / HTTP/1.1\r\nHost: x\x00y\r\n\r\n")
    add("obs-fold", 0, "GET / HTTP/1.1\r\nHost: x\r\n  folded\r\n\r\n")
    add("cl-and-te", 0, echo_post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"))
    add("two-cl", 0, echo_post("Content-Length: 1\r\nContent-Length: 1\r\n", "ab"))
    add("te-gzip-chunked", 0, echo_post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"))
    add("te-chunked-twice", 0, echo_post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"))
    add("chunk-size-huge", 0, echo_chunked("ffffffffffffffffff\r\n"))
    add("chunk-missing-crlf", 0, echo_chunked("3\r\nabcX\r\n0\r\n\r\n"))
    add("chunk-ext-long", 0, echo_chunked("1;" + "e" * 300 + "\r\na\r\n0\r\n\r\n"))
    add("body-too-big", 0, echo_post("Content-Length: 5000\r\n", "a" * 64))
    add("line-too-long", 1 << 2 | 1, "GET /" + "a" * 300 + " HTTP/1.1\r\nHost: x\r\n\r\n")
    add("headers-too-many", 0, "GET / HTTP/1.1\r\n" + "".join("H%d: v\r\n" % i for i in range(20)) + "\r\n")
    add("header-bytes", 0, "GET / HTTP/1.1\r\nHost: x\r\nX: " + "v" * 1100 + "\r\n\r\n")
    add("bad-method", 0, "G@T / HTTP/1.1\r\nHost: x\r\n\r\n")
    add("bad-version", 0, "GET / HTTP/2.0\r\nHost: x\r\n\r\n")
    add("space-before-colon", 0, "GET / HTTP/1.1\r\nHost : x\r\n\r\n")
    add("no-host", 0, "GET / HTTP/1.1\r\n\r\n")
    add("two-hosts", 0, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    add("cl-negative", 0, echo_post("Content-Length: -1\r\n"))
    add("cl-plus", 0, echo_post("Content-Length: +1\r\n", "a"))
    add("upgrade", 0, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
    add("connect", 0, "CONNECT x:80 HTTP/1.1\r\nHost: x:80\r\n\r\n")
    add("trailer-bare-lf", 0, echo_chunked("0\r\nX: y\n\r\n"))
    # issue 10: several chunk extensions (item 14), a refusal from the head before 100 Continue
    # (item 11), Last-Event-ID (item 17)
    multi_ext = ("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "3;a=1;b=2\r\nabc\r\n2;a;b;c=\"q; x\";d=4\r\nde\r\n0;last=1;more\r\nT: 1\r\n\r\n")
    for mode, name in ((0, "whole"), (0 << 2 | 1, "by1"), (1 << 2 | 1, "by2"), (0x53, "random")):
        add("chunk-exts-" + name, mode, multi_ext)
    add("chunk-ext-bad-value", 0, echo_chunked("1;a=@\r\na\r\n0\r\n\r\n"))
    add("chunk-ext-quoted-pair", 0, echo_chunked("1;a=\"\\\"\"\r\na\r\n0\r\n\r\n"))
    add("chunk-exts-many", 0, echo_chunked("1" + ";n=v" * 20 + "\r\na\r\n0\r\n\r\n"))
    add("locked-expect-100", 2, "POST /locked HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}")
    add("locked-chunked", 0, "POST /locked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" + get)
    add("locked-bodiless", 0, "GET /locked HTTP/1.1\r\nHost: x\r\n\r\n" + get)
    add("last-event-id", 0, "GET /stream HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 7\r\nAccept: text/event-stream, */*\r\n\r\n")
    add("garbage", 0, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03")
    add("empty", 0, b"")
    return s


# ---------------------------------------------------------------- server
# byte 0: split mode as for http. "@S" in the rest is replaced by the id of a session the harness
# creates before the input (3 tokens folded), "@N" by the id in the last response that had one.

def seeds_server():
    s = []

    def req(method, path, body=None, extra=""):
        h = "%s %s HTTP/1.1\r\nHost: x\r\n%s" % (method, path, extra)
        if body is not None:
            h += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body.encode())
        return h + "\r\n" + (body or "")

    def add(label, mode, *reqs):
        s.append((label, bytes([mode]) + "".join(reqs).encode()))

    add("healthz", 0, req("GET", "/healthz"))
    add("metrics", 0, req("GET", "/metrics"))
    add("model", 0, req("GET", "/v1/model"))
    add("create-empty", 0, req("POST", "/v1/sessions"))
    add("create-text", 2, req("POST", "/v1/sessions", '{"text":"hello"}'))
    add("create-then-use", 2, req("POST", "/v1/sessions", '{"tokens":[1,2]}'),
        req("POST", "/v1/sessions/@N/tokens", '{"text":"ab","top_k":2}'),
        req("POST", "/v1/sessions/@N/generate", '{"max_tokens":3,"temperature":0}'),
        req("GET", "/v1/sessions/@N"), req("DELETE", "/v1/sessions/@N"))
    add("get", 0, req("GET", "/v1/sessions/@S"))
    add("tokens", 0, req("POST", "/v1/sessions/@S/tokens", '{"tokens":[1,2,3]}'))
    add("tokens-sse", 0, req("POST", "/v1/sessions/@S/tokens", '{"text":"hi"}', "Accept: text/event-stream\r\n"))
    add("generate", 0, req("POST", "/v1/sessions/@S/generate", '{"max_tokens":4,"seed":1,"stop":["a"]}'))
    add("generate-sse", 0, req("POST", "/v1/sessions/@S/generate", '{"max_tokens":2}', "Accept: text/event-stream\r\n"))
    add("generate-empty", 0, req("POST", "/v1/sessions/@S/generate", ""))
    add("generate-topk-topp", 3, req("POST", "/v1/sessions/@S/generate", '{"max_tokens":5,"top_k":3,"top_p":0.5,"temperature":2}'))
    add("fork", 0, req("POST", "/v1/sessions/@S/fork"), req("GET", "/v1/sessions/@N"))
    add("state-get", 0, req("GET", "/v1/sessions/@S/state"))
    add("state-put-garbage", 0, "PUT /v1/sessions/@S/state HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 8\r\n\r\nRECURST1")
    add("delete", 0, req("DELETE", "/v1/sessions/@S"), req("GET", "/v1/sessions/@S"))
    add("pipelined", 0, req("POST", "/v1/sessions/@S/tokens", '{"tokens":[4]}'),
        req("POST", "/v1/sessions/@S/generate", '{"max_tokens":2}'), req("GET", "/v1/sessions/@S"))
    add("chunked-body", 1 << 2 | 1, "POST /v1/sessions/@S/tokens HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "6\r\n{\"text\r\n8\r\n\":\"abc\"}\r\n0\r\n\r\n")
    add("http10-generate", 0, "POST /v1/sessions/@S/generate HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
    add("head-model", 0, req("HEAD", "/v1/model"))
    # near-misses
    add("unknown-session", 0, req("GET", "/v1/sessions/0123456789abcdef0123456789abcdef"))
    add("bad-id", 0, req("GET", "/v1/sessions/XYZ/tokens"))
    add("bad-action", 0, req("POST", "/v1/sessions/@S/rewind", "{}"))
    add("wrong-method", 0, req("PUT", "/v1/sessions/@S/tokens", "{}"))
    add("bad-json", 0, req("POST", "/v1/sessions/@S/tokens", '{"tokens":[1,'))
    add("bad-token", 0, req("POST", "/v1/sessions/@S/tokens", '{"tokens":[256]}'))
    add("too-many-tokens", 0, req("POST", "/v1/sessions/@S/tokens", json.dumps({"tokens": [1] * 200})))
    add("context-full", 0, req("POST", "/v1/sessions/@S/tokens", json.dumps({"tokens": [1] * 60})),
        req("POST", "/v1/sessions/@S/generate", '{"max_tokens":10}'))
    add("media-type", 0, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}")
    add("not-found", 0, req("GET", "/nope"))
    add("v1-not-found", 0, req("GET", "/v1/nope"))
    add("queue-flood", 0, *[req("POST", "/v1/sessions/@S/tokens", '{"tokens":[2]}') for _ in range(6)])
    add("early-close", 0, "POST /v1/sessions/@S/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{\"max")
    # issue 10 item 17: SSE reconnects and Accept negotiation; item 14 on a real route
    sse = "Accept: text/event-stream\r\n"
    add("generate-reconnect", 0, req("POST", "/v1/sessions/@S/generate", '{"max_tokens":2}', sse),
        req("POST", "/v1/sessions/@S/generate", '{"max_tokens":2}', sse + "Last-Event-ID: done\r\n"),
        req("GET", "/v1/sessions/@S"))
    add("tokens-reconnect", 0, req("POST", "/v1/sessions/@S/tokens", '{"tokens":[1]}', "Last-Event-ID: 3\r\n"))
    add("accept-q-values", 0,
        req("POST", "/v1/sessions/@S/tokens", '{"tokens":[1]}', "Accept: text/event-stream;q=0, */*\r\n"),
        req("POST", "/v1/sessions/@S/tokens", '{"tokens":[2]}', "Accept: text/event-stream, */*;q=0.5\r\n"),
        req("POST", "/v1/sessions/@S/generate", '{"max_tokens":1}', 'Accept: text/*;a="x,y";q=0.9, application/x-ndjson;q=0.8\r\n'))
    add("chunked-exts", 1 << 2 | 1, "POST /v1/sessions/@S/tokens HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "6;a=1;b=2\r\n{\"text\r\n8;c;d=\"e\"\r\n\":\"abc\"}\r\n0;z=9\r\n\r\n")
    add("expect-100-create", 2, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    # issue 14: checkpoints and the prefix cache's create extension
    add("checkpoints", 0, req("POST", "/v1/sessions/@S/checkpoints", "{}"),
        req("POST", "/v1/sessions/@S/tokens", '{"tokens":[1,2,3],"checkpoint":true}'),
        req("GET", "/v1/sessions/@S/checkpoints"),
        req("POST", "/v1/sessions/@S/rollback", '{"checkpoint":"0123456789abcdef"}'),
        req("DELETE", "/v1/sessions/@S/checkpoints/0123456789abcdef"),
        req("POST", "/v1/sessions/@S/generate", '{"max_tokens":2,"checkpoint":true}'))
    add("create-prefix-cache", 2, req("POST", "/v1/sessions", '{"tokens":[1,2,3,4],"prefix_cache":true}'),
        req("POST", "/v1/sessions", '{"tokens":[1,2,3,4,5],"prefix_cache":true}'),
        req("POST", "/v1/sessions/@N/generate", '{"max_tokens":2,"temperature":0}'))
    return s


def state_put_seeds():
    """PUT .../state with a real snapshot of the server's model (fuzz_server.c's config)."""
    text = open(os.path.join(HERE, "fuzz_server.c")).read()
    m = re.search(r"#define SERVER_MODEL \\\n((?:\s*\".*\"\s*\\?\n)+)", text)
    if not m:
        return []
    cfg = json.loads("".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))).encode().decode("unicode_escape"))
    seed = int(re.search(r"#define SERVER_MODEL_SEED (\d+)", text).group(1))
    out = []
    V = cfg["vocab_size"]
    after = (b"GET /v1/sessions/@S HTTP/1.1\r\nHost: x\r\n\r\n"
             b"POST /v1/sessions/@S/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 32\r\n\r\n"
             b'{"max_tokens":2,"temperature":1}' +
             b"POST /v1/sessions/@S/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n"
             b'{"text":"ab"}')
    cases = (("n2", 2, None), ("n4-trailer", 4, []), ("n4-trailer-nan-logits", 4, [float("nan")] * V),
             ("n4-trailer-inf-logits", 4, [float("inf")] + [0.0] * (V - 1)),
             ("n4-trailer-neg-inf-logits", 4, [float("-inf")] * V))
    for label, n, logits in cases:
        b = snapshot(cfg, seed, list(range(1, n + 1)))
        if logits is not None:
            b = b + trailer(b, V, logits or None)
        head = ("PUT /v1/sessions/@S/state HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                "Content-Length: %d\r\n\r\n" % len(b)).encode()
        out.append(("state-put-" + label, b"\x02" + head + b + after))
    return out


# ---------------------------------------------------------------- weights_cache


def cache_file(cfg, dtype):
    """The quantized-weights cache file of a seeded model (seed 1) quantized as dtype, written by
    librecur (recur_model_quantize_cached through the binding)."""
    import shutil
    import tempfile
    sys.path.insert(0, os.path.join(ROOT, "core", "python"))
    import recur_model
    d = tempfile.mkdtemp()
    try:
        m = recur_model.Model.init_seed(cfg, 1, max_batch=1, weights_dtype=dtype, weights_cache=d)
        with open(m.weights_cache["path"], "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(d)


def seeds_weights_cache(configs):
    """fuzz_weights_cache.c: byte 0 = config | dtype << 2 | reseal header << 3 | reseal payload << 4."""
    out = []
    for c, cfg in enumerate(configs):
        for q, dt in enumerate(("q8_0", "q4_0")):
            good = cache_file(cfg, dt)
            flag = c | q << 2
            tag = "c%d-%s-" % (c, dt)
            out.append((tag + "valid", bytes([flag]) + good))
            out.append((tag + "truncated", bytes([flag]) + good[:len(good) // 2]))
            flip = bytearray(good)
            flip[64 + 5] ^= 1
            out.append((tag + "payload-bit", bytes([flag]) + bytes(flip)))
            out.append((tag + "payload-bit-resealed", bytes([flag | 16]) + bytes(flip)))
            for label, off, val in (("version", 8, 2), ("layout", 12, 0), ("dtype", 32, 7), ("matrices", 36, 1)):
                h = bytearray(good)
                h[off:off + 4] = struct.pack("<I", val)
                out.append((tag + label + "-resealed", bytes([flag | 8]) + bytes(h)))
            out.append((tag + "other-dtype", bytes([c | (1 - q) << 2]) + good))
            out.append((tag + "trailing", bytes([flag]) + good + bytes(32)))
        out.append(("c%d-other-model" % c, bytes([(c + 1) % 3]) + cache_file(cfg, "q8_0")))
    out.append(("empty", b"\x00"))
    out.append(("header-only", b"\x08RECURWQC" + bytes(56)))
    return out


# ---------------------------------------------------------------- main

def main(argv):
    configs = load_configs()
    assert len(configs) == 3, "fuzz_configs.h: expected FUZZ_CONFIG_0..2"
    targets = {
        "safetensors": lambda: seeds_safetensors(configs),
        "snapshot": lambda: seeds_snapshot(configs),
        "http": seeds_http,
        "http_async": seeds_http,
        "server": lambda: seeds_server() + state_put_seeds(),
        "weights_cache": lambda: seeds_weights_cache(configs),
    }
    for name in argv or sorted(targets):
        write_seeds(name, targets[name]())


if __name__ == "__main__":
    main(sys.argv[1:])
