"""The C model (librecur via core/python/recur_model.py) against its PyTorch twin (tools/model.py).

Models are written by tools/export.py with seeded random weights (std 0.3 and random norm weights,
so every nonlinearity and every norm weight matters). The reference is the twin's token-by-token
("recurrent") form in float64. Tolerance: relative RMS of logits <= 1e-5 (docs/MODEL.md).
"""
import json
import os
import struct

import numpy as np
import pytest
import torch

import export as tw_export
import recur_model as rm

MIXERS = ["linear", "retention", "gla", "deltanet", "gated_deltanet", "softmax"]
HYBRID = ["gated_deltanet", "linear", "softmax", "gla", "retention", "deltanet"]
TOL = 1e-5
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def config(mixers, tied=True, **kw):
    cfg = {"name": "parity", "vocab_size": 61, "d_model": 48, "n_layers": len(mixers), "n_heads": 3,
           "head_k": 16, "head_v": 12, "d_ff": 72, "mixers": list(mixers),
           "tied_embeddings": tied, "max_context": 512, "norm_eps": 1e-5}
    cfg.update(kw)
    return cfg


def write_model(tmp, cfg, seed=1, dtype="F32", std="0.3"):
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "arch.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    tw_export.main(["--config", path, "--seed", str(seed), "--out", tmp, "--dtype", dtype,
                    "--std", std])
    return tmp


def rel_rms(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2)))


def twin_logits(model_dir, tokens):
    """float64 token-by-token reference logits [T, vocab] of the twin on the stored weights."""
    model, _ = tw_export.load(model_dir)
    model = model.double().set_form("recurrent").eval()
    with torch.no_grad():
        return model(torch.tensor(np.asarray(tokens)[None], dtype=torch.long))[0].numpy()


