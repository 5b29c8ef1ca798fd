"""The PyTorch twin (tools/model.py) agrees with itself and with docs/MODEL.md; export/load and the
data split behave. Pure PyTorch: librecur is not needed."""
import hashlib
import json
import os

import pytest
import torch
import torch.nn.functional as F

import data
from export import export, load, read_safetensors, tensor_names
from model import MIXER_KINDS, RecurModel, state_bytes, validate_config

torch.set_num_threads(1)


def tiny_config(mixers, tied=True, max_context=4096):
    return {"name": "tiny", "vocab_size": 61, "d_model": 24, "n_layers": len(mixers),
            "n_heads": 2, "head_k": 12, "head_v": 8, "d_ff": 40, "mixers": list(mixers),
            "tied_embeddings": tied, "max_context": max_context, "norm_eps": 1e-5}


def random_model(cfg, seed=0, std=0.35):
    """float64 model with large enough weights that every mixer matters to the logits."""
    m = RecurModel(cfg).double()
    m.init_weights(torch.Generator().manual_seed(seed), std=std, random_norms=True)
    with torch.no_grad():  # a spread of gate strengths, not only the mild init
        for name, p in m.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.linspace(-1.0, 1.5, p.numel(), dtype=p.dtype))
    return m


def rel_rms(a, b):
    return ((a - b).pow(2).mean() / b.pow(2).mean()).sqrt().item()


@pytest.mark.parametrize("kind", MIXER_KINDS)
def test_chunkwise_equals_recurrent(kind):
    cfg = tiny_config([kind, kind], max_context=23)   # T > max_context exercises softmax's window
    m = random_model(cfg)
    tokens = torch.randint(0, cfg["vocab_size"], (2, 45), generator=torch.Generator().manual_seed(1))
    ref = m.set_form("recurrent")(tokens)
    for chunk in (1, 7, 16, 64):                        # tail chunks, one chunk, chunk > T
        out = m.set_form("chunkwise", chunk)(tokens)
        assert rel_rms(out, ref) <= 1e-6, (kind, chunk)


@pytest.mark.parametrize("kind", MIXER_KINDS)
def test_split_call_equals_one_call(kind):
    cfg = tiny_config([kind], max_context=30)
    m = random_model(cfg, seed=2).set_form("chunkwise", 8)
    tokens = torch.randint(0, cfg["vocab_size"], (1, 40), generator=torch.Generator().manual_seed(3))
    full = m(tokens)
    a, st = m(tokens[:, :13], return_state=True)
    b, st = m(tokens[:, 13:14], state=st, return_state=True)
    m.set_form("recurrent")
    c = m(tokens[:, 14:], state=st)
    assert rel_rms(torch.cat([a, b, c], 1), full) <= 1e-6


def test_mixers_change_the_function():
    """Guards against a test that cannot fail: every kind gives different logits."""
    tokens = torch.randint(0, 61, (1, 20), generator=torch.Generator().manual_seed(4))
    outs = {}
    for kind in MIXER_KINDS:
        m = random_model(tiny_config([kind]), seed=5)
        outs[kind] = m.set_form("recurrent")(tokens)
    for i, a in enumerate(MIXER_KINDS):
        for b in MIXER_KINDS[i + 1:]:
            assert rel_rms(outs[a], outs[b]) > 1e-3, (a, b)


def test_first_token_matches_hand_written_equations():
    """docs/MODEL.md written out for one token of a gated DeltaNet layer (S_0 = 0:
    S_1 = beta k v^T, o = scale S_1^T q) and of a normalised linear-attention layer."""
    for kind in ("gated_deltanet", "linear"):
        cfg = tiny_config([kind])
        m = random_model(cfg, seed=6)
        tok = torch.tensor([[7]])
        mix = m.layers[0].mixer
        eps = cfg["norm_eps"]
        x = m.embed.weight[7]
        h = x / torch.sqrt(x.pow(2).mean() + eps) * m.layers[0].attn_norm.weight
        H, K, V = 2, 12, 8
        q, k, v = (mix.q_proj.weight @ h).view(H, K), (mix.k_proj.weight @ h).view(H, K), \
            (mix.v_proj.weight @ h).view(H, V)
        if kind == "gated_deltanet":
            def l2(t):
                return t / torch.sqrt(t.pow(2).sum(-1, keepdim=True) + 1e-6)
            q, k = l2(F.silu(q)), l2(F.silu(k))
            beta = torch.sigmoid(mix.b_proj.weight @ h)
            o = K ** -0.5 * beta[:, None] * (q * k).sum(-1, keepdim=True) * v
        else:
            pq, pk = (F.elu(q) + 1) * K ** -0.5, F.elu(k) + 1
            o = (pq * pk).sum(-1, keepdim=True) * v / ((pq * pk).sum(-1, keepdim=True) + 1e-6)
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + eps) * mix.o_norm.weight
        o = o.reshape(-1) * F.silu(mix.g_proj.weight @ h)
        x = x + mix.o_proj.weight @ o
        lay = m.layers[0]
        h2 = x / torch.sqrt(x.pow(2).mean() + eps) * lay.mlp_norm.weight
        x = x + lay.mlp.down_proj.weight @ (F.silu(lay.mlp.gate_proj.weight @ h2)
                                            * (lay.mlp.up_proj.weight @ h2))
        x = x / torch.sqrt(x.pow(2).mean() + eps) * m.norm_f.weight
        want = m.embed.weight @ x
        for form in ("recurrent", "chunkwise"):
            got = m.set_form(form)(tok)[0, 0]
            assert rel_rms(got, want) <= 1e-12, (kind, form)


