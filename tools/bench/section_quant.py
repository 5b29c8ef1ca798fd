"""Benchmark section "quant" (issue 18, quantized weights): decode at batch 1 and 64 and prefill
of the d512 model (tools/configs/bench_d512.json exported by tools/export.py --seed 1 --dtype F16,
the file section "model" uses) with its matrices as the F16 file holds them and quantized at load
to Q8_0 and Q4_0 (bench_model --weights-dtype), C only, one thread. Rates are tokens per CPU
second (the cores are shared, so wall time mostly measures the other work). The three weight
types run in ROUNDS rounds, one bench_model process each, the order rotating (F16 Q8_0 Q4_0, then
Q8_0 Q4_0 F16, ...), so each runs first, second and last alike. A run's rate = tokens / median
CPU seconds of its reps; a weight type's rate = the median over rounds; "vs F16" = the median
over rounds of (its rate ÷ F16's rate in the same round) (benchutil.median_ratio: the speed of
these cores drifts between minutes, a same-round ratio cancels it). GB/s of weights streamed at
batch 1 = the bytes of the GEMM matrices (weight_bytes minus the fp32 embedding table and
vectors) × tokens/s: batch-1 decode reads every matrix once per token.
Targets (issue 18), on the "vs F16" figures: B = 1 Q8_0 >= 1.8x, Q4_0 >= 3x; B = 64 and prefill
>= 1x.

Run alone: /usr/bin/python3 tools/bench/run_all.py --sections quant
"""
import json
import os
import statistics

import benchutil

TITLE = "Quantized weights: d512 decode and prefill, F16 vs Q8_0 vs Q4_0 (issue 18)"
ORDER = 35

CONFIG = "tools/configs/bench_d512.json"
F16_DIR = "bench/d512_f16"
DTYPES = [None, "q8_0", "q4_0"]
TARGET_B1 = {"Q8_0": 1.8, "Q4_0": 3.0}
ROUNDS = 3  # a multiple of len(DTYPES): each weight type runs in each position equally often


def run(ctx):
    exe = os.path.join(ctx.build, "bench", "bench_model")
    ctx.run(benchutil.make_target(ctx.root, ctx.build, exe))
    f16 = os.path.relpath(os.path.join(ctx.build, F16_DIR), ctx.root)
    if not os.path.exists(os.path.join(ctx.root, f16, "model.safetensors")):
        ctx.run([ctx.python, "tools/export.py", "--config", CONFIG, "--seed", "1", "--out", f16, "--dtype", "F16"],
                timeout=600)
    cfg = json.load(open(os.path.join(ctx.root, CONFIG)))
    vec_bytes = 4 * cfg["vocab_size"] * cfg["d_model"]  # the fp32 embedding table (plus small vectors)
    reps, tokens, prefill = (3, 64, 512) if ctx.quick else (5, 128, 2048)
    rounds = 1 if ctx.quick else ROUNDS
    runs = {dt: [] for dt in DTYPES}  # dtype -> per round: dict(b1, b64, pre, seq, dtype, wb)
    load, raw_rows = [open("/proc/loadavg").read().split()[:3]], []
    for rnd in range(rounds):
        for dt in DTYPES[rnd % len(DTYPES):] + DTYPES[:rnd % len(DTYPES)]:
            args = [os.path.relpath(exe, ctx.root), "--model", f16, "--batches", "1,64", "--reps", str(reps),
                    "--tokens-per-rep", str(tokens), "--prefill", str(prefill), "--prefill-reps", "3",
                    "--sgemm-m", "64", "--prefill-sgemm-m", "0"]
            if dt:
                args += ["--weights-dtype", dt]
            out = benchutil.jsonl(ctx.run(args, timeout=1800))
            raw_rows += [dict(r, round=rnd, weights=dt or "f16") for r in out]
            info = next(r for r in out if r["kind"] == "info")
            seq = next((r for r in out if r["kind"] == "packed_seq" and r["M"] == 64), None)
            runs[dt].append(dict(benchutil.model_rates(out), dtype=info["weights_dtype"], wb=info["weight_bytes"],
                                 seq=(seq["flops"] / 2 * seq["runs_per_rep"] / statistics.median(seq["cpu_s"])
                                      if seq else None)))
        load.append(open("/proc/loadavg").read().split()[:3])
    raw = os.path.join(ctx.build, "bench", "quant_raw.jsonl")
    with open(raw, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in raw_rows)
    base = runs[None]
    med = lambda xs: statistics.median(xs) if None not in xs else None  # noqa: E731
    md = ["| weights | in memory | B = 1 tok/CPU-s | vs F16 | GB/s of matrices at B = 1 | B = 64 tok/CPU-s | vs F16 "
          "| prefill tok/CPU-s | vs F16 | GEMM sequence at M = 64 (GMAC/CPU-s) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    verdict = []
    for dt in DTYPES:
        rr = runs[dt]
        r = {k: med([x[k] for x in rr]) for k in ("b1", "b64", "pre", "seq")}
        name, wb = rr[0]["dtype"], rr[0]["wb"]
        rat = {k: benchutil.median_ratio([x[k] for x in rr], [x[k] for x in base]) for k in ("b1", "b64", "pre")}
        f = lambda x, p="%.0f": "–" if x is None else p % x  # noqa: E731
        md.append(f"| {name} | {wb / 2**20:.1f} MiB | {f(r['b1'])} | {f(rat['b1'], '%.2f×')} | "
                  f"{f((wb - vec_bytes) * r['b1'] / 1e9 if r['b1'] else None, '%.1f')} | {f(r['b64'])} | "
                  f"{f(rat['b64'], '%.2f×')} | {f(r['pre'])} | {f(rat['pre'], '%.2f×')} | "
                  f"{f(r['seq'] / 1e9 if r['seq'] else None, '%.1f')} |")
        if name in TARGET_B1 and None not in rat.values():
            t = TARGET_B1[name]
            verdict.append(f"{name} B = 1 {rat['b1']:.2f}× F16 (target ≥ {t}×: {'met' if rat['b1'] >= t else 'NOT met'}); "
                           f"B = 64 {rat['b64']:.2f}×, prefill {rat['pre']:.2f}× (target ≥ 1: "
                           f"{'met' if rat['b64'] >= 1 and rat['pre'] >= 1 else 'NOT met'})")
    return ("\n".join(md) + "\n\n" + "; ".join(verdict) + ".\n\n"
            f"{rounds} rounds of one run per weight type, the order rotating each round (F16 Q8_0 Q4_0, "
            "Q8_0 Q4_0 F16, Q4_0 F16 Q8_0); tok/CPU-s: the median over rounds of each run's tokens ÷ median "
            "CPU seconds of its reps; \"vs F16\" (the verdict figures): the median over rounds of the "
            "same-round ratio, so the speed of these shared cores drifting between minutes falls on both "
            "sides of each ratio (it need not equal the ratio of the medians beside it). "
            f"Prefill {prefill} tokens (logits not requested), 3 reps; decode {tokens} tokens per rep, "
            f"{reps} reps; raw: `{os.path.relpath(raw, ctx.root)}`; load average before / after each round: "
            f"{', '.join('/'.join(l) for l in load)}.\n")
