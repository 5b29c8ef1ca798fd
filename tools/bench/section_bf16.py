"""Benchmark section "bf16" (issue 18, bf16 compute for prefill): prefill of the seeded d512 model
(tools/configs/bench_d512.json, seed 1, fp32 matrices) with prefill_dtype f32 and bf16
(bench_model --prefill-dtype: every GEMM of the layers through vdpbf16ps on bf16 panels, the LM
head as held; docs/MODEL.md "Prefill dtype"), C only, one thread, in the same run: the two
variants alternate process by process (ROUNDS rounds), each process timing PREFILL_REPS prefills
of the same tokens after a warm-up piece. Rates are tokens per CPU second (medians over every rep
of a variant; the cores are shared, so wall time mostly measures the other work).
Target (issue 18): bf16 prefill >= 1.6x fp32 prefill where the CPU has avx512_bf16.

Run alone: /usr/bin/python3 tools/bench/run_all.py --sections bf16
"""
import os
import statistics

import benchutil

TITLE = "bf16 prefill: d512 prefill with bf16 GEMM inputs vs fp32 (issue 18)"
ORDER = 36

CONFIG = "tools/configs/bench_d512.json"
TARGET = 1.6


def run(ctx):
    exe = os.path.join(ctx.build, "bench", "bench_model")
    ctx.run(benchutil.make_target(ctx.root, ctx.build, exe))
    rounds, prefill, reps = (2, 1024, 2) if ctx.quick else (3, 2048, 3)
    cpu = {"f32": [], "bf16": []}
    info = {}
    load = [open("/proc/loadavg").read().split()[:3]]
    for _ in range(rounds):
        for dt in ("f32", "bf16"):
            args = [os.path.relpath(exe, ctx.root), "--config", CONFIG, "--seed", "1", "--batches", "1", "--reps", "1",
                    "--tokens-per-rep", "1", "--sgemm-m", "1", "--prefill-sgemm-m", "0", "--prefill", str(prefill),
                    "--prefill-reps", str(reps), "--prefill-dtype", dt]
            try:
                out = benchutil.jsonl(ctx.run(args, timeout=1800))
            except Exception as e:  # bf16 refused on a CPU without avx512_bf16: say so, not a number
                if dt == "bf16":
                    return (f"bf16 prefill not available on this machine (bench_model refused it: {e}); "
                            "the target applies where the CPU has avx512_bf16.\n")
                raise
            info[dt] = next(r for r in out if r["kind"] == "info")
            cpu[dt] += next(r for r in out if r["kind"] == "prefill")["cpu_s"]
            load.append(open("/proc/loadavg").read().split()[:3])
    rate = {dt: prefill / statistics.median(v) for dt, v in cpu.items()}
    best = {dt: prefill / min(v) for dt, v in cpu.items()}
    ratio = rate["bf16"] / rate["f32"]
    md = ["| prefill dtype | prefill tok/CPU-s (median) | fastest rep | vs fp32 | weights in memory | bf16 panels |",
          "|---|---|---|---|---|---|"]
    for dt in ("f32", "bf16"):
        i = info[dt]
        md.append(f"| {i['prefill_dtype']} | {rate[dt]:.0f} | {best[dt]:.0f} | {rate[dt] / rate['f32']:.2f}× | "
                  f"{i['weight_bytes'] / 2**20:.1f} MiB ({i['weights_dtype']}) | {i['prefill_bytes'] / 2**20:.1f} MiB |")
    verdict = (f"bf16 prefill {ratio:.2f}× fp32 prefill by median CPU time (target ≥ {TARGET}×: "
               f"{'met' if ratio >= TARGET else 'NOT met'}; fastest reps {best['bf16'] / best['f32']:.2f}×)")
    return ("\n".join(md) + "\n\n" + verdict + ".\n\n"
            f"Prefill {prefill} tokens (logits not requested), {reps} reps per process, {rounds} rounds of "
            f"f32 / bf16 processes alternating; load average before / after each process: "
            f"{', '.join('/'.join(l) for l in load)}.\n")
