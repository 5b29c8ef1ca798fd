"""Held-out quality of quantized weights, of half-precision states and of the bf16 prefill
(docs/MODELS.md "Quantized weights", "State dtype", "Prefill dtype"): bits/byte of the whole 132,732-byte held-out stream (tools/data.py)
and greedy agreement: the fraction of positions whose most likely next byte equals the reference's
(the unquantized model; the f32 state; the fp32 prefill).

    /usr/bin/python3 tools/quant_quality.py [--models default,d512] [--bytes N]
    /usr/bin/python3 tools/quant_quality.py --state-dtypes f32,bf16,f16 [--models ...] [--bytes N]
    /usr/bin/python3 tools/quant_quality.py --prefill-dtypes f32,bf16 [--models ...] [--bytes N]

Weights: the stream folded as one sequence, state carried, as `recur score` does (prefill), with
the matrices as the file holds them and quantized to Q8_0 / Q4_0.
States (--state-dtypes): two ways of folding the stream, each with the state stored as f32, bf16,
f16. "prefill": as above (one sequence; a half state is rounded once per prefill piece of 256
tokens). "decode": token by token, the state rounded after every token (the worst case, what a
generating session does): the stream cut into 64 consecutive segments, each stepped from a zero
state, the 64 sessions batched (a batched step is bit-identical to a single one).
Prefill (--prefill-dtypes): the stream folded as for weights (prefill calls of 4096 tokens, each
run by librecur in pieces of 256, logits of every position), the model loaded with each prefill
dtype (bf16: every GEMM of the layers on bf16 inputs, the LM head as the model holds it; a CPU
without avx512_bf16 refuses it by name).

default: models/default (an F16 file; its results are the fp32 ones, bit for bit). d512:
tools/configs/bench_d512.json seeded (seed 1, fp32 weights; random weights, so its bpb is near
8 and only the differences mean anything). The model families of docs/MODELS.md, as seeded
Hugging Face folders written here at a small size (FAMILY_SIZE: d 128, 2 layers, head dim 32, F32, std
FAMILY_STD) with the byte vocabulary (vocab_size 256: a folder without tokenizer.json reads bytes,
so the held-out stream is its token ids as for the default model): gated_deltanet, gla, delta_net
(tools/export_hf.py), mamba2 (tools/export_mamba2.py), rwkv7 (tools/export_rwkv7.py). A seeded
model's bits/byte means little (random weights); the Δ and the greedy agreement are the figures.

    /usr/bin/python3 tools/quant_quality.py --models gated_deltanet,gla,delta_net,mamba2,rwkv7

Prints a markdown table."""
import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "core", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import data  # noqa: E402
import recur_model as rm  # noqa: E402

PIECE = 4096