def tokens_for(vocab, n, seed=0):
    return np.random.RandomState(seed).randint(0, vocab, n).astype(np.int32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """kind -> model dir, for every mixer kind (untied for gla to cover lm_head) and a hybrid."""
    out = {}
    for kind in MIXERS:
        out[kind] = write_model(str(tmp_path_factory.mktemp(kind)),
                                config([kind, kind], tied=(kind != "gla")), seed=3)
    out["hybrid"] = write_model(str(tmp_path_factory.mktemp("hybrid")), config(HYBRID, tied=False), seed=4)
    return out


# ---------------------------------------------------------------- parity with the twin

@pytest.mark.parametrize("kind", MIXERS + ["hybrid"])
def test_logits_match_twin(models, kind):
    d = models[kind]
    m = rm.Model.load(d)
    toks = tokens_for(m.vocab, 40, seed=1)
    ref = twin_logits(d, toks)
    s = m.state()
    stepped = np.stack([m.step(s, t) for t in toks])
    s2 = m.state()
    prefilled = m.prefill(s2, toks)
    assert rel_rms(stepped, ref) <= TOL, "step vs twin"
    assert rel_rms(prefilled, ref) <= TOL, "prefill vs twin"
    assert s.tokens_seen == s2.tokens_seen == 40
    # the binding reports what the twin computes from the config
    import model as tw_model
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    assert m.info["state_bytes"] == tw_model.state_bytes(cfg)
    assert m.info["n_params"] == tw_model.RecurModel(cfg).n_params()
    assert m.info["mixers"] == cfg["mixers"]


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_half_precision_weights_load(tmp_path, dtype):
    d = write_model(str(tmp_path), config(["gated_deltanet", "softmax"]), seed=5, dtype=dtype)
    m = rm.Model.load(d)
    toks = tokens_for(m.vocab, 30, seed=2)
    ref = twin_logits(d, toks)  # the twin reads the same half-precision values, widened to fp32
    s = m.state()
    assert rel_rms(np.stack([m.step(s, t) for t in toks]), ref) <= TOL
    f32 = rm.Model.load(write_model(str(tmp_path / "f32"), config(["gated_deltanet", "softmax"]), seed=5))
    assert f32.info["fingerprint"] != m.info["fingerprint"]
    assert f32.info["n_params"] == m.info["n_params"]


# ---------------------------------------------------------------- forms agree inside C

@pytest.mark.parametrize("kind", ["gated_deltanet", "hybrid", "linear"])
def test_prefill_then_decode_equals_decode(models, kind):
    """Prefill across piece (256) and chunk (64) boundaries, in uneven calls, then decode."""
    m = rm.Model.load(models[kind])
    toks = tokens_for(m.vocab, 330, seed=3)
    a, b = m.state(), m.state()
    parts = [m.prefill(a, toks[:70]), m.prefill(a, toks[70:300]), m.prefill(a, toks[300:301])]
    parts.append(np.stack([m.step(a, t) for t in toks[301:]]))
    got = np.concatenate(parts)
    ref = np.stack([m.step(b, t) for t in toks])
    assert rel_rms(got, ref) <= TOL
    assert a.tokens_seen == b.tokens_seen == 330
    # prefill without logits advances the state the same way
    c = m.state()
    assert m.prefill(c, toks[:300], want_logits=False) is None
    assert rel_rms(m.step(c, toks[300]), ref[300]) <= TOL


@pytest.mark.parametrize("kind", ["hybrid", "deltanet"])
def test_batched_step_equals_single(models, kind):
    m = rm.Model.load(models[kind], max_batch=16)
    B = 12  # more rows than go through sgemv row by row: the sgemm path is compared
    batch = [m.state() for _ in range(B)]
    single = [m.state() for _ in range(B)]
    for i in range(B):  # sessions at different positions
        pre = tokens_for(m.vocab, 3 * i, seed=10 + i)
        m.prefill(batch[i], pre, want_logits=False)
        m.prefill(single[i], pre, want_logits=False)
    got, want = [], []
    for step in range(10):
        toks = tokens_for(m.vocab, B, seed=100 + step)
        got.append(m.step_batch(batch, toks))
        want.append(np.stack([m.step(single[i], toks[i]) for i in range(B)]))
    # both sides are fp32 and differ only in summation order (sgemm over the batch vs sgemv)
    assert rel_rms(np.stack(got), np.stack(want)) <= TOL
    # a batch holding a bad token folds nothing
    seen = [s.tokens_seen for s in batch]
    with pytest.raises(rm.RecurError) as e:
        m.step_batch(batch, [0, 1, 2, m.vocab] + [3] * (B - 4))
    assert e.value.code == rm.ETOKEN
    assert [s.tokens_seen for s in batch] == seen


# ---------------------------------------------------------------- snapshots

@pytest.mark.parametrize("kind", ["hybrid", "gated_deltanet"])
def test_snapshot_round_trip_exact(models, kind):
    m = rm.Model.load(models[kind])
    toks = tokens_for(m.vocab, 50, seed=4)
    s = m.state()
    m.prefill(s, toks)
    blob = s.snapshot()
    assert blob[:8] == b"RECURST1"
    assert struct.unpack_from("<Q", blob, 16)[0] == m.info["fingerprint"]
    assert struct.unpack_from("<Q", blob, 24)[0] == 50
    t = m.state()
    t.restore(blob)
    assert t.tokens_seen == 50
    assert t.snapshot() == blob
    assert np.array_equal(m.step(s, 7), m.step(t, 7))
    f = s.copy()
    assert np.array_equal(m.step(s, 9), m.step(f, 9))
    if kind == "gated_deltanet":  # fixed size for a model without softmax layers
        u = m.state()
        assert len(u.snapshot()) == len(blob)
        assert u.bytes_used == s.bytes_used == m.info["state_bytes"]
    else:  # the softmax layer's cache grows with the tokens seen, bounded by state_bytes
        u = m.state()
        assert u.bytes_used < s.bytes_used < m.info["state_bytes"]
        w = m.state()
        w.restore(blob)
        assert len(blob) == 48 + w.bytes_used


def test_snapshot_rejections_change_nothing(models):
    m = rm.Model.load(models["hybrid"])
    other = rm.Model.load(models["gated_deltanet"])
    s = m.state()
    m.prefill(s, tokens_for(m.vocab, 20, seed=5))
    blob = s.snapshot()
    t = m.state()
    m.prefill(t, tokens_for(m.vocab, 7, seed=6))
    before = t.snapshot()

    def rejected(data, code):
        with pytest.raises(rm.RecurError) as e:
            t.restore(data)
        assert e.value.code == code, (e.value, code)
        assert t.snapshot() == before and t.tokens_seen == 7

    bad = bytearray(blob)
    bad[60] ^= 1
    rejected(bytes(bad), rm.ECHECKSUM)
    rejected(blob[:-1], rm.ETRUNCATED)
    rejected(blob[:30], rm.ETRUNCATED)
    rejected(b"", rm.ETRUNCATED)
    rejected(b"NOTASNAP" + blob[8:], rm.EFORMAT)
    rejected(blob + b"\0", rm.EFORMAT)
    # a snapshot of another model (other fingerprint, other layer count)
    o = other.state()
    other.prefill(o, tokens_for(other.vocab, 5, seed=7))
    rejected(o.snapshot(), rm.EMISMATCH)
    # same architecture, other weights
    m2 = rm.Model.load(write_model(models["hybrid"] + "_w2", config(HYBRID, tied=False), seed=99))
    s2 = m2.state()
    m2.prefill(s2, tokens_for(m2.vocab, 20, seed=5))
    rejected(s2.snapshot(), rm.EMISMATCH)
    with pytest.raises(rm.RecurError):
        t.copy_from(s2)


# ---------------------------------------------------------------- weight files

def test_corrupt_weight_files_rejected(tmp_path):
    d = write_model(str(tmp_path / "ok"), config(["gated_deltanet", "softmax"]), seed=8)
    good = open(os.path.join(d, "model.safetensors"), "rb").read()
    cfg_path = os.path.join(d, "config.json")
    (n,) = struct.unpack_from("<Q", good, 0)
    header = json.loads(good[8:8 + n])
    data = good[8 + n:]

    def st(hdr, payload):
        text = json.dumps(hdr).encode()
        return struct.pack("<Q", len(text)) + text + payload

    def rejected(blob, code, cfg=cfg_path):
        p = tmp_path / "bad.safetensors"
        p.write_bytes(blob)
        with pytest.raises(rm.RecurError) as e:
            rm.Model.load_files(cfg, str(p))
        assert e.value.code == code, (e.value, code)

    rm.Model.load_files(cfg_path, os.path.join(d, "model.safetensors"))
    rejected(good[:-3], rm.ETRUNCATED)
    rejected(good[:6], rm.ETRUNCATED)
    rejected(struct.pack("<Q", 1 << 62) + good[8:], rm.EFORMAT)
    rejected(struct.pack("<Q", len(good)) + good[8:], rm.ETRUNCATED)
    rejected(good[:8] + b"x" + good[9:], rm.EFORMAT)
    h = dict(header)
    h.pop("norm_f.weight")
    rejected(st(h, data), rm.EFORMAT)                                   # missing tensor
    h = dict(header)
    h["extra.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    rejected(st(h, data), rm.EFORMAT)                                   # extra tensor
    h = json.loads(json.dumps(header))
    h["embed.weight"]["shape"] = h["embed.weight"]["shape"][::-1]
    rejected(st(h, data), rm.EFORMAT)                                   # wrong shape
    h = json.loads(json.dumps(header))
    h["norm_f.weight"]["dtype"] = "I32"
    rejected(st(h, data), rm.EFORMAT)                                   # wrong dtype
    h = json.loads(json.dumps(header))
    b0, e0 = h["norm_f.weight"]["data_offsets"]
    h["norm_f.weight"]["data_offsets"] = [4, 4 + e0 - b0]
    rejected(st(h, data), rm.EFORMAT)                                   # overlapping ranges
    h = json.loads(json.dumps(header))
    h["norm_f.weight"]["data_offsets"] = [len(data), len(data) + e0 - b0]
    rejected(st(h, data), rm.ETRUNCATED)                                # out of the file
    # weights of another architecture under this config (foreign file)
    d2 = write_model(str(tmp_path / "other"), config(["gla", "softmax"]), seed=8)
    rejected(open(os.path.join(d2, "model.safetensors"), "rb").read(), rm.EFORMAT)
    # config errors
    bad_cfg = tmp_path / "bad.json"
    bad_cfg.write_text(json.dumps(dict(config(["gla"]), d_modle=3)))
    rejected(good, rm.EFORMAT, str(bad_cfg))
    with pytest.raises(rm.RecurError) as e:
        rm.Model.load(str(tmp_path / "missing"))
    assert e.value.code == rm.EIO


# ---------------------------------------------------------------- seeded models and sampling

def test_seeded_init_is_deterministic():
    cfg = config(["gated_deltanet", "softmax", "gla"])
    a, b = rm.Model.init_seed(cfg, 1), rm.Model.init_seed(cfg, 1)
    c = rm.Model.init_seed(cfg, 2)
    assert a.info["fingerprint"] == b.info["fingerprint"] != c.info["fingerprint"]
    toks = tokens_for(a.vocab, 12)
    assert np.array_equal(a.prefill(a.state(), toks), b.prefill(b.state(), toks))
    with pytest.raises(rm.RecurError) as e:
        rm.Model.init_seed(dict(cfg, mixers=["mamba", "gla", "gla"]), 1)
    assert e.value.code == rm.EFORMAT


def test_sampling_reproducible():
    logits = np.random.RandomState(0).randn(256).astype(np.float32) * 3
    r1, r2 = [5], [5]
    a = [rm.sample(logits, 0.9, 40, 0.95, r1) for _ in range(50)]
    b = [rm.sample(logits, 0.9, 40, 0.95, r2) for _ in range(50)]
    assert a == b and r1 == r2
    top40 = set(np.argsort(-logits, kind="stable")[:40].tolist())
    assert set(a) <= top40
    assert rm.sample(logits) == int(np.argmax(logits))
    ls = rm.log_softmax(logits)
    assert abs(np.exp(ls.astype(np.float64)).sum() - 1) < 1e-5


def test_default_model_if_present():
    d = os.path.join(ROOT, "models", "default")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        pytest.skip("models/default not trained yet")
    m = rm.Model.load(d)
    text = b"Q: What is the difference between a duck?\nA: One leg is both the same.\n"
    toks = np.frombuffer(text, np.uint8).astype(np.int32)
    ref = twin_logits(d, toks)
    s = m.state()
    assert rel_rms(m.prefill(s, toks), ref) <= TOL


@pytest.mark.parametrize("head_v", [16, 64, 80])
def test_vector_width_heads_match_twin(tmp_path, head_v):
    """head_v a multiple of 16: the decode step's register-blocked path (one, four, four + one
    blocks of 16 columns), every kind in one stack."""
    cfg = config(HYBRID, tied=False, head_k=16, head_v=head_v, n_heads=2)
    d = write_model(str(tmp_path), cfg, seed=5)
    m = rm.Model.load(d, max_batch=3)
    toks = tokens_for(m.vocab, 30, seed=2)
    ref = twin_logits(d, toks)
    s = m.state()
    stepped = np.stack([m.step(s, t) for t in toks])
    assert rel_rms(stepped, ref) <= TOL
    assert rel_rms(m.prefill(m.state(), toks), ref) <= TOL


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_match_twin(tmp_path, seed):
    """Odd sizes (K != V, one head, tiny d, V not a multiple of any vector width), random stacks."""
    import random
    r = random.Random(seed)
    n = r.randint(1, 4)
    cfg = config([r.choice(MIXERS) for _ in range(n)], tied=r.random() < 0.5,
                 vocab_size=r.randint(2, 300), d_model=r.randint(1, 70), n_heads=r.randint(1, 4),
                 head_k=r.randint(1, 40), head_v=r.randint(1, 40), d_ff=r.randint(1, 90),
                 max_context=r.randint(30, 300))
    d = write_model(str(tmp_path), cfg, seed=seed, std="0.2")
    m = rm.Model.load(d, max_batch=3)
    toks = tokens_for(m.vocab, 30, seed=seed)
    ref = twin_logits(d, toks)
    s = m.state()
    assert rel_rms(np.stack([m.step(s, t) for t in toks]), ref) <= TOL, cfg
    assert rel_rms(m.prefill(m.state(), toks), ref) <= TOL, cfg
