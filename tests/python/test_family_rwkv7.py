"""RWKV-7 Hugging Face folders (model_type "rwkv7", FLA's layout, docs/MODELS.md "RWKV-7") in librecur
against the PyTorch twin tools/rwkv7_model.py, and the twin against an independent formulation of
BlinkDL's equations on the .pth names (below: the naive softplus form of the decay, RWKV's
value-major state, x @ W products), so the twin's names and math are checked too.

Folders are written by tools/export_rwkv7.py with seeded random weights (std 0.3; norm weights,
biases, mixes, k_k, k_a, r_k and the LoRA biases spread so every component matters). The reference
is the twin in float64. Tolerance: relative RMS of logits <= 1e-5 over T = 300 tokens (one
256-token prefill piece and a partial one). Exactness claims (batched decode, snapshots, fork, the
converter) are checked bit for bit.
"""
import math
import os

import numpy as np
import pytest
import torch

import convert_rwkv7
import export_rwkv7 as ex
import family_checks as fc
import recur_model as rm
import rwkv7_model as tw
from family_checks import edit_config, rel_rms, rewrite_tensors, tokens_for

TOL = 1e-5
T = 300


def write(tmp, name, seed=1, dtype="F32", raw_edit=None, **kw):
    kw.setdefault("hidden_size", 32)
    kw.setdefault("head_dim", 8)
    kw.setdefault("vocab", 97)
    kw.setdefault("layers", 3)
    raw = ex.raw_config(**kw)
    if raw_edit:
        raw.update(raw_edit)
    params = tw.random_params(tw.resolve_config(raw), seed, std=0.3)
    return ex.write_folder(str(tmp / name), raw, params, dtype)


def twin_logits(folder, tokens):
    params, cfg = tw.load_folder(folder)
    logits, _ = tw.forward(params, cfg, torch.tensor(tokens, dtype=torch.long))
    return logits.numpy()