def test_parameter_names_are_the_tensor_names():
    cfg = tiny_config(list(MIXER_KINDS), tied=False)
    m = RecurModel(cfg)
    sd = m.state_dict()
    assert set(sd) == set(tensor_names(cfg))
    d, H, K, V = 24, 2, 12, 8
    assert sd["layers.4.mixer.A_log"].shape == (H,)
    assert sd["layers.2.mixer.gk_proj.weight"].shape == (H * K, d)
    assert sd["layers.0.mixer.o_proj.weight"].shape == (d, H * V)
    assert sd["layers.0.mixer.o_norm.weight"].shape == (V,)
    assert sd["lm_head.weight"].shape == (61, d)
    assert "lm_head.weight" not in RecurModel(tiny_config(["gla"])).state_dict()


def test_config_validation():
    cfg = tiny_config(["gla"])
    with pytest.raises(ValueError):
        validate_config(dict(cfg, n_layer=2))           # typo of n_layers: unknown key
    with pytest.raises(ValueError):
        validate_config(dict(cfg, mixers=["gla", "gla"]))
    with pytest.raises(ValueError):
        validate_config(dict(cfg, mixers=["mamba"]))
    assert state_bytes(tiny_config(["linear", "gla"])) == (2 * 12 * 8 * 4 + 2 * 12 * 4) + 2 * 12 * 8 * 4


@pytest.mark.parametrize("dtype,tdt", [("F32", torch.float32), ("F16", torch.float16),
                                       ("BF16", torch.bfloat16)])
def test_export_load_round_trip(tmp_path, dtype, tdt):
    cfg = tiny_config(list(MIXER_KINDS), tied=(dtype != "F32"))
    m = RecurModel(cfg)
    m.init_weights(torch.Generator().manual_seed(8), random_norms=True)
    export(m, cfg, str(tmp_path / "a"), dtype)
    m2, cfg2 = load(str(tmp_path / "a"))
    assert cfg2 == validate_config(cfg)
    sd, sd2 = m.state_dict(), m2.state_dict()
    for name in sd:
        assert torch.equal(sd[name].to(tdt).float(), sd2[name]), name
    # writing the loaded model again gives the same bytes
    export(m2, cfg2, str(tmp_path / "b"), dtype)
    for f in ("model.safetensors", "config.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    # the header follows the safetensors layout
    raw = (tmp_path / "a" / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    assert (8 + n) % 8 == 0
    end = max(v["data_offsets"][1] for v in header.values())
    assert 8 + n + end == len(raw)
    assert all(v["dtype"] == dtype for v in header.values())
    assert set(read_safetensors(str(tmp_path / "a" / "model.safetensors"))) == set(sd)


def test_load_rejects_a_missing_tensor(tmp_path):
    cfg = tiny_config(["gated_deltanet"])
    export(RecurModel(cfg), cfg, str(tmp_path))
    with open(tmp_path / "config.json", "w") as f:
        json.dump(dict(cfg, mixers=["gla"]), f)         # gla needs gk_proj, the file has none
    with pytest.raises(ValueError):
        load(str(tmp_path))


needs_fortunes = pytest.mark.skipif(not os.path.isdir(data.FORTUNE_DIR),
                                    reason="Debian package fortunes not installed")


@needs_fortunes
def test_data_split_is_deterministic_and_disjoint():
    train, held = data.split()
    train2, held2 = data.split()
    assert hashlib.sha256(train).digest() == hashlib.sha256(train2).digest()
    assert held == held2
    fortunes = data.all_fortunes()
    held_idx = [i for i in range(len(fortunes)) if i % data.HELDOUT_EVERY == 0]
    assert held == b"\n".join(fortunes[i] for i in held_idx)
    assert len(train) + len(held) + 2 == sum(len(f) + 1 for f in fortunes)
    assert len(held) > 100_000 and len(train) > 20 * len(held) * 0.8
    # disjoint: no held-out fortune occurs as a training fortune (position-wise split; identical
    # texts repeated in two files are counted and must stay rare)
    train_set = set(f for i, f in enumerate(fortunes) if i % data.HELDOUT_EVERY != 0)
    dup = sum(1 for i in held_idx if fortunes[i] in train_set)
    assert dup <= 0.02 * len(held_idx), dup
    assert all(f.endswith(b"\n") and b"\n%\n" not in b"\n" + f for f in fortunes)
