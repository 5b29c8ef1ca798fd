"""Half-precision session states (state_dtype f32 | bf16 | f16; core/state_dtype.h, docs/MODEL.md
"State dtype"): state bytes halve; a bf16 / f16 state's snapshot restores bit-identically and states
its dtype (version 5; version 3, its FNV-1a predecessor, still reads); snapshots move across dtypes by the rule (widen exactly, round to nearest
even once, refuse a value F16 cannot hold); a copy (fork) is exact; batched steps stay
bit-identical to single steps; recurd --state-dtype (GET /v1/model, state download / upload
across daemons of another dtype, state_dir resumed under another dtype) and the CLI."""
import json
import os
import re
import struct
import subprocess

import numpy as np
import pytest
import requests

import recur_model as rm
from daemon import Daemon, RECURD, ROOT, TINY_MODEL, check_config
from checksums import as_version, lanesum, reseal

HYBRID = {"name": "sd-hybrid", "vocab_size": 256, "d_model": 64, "n_layers": 4, "n_heads": 2, "head_k": 32,
          "head_v": 32, "d_ff": 128, "mixers": ["linear", "softmax", "gla", "gated_deltanet"],
          "tied_embeddings": True, "max_context": 512, "norm_eps": 1e-5}
TOKS = list(b"The state of a session, stored in half precision.")
DTYPES = ("f32", "bf16", "f16")


def model(dtype, cfg=HYBRID, max_batch=8):
    return rm.Model.init_seed(cfg, 11, max_batch=max_batch, state_dtype=dtype)


def parse(blob):
    """(version, dtype, values of the recurrent layers as float32, softmax KV bytes) of a snapshot
    of HYBRID (layout of core/snapshot.c)."""
    version, = struct.unpack_from("<I", blob, 8)
    n, = struct.unpack_from("<Q", blob, 24)
    p = 40
    dtype = "f32"
    if version in (3, 5):
        d, z = struct.unpack_from("<II", blob, 40)
        assert z == 0
        dtype = {1: "f16", 2: "bf16"}[d]
        p += 8
    H, K, V = 2, 32, 32
    sizes = [H * K * V + H * K, None, H * K * V, H * K * V]
    vals, kv = [], b""
    for sz in sizes:
        if sz is None:
            kb = n * 2 * H * K * 4
            kv = blob[p:p + kb]
            p += kb
            continue
        if dtype == "f32":
            vals.append(np.frombuffer(blob, np.float32, sz, p)); p += 4 * sz
        else:
            h = np.frombuffer(blob, np.uint16, sz, p); p += 2 * sz
            vals.append(widen(h, dtype))
    assert p == len(blob) - 8
    return version, dtype, np.concatenate(vals), kv


def widen(h, dtype):
    if dtype == "bf16":
        return (h.astype(np.uint32) << 16).view(np.float32)
    return h.view(np.float16).astype(np.float32)


def narrow(x, dtype):
    """numpy's round to nearest even: the rule the C rounding must give"""
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7fff + ((b >> 16) & 1)) >> 16).astype(np.uint32) << 16).view(np.float32)


def fed(m, toks=TOKS):
    s = m.state()
    for t in toks:
        m.step(s, t)
    return s


def test_state_bytes_and_info():
    f32 = model("f32")
    for d in DTYPES:
        m = model(d)
        assert m.info["state_dtype"] == d.upper()
        s = fed(m, TOKS[:5])
        if d != "f32":
            rec = f32.info["state_bytes"] - 2 * 512 * 2 * 32 * 4  # recurrent part (softmax KV stays fp32)
            assert m.info["state_bytes"] == rec // 2 + 2 * 512 * 2 * 32 * 4
            assert len(s.snapshot()) == len(fed(f32, TOKS[:5]).snapshot()) - rec // 2 + 8
    with pytest.raises(ValueError, match="state_dtype"):
        model("fp8")


@pytest.mark.parametrize("d", ["bf16", "f16"])
def test_snapshot_restore_bit_identical_and_fork(d):
    m = model(d)
    s = fed(m)
    blob = s.snapshot()
    version, dtype, vals, _ = parse(blob)
    assert version == 5 and dtype == d and np.isfinite(vals).all() and np.abs(vals).max() > 0
    t = m.state()
    assert struct.unpack_from("<Q", blob, len(blob) - 8)[0] == lanesum(blob[:-8])  # the reference
    t.restore(blob)
    assert t.snapshot() == blob
    old = as_version(blob, 3)  # the FNV-1a predecessor of version 5 still reads, and writes as 5
    u = m.state()
    u.restore(old)
    assert u.snapshot() == blob
    with pytest.raises(rm.RecurError) as e:
        u.restore(old[:-1] + bytes([old[-1] ^ 1]))
    assert e.value.code == rm.ECHECKSUM
    c = s.copy()
    assert c.snapshot() == blob
    # the restored state and the fork go on exactly like the original
    a, b, e = m.step(s, 7), m.step(t, 7), m.step(c, 7)
    assert a.tobytes() == b.tobytes() == e.tobytes()
    assert s.snapshot() == t.snapshot() == c.snapshot()


