"""Held-out quality of quantized weights and of half-precision states (docs/MODELS.md "Quantized
weights", "State dtype"): bits/byte of the whole 132,732-byte held-out stream (tools/data.py)
and greedy agreement: the fraction of positions whose most likely next byte equals the reference's
(the unquantized model; the f32 state).

    /usr/bin/python3 tools/quant_quality.py [--models default,d512] [--bytes N]
    /usr/bin/python3 tools/quant_quality.py --state-dtypes f32,bf16,f16 [--models ...] [--bytes N]

Weights: the stream folded as one sequence, state carried, as `recur score` does (prefill), with
the matrices as the file holds them and quantized to Q8_0 / Q4_0.
States (--state-dtypes): two ways of folding the stream, each with the state stored as f32, bf16,
f16. "prefill": as above (one sequence; a half state is rounded once per prefill piece of 256
tokens). "decode": token by token, the state rounded after every token (the worst case, what a
generating session does): the stream cut into 64 consecutive segments, each stepped from a zero
state, the 64 sessions batched (a batched step is bit-identical to a single one).

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


def load_model(name, weights_dtype=None, state_dtype=None):
    if name == "default":
        return rm.Model.load(os.path.join(ROOT, "models", "default"), weights_dtype=weights_dtype,
                             state_dtype=state_dtype)
    cfg = open(os.path.join(ROOT, "tools", "configs", "bench_d512.json")).read()
    return rm.Model.init_seed(cfg, 1, weights_dtype=weights_dtype, state_dtype=state_dtype)


def state_table(models, dtypes, toks):
    print("| model | fold | state | bits/byte | Δ vs f32 state | greedy agreement | state bytes |")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        for fold, fn in (("prefill", stream_scores), ("decode", decode_scores)):
            base = None
            for dt in dtypes:
                m = load_model(name, state_dtype=dt)
                nats, top = fn(m, toks)
                bpb = nats.sum() / np.log(2) / len(nats)
                if base is None:
                    base = (bpb, top)
                agree = float(np.mean(top == base[1]))
                print("| %s | %s | %s | %.5f | %+.5f | %.4f | %d |" % (
                    name, fold, m.info["state_dtype"], bpb, bpb - base[0], agree, m.info["state_bytes"]))
                sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,d512")
    ap.add_argument("--bytes", type=int, default=0, help="score only the first N bytes (0 = all)")
    ap.add_argument("--state-dtypes", default="",
                    help="comma list (the first is the reference, e.g. f32,bf16,f16): the state table instead")
    a = ap.parse_args()
    held = data.split()[1]
    toks = list(held[:a.bytes] if a.bytes else held)
    if a.state_dtypes:
        state_table(a.models.split(","), a.state_dtypes.split(","), toks)
        return
    print("| model | weights | bits/byte | Δ vs unquantized | greedy agreement | weight bytes |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        base = None
        for dt in (None, "q8_0", "q4_0"):
            m = load_model(name, weights_dtype=dt)
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
