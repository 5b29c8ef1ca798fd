"""Mamba-2 Hugging Face folders (model_type "mamba2", docs/MODELS.md "Mamba-2") in librecur against
the PyTorch twin tools/mamba2_model.py.

Folders are written by tools/export_mamba2.py with seeded random weights (std 0.3, norm weights
and D away from 1, so every component matters). The reference is the twin's token-by-token form in
float64 (its chunked SSD form agrees with it to ~1e-15, checked here too). Tolerance: relative RMS
of logits <= 1e-5 over T = 300 tokens, which crosses four 64-token chunks of librecur's chunkwise
GLA and one of its 256-token prefill pieces. Exactness claims (batched decode, snapshots, fork,
the converter) are checked bit for bit.
"""
import json
import math
import os

import numpy as np
import pytest
import torch

import convert_mamba2
import export_mamba2 as ex
import mamba2_model as mm
import family_checks as fc
import recur_model as rm
from family_checks import edit_config, rel_rms, rewrite_tensors, tokens_for

TOL = 1e-5
T = 300


def write(tmp, name, seed=1, dtype="F32", shards=1, **kw):
    kw.setdefault("hidden_size", 32)
    kw.setdefault("state_size", 16)
    kw.setdefault("head_dim", 8)
    kw.setdefault("vocab", 97)
    raw = ex.raw_config(**kw)
    cfg = mm.resolve_config(raw)
    params = ex.random_params(cfg, seed, std=0.3)
    return ex.write_folder(str(tmp / name), raw, params, dtype, shards)


def twin_logits(folder, tokens):
    params, cfg = mm.load_folder(folder)
    logits, _ = mm.forward(params, cfg, torch.tensor(tokens, dtype=torch.long), form="recurrent")
    return logits.numpy()


# name -> export options; every option of docs/MODELS.md "Mamba-2" at least once
VARIANTS = {
    "base": {},
    "groups2": {"n_groups": 2},
    "groups4_untied": {"n_groups": 4, "tied": False},
    "no_conv_bias": {"conv_bias": False},
    "conv2": {"conv_kernel": 2},
    "f16": {"dtype": "F16"},
    "bf16_untied": {"dtype": "BF16", "tied": False},
    "sharded": {"shards": 3},
    "dt_limit": {"dt_limit": (0.05, 0.5)},
    "fla_keys": {"fla_keys": True, "dt_limit": (0.01, math.inf)},
    "padded_vocab": {"vocab": 90, "pad_vocab_multiple": 16},
    "use_bias": {"use_bias": True},
    "norm_before_gate": {"norm_before_gate": True, "n_groups": 2},
    "no_rmsnorm": {"rmsnorm": False},
    "D_has_hdim": {"D_has_hdim": True},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return fc.write_variants(tmp_path_factory.mktemp("mamba2"), VARIANTS, write)


def test_twin_forms_agree(folders):
    params, cfg = mm.load_folder(folders["groups2"])
    toks = torch.tensor(tokens_for(cfg["vocab_size"], 150, 3), dtype=torch.long)
    a, sa = mm.forward(params, cfg, toks, form="recurrent")
    b, sb = mm.forward(params, cfg, toks[:70], form="chunked", chunk_size=32)
    c, sc = mm.forward(params, cfg, toks[70:], state=sb, form="chunked", chunk_size=48)
    assert rel_rms(torch.cat([b, c]).numpy(), a.numpy()) < 1e-12
    assert rel_rms(sc[0][1].numpy(), sa[0][1].numpy()) < 1e-12
    assert torch.equal(sc[0][0], sa[0][0])  # layer 0's conv window: the last inputs, exactly
    assert rel_rms(sc[1][0].numpy(), sa[1][0].numpy()) < 1e-12


@pytest.mark.parametrize("name", list(VARIANTS))
def test_prefill_and_decode_match_twin(folders, name):
    fc.prefill_and_decode_match_twin(folders[name], twin_logits, TOL, T, 80, len(name))


def test_info_and_state_bytes(folders):
    for name in ("base", "groups4_untied", "conv2"):
        params, cfg = mm.load_folder(folders[name])
        info = rm.Model.load(folders[name]).info
        assert info["state_bytes"] == mm.state_bytes(cfg)
        assert info["vocab_size"] == cfg["vocab_size"] and info["n_layers"] == cfg["n_layers"]
        assert info["n_params"] == sum(t.numel() for t in params.values())


class TestChecks(fc.FamilyChecks):
    PREFILL_DECODE = SNAPSHOT = FORK = "groups2"
    BATCHED = ("base", "groups4_untied", "bf16_untied", "use_bias")
    OTHER = "no_conv_bias"


# --------------------------------------------------------------------------- the converter

def state_spaces_checkpoint(folder, out, tie):
    """The HF folder's weights in state-spaces' layout (MambaLMHeadModel.state_dict())."""
    params, cfg = mm.load_folder(folder)
    sd = {}
    for n, t in params.items():
        sd["backbone.embedding.weight" if n == "backbone.embeddings.weight" else n] = t.clone()
    if tie:
        sd["lm_head.weight"] = sd["backbone.embedding.weight"]
    os.makedirs(out, exist_ok=True)
    torch.save(sd, os.path.join(out, "pytorch_model.bin"))
    ssm = {"layer": "Mamba2", "d_state": cfg["N"], "d_conv": cfg["W"], "expand": 2,
           "headdim": cfg["P"], "ngroups": cfg["G"], "chunk_size": 256}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"d_model": cfg["d"], "d_intermediate": 0, "n_layer": cfg["n_layers"],
                   "vocab_size": cfg["vocab_size"] - 3, "ssm_cfg": ssm, "attn_layer_idx": [],
                   "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": True,
                   "fused_add_norm": True, "pad_vocab_size_multiple": 8,
                   "tie_embeddings": tie}, f)
    return out