@pytest.mark.parametrize("d", ["bf16", "f16"])
def test_each_step_rounds_once_to_nearest_even(d):
    """after a step the stored state is exactly the rounding of the fp32 step from the widened state"""
    m, f = model(d), model("f32")
    s = fed(m)
    sf = f.state()
    sf.restore(s.snapshot())                       # widened exactly
    _, _, w, kv = parse(s.snapshot())
    _, _, w32, kv32 = parse(sf.snapshot())
    assert w.tobytes() == w32.tobytes() and kv == kv32
    la, lb = m.step(s, 42), f.step(sf, 42)
    assert la.tobytes() == lb.tobytes()            # the same fp32 arithmetic
    _, _, after, _ = parse(s.snapshot())
    _, _, after32, _ = parse(sf.snapshot())
    assert after.tobytes() == narrow(after32, d).tobytes()


def test_snapshots_across_dtypes_by_the_rule():
    ms = {d: model(d) for d in DTYPES}
    src = fed(ms["f32"])
    blob32 = src.snapshot()
    _, _, v32, kv32 = parse(blob32)
    for d in ("bf16", "f16"):
        s = ms[d].state()
        s.restore(blob32)                          # f32 -> half: rounded once
        _, dt, v, kv = parse(s.snapshot())
        assert dt == d and v.tobytes() == narrow(v32, d).tobytes() and kv == kv32
        back = ms["f32"].state()
        back.restore(s.snapshot())                 # half -> f32: exact
        _, _, vb, _ = parse(back.snapshot())
        assert vb.tobytes() == v.tobytes()
    hb = ms["bf16"].state(); hb.restore(blob32)
    hf = ms["f16"].state(); hf.restore(hb.snapshot())   # bf16 -> f16: widen, round once
    _, _, v, _ = parse(hf.snapshot())
    assert v.tobytes() == narrow(parse(hb.snapshot())[2], "f16").tobytes()


def test_f16_refuses_what_it_cannot_hold():
    f = model("f32")
    s = fed(f, TOKS[:3])
    blob = bytearray(s.snapshot())
    struct.pack_into("<f", blob, 40 + 4 * 5, 70000.0)   # beyond F16's 65504 (within the 2^40 rule)
    blob = reseal(blob)
    g = model("f32").state(); g.restore(bytes(blob))   # f32 and bf16 take it
    b = model("bf16").state(); b.restore(bytes(blob))
    h = model("f16")
    t = fed(h, TOKS[:2])
    before = t.snapshot()
    with pytest.raises(rm.RecurError) as e:
        t.restore(bytes(blob))
    assert e.value.code == rm.ERANGE
    assert t.snapshot() == before                      # unchanged


@pytest.mark.parametrize("d", ["bf16", "f16"])
def test_batched_equals_single(d):
    m = model(d)
    prompts = [TOKS[:7], TOKS[3:20], TOKS[10:14], TOKS[:1], TOKS[5:30]]
    single = [fed(m, p) for p in prompts]
    batch = [fed(m, p) for p in prompts]
    for step in range(4):
        toks = [(17 * i + 5 * step) % 256 for i in range(len(prompts))]
        lb = m.step_batch(batch, toks)
        for i, s in enumerate(single):
            assert m.step(s, toks[i]).tobytes() == lb[i].tobytes()
    for a, b in zip(single, batch):
        assert a.snapshot() == b.snapshot()


def test_prefill_rounds_and_stays_close():
    """prefill computes a piece in fp32 and rounds once at its end: near the f32 model's logits"""
    f, b = model("f32"), model("bf16")
    la = f.prefill(f.state(), TOKS)
    lb = b.prefill(b.state(), TOKS)
    assert la.tobytes() == lb.tobytes()                # one piece from a zero state: no rounding inside
    s32, s16 = fed(f, TOKS), fed(b, TOKS)
    l32, l16 = f.prefill(s32, TOKS[:9]), b.prefill(s16, TOKS[:9])
    assert np.abs(l32 - l16).max() < 0.05 * np.abs(l32).max()


