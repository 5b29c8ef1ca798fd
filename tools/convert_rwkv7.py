"""Convert a BlinkDL RWKV-7 checkpoint (RWKV-LM's x070 `.pth`, e.g. rwkv7-g1a-0.1b-...pth: a
torch state dict with emb.weight, blocks.N.att.*, blocks.N.ffn.*, ln_out.*, head.weight) into the
Hugging Face folder recurd serves (model_type "rwkv7", FLA's tensor names, config.json as FLA's
RWKV7Config writes it; tools/rwkv7_model.py has the names and the math).

    /usr/bin/python3 tools/convert_rwkv7.py MODEL.pth OUT_DIR [--dtype F32|F16|BF16]
                                           [--tokenizer rwkv_vocab_v20230424.txt]

The dimensions come from the tensors: vocabulary and width from emb.weight, layers from
blocks.N.ffn.key.weight, heads and head size from att.r_k [H, N], the LoRA ranks from w1 / a1 /
v1 / g1, the channel-mix width from ffn.key.weight; ln0 present or not gives norm_first. What
changes: the LoRA matrices w1, w2, a1, ... are stored transposed ([in, out]: FLA's lora.0 / lora.2
Linear weights are [out, in]), w0 / a0 / v0 become the LoRA biases, k_k, k_a and ffn.x_k lose their
[1, 1, d] shape. Layer 0's v0 / v1 / v2 (trained, never used: layer 0 makes the value residual) are
dropped. Nothing else is touched: the numbers are copied (--dtype narrows them; default the
checkpoint's own dtype when it is F32, F16 or BF16 throughout). The LayerNorm eps is RWKV-LM's
(1e-5, norm_eps), so the GroupNorm's is head_size * 1e-5 (64e-5 at head size 64).

Refused by name: a tensor the x070 model does not have (another RWKV version), a missing one, a
shape that disagrees with the others.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import checkpoint_tensors_f32  # noqa: E402
from export_rwkv7 import raw_config, write_folder  # noqa: E402
from rwkv7_model import blinkdl_names, resolve_config, tensor_shapes  # noqa: E402

UNUSED = ("blocks.0.att.v0", "blocks.0.att.v1", "blocks.0.att.v2")


def _need(sd, name):
    if name not in sd:
        raise ValueError("checkpoint: tensor %s is missing (not an RWKV-7 x070 checkpoint?)" % name)
    return sd[name]


def hf_config(sd):
    """The FLA config.json dict of a BlinkDL state dict (shapes only)."""
    vocab, d = _need(sd, "emb.weight").shape
    layers = 0
    while "blocks.%d.ffn.key.weight" % layers in sd:
        layers += 1
    if layers == 0:
        raise ValueError("checkpoint: tensor blocks.0.ffn.key.weight is missing (not an RWKV-7 x070 checkpoint?)")
    H, N = _need(sd, "blocks.0.att.r_k").shape
    vname = "blocks.1.att.v1" if layers > 1 else None
    ranks = (_need(sd, "blocks.0.att.w1").shape[1], _need(sd, "blocks.0.att.a1").shape[1],
             _need(sd, vname).shape[1] if vname else 32, _need(sd, "blocks.0.att.g1").shape[1])
    if H * N != d:
        raise ValueError("checkpoint: blocks.0.att.r_k has shape %s; emb.weight's width %d needs heads x head "
                         "size = %d" % (list(sd["blocks.0.att.r_k"].shape), d, d))
    return raw_config(hidden_size=int(d), layers=layers, head_dim=int(N), vocab=int(vocab),
                      ff=int(sd["blocks.0.ffn.key.weight"].shape[0]), ranks=tuple(int(r) for r in ranks),
                      tied=False, ln0="blocks.0.ln0.weight" in sd, eps=1e-5)


def fla_tensors(sd, cfg):
    """BlinkDL names -> FLA names and shapes (checked against the config's tensor table)."""
    names = blinkdl_names(cfg)
    shapes = tensor_shapes(cfg)
    known = {src for src, _ in names.values()}
    for n in sd:
        if n not in known and n not in UNUSED:
            raise ValueError("checkpoint: tensor %s is not part of an RWKV-7 x070 model" % n)
    out = {}
    for fla, (src, how) in names.items():
        t = _need(sd, src)
        if how == "t":
            t = t.t()
        want = shapes[fla]
        if how == "flat" and t.numel() == max(1, torch.Size(want).numel()):
            t = t.reshape(want)
        if tuple(t.shape) != tuple(want):
            raise ValueError("checkpoint: tensor %s has shape %s; the model's other tensors imply %s"
                             % (src, list(sd[src].shape), list(want) if how != "t" else list(want)[::-1]))
        out[fla] = t.contiguous()
    return out


def convert(pth, out_dir, dtype=None, tokenizer=None):
    # weights_only: tensors and plain containers, never arbitrary pickled code from a download
    sd = torch.load(pth, map_location="cpu", weights_only=True)
    raw = hf_config(sd)
    cfg = resolve_config(raw)
    tensors = fla_tensors(sd, cfg)
    params, dtype = checkpoint_tensors_f32(tensors, dtype)  # exact widening; written as dtype
    return write_folder(out_dir, raw, params, dtype, tokenizer)


def main(argv=None):
    ap = argparse.ArgumentParser(description="BlinkDL RWKV-7 .pth -> Hugging Face folder (FLA layout)")
    ap.add_argument("pth")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default=None)
    ap.add_argument("--tokenizer", default=None, help="a tokenizer file to copy into the folder "
                    "(rwkv_vocab_v20230424.txt for RWKV World models)")
    a = ap.parse_args(argv)
    convert(a.pth, a.out, a.dtype, a.tokenizer)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
