"""The chunkwise mixers of tools/bench/torch_chunkwise.py in PyTorch (float32, 1 thread), timed at
the same sizes as bench_kernels.c, for the "chunkwise vs PyTorch" ratio of docs/BENCHMARKS.md.

Usage: /usr/bin/python3 tools/bench/bench_torch_kernels.py [--T 1024,4096,16384] [--reps 5]
       [--budget 8] [--H 4] [--K 64] [--V 64] [--chunk 64] [--mixers linear,retention,...]
Prints one JSON object per line (same keys as bench_kernels.c, "impl":"torch").
Inputs are made the same way as bench_kernels.c (uniform [-1,1), unit keys, log gates in
[-0.1, 0), beta in [0.25, 0.75]); timings exclude input creation; torch.inference_mode().
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import torch_chunkwise as TC  # noqa: E402

MIXERS = ["linear", "retention", "gla_scalar", "gla_vector", "deltanet", "gated_deltanet", "gdr"]


def make_inputs(T, H, K, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: torch.rand(*s, generator=g) * 2 - 1  # noqa: E731
    q, k, v = u(T, H, K), u(T, H, K), u(T, H, V)
    k = k / k.norm(dim=-1, keepdim=True)
    gs = -0.05 * (u(T, H) + 1) - 1e-4
    gv = -0.05 * (u(T, H, K) + 1) - 1e-4
    beta = 0.5 + 0.25 * u(T, H)
    gamma = 1 - 2.0 ** (-5 - torch.arange(H, dtype=torch.float32))
    kh = u(T, H, K)
    kh = kh / kh.norm(dim=-1, keepdim=True)                 # RWKV-7: a = -kappa_hat, b = kappa_hat a_gate
    return dict(q=q, k=k, v=v, gs=gs, gv=gv, beta=beta, gamma=gamma, ea=-kh,
                eb=kh * (0.5 + 0.25 * u(T, H, K)))


def run(mixer, x, chunk):
    q, k, v = x["q"], x["k"], x["v"]
    if mixer == "linear":
        return TC.linear_attention(q, k, v, normalize=True, feature_map="elu1", chunk=chunk)[0]
    if mixer == "retention":
        return TC.retention(q, k, v, x["gamma"], chunk=chunk)[0]
    if mixer == "gla_scalar":
        return TC.gla(q, k, v, x["gs"], chunk=chunk)[0]
    if mixer == "gla_vector":
        return TC.gla(q, k, v, x["gv"], chunk=chunk)[0]
    if mixer == "deltanet":
        return TC.delta_rule(q, k, v, x["beta"], chunk=chunk)[0]
    if mixer == "gated_deltanet":
        return TC.delta_rule(q, k, v, x["beta"], g=x["gs"], chunk=chunk)[0]
    if mixer == "gdr":
        return TC.generalized_delta(q, k, v, x["gv"], x["ea"], x["eb"], chunk=chunk)[0]
    raise ValueError(mixer)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", default="1024,4096,16384")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=8.0)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--K", type=int, default=64)
    ap.add_argument("--V", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--mixers", default=",".join(MIXERS))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(json.dumps({"kind": "torch", "version": torch.__version__,
                      "threads": torch.get_num_threads()}), flush=True)
    for T in (int(t) for t in a.T.split(",")):
        x = make_inputs(T, a.H, a.K, a.V)
        for mixer in a.mixers.split(","):
            times = []
            with torch.inference_mode():
                run(mixer, x, a.chunk)                          # warm-up
                t_start = time.perf_counter()
                for _ in range(a.reps):
                    t0 = time.perf_counter()
                    o = run(mixer, x, a.chunk)
                    times.append(time.perf_counter() - t0)
                    if time.perf_counter() - t_start > a.budget:
                        break
            med = statistics.median(times)
            print(json.dumps({"kind": "mixer", "impl": "torch", "mixer": mixer, "form": "chunkwise",
                              "T": T, "H": a.H, "K": a.K, "V": a.V, "chunk": a.chunk,
                              "reps": len(times), "median_s": med, "min_s": min(times),
                              "tokens_per_s": T / med, "checksum": float(o[-1, 0, 0]),
                              "status": "ok"}), flush=True)


if __name__ == "__main__":
    main()