def test_recurd_state_dtype_snapshots_across_daemons(tmp_path):
    toks = TOKS
    sd = tmp_path / "state"
    sd.mkdir()
    with Daemon("--state-dtype", "bf16", "--state-dir", str(sd)) as d:
        info = requests.get(d.url("/v1/model"), timeout=10).json()
        assert info["state_dtype"] == "BF16"
        sid = requests.post(d.url("/v1/sessions"), json={"tokens": toks}, timeout=30).json()["id"]
        blob = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content
        other = requests.post(d.url("/v1/sessions"), json={}, timeout=30).json()["id"]
        assert requests.put(d.url("/v1/sessions/%s/state" % other), data=blob, timeout=10).status_code == 200
        assert requests.get(d.url("/v1/sessions/%s/state" % other), timeout=10).content == blob
        fork = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=10).json()["id"]
        assert requests.get(d.url("/v1/sessions/%s/state" % fork), timeout=10).content == blob
        gen = {"max_tokens": 8, "temperature": 0}
        a = requests.post(d.url("/v1/sessions/%s/generate" % sid), json=gen, timeout=30).text
        b = requests.post(d.url("/v1/sessions/%s/generate" % other), json=gen, timeout=30).text
        assert [json.loads(x).get("token") for x in a.split("\n") if x] == \
               [json.loads(x).get("token") for x in b.split("\n") if x]
        after = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content
    v = parse_tiny(blob)
    assert v[0] == 5 and v[1] == "bf16"
    with Daemon("--state-dtype", "f32", "--state-dir", str(sd)) as d:   # resumed under f32: widened
        assert requests.get(d.url("/v1/model"), timeout=10).json()["state_dtype"] == "F32"
        got = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content
        gv = parse_tiny(got)
        assert gv[1] == "f32" and gv[2].tobytes() == parse_tiny(after)[2].tobytes()
        fresh = requests.post(d.url("/v1/sessions"), json={}, timeout=30).json()["id"]
        r = requests.put(d.url("/v1/sessions/%s/state" % fresh), data=blob, timeout=10)   # bf16 upload
        assert r.status_code == 200, r.text
    with Daemon("--state-dtype", "f16") as d:
        fresh = requests.post(d.url("/v1/sessions"), json={}, timeout=30).json()["id"]
        r = requests.put(d.url("/v1/sessions/%s/state" % fresh), data=blob, timeout=10)
        assert r.status_code == 200, r.text
        got = parse_tiny(requests.get(d.url("/v1/sessions/%s/state" % fresh), timeout=10).content)
        assert got[1] == "f16" and got[2].tobytes() == narrow(parse_tiny(blob)[2], "f16").tobytes()


def test_recurd_f32_state_dir_resumed_as_bf16_and_f16_refusal(tmp_path):
    """an f32 daemon's session files (and checkpoints) load into a bf16 daemon, rounded once; an f16
    daemon refuses an upload holding a value F16 cannot hold (400 snapshot_range, session unchanged)"""
    sd = tmp_path / "state"
    sd.mkdir()
    with Daemon("--state-dir", str(sd)) as d:
        sid = requests.post(d.url("/v1/sessions"), json={"tokens": TOKS}, timeout=30).json()["id"]
        ck = requests.post(d.url("/v1/sessions/%s/checkpoints" % sid), timeout=10).json()["checkpoint"]
        blob32 = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content
        requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [1, 2, 3]}, timeout=30)
    with Daemon("--state-dtype", "bf16", "--state-dir", str(sd)) as d:
        r = requests.post(d.url("/v1/sessions/%s/rollback" % sid), json={"checkpoint": ck}, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["state_bytes"] == requests.get(d.url("/v1/model"), timeout=10).json()["state_bytes"]
        got = parse_tiny(requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content)
        assert got[1] == "bf16" and got[2].tobytes() == narrow(parse_tiny(blob32)[2], "bf16").tobytes()
    bad = bytearray(blob32)
    core = 40 + struct.unpack_from("<Q", bad, 32)[0] + 8
    struct.pack_into("<f", bad, 44, -1.0e6)
    bad = reseal(bad)
    with Daemon("--state-dtype", "f16") as d:
        sid = requests.post(d.url("/v1/sessions"), json={"tokens": TOKS[:4]}, timeout=30).json()["id"]
        before = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content
        r = requests.put(d.url("/v1/sessions/%s/state" % sid), data=bytes(bad), timeout=10)
        assert r.status_code == 400 and r.json()["error"]["code"] == "snapshot_range", r.text
        assert requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=10).content == before


def parse_tiny(blob):
    """(version, dtype, recurrent values) of a snapshot of the tiny e2e model (two gated DeltaNet
    layers, heads 2 x 32 x 32); a logits trailer after the core is ignored"""
    version, = struct.unpack_from("<I", blob, 8)
    P, = struct.unpack_from("<Q", blob, 32)
    p, dtype = 40, "f32"
    if version in (3, 5):
        dtype = {1: "f16", 2: "bf16"}[struct.unpack_from("<I", blob, 40)[0]]
        p += 8
    n = 2 * 2 * 32 * 32
    if dtype == "f32":
        vals = np.frombuffer(blob, np.float32, n, p)
    else:
        vals = widen(np.frombuffer(blob, np.uint16, n, p), dtype)
    assert p + n * (4 if dtype == "f32" else 2) == 40 + P
    return version, dtype, vals


