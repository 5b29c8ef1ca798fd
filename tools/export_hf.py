"""Write a seeded random FLA model (docs/MODELS.md) as a Hugging Face folder with upstream names.

    /usr/bin/python3 tools/export_hf.py --config '{"model_type": "gated_deltanet", "hidden_size": 64,
        "num_hidden_layers": 2, "num_heads": 2, "head_dim": 16, "vocab_size": 300}' --seed 1 --out DIR
        [--dtype F32|F16|BF16] [--shards N] [--tokenizer PATH/tokenizer.json] [--std 0.02]

Writes DIR/config.json (the given keys; absent keys take FLA's defaults when read), the tensors
of the FLA modeling code (model.embeddings.weight, model.layers.N.attn_norm.weight,
model.layers.N.attn.q_proj.weight, ..., q_conv1d.weight [C, 1, W], ..., model.norm.weight,
lm_head.weight unless tied) in model.safetensors, or in N shards
model-0000i-of-0000N.safetensors with model.safetensors.index.json, and a copy of the tokenizer.
Weights: matrices and embeddings uniform with the given std; norm weights 1 + 0.1 * uniform(-1, 1)
(so a test sees that they are read); conv taps uniform(+-1/sqrt(W)); A_log = log U[1, 16];
dt_bias = softplus^-1 of dt ~ logU[1e-3, 1e-1] (FLA's initialisation); GLA's gate bias
uniform(+-0.5).
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import write_safetensors  # noqa: E402
from fla_model import fla_config  # noqa: E402


def tensor_specs(cfg):
    """[(name, shape, kind)] in the modeling code's order; kind: mat, norm, conv, alog, dtb, bias."""
    c = fla_config(cfg)
    d, H, Hq, K, V, ff, W = c["d"], c["heads"], c["qk_heads"], c["K"], c["V"], c["ff"], c["W"]
    t = c["type"]
    out = [("model.embeddings.weight", (c["vocab"], d), "mat")]
    for l in range(c["layers"]):
        p = "model.layers.%d." % l
        a = p + "attn."
        out.append((p + "attn_norm.weight", (d,), "norm"))
        out += [(a + "q_proj.weight", (Hq * K, d), "mat"), (a + "k_proj.weight", (Hq * K, d), "mat"),
                (a + "v_proj.weight", (H * V, d), "mat")]
        if t == "gated_deltanet":
            out += [(a + "a_proj.weight", (H, d), "mat"), (a + "b_proj.weight", (H, d), "mat"),
                    (a + "A_log", (H,), "alog"), (a + "dt_bias", (H,), "dtb")]
        if t == "delta_net" and c["use_beta"]:
            out.append((a + "b_proj.weight", (H, d), "mat"))
        if c["conv"]:
            for n, ch in (("q", Hq * K), ("k", Hq * K), ("v", H * V)):
                out.append((a + n + "_conv1d.weight", (ch, 1, W), "conv"))
        if t == "gla":
            if c["gate"]:
                out.append((a + "g_proj.weight", (H * V, d), "mat"))
            out += [(a + "gk_proj.0.weight", (16, d), "mat"), (a + "gk_proj.1.weight", (H * K, 16), "mat"),
                    (a + "gk_proj.1.bias", (H * K,), "bias")]
            out.append((a + "o_proj.weight", (d, H * V), "mat"))
            if c["affine"]:
                out.append((a + ("g_norm_swish_gate.weight" if c["fused"] else "g_norm.weight"), (V,), "norm"))
        else:
            if c["gate"]:
                out.append((a + "g_proj.weight", (H * V, d), "mat"))
            out.append((a + "o_norm.weight", (V,), "norm"))
            out.append((a + "o_proj.weight", (d, H * V), "mat"))
        out += [(p + "mlp_norm.weight", (d,), "norm"), (p + "mlp.gate_proj.weight", (ff, d), "mat"),
                (p + "mlp.up_proj.weight", (ff, d), "mat"), (p + "mlp.down_proj.weight", (d, ff), "mat")]
    out.append(("model.norm.weight", (d,), "norm"))
    if not c["tied"]:
        out.append(("lm_head.weight", (c["vocab"], d), "mat"))
    return out


def random_tensors(cfg, seed, std=0.02):
    g = torch.Generator().manual_seed(seed)
    W = fla_config(cfg)["W"]

    def u(shape, a):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * a

    out = []
    for name, shape, kind in tensor_specs(cfg):
        if kind == "mat":
            t = u(shape, math.sqrt(3) * std)
        elif kind == "norm":
            t = 1 + 0.1 * u(shape, 1.0)
        elif kind == "conv":
            t = u(shape, 1 / math.sqrt(W))
        elif kind == "alog":
            t = torch.log(1 + 15 * torch.rand(shape, generator=g, dtype=torch.float64))
        elif kind == "dtb":
            dt = torch.exp(torch.rand(shape, generator=g, dtype=torch.float64) * (math.log(0.1) - math.log(1e-3))
                           + math.log(1e-3))
            t = dt + torch.log(-torch.expm1(-dt))
        else:
            t = u(shape, 0.5)
        out.append((name, t.float()))
    return out


def write_folder(out, cfg, tensors, dtype="F32", shards=1, tokenizer=None):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if shards <= 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
    else:
        weight_map, parts = {}, [[] for _ in range(shards)]
        for i, (name, t) in enumerate(tensors):
            parts[i * shards // len(tensors)].append((name, t))
        for i, part in enumerate(parts):
            fn = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
            write_safetensors(os.path.join(out, fn), part, dtype)
            for name, _ in part:
                weight_map[name] = fn
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
    if tokenizer:
        shutil.copyfile(tokenizer, os.path.join(out, "tokenizer.json"))


def main(argv=None):
    ap = argparse.ArgumentParser(description="seeded random FLA model as a Hugging Face folder")
    ap.add_argument("--config", required=True, help="config.json text or a path to one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="F32", choices=("F32", "F16", "BF16"))
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tokenizer")
    ap.add_argument("--std", type=float, default=0.02)
    a = ap.parse_args(argv)
    cfg = json.loads(open(a.config).read() if os.path.exists(a.config) else a.config)
    write_folder(a.out, cfg, random_tensors(cfg, a.seed, a.std), a.dtype, a.shards, a.tokenizer)


if __name__ == "__main__":
    main()
