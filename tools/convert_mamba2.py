"""Convert a state-spaces Mamba-2 checkpoint (the format of mamba_ssm's MambaLMHeadModel, e.g. the
state-spaces/mamba2-130m repository: pytorch_model.bin + its config.json with d_model, n_layer,
vocab_size, ssm_cfg, ...) into the Hugging Face folder recurd serves (model_type "mamba2",
tensors under transformers' names, config.json as transformers' Mamba2Config writes it).

    /usr/bin/python3 tools/convert_mamba2.py SRC_DIR OUT_DIR [--dtype F32|F16|BF16]
                                             [--tokenizer tokenizer.json] [--shards K]

What changes: `backbone.embedding.weight` becomes `backbone.embeddings.weight`; a tied
checkpoint's `lm_head.weight` (the same tensor as the embedding) is dropped; the vocabulary is
the padded one (vocab_size rounded up to pad_vocab_size_multiple, as MambaLMHeadModel builds its
embedding). Nothing is renormalised or re-laid-out: the numbers are copied (--dtype narrows them,
default: the checkpoint's own dtype when it is F32, F16 or BF16 throughout).

Refused by name (the HF layout or recurd cannot express them): ssm_cfg.layer other than Mamba2,
attention layers (attn_layer_idx), an MLP (d_intermediate > 0), LayerNorm blocks (rms_norm false),
ssm_cfg.d_ssm below expand * d_model, unknown keys.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import checkpoint_tensors_f32  # noqa: E402
from export_mamba2 import raw_config, write_folder  # noqa: E402
from mamba2_model import resolve_config, tensor_shapes  # noqa: E402

# MambaConfig's defaults (mamba_ssm/models/config_mamba.py) and Mamba2's constructor defaults
TOP_DEFAULTS = {"d_model": 2560, "d_intermediate": 0, "n_layer": 64, "vocab_size": 50277,
                "ssm_cfg": {}, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
                "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 8,
                "tie_embeddings": True}
SSM_DEFAULTS = {"d_state": 128, "d_conv": 4, "expand": 2, "headdim": 64, "d_ssm": None,
                "ngroups": 1, "D_has_hdim": False, "rmsnorm": True, "norm_before_gate": False,
                "dt_limit": (0.0, math.inf), "bias": False, "conv_bias": True}
# constructor arguments that only shape initialisation or kernels, not the function computed
SSM_IGNORED = {"layer", "conv_init", "A_init_range", "dt_min", "dt_max", "dt_init_floor",
               "chunk_size", "use_mem_eff_path", "process_group", "sequence_parallel"}
TOP_IGNORED = {"residual_in_fp32", "fused_add_norm", "attn_cfg"}


def hf_config(src):
    """state-spaces config dict -> the HF config.json dict (raw_config of export_mamba2)."""
    unknown = set(src) - set(TOP_DEFAULTS) - TOP_IGNORED
    if unknown:
        raise ValueError("config: unknown key(s) %s" % sorted(unknown))
    c = dict(TOP_DEFAULTS, **src)
    ssm = dict(SSM_DEFAULTS, **c["ssm_cfg"])
    if ssm.get("layer", "Mamba1") != "Mamba2":
        raise ValueError("config: ssm_cfg.layer is %r, only Mamba2 is converted" % ssm.get("layer", "Mamba1"))
    bad = set(ssm) - set(SSM_DEFAULTS) - SSM_IGNORED
    if bad:
        raise ValueError("config: unknown ssm_cfg key(s) %s" % sorted(bad))
    if c["attn_layer_idx"]:
        raise ValueError("config: attn_layer_idx (attention layers) is not supported")
    if c["d_intermediate"]:
        raise ValueError("config: d_intermediate > 0 (an MLP per block) is not supported")
    if not c["rms_norm"]:
        raise ValueError("config: rms_norm false (LayerNorm blocks) is not supported")
    d = int(c["d_model"])
    if ssm["d_ssm"] is not None and ssm["d_ssm"] != ssm["expand"] * d:
        raise ValueError("config: ssm_cfg.d_ssm < expand * d_model (a gated MLP beside the SSM) is not "
                         "supported by recurd")
    d_ssm = ssm["expand"] * d
    mult = int(c["pad_vocab_size_multiple"])
    vocab = (int(c["vocab_size"]) + mult - 1) // mult * mult
    # Mamba2's gated norm has eps 1e-5 and MixerModel's norms norm_epsilon = 1e-5 (not configurable
    # through MambaLMHeadModel): one eps, 1e-5
    return raw_config(hidden_size=d, layers=int(c["n_layer"]), state_size=int(ssm["d_state"]),
                      head_dim=int(ssm["headdim"]), expand=ssm["expand"], n_groups=int(ssm["ngroups"]),
                      conv_kernel=int(ssm["d_conv"]), vocab=vocab, conv_bias=bool(ssm["conv_bias"]),
                      use_bias=bool(ssm["bias"]), tied=bool(c["tie_embeddings"]),
                      dt_limit=tuple(float(x) for x in ssm["dt_limit"]), rmsnorm=bool(ssm["rmsnorm"]),
                      norm_before_gate=bool(ssm["norm_before_gate"]),
                      D_has_hdim=bool(ssm["D_has_hdim"]), d_ssm=d_ssm, eps=1e-5)


def hf_tensors(state_dict, cfg):
    """state-spaces tensor names -> HF names, checked against the config's tensor table."""
    out = {}
    for name, t in state_dict.items():
        if name == "backbone.embedding.weight":
            name = "backbone.embeddings.weight"
        elif name == "lm_head.weight" and cfg["tied"]:
            continue
        out[name] = t
    want = tensor_shapes(cfg)
    if set(out) != set(want):
        raise ValueError("checkpoint tensors differ from the config's: %s" % sorted(set(out) ^ set(want)))
    for name, shape in want.items():
        if tuple(out[name].shape) != tuple(shape):
            raise ValueError("%s has shape %s, expected %s" % (name, list(out[name].shape), list(shape)))
    return out


def convert(src_dir, out_dir, dtype=None, tokenizer=None, shards=1):
    with open(os.path.join(src_dir, "config.json")) as f:
        raw = hf_config(json.load(f))
    cfg = resolve_config(raw)
    # weights_only: tensors and plain containers, never arbitrary pickled code from a download
    sd = torch.load(os.path.join(src_dir, "pytorch_model.bin"), map_location="cpu", weights_only=True)
    tensors = hf_tensors(sd, cfg)
    params, dtype = checkpoint_tensors_f32(tensors, dtype)  # exact widening; written as dtype
    return write_folder(out_dir, raw, params, dtype, shards, tokenizer)


def main(argv=None):
    ap = argparse.ArgumentParser(description="state-spaces Mamba-2 checkpoint -> HF folder")
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default=None)
    ap.add_argument("--tokenizer", default=None, help="a tokenizer.json to copy into the folder")
    ap.add_argument("--shards", type=int, default=1)
    a = ap.parse_args(argv)
    convert(a.src, a.out, a.dtype, a.tokenizer, a.shards)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
