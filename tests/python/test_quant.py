"""Quantized weights (Q8_0 / Q4_0, core/quant.h): the block codes and scales against a numpy
reimplementation of llama.cpp's definition (quantize_row_q8_0_ref / quantize_row_q4_0_ref in
ggml-quants.c, written here from its formulas), bit for bit; the panel layout byte for byte
(llama.cpp's Q4_0 nibble pairing); a quantized default model through the binding (finite logits,
close to the F16 file's) and through recurd (--weights-dtype, GET /v1/model, logprobs equal to the
binding's quantized model); bad dtypes refused by name."""
import ctypes
import os
import subprocess

import numpy as np
import pytest
import requests

import recur_model as rm
from daemon import Daemon, RECURD, ROOT, TINY_MODEL, check_config

DEFAULT = os.path.join(ROOT, "models", "default")
WT = {"F32": 0, "Q8_0": 3, "Q4_0": 4}
QB = 32
PANEL = 16

_lib = rm._lib
_lib.recur__quantize_q8_0.restype = ctypes.c_uint16
_lib.recur__quantize_q8_0.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_lib.recur__quantize_q4_0.restype = ctypes.c_uint16
_lib.recur__quantize_q4_0.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_lib.recur__packed_floats.restype = ctypes.c_size_t
_lib.recur__packed_floats.argtypes = [ctypes.c_int, ctypes.c_int]
_lib.recur__packed_bytes.restype = ctypes.c_size_t
_lib.recur__packed_bytes.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
_lib.recur__pack.restype = None
_lib.recur__pack.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
_lib.recur__pack_quant.restype = None
_lib.recur__pack_quant.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int]

F32 = np.float32


# ---------------------------------------------------------------- numpy: llama.cpp's definitions

def fp16_bits(d):
    """IEEE binary16 of a float32, nearest even (inf past 65504)."""
    with np.errstate(over="ignore"):
        return int(np.array(d, F32).astype(np.float16).view(np.uint16))


def np_q8_0(x):
    """32 float32 -> (int8 codes, fp16 bits of d): amax/127, codes roundf(x * (1/d))."""
    x = np.asarray(x, F32)
    amax = F32(np.max(np.abs(x)))
    d = F32(amax / F32(127))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    v = (x * inv).astype(F32).astype(np.float64)
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)          # roundf: ties away from zero
    return q.astype(np.int8), fp16_bits(d)


def np_q4_0(x):
    """32 float32 -> (codes 0..15, fp16 bits of d): d = (the x of largest |x|, first) / -8,
    codes min(15, (int8)(x * (1/d) + 8.5))."""
    x = np.asarray(x, F32)
    i = int(np.argmax(np.abs(x)))
    mx = x[i] if abs(x[i]) > 0 else F32(0)
    d = F32(mx / F32(-8))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    v = ((x * inv).astype(F32) + F32(8.5)).astype(F32)
    q = np.minimum(15, np.trunc(v).astype(np.int64))
    return q.astype(np.uint8), fp16_bits(d)


def c_quant(kind, x, n=QB):
    buf = np.zeros(QB, F32)
    buf[:n] = x[:n]
    q = np.zeros(QB, np.int8 if kind == "Q8_0" else np.uint8)
    fn = _lib.recur__quantize_q8_0 if kind == "Q8_0" else _lib.recur__quantize_q4_0
    d = fn(buf.ctypes.data, n, q.ctypes.data)
    return q, d