@pytest.mark.parametrize("tie", [True, False])
def test_converter_round_trip_identical_logits(tmp_path, tie):
    src = write(tmp_path, "src", vocab=96, n_groups=2, tied=tie)  # 96: a multiple of 8
    ss = state_spaces_checkpoint(src, str(tmp_path / "ss"), tie)
    out = convert_mamba2.convert(ss, str(tmp_path / "hf"))
    a, b = rm.Model.load(src), rm.Model.load(out)
    assert a.info["fingerprint"] == b.info["fingerprint"]
    toks = tokens_for(a.vocab, 100, 1)
    assert np.array_equal(a.prefill(a.state(), toks), b.prefill(b.state(), toks))


def test_converter_refuses_by_name(tmp_path):
    src = write(tmp_path, "src", vocab=96)
    ss = state_spaces_checkpoint(src, str(tmp_path / "ss"), True)
    cfgp = os.path.join(ss, "config.json")
    base = json.load(open(cfgp))
    for change, word in [({"attn_layer_idx": [0]}, "attn_layer_idx"),
                         ({"d_intermediate": 64}, "d_intermediate"),
                         ({"rms_norm": False}, "rms_norm"),
                         ({"ssm_cfg": {"layer": "Mamba1"}}, "Mamba1"),
                         ({"ssm_cfg": dict(base["ssm_cfg"], d_ssm=32)}, "d_ssm"),
                         ({"ssm_cfg": dict(base["ssm_cfg"], mystery=1)}, "mystery")]:
        json.dump(dict(base, **change), open(cfgp, "w"))
        with pytest.raises(ValueError, match=word):
            convert_mamba2.convert(ss, str(tmp_path / "out"))


# --------------------------------------------------------------------------- hostile folders