# name -> export options; several layer counts, head size 64, tied / untied, F32 / F16 / BF16
VARIANTS = {
    "base": {},
    "one_layer": {"layers": 1},
    "head64_untied": {"hidden_size": 128, "head_dim": 64, "layers": 2, "ranks": (32, 32, 16, 64)},
    "head64_bf16": {"hidden_size": 128, "head_dim": 64, "layers": 4, "dtype": "BF16"},
    "tied": {"tied": True},
    "f16_tied": {"tied": True, "dtype": "F16"},
    "no_ln0": {"ln0": False},
    "stale_num_heads": {"stale_num_heads": True},
    "num_heads_only": {"raw_edit": {"head_dim": None, "num_heads": 4}},
    "ff_default": {"ff": None, "raw_edit": {"intermediate_size": None, "hidden_ratio": 3.5}},
    "eps": {"eps": 1e-3},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return fc.write_variants(tmp_path_factory.mktemp("rwkv7"), VARIANTS, write)


# --------------------------------------------------------------------------- the twin vs BlinkDL's form

def blinkdl_sd(params, cfg, layer0_v=False, seed=0):
    """The folder's weights under RWKV-LM's .pth names and shapes (what tools/convert_rwkv7.py reads);
    layer0_v: also layer 0's unused v0 / v1 / v2, as trained checkpoints carry them."""
    sd = {}
    for fla, (src, how) in tw.blinkdl_names(cfg).items():
        t = params[fla].clone()
        if how == "t":
            t = t.t().contiguous()
        elif how == "flat":
            t = t.reshape(1, 1, -1)
        sd[src] = t
    if layer0_v:
        g = torch.Generator().manual_seed(seed)
        d, r = cfg["d"], cfg["Dv"]
        sd["blocks.0.att.v0"] = torch.rand(1, 1, d, generator=g)
        sd["blocks.0.att.v1"] = torch.rand(d, r, generator=g)
        sd["blocks.0.att.v2"] = torch.rand(r, d, generator=g)
    return sd


def blinkdl_forward(sd, cfg, tokens):
    """RWKV-LM's x070 inference equations on the .pth dict, written independently of the twin:
    row vectors times [in, out] matrices, the decay in its softplus form
    exp(-exp(-softplus(-(w0 + w)) - 0.5)), the state value-major S[h][v][k], S @ r."""
    z = {k: v.double().reshape(v.shape[-1]) if v.dim() == 3 else v.double() for k, v in sd.items()}
    H, N, L, eps = cfg["H"], cfg["N"], cfg["n_layers"], cfg["eps"]
    ln = lambda x, p: F_ln(x, z[p + ".weight"], z[p + ".bias"], eps)  # noqa: E731
    att_x = [torch.zeros(cfg["d"], dtype=torch.float64) for _ in range(L)]
    ffn_x = [torch.zeros(cfg["d"], dtype=torch.float64) for _ in range(L)]
    S = [torch.zeros(H, N, N, dtype=torch.float64) for _ in range(L)]
    out = []
    for tok in tokens:
        x = z["emb.weight"][int(tok)]
        if "blocks.0.ln0.weight" in z:
            x = ln(x, "blocks.0.ln0")
        v_first = None
        for i in range(L):
            a = "blocks.%d.att." % i
            xx = ln(x, "blocks.%d.ln1" % i)
            sx = att_x[i] - xx
            att_x[i] = xx
            xr, xw, xk, xv, xa, xg = (xx + sx * z[a + "x_" + c] for c in "rwkvag")
            r, k, v = z[a + "receptance.weight"] @ xr, z[a + "key.weight"] @ xk, z[a + "value.weight"] @ xv
            w = torch.tanh(xw @ z[a + "w1"]) @ z[a + "w2"]
            w = torch.exp(-torch.exp(-torch.nn.functional.softplus(-(z[a + "w0"] + w)) - 0.5))
            if i == 0:
                v_first = v
            else:
                v = v + (v_first - v) * torch.sigmoid(z[a + "v0"] + (xv @ z[a + "v1"]) @ z[a + "v2"])
            al = torch.sigmoid(z[a + "a0"] + (xa @ z[a + "a1"]) @ z[a + "a2"])
            g = torch.sigmoid(xg @ z[a + "g1"]) @ z[a + "g2"]
            kk = torch.nn.functional.normalize((k * z[a + "k_k"]).view(H, N), dim=-1, p=2.0).view(-1)
            k = k * (1 + (al - 1) * z[a + "k_a"])
            vk = v.view(H, N, 1) @ k.view(H, 1, N)
            ab = (-kk).view(H, N, 1) @ (kk * al).view(H, 1, N)
            S[i] = S[i] * w.view(H, 1, N) + S[i] @ ab + vk
            o = (S[i] @ r.view(H, N, 1)).view(H, N)
            o = torch.nn.functional.group_norm(o.reshape(1, H * N), H, z[a + "ln_x.weight"], z[a + "ln_x.bias"],
                                               eps=N * eps).view(-1)
            o = o + ((r * k * z[a + "r_k"].reshape(-1)).view(H, N).sum(-1, keepdim=True) * v.view(H, N)).view(-1)
            x = x + z[a + "output.weight"] @ (o * g)
            f = "blocks.%d.ffn." % i
            xx = ln(x, "blocks.%d.ln2" % i)
            kx = xx + (ffn_x[i] - xx) * z[f + "x_k"]
            ffn_x[i] = xx
            x = x + z[f + "value.weight"] @ torch.relu(z[f + "key.weight"] @ kx) ** 2
        out.append(z["head.weight"] @ ln(x, "ln_out"))
    return torch.stack(out).numpy()


def F_ln(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


@pytest.mark.parametrize("name", ["base", "head64_untied", "no_ln0"])
def test_twin_equals_blinkdl_equations(folders, name):
    params, cfg = tw.load_folder(folders[name])
    toks = tokens_for(cfg["vocab_size"], 40, 3)
    ref = blinkdl_forward(blinkdl_sd(params, cfg), cfg, toks)
    got, _ = tw.forward(params, cfg, torch.tensor(toks, dtype=torch.long))
    assert rel_rms(got.numpy(), ref) < 1e-12


def test_twin_state_continues(folders):
    params, cfg = tw.load_folder(folders["base"])
    toks = torch.tensor(tokens_for(cfg["vocab_size"], 30, 4), dtype=torch.long)
    a, _ = tw.forward(params, cfg, toks)
    b, st = tw.forward(params, cfg, toks[:11])
    c, _ = tw.forward(params, cfg, toks[11:], state=st)
    assert torch.equal(torch.cat([b, c]), a)


# --------------------------------------------------------------------------- librecur vs the twin

@pytest.mark.parametrize("name", list(VARIANTS))
def test_prefill_and_decode_match_twin(folders, name):
    fc.prefill_and_decode_match_twin(folders[name], twin_logits, TOL, T, 60, len(name))


def test_info_and_state_bytes(folders):
    for name in ("base", "head64_untied", "tied", "no_ln0"):
        params, cfg = tw.load_folder(folders[name])
        info = rm.Model.load(folders[name]).info
        assert info["state_bytes"] == tw.state_bytes(cfg)
        assert info["mixers"] == ["rwkv7"] * cfg["n_layers"]
        assert info["n_heads"] == cfg["H"] and info["head_k"] == info["head_v"] == cfg["N"]
        assert info["n_params"] == sum(t.numel() for t in params.values())


def test_head_dim_decides_over_num_heads(folders):
    a, b = rm.Model.load(folders["base"]).info, rm.Model.load(folders["stale_num_heads"]).info
    assert a["n_heads"] == b["n_heads"] == 4  # num_heads 7 in the stale config: head_dim 8 decides


class TestChecks(fc.FamilyChecks):
    PREFILL_DECODE = "head64_untied"
    FORK = "head64_bf16"
    BATCHED = ("base", "head64_untied", "head64_bf16", "tied")
    OTHER = "no_ln0"


def test_long_run_stays_finite(folders):
    """1500 decode steps (the decay and erase keep S bounded); logits equal the twin's at the end."""
    folder = folders["base"]
    m = rm.Model.load(folder)
    toks = tokens_for(m.vocab, 1500, 10)
    got = m.prefill(m.state(), toks)
    assert np.isfinite(got).all()
    assert rel_rms(got[-50:], twin_logits(folder, toks)[-50:]) <= TOL


# --------------------------------------------------------------------------- the converter

@pytest.mark.parametrize("dtype,layer0_v", [("F32", True), ("BF16", False)])
def test_converted_pth_gives_the_folders_logits(tmp_path, dtype, layer0_v):
    src = write(tmp_path, "src", dtype=dtype, hidden_size=128, head_dim=64, layers=2, ranks=(32, 32, 16, 64))
    params, cfg = tw.load_folder(src)
    sd = blinkdl_sd(params, cfg, layer0_v)
    if dtype == "BF16":
        sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}  # exact: the folder's values are bf16
    pth = str(tmp_path / "model.pth")
    torch.save(sd, pth)
    out = convert_rwkv7.convert(pth, str(tmp_path / "hf"))
    a, b = rm.Model.load(src), rm.Model.load(out)
    assert b.info["weights_dtype"] == dtype
    assert a.info["fingerprint"] == b.info["fingerprint"]
    toks = tokens_for(a.vocab, 100, 1)
    assert np.array_equal(a.prefill(a.state(), toks), b.prefill(b.state(), toks))


def test_converter_refuses_by_name(tmp_path):
    src = write(tmp_path, "src")
    params, cfg = tw.load_folder(src)
    base = blinkdl_sd(params, cfg)
    pth = str(tmp_path / "m.pth")
    cases = [({"blocks.1.att.time_decay": torch.zeros(32)}, None, "blocks.1.att.time_decay"),
             ({}, "blocks.2.att.a1", "blocks.2.att.a1"),
             ({"blocks.1.att.k_k": torch.zeros(1, 1, 31)}, None, "blocks.1.att.k_k")]
    for add, drop, word in cases:
        sd = dict(base, **add)
        sd.pop(drop, None)
        torch.save(sd, pth)
        with pytest.raises(ValueError, match=word.replace(".", r"\.")):
            convert_rwkv7.convert(pth, str(tmp_path / "out"))


# --------------------------------------------------------------------------- hostile folders

HOSTILE = [  # (what, spoil, words the error message must hold)
    ("unknown key", lambda f: edit_config(f, mystery_option=1), "mystery_option"),
    ("hidden_act", lambda f: edit_config(f, hidden_act="gelu"), "hidden_act"),
    ("hybrid attention", lambda f: edit_config(f, attn={"layers": [1], "num_heads": 4}), "attn"),
    ("norm_bias false", lambda f: edit_config(f, norm_bias=False), "norm_bias"),
    ("wide values", lambda f: edit_config(f, value_dim=64), "value_dim"),
    ("value_dim list", lambda f: edit_config(f, value_dim=[32, 64, 32]), "value_dim"),
    ("head_dim not dividing", lambda f: edit_config(f, head_dim=5), "head_dim"),
    ("no head size", lambda f: edit_config(f, head_dim=None, num_heads=None), "num_heads"),
    ("num_heads not dividing", lambda f: edit_config(f, head_dim=None, num_heads=5), "num_heads"),
    ("tiny eps", lambda f: edit_config(f, norm_eps=1e-300), "norm_eps"),
    ("absurd hidden_size", lambda f: edit_config(f, hidden_size=1 << 40), "hidden_size"),
    ("zero layers", lambda f: edit_config(f, num_hidden_layers=0), "num_hidden_layers"),
    ("head_dim default 64", lambda f: edit_config(f, drop=["head_dim"]), "head_dim"),
    ("null rank", lambda f: edit_config(f, v_low_rank_dim=None), "v_low_rank_dim"),
    ("rank mismatch", lambda f: edit_config(f, decay_low_rank_dim=8), "w_lora.lora.0.weight"),
    ("ff mismatch", lambda f: edit_config(f, intermediate_size=64), "ffn.key.weight"),
    ("vocab mismatch", lambda f: edit_config(f, vocab_size=98), "model.embeddings.weight"),
    ("tied flag mismatch", lambda f: edit_config(f, tie_word_embeddings=True), "lm_head.weight"),
    ("norm_first mismatch", lambda f: edit_config(f, norm_first=False), "pre_norm"),
    ("missing tensor", lambda f: rewrite_tensors(f, lambda t: t.pop("model.layers.1.attn.r_k")),
     "model.layers.1.attn.r_k"),
    ("layer 0 value lora", lambda f: rewrite_tensors(
        f, lambda t: t.update({"model.layers.0.attn.v_lora.lora.2.bias": torch.zeros(32)})), "v_lora"),
    ("misshapen mix", lambda f: rewrite_tensors(
        f, lambda t: t.update({"model.layers.0.attn.x_r": torch.zeros(32)})), "attn.x_r"),
    ("non-finite weight", lambda f: rewrite_tensors(
        f, lambda t: t["model.layers.2.attn.k_a"].__setitem__(3, math.inf)), "k_a"),
    ("not json", lambda f: open(os.path.join(f, "config.json"), "w").write('{"model_type": "rwkv7",'),
     "config.json"),
]


@pytest.mark.parametrize("what,spoil,words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_folder_refused(tmp_path, what, spoil, words):
    fc.refused_by_name(write(tmp_path, "h"), spoil, words, what)


@pytest.mark.parametrize("q,bound", [("q8_0", 0.15), ("q4_0", 1.0)])
def test_quantized_at_load(folders, q, bound):
    """--weights-dtype on an RWKV-7 folder: every RWKV-7 matrix quantized (no crash, no matrix left
    behind: Q8_0 stays near the F32 logits); prefill = decode, batched = single bit for bit."""
    f32 = rm.Model.load(folders["head64_untied"])
    m = rm.Model.load(folders["head64_untied"], weights_dtype=q)
    assert m.info["weights_dtype"] == q.upper() and m.info["weight_bytes"] < f32.info["weight_bytes"] / 2
    toks = tokens_for(m.vocab, 80, 11)
    got = m.prefill(m.state(), toks)
    assert rel_rms(got, f32.prefill(f32.state(), toks)) < bound
    s = m.state()
    assert rel_rms(np.stack([m.step(s, t) for t in toks[:20]]), got[:20]) <= TOL
    fc.batched_decode_is_bit_identical(m, B=3, steps=2)