def blocks(seed):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(QB).astype(F32) * F32(10 ** rng.uniform(-6, 3)) for _ in range(400)]
    ties = np.array([127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 3.5] + [0.25] * 22, F32)
    out += [ties, -ties, np.zeros(QB, F32), np.full(QB, -3.0, F32), np.full(QB, 7.0, F32)]
    q4ties = np.array([-8, 0.5, -0.5, 1.5, -7.5, 7.5, 6.5, -6.5] + [0.0] * 24, F32)  # d = 1: x + 8.5 exact
    out += [q4ties, -q4ties]
    out += [np.array([1e-6] * 16 + [-2e-6] * 16, F32), np.array([1e7] + [1.0] * 31, F32)]  # fp16 subnormal d, inf d
    r = rng.integers(-127, 128, QB).astype(F32)
    r[0] = 127
    out.append(r * F32(0.03125))
    return out


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0"])
def test_block_codes_and_scales_match_llama_definition(kind):
    ref = np_q8_0 if kind == "Q8_0" else np_q4_0
    for i, x in enumerate(blocks(1)):
        q, d = c_quant(kind, x)
        rq, rd = ref(x)
        assert d == rd, (kind, i, x, hex(d), hex(rd))
        assert np.array_equal(q, rq), (kind, i, x, q, rq)
    # a partial block (a row of K % 32 != 0) is the block padded with zeros
    x = blocks(2)[0]
    for n in (1, 7, 31):
        pad = np.zeros(QB, F32)
        pad[:n] = x[:n]
        q, d = c_quant(kind, x, n)
        rq, rd = ref(pad)
        assert d == rd and np.array_equal(q, rq), (kind, n)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0"])
def test_panel_layout_holds_llama_blocks(kind):
    """recur__pack_quant of W [20][70]: per panel and block, the codes (Q8_0: q + 128 at byte
    (g*16 + j)*4 + t for k = 4g + t; Q4_0: llama.cpp's byte qs[4g + t] = q[4g+t] | q[4g+t+16] << 4)
    then 16 fp16 scales; rows past N zero."""
    N, K = 20, 70
    nb = (K + QB - 1) // QB
    rng = np.random.default_rng(3)
    W = rng.standard_normal((N, K)).astype(F32)
    Wp = np.zeros(_lib.recur__packed_floats(N, K), F32)
    _lib.recur__pack(Wp.ctypes.data, W.ctypes.data, N, K)
    size = _lib.recur__packed_bytes(N, K, WT[kind])
    bb = 544 if kind == "Q8_0" else 288
    assert size == 2 * nb * bb
    Wq = np.zeros(size, np.uint8)
    _lib.recur__pack_quant(Wq.ctypes.data, WT[kind], Wp.ctypes.data, WT["F32"], N, K)
    codes = bb - 2 * PANEL
    for p in range(2):
        for b in range(nb):
            blk = Wq[(p * nb + b) * bb:(p * nb + b + 1) * bb]
            scales = blk[codes:].view(np.uint16)
            for j in range(PANEL):
                n = p * PANEL + j
                row = np.zeros(QB, F32)
                if n < N:
                    seg = W[n, b * QB:min(K, (b + 1) * QB)]
                    row[:len(seg)] = seg
                    q, d = (np_q8_0 if kind == "Q8_0" else np_q4_0)(row)
                else:
                    q, d = (np.zeros(QB, np.int8), 0) if kind == "Q8_0" else (np.full(QB, 8, np.uint8), 0)
                assert scales[j] == d, (p, b, j)
                if kind == "Q8_0":
                    want = [(int(q[4 * g + t]) + 128) & 255 for g in range(8) for t in range(4)]
                    got = [blk[(g * PANEL + j) * 4 + t] for g in range(8) for t in range(4)]
                else:
                    qs = [int(q[i]) | int(q[i + 16]) << 4 for i in range(16)]   # llama.cpp's block bytes
                    want = [qs[4 * g + t] for g in range(4) for t in range(4)]
                    got = [blk[(g * PANEL + j) * 4 + t] for g in range(4) for t in range(4)]
                assert got == want, (kind, p, b, j)


# ---------------------------------------------------------------- a quantized model

def heldout_bytes(n):
    import data
    return list(data.split()[1][:n])


def log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def score(m, toks):
    s = m.state()
    lp = log_softmax(m.prefill(s, toks[:-1]))
    nats = -lp[np.arange(len(toks) - 1), toks[1:]].sum()
    return lp, nats / np.log(2) / (len(toks) - 1)


@pytest.fixture(scope="module")
def models():
    return {d: rm.Model.load(DEFAULT, weights_dtype=None if d == "F16" else d.lower())
            for d in ("F16", "Q8_0", "Q4_0")}


