"""Held-out quality of quantized weights (docs/MODELS.md "Quantized weights"): bits/byte of the
whole 132,732-byte held-out stream (tools/data.py; folded as one sequence, state carried, as
`recur score` does) with the matrices as the file holds them and quantized to Q8_0 / Q4_0, and
greedy agreement: the fraction of positions whose most likely next byte equals the unquantized
model's.

    /usr/bin/python3 tools/quant_quality.py [--models default,d512] [--bytes N]

default: models/default (an F16 file; its results are the fp32 ones, bit for bit). d512:
tools/configs/bench_d512.json seeded (seed 1, fp32 weights; random weights, so its bpb is near
8 and only the differences mean anything). Prints a markdown table."""
import argparse
import json
import os
import sys

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,d512")
    ap.add_argument("--bytes", type=int, default=0, help="score only the first N bytes (0 = all)")
    a = ap.parse_args()
    held = data.split()[1]
    toks = list(held[:a.bytes] if a.bytes else held)
    print("| model | weights | bits/byte | Δ vs unquantized | greedy agreement | weight bytes |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        def load(dt):
            if name == "default":
                return rm.Model.load(os.path.join(ROOT, "models", "default"), weights_dtype=dt)
            cfg = open(os.path.join(ROOT, "tools", "configs", "bench_d512.json")).read()
            return rm.Model.init_seed(cfg, 1, weights_dtype=dt)
        base = None
        for dt in (None, "q8_0", "q4_0"):
            m = load(dt)
            nats, top = stream_scores(m, toks)
            bpb = nats.sum() / np.log(2) / len(nats)
            if base is None:
                base = (bpb, top)
            agree = float(np.mean(top == base[1]))
            print("| %s | %s | %.4f | %+.4f | %.4f | %.2f MiB |" % (
                name, m.info["weights_dtype"], bpb, bpb - base[0], agree, m.info["weight_bytes"] / 2 ** 20))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