HOSTILE = [  # (what, spoil, words the error message must hold)
    ("unknown key", lambda f: edit_config(f, mystery_option=1), "mystery_option"),
    ("hidden_act", lambda f: edit_config(f, hidden_act="gelu"), "hidden_act"),
    ("groups do not divide heads", lambda f: edit_config(f, n_groups=3), "n_groups"),
    ("norm_eps disagrees", lambda f: edit_config(f, norm_eps=1e-3), "norm_eps"),
    ("dt_limit disagrees", lambda f: edit_config(f, dt_limit=[0.0, 1.0]), "dt_limit"),
    ("time_step_limit NaN", lambda f: edit_config(f, time_step_limit=[float("nan"), 1.0]), "time_step_limit"),
    ("time_step_limit reversed", lambda f: edit_config(f, time_step_limit=[1.0, 0.5]), "time_step_limit"),
    ("time_step_limit not a pair", lambda f: edit_config(f, time_step_limit=[0.0]), "time_step_limit"),
    ("time_step_limit huge min", lambda f: edit_config(f, time_step_limit=[1e300, float("inf")]),
     "time_step_limit"),
    ("tiny eps", lambda f: edit_config(f, layer_norm_epsilon=1e-300), "layer_norm_epsilon"),
    ("absurd hidden_size", lambda f: edit_config(f, hidden_size=1 << 40), "hidden_size"),
    ("zero layers", lambda f: edit_config(f, num_hidden_layers=0), "num_hidden_layers"),
    ("conv kernel 1", lambda f: edit_config(f, conv_kernel=1), "conv_kernel"),
    ("attention layers", lambda f: edit_config(f, layer_types=["mamba", "attention"]), "layer_types"),
    ("d_ssm below d_inner", lambda f: edit_config(f, num_heads=2), "num_heads"),
    ("state_size mismatch", lambda f: edit_config(f, state_size=8), "in_proj"),
    ("conv kernel mismatch", lambda f: edit_config(f, conv_kernel=3), "conv1d.weight"),
    ("vocab mismatch", lambda f: edit_config(f, vocab_size=98), "embeddings"),
    ("tied flag mismatch", lambda f: edit_config(f, tie_word_embeddings=False), "lm_head.weight"),
    ("missing tensor", lambda f: rewrite_tensors(f, lambda t: t.pop("backbone.layers.1.mixer.D")),
     "backbone.layers.1.mixer.D"),
    ("extra tensor", lambda f: rewrite_tensors(f, lambda t: t.update(extra=torch.zeros(3))), "extra"),
    ("misshapen tensor", lambda f: rewrite_tensors(
        f, lambda t: t.update({"backbone.layers.0.mixer.A_log": torch.zeros(5)})), "A_log"),
    ("non-finite weight", lambda f: rewrite_tensors(
        f, lambda t: t["backbone.layers.0.mixer.conv1d.weight"].view(-1).__setitem__(3, math.inf)),
     "conv1d.weight"),
    ("not json", lambda f: open(os.path.join(f, "config.json"), "w").write('{"model_type": "mamba2",'),
     "config.json"),
]


@pytest.mark.parametrize("what,spoil,words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_folder_refused(tmp_path, what, spoil, words):
    fc.refused_by_name(write(tmp_path, "h"), spoil, words, what)


def test_gated_mlp_beside_the_ssm_refused(tmp_path):
    """state-spaces' d_ssm < d_inner (z0, x0 of a gated MLP in in_proj): the twin computes it,
    recurd refuses it by name."""
    folder = write(tmp_path, "dmlp", d_ssm=32)
    params, cfg = mm.load_folder(folder)
    assert cfg["d_mlp"] == 32
    with pytest.raises(ValueError, match="num_heads"):
        rm.Model.load(folder)


def test_hostile_shards(tmp_path):
    folder = write(tmp_path, "s", shards=2)
    idx = os.path.join(folder, "model.safetensors.index.json")
    good = json.load(open(idx))
    # a tensor mapped to the wrong shard
    bad = json.loads(json.dumps(good))
    name = next(iter(bad["weight_map"]))
    bad["weight_map"][name] = "model-00002-of-00002.safetensors"
    json.dump(bad, open(idx, "w"))
    with pytest.raises(ValueError):
        rm.Model.load(folder)
    json.dump(good, open(idx, "w"))
    rm.Model.load(folder)
    os.remove(os.path.join(folder, "model-00002-of-00002.safetensors"))
    with pytest.raises(ValueError):
        rm.Model.load(folder)
