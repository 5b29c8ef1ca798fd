"""Benchmark section "quant" (issue 18, quantized weights): decode at batch 1 and 64 and prefill
of the d512 model (tools/configs/bench_d512.json exported by tools/export.py --seed 1 --dtype F16,
the file section "model" uses) with its matrices as the F16 file holds them and quantized at load
to Q8_0 and Q4_0 (bench_model --weights-dtype), C only, one thread. Rates are tokens per CPU
second (medians; the cores are shared, so wall time mostly measures the other work). GB/s of
weights streamed at batch 1 = the bytes of the GEMM matrices (weight_bytes minus the fp32
embedding table and vectors) × tokens/s: batch-1 decode reads every matrix once per token.
Targets (issue 18): B = 1 Q8_0 >= 1.8x F16, Q4_0 >= 3x F16; B = 64 and prefill not slower.

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


def _rate(r):
    return r["tokens"] / statistics.median(r["cpu_s"]) if r else None


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
    rows, load = [], [open("/proc/loadavg").read().split()[:3]]
    for dt in DTYPES:
        args = [os.path.relpath(exe, ctx.root), "--model", f16, "--batches", "1,64", "--reps", str(reps),
                "--tokens-per-rep", str(tokens), "--prefill", str(prefill), "--prefill-reps", "3",
                "--sgemm-m", "64", "--prefill-sgemm-m", "0"]
        if dt:
            args += ["--weights-dtype", dt]
        out = benchutil.jsonl(ctx.run(args, timeout=1800))
        info = next(r for r in out if r["kind"] == "info")
        dec = {B: next((r for r in out if r["kind"] == "decode" and r["B"] == B and r["api"] == "step_batch"), None)
               for B in (1, 64)}
        pre = next((r for r in out if r["kind"] == "prefill"), None)
        seq = next((r for r in out if r["kind"] == "packed_seq" and r["M"] == 64), None)
        rows.append(dict(dtype=info["weights_dtype"], wb=info["weight_bytes"], b1=_rate(dec[1]), b64=_rate(dec[64]),
                         pre=_rate(pre), seq=(seq["flops"] / 2 * seq["runs_per_rep"] / statistics.median(seq["cpu_s"])
                                              if seq else None)))
        load.append(open("/proc/loadavg").read().split()[:3])
    base = rows[0]
    md = ["| weights | in memory | B = 1 tok/CPU-s | vs F16 | GB/s of matrices at B = 1 | B = 64 tok/CPU-s | vs F16 "
          "| prefill tok/CPU-s | vs F16 | GEMM sequence at M = 64 (GMAC/CPU-s) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    verdict = []
    for r in rows:
        mat = r["wb"] - vec_bytes
        rat = lambda k: r[k] / base[k] if r[k] and base[k] else None  # noqa: E731
        f = lambda x, p="%.0f": "–" if x is None else p % x  # noqa: E731
        md.append(f"| {r['dtype']} | {r['wb'] / 2**20:.1f} MiB | {f(r['b1'])} | {f(rat('b1'), '%.2f×')} | "
                  f"{f(mat * r['b1'] / 1e9 if r['b1'] else None, '%.1f')} | {f(r['b64'])} | {f(rat('b64'), '%.2f×')} | "
                  f"{f(r['pre'])} | {f(rat('pre'), '%.2f×')} | {f(r['seq'] / 1e9 if r['seq'] else None, '%.1f')} |")
        if r["dtype"] in TARGET_B1 and rat("b1"):
            t = TARGET_B1[r["dtype"]]
            verdict.append(f"{r['dtype']} B = 1 {rat('b1'):.2f}× F16 (target ≥ {t}×: {'met' if rat('b1') >= t else 'NOT met'}); "
                           f"B = 64 {rat('b64'):.2f}×, prefill {rat('pre'):.2f}× (target ≥ 1: "
                           f"{'met' if rat('b64') >= 1 and rat('pre') >= 1 else 'NOT met'})")
    return ("\n".join(md) + "\n\n" + "; ".join(verdict) + ".\n\n"
            f"Prefill {prefill} tokens (logits not requested), decode {tokens} tokens per rep, {reps} reps; "
            f"load average before / after each run: {', '.join('/'.join(l) for l in load)}.\n")
