"""FLA checkpoints (gated_deltanet, gla, delta_net; docs/MODELS.md) loaded by librecur from Hugging
Face folders, against the PyTorch twin tools/fla_model.py (float64, token by token).

Folders are written by tools/export_hf.py with seeded random weights (std 0.1, norm weights
1 +- 0.1, so every nonlinearity and norm weight matters). For each family and option:
  - C prefill logits (T = 320: 5 chunks of 64, two prefill pieces of 256) vs the twin: rel. RMS <= 1e-5;
  - prefill then decode vs decode only, and a split prefill vs one: rel. RMS <= 1e-5 (chunkwise vs
    recurrent forms agree to rounding);
  - batched decode bit-identical to single steps; snapshot -> restore -> continue and fork
    bit-identical (the snapshot carries the short convolution's inputs).
Hostile folders: clear errors that name the key / tensor / shard, never a crash.
"""
import json
import os
import struct

import numpy as np
import pytest

import export_hf
import recur_model as rm
from checksums import as_version, lanesum
from fla_model import FlaModel, state_bytes

TOL = 1e-5
T = 320
RECUR_EFORMAT = -7  # core/recur.h


def rel_rms(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2)))


def base(kind, **kw):
    cfg = {"model_type": kind, "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 97}
    if kind == "gated_deltanet":
        cfg.update(num_heads=2, head_dim=16)
    elif kind == "gla":
        cfg.update(num_heads=2)
    else:
        cfg.update(num_heads=4)
    cfg.update(kw)
    return cfg


CASES = {
    "gdn": base("gated_deltanet"),
    "gdn_noconv_nogate": base("gated_deltanet", use_short_conv=False, use_gate=False),
    "gdn_negeig": base("gated_deltanet", allow_neg_eigval=True),
    "gdn_gva": base("gated_deltanet", num_v_heads=4, expand_v=1.5),
    "gdn_tied_conv3": base("gated_deltanet", tie_word_embeddings=True, conv_size=3, intermediate_size=96),
    "gla": base("gla"),
    "gla_conv": base("gla", use_short_conv=True),
    "gla_nogate_noaffine": base("gla", use_output_gate=False, elementwise_affine=False),
    "gla_unfused_clamp": base("gla", fuse_norm=False, clamp_min=-0.05),
    "delta": base("delta_net"),
    "delta_gate_noconv": base("delta_net", use_gate=True, use_short_conv=False),
    "delta_relu_nobeta": base("delta_net", qk_activation="relu", use_beta=False),
    "delta_elu_negeig": base("delta_net", qk_activation="elu", allow_neg_eigval=True, use_short_conv=False),
    "delta_identity": base("delta_net", qk_activation="identity", expand_k=0.5),
}


def write(tmp, cfg, seed=1, dtype="F32", shards=1):
    d = str(tmp)
    export_hf.write_folder(d, cfg, export_hf.random_tensors(cfg, seed, std=0.1), dtype, shards)
    return d


def toks(vocab, n, seed=0):
    return np.random.RandomState(seed).randint(0, vocab, n).astype(np.int32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_twin_and_forms_agree(tmp_path, name):
    cfg = CASES[name]
    d = write(tmp_path / name, cfg)
    m = rm.Model.load(d)
    t = toks(cfg["vocab_size"], T)
    ref, _ = FlaModel.load(d).forward(t.tolist())
    ref = ref.numpy()
    s = m.state()
    got = m.prefill(s, t)
    assert rel_rms(got, ref) <= TOL, name
    # prefill then decode = decode only
    s2 = m.state()
    m.prefill(s2, t[:200])
    tail = np.stack([m.step(s2, int(x)) for x in t[200:240]])
    assert rel_rms(tail, ref[200:240]) <= TOL
    # split prefill = one prefill
    s3 = m.state()
    a = m.prefill(s3, t[:77])
    b = m.prefill(s3, t[77:])
    assert rel_rms(np.concatenate([a, b]), got) <= TOL
    assert rel_rms(m.step(s3, 5), m.step(s, 5)) <= TOL
    # the state size is the formula of docs/MODELS.md
    assert m.info["state_bytes"] == state_bytes(cfg)


@pytest.mark.parametrize("name", ["gdn", "gdn_gva", "gla_conv", "delta_relu_nobeta"])
def test_batch_snapshot_fork_bit_exact(tmp_path, name):
    cfg = CASES[name]
    d = write(tmp_path / name, cfg, seed=3)
    m = rm.Model.load(d, max_batch=8)
    V = cfg["vocab_size"]
    states = [m.state() for _ in range(5)]
    for i, s in enumerate(states):
        m.prefill(s, toks(V, 10 + 7 * i, seed=i))
    singles = [s.copy() for s in states]
    nxt = toks(V, 5, seed=9)
    for step in range(3):
        batched = m.step_batch(states, nxt)
        for i, s in enumerate(singles):
            assert m.step(s, int(nxt[i])).tobytes() == batched[i].tobytes()
        nxt = (nxt + 1 + step) % V
    for a, b in zip(states, singles):
        assert a.snapshot() == b.snapshot()
    # snapshot -> restore -> continue, and fork, bit for bit
    blob = states[2].snapshot()
    assert struct.unpack_from("<I", blob, 8)[0] == 4
    r = m.state()
    r.restore(blob)
    f = states[2].copy()
    cont = toks(V, 30, seed=11)
    want = m.prefill(states[2], cont)
    assert m.prefill(r, cont).tobytes() == want.tobytes()
    assert m.prefill(f, cont).tobytes() == want.tobytes()
    # (a restored state that lacked the conv inputs would continue differently: they are in
    # the snapshot, counted in its payload)
    assert len(blob) == 48 + m.info["state_bytes"]


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
@pytest.mark.parametrize("shards", [1, 3])
def test_half_and_sharded(tmp_path, dtype, shards):
    cfg = CASES["gdn"]
    d = write(tmp_path / ("%s%d" % (dtype, shards)), cfg, seed=5, dtype=dtype, shards=shards)
    if shards > 1:
        assert not os.path.exists(os.path.join(d, "model.safetensors"))
    m = rm.Model.load(d)
    assert m.info["weights_dtype"] == dtype
    t = toks(cfg["vocab_size"], T)
    ref, _ = FlaModel.load(d).forward(t.tolist())
    assert rel_rms(m.prefill(m.state(), t), ref.numpy()) <= TOL


def test_sharded_equals_single(tmp_path):
    cfg = CASES["gla_conv"]
    a = rm.Model.load(write(tmp_path / "one", cfg, seed=2))
    b = rm.Model.load(write(tmp_path / "four", cfg, seed=2, shards=4))
    assert a.info["fingerprint"] == b.info["fingerprint"]
    t = toks(cfg["vocab_size"], 50)
    assert a.prefill(a.state(), t).tobytes() == b.prefill(b.state(), t).tobytes()


# ---------------------------------------------------------------- hostile folders

def load_error(d):
    with pytest.raises(rm.RecurError) as e:
        rm.Model.load(str(d))
    return str(e.value)


def edit_config(d, **kw):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    for k, v in kw.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    open(p, "w").write(json.dumps(cfg))


@pytest.mark.parametrize("key,value,needle", [
    ("attn", {"layers": [1], "num_heads": 2}, '"attn"'),
    ("hidden_act", "gelu", '"hidden_act"'),
    ("attnres_block_size", 2, '"attnres_block_size"'),
    ("frobnicate", 1, '"frobnicate"'),
    ("num_v_heads", 3, '"num_v_heads"'),
    ("norm_eps", -1.0, '"norm_eps"'),
    ("norm_eps", 1e-300, '"norm_eps"'),
    ("expand_v", 1e300, '"expand_v"'),
    ("hidden_size", 10 ** 9, '"hidden_size"'),
    ("num_hidden_layers", 1000, '"num_hidden_layers"'),
    ("vocab_size", 2 ** 40, '"vocab_size"'),
    ("head_dim", 2.5, '"head_dim"'),
    ("use_gate", "yes", '"use_gate"'),
    ("model_type", "mamba3", '"model_type"'),
])
def test_config_refusals_name_the_key(tmp_path, key, value, needle):
    d = write(tmp_path / "m", CASES["gdn"])
    edit_config(d, **{key: value})
    assert needle in load_error(d)


@pytest.mark.parametrize("kind,key,value", [
    ("gla", "feature_map", "elu"), ("gla", "num_kv_heads", 1), ("delta_net", "qk_norm", "sum"),
    ("delta_net", "qk_activation", "tanh"), ("gla", "clamp_min", 0.5), ("gla", "expand_k", 1e300),
])
def test_family_refusals(tmp_path, kind, key, value):
    d = write(tmp_path / "m", base(kind))
    edit_config(d, **{key: value})
    assert '"%s"' % key in load_error(d)


def test_python_json_tokens(tmp_path):
    """Infinity / NaN as Python writes them: fine where a key is ignored, refused where read."""
    d = write(tmp_path / "m", CASES["gdn"])
    p = os.path.join(d, "config.json")
    text = open(p).read().rstrip().rstrip("}") + ', "initializer_range": Infinity, "temperature": NaN}'
    open(p, "w").write(text)
    rm.Model.load(d)
    open(p, "w").write(text.replace('"temperature": NaN', '"norm_eps": NaN'))
    assert '"norm_eps"' in load_error(d)
    open(p, "w").write(text.replace("Infinity", "Infinit"))
    assert "invalid JSON" in load_error(d)
    open(p, "w").write(text[:-1] + ', "vocab_size": 97}')
    assert "duplicate key" in load_error(d)


def rewrite_tensors(d, fn):
    """Apply fn to the [(name, tensor)] list of the folder's model.safetensors."""
    from export import read_safetensors, write_safetensors
    p = os.path.join(d, "model.safetensors")
    ts = list(read_safetensors(p).items())
    write_safetensors(p, fn(ts))


def test_tensor_refusals_name_the_tensor(tmp_path):
    import torch
    cfg = CASES["gdn"]
    name = "model.layers.1.attn.k_conv1d.weight"
    d = write(tmp_path / "missing", cfg)
    rewrite_tensors(d, lambda ts: [(n, t) for n, t in ts if n != name])
    e = load_error(d)
    assert name in e and "missing" in e
    d = write(tmp_path / "extra", cfg)
    rewrite_tensors(d, lambda ts: ts + [("model.layers.0.attn.q_conv1d.bias", torch.zeros(32))])
    assert "model.layers.0.attn.q_conv1d.bias" in load_error(d)
    d = write(tmp_path / "shape", cfg)
    rewrite_tensors(d, lambda ts: [(n, t[:, :, :3] if n == name else t) for n, t in ts])
    e = load_error(d)
    assert name in e and "[32, 1, 3]" in e and "[32, 1, 4]" in e
    d = write(tmp_path / "mismatch", cfg)
    edit_config(d, hidden_size=48)
    assert "model.embeddings.weight" in load_error(d)
    d = write(tmp_path / "tied", cfg)
    edit_config(d, tie_word_embeddings=True)
    assert "lm_head.weight" in load_error(d)
    d = write(tmp_path / "nan", cfg)
    rewrite_tensors(d, lambda ts: [(n, t * float("nan") if n == name else t) for n, t in ts])
    assert name in load_error(d)


def test_shard_refusals(tmp_path):
    cfg = CASES["gdn"]

    def sharded(sub):
        d = write(tmp_path / sub, cfg, shards=3)
        idx = os.path.join(d, "model.safetensors.index.json")
        return d, idx, json.load(open(idx))

    d, idx, j = sharded("missing")
    os.remove(os.path.join(d, "model-00002-of-00003.safetensors"))
    assert "model-00002-of-00003.safetensors" in load_error(d)
    d, idx, j = sharded("wrongshard")
    n = "model.norm.weight"
    j["weight_map"][n] = "model-00001-of-00003.safetensors"
    json.dump(j, open(idx, "w"))
    assert n in load_error(d)
    d, idx, j = sharded("unlisted")
    del j["weight_map"][n]
    json.dump(j, open(idx, "w"))
    e = load_error(d)
    assert n in e and "does not list" in e
    d, idx, j = sharded("traversal")
    j["weight_map"][n] = "../x.safetensors"
    json.dump(j, open(idx, "w"))
    assert "not a file name" in load_error(d)
    d, idx, j = sharded("numbering")
    for k, v in j["weight_map"].items():
        if v == "model-00003-of-00003.safetensors":
            j["weight_map"][k] = "model-00002-of-00003.safetensors"
    json.dump(j, open(idx, "w"))
    assert "missing" in load_error(d)
    d, idx, j = sharded("twice")
    from export import read_safetensors, write_safetensors
    p1 = os.path.join(d, "model-00001-of-00003.safetensors")
    p3 = os.path.join(d, "model-00003-of-00003.safetensors")
    t1 = read_safetensors(p1)
    t3 = list(read_safetensors(p3).items())
    first = sorted(t1)[0]
    write_safetensors(p3, t3 + [(first, t1[first])])
    assert first in load_error(d)
    d, idx, j = sharded("badjson")
    open(idx, "w").write('{"weight_map": {"a": "b.safetensors",}}')
    assert "invalid JSON" in load_error(d)
    d, idx, j = sharded("none")
    os.remove(idx)
    assert "neither" in load_error(d)


def test_snapshot_version_1_still_reads_where_it_can(tmp_path):
    """Version 4 is written (its checksum the lane checksum of tests/python/checksums.py); a
    version-1 snapshot (before short convolutions, FNV-1a) still loads into a model without a
    convolution (the bytes are the same) and is refused where a conv state is due; version 2 (4's
    FNV-1a predecessor) loads everywhere."""
    native = rm.Model.init_seed({"name": "v1", "vocab_size": 50, "d_model": 32, "n_layers": 2, "n_heads": 2,
                                 "head_k": 16, "head_v": 16, "d_ff": 48,
                                 "mixers": ["gated_deltanet", "gla"]}, seed=3)
    for m, ok in ((native, True), (rm.Model.load(write(tmp_path / "gla", CASES["gla"])), True),
                  (rm.Model.load(write(tmp_path / "gdn", CASES["gdn"])), False)):
        s = m.state()
        m.prefill(s, toks(m.vocab, 20))
        blob = s.snapshot()
        assert struct.unpack_from("<I", blob, 8)[0] == 4
        assert struct.unpack_from("<Q", blob, len(blob) - 8)[0] == lanesum(blob[:-8])
        r = m.state()
        if ok:
            r.restore(as_version(blob, 1))
            assert r.snapshot() == blob
        else:
            with pytest.raises(rm.RecurError) as e:
                r.restore(as_version(blob, 1))
            assert e.value.code == RECUR_EFORMAT
        r2 = m.state()
        r2.restore(as_version(blob, 2))
        assert r2.snapshot() == blob
        for v in (3, 5):  # half versions: an f32 payload is the wrong length for them
            with pytest.raises(rm.RecurError):
                r.restore(as_version(blob, v))
