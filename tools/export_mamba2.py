"""Write a seeded random Mamba-2 model as a Hugging Face folder (Mamba2ForCausalLM layout):
config.json as transformers writes it (`"time_step_limit": [0.0, Infinity]`), the tensors under
their upstream names (tools/mamba2_model.py tensor_shapes) in model.safetensors or sharded
(model.safetensors.index.json + model-0000i-of-0000n.safetensors), F32 / F16 / BF16, and
optionally a tokenizer.json copied beside them.

    /usr/bin/python3 tools/export_mamba2.py --out DIR [--seed N] [--hidden-size 64] [--layers 2]
        [--state-size 16] [--head-dim 16] [--expand 2] [--n-groups 1] [--conv-kernel 4]
        [--vocab 300] [--pad-vocab-multiple 1] [--no-conv-bias] [--use-bias] [--untied]
        [--dt-limit LO HI] [--no-rmsnorm] [--norm-before-gate] [--D-has-hdim] [--d-ssm N]
        [--dtype F32|F16|BF16] [--shards K] [--fla-keys] [--tokenizer FILE] [--std 0.02]

`--fla-keys` writes FLA's spelling of the keys (norm_eps, dt_limit) instead of transformers'.
Also a library: write_folder(out, raw_config, params, dtype, shards, tokenizer).
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import write_hf_folder  # noqa: E402
from mamba2_model import resolve_config, tensor_shapes  # noqa: E402


def raw_config(hidden_size=64, layers=2, state_size=16, head_dim=16, expand=2, n_groups=1,
               conv_kernel=4, vocab=300, pad_vocab_multiple=1, conv_bias=True, use_bias=False,
               tied=True, dt_limit=(0.0, math.inf), rmsnorm=True, norm_before_gate=False,
               D_has_hdim=False, d_ssm=None, eps=1e-5, fla_keys=False):
    """A config.json dict with the keys transformers' Mamba2Config writes (FLA's when fla_keys)."""
    d_ssm = expand * hidden_size if d_ssm is None else d_ssm
    c = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "vocab_size": vocab,
         "hidden_size": hidden_size, "state_size": state_size, "num_hidden_layers": layers,
         "expand": expand, "conv_kernel": conv_kernel, "n_groups": n_groups,
         "num_heads": d_ssm // head_dim, "head_dim": head_dim, "use_bias": use_bias,
         "use_conv_bias": conv_bias, "hidden_act": "silu", "initializer_range": 0.1,
         "residual_in_fp32": True, "time_step_rank": math.ceil(hidden_size / 16),
         "time_step_min": 0.001, "time_step_max": 0.1, "time_step_floor": 1e-4,
         "rescale_prenorm_residual": False, "use_cache": True, "rms_norm": True,
         "chunk_size": 256, "tie_word_embeddings": tied, "bos_token_id": 0, "eos_token_id": 0,
         "pad_token_id": 0, "torch_dtype": "float32", "transformers_version": "4.44.0"}
    if fla_keys:
        c["norm_eps"] = eps
        c["dt_limit"] = list(dt_limit)
        c["rmsnorm"] = rmsnorm
        c["fuse_norm"] = True
    else:
        c["layer_norm_epsilon"] = eps
        c["time_step_limit"] = list(dt_limit)
        if not rmsnorm:
            c["rmsnorm"] = False
    if norm_before_gate:
        c["norm_before_gate"] = True
    if D_has_hdim:
        c["D_has_hdim"] = True
    if pad_vocab_multiple != 1:
        c["pad_vocab_size_multiple"] = pad_vocab_multiple
    return c


def random_params(cfg, seed, std=0.02):
    """Seeded random tensors for a resolved config: matrices and conv weights uniform with the
    given std, norm weights 1 + U[-0.5, 0.5] (so the tests see them applied), A_log = log U[1, 16],
    dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1], D = 1 + U[-0.5, 0.5]."""
    g = torch.Generator().manual_seed(seed)
    a = std * math.sqrt(3.0)
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        u = torch.rand(shape, generator=g, dtype=torch.float64)
        if name.endswith("norm.weight") or name.endswith("norm_f.weight") or name.endswith(".D"):
            t = 0.5 + u
        elif name.endswith("A_log"):
            t = torch.log(1.0 + 15.0 * u)
        elif name.endswith("dt_bias"):
            dt = torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3)))
            t = dt + torch.log(-torch.expm1(-dt))
        elif name.endswith("conv1d.weight"):
            t = (2 * u - 1) * 0.5
        else:
            t = (2 * u - 1) * a
        out[name] = t.to(torch.float32)
    return out


def write_folder(out, raw, params, dtype="F32", shards=1, tokenizer=None):
    """config.json + the tensors (in tensor_shapes order) + an optional tokenizer.json copy."""
    return write_hf_folder(out, raw, params, list(tensor_shapes(resolve_config(raw))), dtype, shards,
                           tokenizer, "tokenizer.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a seeded random Mamba-2 Hugging Face folder.")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--state-size", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--expand", type=int, default=2)
    ap.add_argument("--n-groups", type=int, default=1)
    ap.add_argument("--conv-kernel", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--pad-vocab-multiple", type=int, default=1)
    ap.add_argument("--no-conv-bias", action="store_true")
    ap.add_argument("--use-bias", action="store_true")
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--dt-limit", type=float, nargs=2, default=[0.0, math.inf])
    ap.add_argument("--no-rmsnorm", action="store_true")
    ap.add_argument("--norm-before-gate", action="store_true")
    ap.add_argument("--D-has-hdim", action="store_true")
    ap.add_argument("--d-ssm", type=int, default=None)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--fla-keys", action="store_true")
    ap.add_argument("--tokenizer", default=None, help="a tokenizer.json to copy into the folder")
    ap.add_argument("--std", type=float, default=0.02)
    a = ap.parse_args(argv)
    raw = raw_config(a.hidden_size, a.layers, a.state_size, a.head_dim, a.expand, a.n_groups,
                     a.conv_kernel, a.vocab, a.pad_vocab_multiple, not a.no_conv_bias, a.use_bias,
                     not a.untied, tuple(a.dt_limit), not a.no_rmsnorm, a.norm_before_gate,
                     a.D_has_hdim, a.d_ssm, a.eps, a.fla_keys)
    cfg = resolve_config(raw)
    params = random_params(cfg, a.seed, a.std)
    write_folder(a.out, raw, params, a.dtype, a.shards, a.tokenizer)
    print("wrote %s (%d parameters, %s, %d shard(s))"
          % (a.out, sum(t.numel() for t in params.values()), a.dtype, max(a.shards, 1)))


if __name__ == "__main__":
    main()