def stream_scores(m, toks):
    """-> (nats of each next byte, argmax at each position), the stream folded in pieces."""
    s = m.state()
    nats, top = [], []
    for off in range(0, len(toks) - 1, PIECE):
        piece = toks[off:min(off + PIECE, len(toks) - 1)]
        z = m.prefill(s, piece).astype(np.float64)
        z -= z.max(-1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        nxt = np.array(toks[off + 1:off + 1 + len(piece)])
        nats.append(-lp[np.arange(len(piece)), nxt])
        top.append(lp.argmax(-1))
    return np.concatenate(nats), np.concatenate(top)


SEGMENTS = 64


def decode_scores(m, toks):
    """-> (nats, argmax) at every position of SEGMENTS segments, each stepped token by token from a
    zero state, the segments batched; positions in stream order (the first of each segment
    predicts its second byte: len(toks) - SEGMENTS positions)."""
    n = len(toks)
    bounds = [n * i // SEGMENTS for i in range(SEGMENTS + 1)]
    segs = [toks[bounds[i]:bounds[i + 1]] for i in range(SEGMENTS)]
    states = [m.state() for _ in segs]
    nats = [[] for _ in segs]
    top = [[] for _ in segs]
    for t in range(max(len(x) for x in segs) - 1):
        live = [i for i, x in enumerate(segs) if t + 1 < len(x)]
        z = m.step_batch([states[i] for i in live], [segs[i][t] for i in live]).astype(np.float64)
        z -= z.max(-1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        for r, i in enumerate(live):
            nats[i].append(-lp[r, segs[i][t + 1]])
            top[i].append(int(lp[r].argmax()))
    return np.concatenate([np.array(x) for x in nats]), np.concatenate([np.array(x) for x in top])


FAMILIES = ("gated_deltanet", "gla", "delta_net", "mamba2", "rwkv7")
FAMILY_SIZE = dict(d=128, layers=2, vocab=256, head_dim=32)
FAMILY_STD = 0.1  # larger than a trained init: logits far from uniform, so agreement can drop
_folders = {}


def family_folder(name):
    """A seeded folder of family `name` (seed 1), written once per run into a temporary directory."""
    if name in _folders:
        return _folders[name]
    root = tempfile.mkdtemp(prefix="quant_quality_")
    atexit.register(shutil.rmtree, root, True)
    out = os.path.join(root, name)
    z = FAMILY_SIZE
    if name in ("gated_deltanet", "gla", "delta_net"):
        import export_hf
        cfg = {"model_type": name, "hidden_size": z["d"], "num_hidden_layers": z["layers"],
               "vocab_size": z["vocab"], "num_heads": z["d"] // z["head_dim"]}
        if name == "gated_deltanet":
            cfg["head_dim"] = z["head_dim"]
        export_hf.write_folder(out, cfg, export_hf.random_tensors(cfg, 1, std=FAMILY_STD), "F32")
    elif name == "mamba2":
        import export_mamba2
        from mamba2_model import resolve_config
        raw = export_mamba2.raw_config(hidden_size=z["d"], layers=z["layers"], state_size=32,
                                       head_dim=z["head_dim"], vocab=z["vocab"])
        export_mamba2.write_folder(out, raw, export_mamba2.random_params(resolve_config(raw), 1, FAMILY_STD))
    elif name == "rwkv7":
        import export_rwkv7
        from rwkv7_model import random_params, resolve_config
        raw = export_rwkv7.raw_config(hidden_size=z["d"], layers=z["layers"], head_dim=z["head_dim"],
                                      vocab=z["vocab"])
        export_rwkv7.write_folder(out, raw, random_params(resolve_config(raw), 1, FAMILY_STD))
    else:
        raise SystemExit("unknown model %r (default, d512, %s)" % (name, ", ".join(FAMILIES)))
    _folders[name] = out
    return out


def load_model(name, weights_dtype=None, state_dtype=None, prefill_dtype=None):
    kw = dict(weights_dtype=weights_dtype, state_dtype=state_dtype, prefill_dtype=prefill_dtype)
    if name in FAMILIES:
        return rm.Model.load(family_folder(name), **kw)
    if name == "default":
        return rm.Model.load(os.path.join(ROOT, "models", "default"), **kw)
    cfg = open(os.path.join(ROOT, "tools", "configs", "bench_d512.json")).read()
    return rm.Model.init_seed(cfg, 1, **kw)


def scored_against_first(name, key, dtypes, toks, score=None):
    """For each dtype (the first is the reference): (model, bits/byte, Δ vs the reference, greedy
    agreement with the reference), the model loaded with `key`=dtype and scored by `score`."""
    base = None
    for dt in dtypes:
        m = load_model(name, **{key: dt})
        nats, top = (score or stream_scores)(m, toks)
        bpb = nats.sum() / np.log(2) / len(nats)
        if base is None:
            base = (bpb, top)
        yield m, bpb, bpb - base[0], float(np.mean(top == base[1]))


def prefill_table(models, dtypes, toks):
    print("| model | prefill | bits/byte | Δ vs fp32 prefill | greedy agreement | bf16 panels |")
    print("|---|---|---|---|---|---|")
    for name in models:
        for m, bpb, delta, agree in scored_against_first(name, "prefill_dtype", dtypes, toks):
            print("| %s | %s | %.5f | %+.5f | %.4f | %.2f MiB |" % (
                name, m.info["prefill_dtype"], bpb, delta, agree, m.info["prefill_bytes"] / 2 ** 20))
            sys.stdout.flush()


def state_table(models, dtypes, toks):
    print("| model | fold | state | bits/byte | Δ vs f32 state | greedy agreement | state bytes |")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        for fold, fn in (("prefill", stream_scores), ("decode", decode_scores)):
            for m, bpb, delta, agree in scored_against_first(name, "state_dtype", dtypes, toks, fn):
                print("| %s | %s | %s | %.5f | %+.5f | %.4f | %d |" % (
                    name, fold, m.info["state_dtype"], bpb, delta, agree, m.info["state_bytes"]))
                sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,d512")
    ap.add_argument("--bytes", type=int, default=0, help="score only the first N bytes (0 = all)")
    ap.add_argument("--state-dtypes", default="",
                    help="comma list (the first is the reference, e.g. f32,bf16,f16): the state table instead")
    ap.add_argument("--prefill-dtypes", default="",
                    help="comma list (the first is the reference, e.g. f32,bf16): the prefill table instead")
    a = ap.parse_args()
    held = data.split()[1]
    toks = list(held[:a.bytes] if a.bytes else held)
    if a.state_dtypes:
        state_table(a.models.split(","), a.state_dtypes.split(","), toks)
        return
    if a.prefill_dtypes:
        prefill_table(a.models.split(","), a.prefill_dtypes.split(","), toks)
        return
    print("| model | weights | bits/byte | Δ vs unquantized | greedy agreement | weight bytes |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        for m, bpb, delta, agree in scored_against_first(name, "weights_dtype", (None, "q8_0", "q4_0"), toks):
            print("| %s | %s | %.4f | %+.4f | %.4f | %.2f MiB |" % (
                name, m.info["weights_dtype"], bpb, delta, agree, m.info["weight_bytes"] / 2 ** 20))
            sys.stdout.flush()

if __name__ == "__main__":
    main()