def test_recurd_refuses_unknown_state_dtype():
    rc, out = check_config("--state-dtype", "f8")
    assert rc != 0
    assert b"state_dtype must be f32, bf16 or f16" in out


def test_cli_state_dtype(tmp_path):
    recur = os.path.join(os.path.dirname(RECURD), "recur")
    dflt = os.path.join(ROOT, "models", "default")
    p = subprocess.run([recur, "info", dflt, "--state-dtype", "bf16"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert b"state_dtype     BF16" in p.stdout and b"state_bytes     98304 per session" in p.stdout
    out = {}
    for d in DTYPES:
        p = subprocess.run([recur, "generate", dflt, "--prompt", "The meaning of life is", "-n", "24",
                            "--state-dtype", d], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        out[d] = p.stdout
    assert out["bf16"][:8] == out["f32"][:8]
    p = subprocess.run([recur, "info", dflt, "--state-dtype", "f64"], capture_output=True, timeout=60)
    assert p.returncode == 2 and b"--state-dtype" in p.stderr


# ---------------------------------------------------------------- the twin simulates the rounding

TWIN_CFG = {"name": "sd-twin", "vocab_size": 61, "d_model": 48, "n_layers": 4, "n_heads": 3, "head_k": 16,
            "head_v": 12, "d_ff": 72, "mixers": ["gated_deltanet", "linear", "softmax", "gla"],
            "tied_embeddings": True, "max_context": 512, "norm_eps": 1e-5}
TWIN_TOL = {"bf16": 2e-3, "f16": 3e-4}   # rel. RMS of logits, C decode vs the rounding twin (measured
# 3.4e-4 and 5.2e-5; against the unrounded twin 4.6e-3 and 4.1e-4)


@pytest.fixture(scope="module")
def twin_dir(tmp_path_factory):
    import export as tw_export
    d = str(tmp_path_factory.mktemp("twin"))
    with open(os.path.join(d, "arch.json"), "w") as f:
        json.dump(TWIN_CFG, f)
    tw_export.main(["--config", os.path.join(d, "arch.json"), "--seed", "2", "--out", d, "--std", "0.3"])
    return d


def rel_rms(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2)))


@pytest.mark.parametrize("d", ["bf16", "f16"])
def test_twin_simulates_the_rounding(twin_dir, d):
    """C decode with a half state against tools/model.py's decode_rounded (float64 arithmetic, the
    state rounded after each token): within TWIN_TOL, and much closer than to the unrounded twin"""
    import torch
    import export as tw_export
    import model as tw
    m = rm.Model.load(twin_dir, state_dtype=d)
    assert m.info["state_bytes"] == tw.state_bytes(TWIN_CFG, d)
    toks = np.random.RandomState(3).randint(0, 61, 48).astype(np.int32)
    s = m.state()
    got = np.stack([m.step(s, int(t)) for t in toks])
    twin, _ = tw_export.load(twin_dir)
    twin = twin.double().eval()
    x = torch.tensor(toks[None], dtype=torch.long)
    ref, _ = tw.decode_rounded(twin, x, d)
    with torch.no_grad():
        exact = twin.set_form("recurrent")(x)[0].numpy()
    e_round, e_exact = rel_rms(got, ref[0].numpy()), rel_rms(got, exact)
    assert e_round <= TWIN_TOL[d], (e_round, e_exact)
    assert e_round * 4 < e_exact, (e_round, e_exact)

@pytest.mark.parametrize("dtype", ("bf16", "f16"))
def test_prefix_cache_hit_of_a_half_state_is_exact(dtype):
    """A prefix-cache entry kept in memory is applied without its checks (recur_snapshot_read_own):
    under a half dtype too, the restored state is the stored one, byte for byte (reference: the
    state downloaded from the session that stored it)."""
    toks = list(b"A half-precision state, stored by the prefix cache and restored from memory.")
    with Daemon("--state-dtype", dtype) as d:
        a = requests.post(d.url("/v1/sessions"), json={"tokens": toks, "prefix_cache": True},
                          timeout=30).json()
        assert a["cached_tokens"] == 0
        want = requests.get(d.url("/v1/sessions/%s/state" % a["id"]), timeout=10).content
        b = requests.post(d.url("/v1/sessions"), json={"tokens": toks, "prefix_cache": True},
                          timeout=30).json()
        assert b["cached_tokens"] == len(toks)
        got = requests.get(d.url("/v1/sessions/%s/state" % b["id"]), timeout=10).content
        assert got == want
        assert parse_tiny(got)[1] == dtype