def test_quantized_default_model_info(models):
    f16 = models["F16"].info
    for d in ("Q8_0", "Q4_0"):
        i = models[d].info
        assert i["weights_dtype"] == d
        assert i["n_params"] == f16["n_params"] and i["state_bytes"] == f16["state_bytes"]
        assert i["fingerprint"] != f16["fingerprint"]
    # matrices at 34 / 18 bytes per 32 weights; the fp32 embedding table and norms on top
    assert models["Q8_0"].info["weight_bytes"] < 0.6 * f16["weight_bytes"]
    assert models["Q4_0"].info["weight_bytes"] < 0.6 * models["Q8_0"].info["weight_bytes"]


def test_quantized_logits_finite_and_near_f16(models):
    """4 KiB of the held-out stream: bits/byte within 0.02 (Q8_0) / 0.25 (Q4_0) of the F16 file's
    (which computes what fp32 computes), greedy next byte the same at >= 95 % / 80 % of positions."""
    toks = heldout_bytes(4096)
    lp16, bpb16 = score(models["F16"], toks)
    for d, dbpb, agree_min in (("Q8_0", 0.02, 0.95), ("Q4_0", 0.25, 0.80)):
        lp, bpb = score(models[d], toks)
        assert np.isfinite(lp).all()
        agree = float(np.mean(lp.argmax(-1) == lp16.argmax(-1)))
        assert abs(bpb - bpb16) <= dbpb, (d, bpb, bpb16)
        assert agree >= agree_min, (d, agree)


def test_quantize_refuses_by_name():
    with pytest.raises(ValueError, match="q8_0, q4_0"):
        rm.Model.load(DEFAULT, weights_dtype="q5_1")
    q = rm.Model.load(DEFAULT, weights_dtype="q8_0")
    h = rm._P()
    err = ctypes.create_string_buffer(256)
    assert _lib.recur_model_quantize(q._h, b"q4_0", ctypes.byref(h), err, 256) == rm.EINVAL
    assert b"already quantized" in err.value


def test_recurd_serves_quantized_default_model(models):
    toks = heldout_bytes(600)
    with Daemon("--model", DEFAULT, "--weights-dtype", "q8_0", model_config=None) as d:
        info = requests.get(d.url("/v1/model"), timeout=10).json()
        assert info["weights_dtype"] == "Q8_0"
        assert info["weight_bytes"] == models["Q8_0"].info["weight_bytes"]
        assert info["fingerprint"] == "%016x" % models["Q8_0"].info["fingerprint"]
        sid = requests.post(d.url("/v1/sessions"), json={}, timeout=30).json()["id"]
        r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": toks}, timeout=60)
        assert r.status_code == 200, r.text
        import json
        lines = [json.loads(x) for x in r.text.split("\n") if x][:-1]
    lp, _ = score(models["Q8_0"], toks)
    got = np.array([l["logprob"] for l in lines[1:]])
    want = lp[np.arange(len(toks) - 1), toks[1:]]
    assert np.isfinite(got).all()
    assert np.max(np.abs(got - want)) <= 1e-4   # the same model, prefill pieces may differ in rounding


def test_recurd_refuses_unknown_weights_dtype():
    rc, out = check_config("--weights-dtype", "q3_k")
    assert rc != 0
    assert b"weights_dtype must be auto, q8_0 or q4_0" in out


def test_cli_info_and_score_quantized(tmp_path):
    recur = os.path.join(os.path.dirname(RECURD), "recur")
    p = subprocess.run([recur, "info", DEFAULT, "--weights-dtype", "q4_0"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert b"weights         Q4_0 in memory" in p.stdout
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(heldout_bytes(2000)))
    bpb = {}
    for d in ("auto", "q8_0"):
        p = subprocess.run([recur, "score", DEFAULT, str(text), "--weights-dtype", d], capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr
        import re
        bpb[d] = float(re.search(rb"([0-9.]+) bits/byte", p.stdout + p.stderr).group(1))
    assert abs(bpb["q8_0"] - bpb["auto"]) <= 0.02, bpb
    p = subprocess.run([recur, "info", DEFAULT, "--weights-dtype", "q2_k"], capture_output=True, timeout=60)
    assert p.returncode == 2 and b"--weights-dtype" in p.stderr
