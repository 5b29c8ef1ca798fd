"""Write a seeded random RWKV-7 model as a Hugging Face folder in FLA's layout (model_type "rwkv7"):
config.json with the keys FLA's RWKV7Config writes, the tensors under FLA's names
(tools/rwkv7_model.py tensor_shapes) in model.safetensors, F32 / F16 / BF16, and optionally a
tokenizer file copied beside them (tokenizer.json, or RWKV World's rwkv_vocab_v20230424.txt).

    /usr/bin/python3 tools/export_rwkv7.py --out DIR [--seed N] [--hidden-size 64] [--layers 2]
        [--head-dim 16] [--vocab 300] [--ff N] [--ranks DW DA DV DG] [--tied] [--no-ln0]
        [--stale-num-heads] [--dtype F32|F16|BF16] [--tokenizer FILE] [--std 0.02]

Also a library: raw_config(...), write_folder(out, raw, params, dtype, tokenizer).
The RWKV-7 0.1B size (RWKV-LM's rwkv7-g1 0.1B): --hidden-size 768 --layers 12 --head-dim 64
--vocab 65536 --ff 3072 --ranks 64 64 32 128.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import write_hf_folder  # noqa: E402
from rwkv7_model import random_params, resolve_config, tensor_shapes  # noqa: E402


def raw_config(hidden_size=64, layers=2, head_dim=16, vocab=300, ff=None, ranks=(16, 16, 8, 32),
               tied=False, ln0=True, eps=1e-5, stale_num_heads=False):
    """A config.json dict as FLA writes it (save_pretrained of RWKV7Config). stale_num_heads: a
    num_heads that head_dim contradicts (FLA's converter keeps the default's)."""
    H = hidden_size // head_dim
    return {"architectures": ["RWKV7ForCausalLM"], "model_type": "rwkv7", "attn": None,
            "attn_mode": "chunk", "hidden_size": hidden_size, "hidden_ratio": 4,
            "intermediate_size": ff if ff is not None else 4 * hidden_size, "num_hidden_layers": layers,
            "head_dim": head_dim, "num_heads": H + 3 if stale_num_heads else H,
            "decay_low_rank_dim": ranks[0], "a_low_rank_dim": ranks[1], "v_low_rank_dim": ranks[2],
            "gate_low_rank_dim": ranks[3], "hidden_act": "sqrelu", "max_position_embeddings": 2048,
            "norm_first": ln0, "norm_bias": True, "norm_eps": eps, "use_cache": True,
            "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": tied,
            "initializer_range": 0.02, "fuse_norm": True, "fuse_cross_entropy": True,
            "fuse_linear_cross_entropy": False, "use_l2warp": True, "vocab_size": vocab,
            "value_dim": [hidden_size] * layers, "torch_dtype": "float32",
            "transformers_version": "4.48.0"}


def write_folder(out, raw, params, dtype="F32", tokenizer=None):
    """config.json + model.safetensors (tensor_shapes order) + an optional tokenizer copy (kept
    under its own file name: tokenizer.json or rwkv_vocab_v20230424.txt)."""
    return write_hf_folder(out, raw, params, list(tensor_shapes(resolve_config(raw))), dtype, 1, tokenizer)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a seeded random RWKV-7 Hugging Face folder (FLA layout).")
    ap.add_argument("--out", required=True)
    for flag, default in (("--seed", 0), ("--hidden-size", 64), ("--layers", 2), ("--head-dim", 16), ("--vocab", 300)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--ff", type=int, default=None, help="intermediate_size (default 4 * hidden)")
    ap.add_argument("--ranks", type=int, nargs=4, default=[16, 16, 8, 32],
                    metavar=("DECAY", "A", "V", "GATE"), help="the LoRA ranks")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--no-ln0", action="store_true", help="norm_first false: no pre_norm on the embedding")
    ap.add_argument("--stale-num-heads", action="store_true")
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--tokenizer", default=None, help="a tokenizer file to copy into the folder")
    ap.add_argument("--std", type=float, default=0.02)
    a = ap.parse_args(argv)
    raw = raw_config(a.hidden_size, a.layers, a.head_dim, a.vocab, a.ff, tuple(a.ranks), a.tied,
                     not a.no_ln0, a.eps, a.stale_num_heads)
    params = random_params(resolve_config(raw), a.seed, a.std)
    write_folder(a.out, raw, params, a.dtype, a.tokenizer)
    print("wrote %s (%d parameters, %s)" % (a.out, sum(t.numel() for t in params.values()), a.dtype))


if __name__ == "__main__":
    main()
