"""Benchmark section "refactor" (issue 11: "make bench figures within noise of today's (quote
both)"): the C model and kernel figures of the build before the structure work and of this tree,
measured in the same run, alternated, so that the machine's other load falls on both alike.

Before = BASELINE, the tree of the last full `make bench` of the previous session (docs/
BENCHMARKS.md at e0c7d2f, 2026-11-29, load 0.9), extracted with `git archive` into
BUILD/bench/baseline-BASELINE and built there (its Makefile's librecur.a, its own bench_model.c
and bench_kernels.c compiled by the cc line its bench driver used). After = this tree's
BUILD/bench/bench_model and bench_kernels. PAIRS rounds, each running before and after (in
alternating order) on: bench_model on models/default and on the seeded d512
(tools/configs/bench_d512.json, fp32 weights), decode at B = 1 / 8 / 64 and a 4096-token
prefill (tokens per CPU second, median of the reps, then median over the rounds), and
bench_kernels at T = 4096 (tokens per wall second of each mixer's recurrent and chunkwise form).
The figures recorded on 2026-11-29 (quiet machine) are shown beside them.
RECUR_BENCH_AFTER_DIR, when set, names a folder holding an already built bench_model and
bench_kernels to use as "after" (no make: e.g. while the tree is being rebuilt).
ON_REQUEST: it builds another tree, so `make bench` keeps the last result; run it with
/usr/bin/python3 tools/bench/run_all.py --sections refactor
"""
import os
import statistics

import benchutil

TITLE = "Structure refactor (issue 11): before and after, same run"
ORDER = 90
ON_REQUEST = True

BASELINE = "519da9f"
PAIRS = 3
MODELS = {"default": ["--model", "models/default"],
          "d512": ["--config", "tools/configs/bench_d512.json", "--seed", "1"]}
MODEL_ARGS = {"default": ["--batches", "1,8,64", "--reps", "5", "--tokens-per-rep", "512",
                          "--prefill", "4096", "--prefill-reps", "3"],
              "d512": ["--batches", "1,8,64", "--reps", "3", "--tokens-per-rep", "64",
                       "--prefill", "4096", "--prefill-reps", "2"]}
KERNEL_ARGS = ["--T", "4096", "--reps", "3", "--budget", "4", "--forms", "recurrent,chunkwise"]
# docs/BENCHMARKS.md at e0c7d2f (full make bench at 519da9f, 2026-11-29 19:38 UTC, load 0.9)
RECORDED = {("default", "decode B=1"): 11.5e3, ("default", "decode B=8"): 19.8e3,
            ("default", "decode B=64"): 17.0e3, ("default", "prefill 4096"): 19.6e3,
            ("d512", "decode B=1"): 241, ("d512", "decode B=8"): 1564,
            ("d512", "decode B=64"): 1628, ("d512", "prefill 4096"): 1777}
CC = ["cc", "-std=c11", "-O2", "-march=native", "-I/usr/include/x86_64-linux-gnu/openblas-pthread/"]
LIBS = ["-L/usr/lib/x86_64-linux-gnu/openblas-pthread/", "-lopenblas", "-lcjson", "-lm", "-lpthread"]


def _med(xs):
    return statistics.median(xs) if xs else None


def build_baseline(ctx):
    d = os.path.join(ctx.build, "bench", f"baseline-{BASELINE}")
    tools = {t: os.path.join(d, "build", "bench", t) for t in ("bench_model", "bench_kernels")}
    if all(os.path.exists(p) for p in tools.values()):
        return tools
    os.makedirs(os.path.join(d, "build", "bench"), exist_ok=True)
    ctx.run(["sh", "-c", f"git archive {BASELINE} | tar -x -C {d}"])
    ctx.run(["make", "-C", d, "-j2", "build/librecur.a"], timeout=1800)
    for t, exe in tools.items():
        ctx.run(CC + [f"-I{d}/core", f"{d}/tools/bench/{t}.c", f"{d}/build/librecur.a"] + LIBS + ["-o", exe])
    return tools


def model_figures(out):
    rows = benchutil.jsonl(out)
    fig = {}
    for r in rows:
        if r["kind"] == "decode" and r["api"] == "step_batch":
            fig[f"decode B={r['B']}"] = r["tokens"] / _med(r["cpu_s"])
        elif r["kind"] == "prefill":
            fig[f"prefill {r['tokens']}"] = r["tokens"] / _med(r["cpu_s"])
    return fig


def kernel_figures(out):
    return {f"{r['mixer']} {r['form']}": r["tokens_per_s"] for r in benchutil.jsonl(out)
            if r["kind"] == "mixer" and r.get("status") == "ok"}


def fmt(x):
    if x is None:
        return "–"
    return f"{x / 1e3:.1f} k" if x >= 1e4 else f"{x:.0f}"


def run(ctx):
    old = build_baseline(ctx)
    after_dir = os.environ.get("RECUR_BENCH_AFTER_DIR")
    new = {t: os.path.join(after_dir or os.path.join(ctx.build, "bench"), t)
           for t in ("bench_model", "bench_kernels")}
    for exe in new.values():
        if not after_dir:
            ctx.run(benchutil.make_target(ctx.root, ctx.build, exe))
    res = {"before": {}, "after": {}}  # side -> (model, metric) -> [median per round]
    loads = [" ".join(open("/proc/loadavg").read().split()[:3])]
    for p in range(PAIRS):
        for side in (("before", "after") if p % 2 == 0 else ("after", "before")):
            tools = old if side == "before" else new
            for key, margs in MODELS.items():
                fig = model_figures(ctx.run([tools["bench_model"], *margs, *MODEL_ARGS[key]], timeout=1800))
                for k, v in fig.items():
                    res[side].setdefault((key, k), []).append(v)
            for k, v in kernel_figures(ctx.run([tools["bench_kernels"], *KERNEL_ARGS], timeout=1800)).items():
                res[side].setdefault(("kernels T=4096", k), []).append(v)
        loads.append(" ".join(open("/proc/loadavg").read().split()[:3]))
    keys = [k for k in res["after"] if k in res["before"]]
    md = [f"Before: `{BASELINE}` (the tree of the previous session's last full `make bench`). After: this "
          f"tree. {PAIRS} rounds, before and after alternated within each; each figure is the median "
          "over the rounds of each run's median. Model rows: tokens per CPU second (`bench_model`, "
          "decode = `recur_model_step_batch` over B sessions); kernel rows: tokens per wall second "
          "(`bench_kernels`, H 4 × K 64 × V 64, chunk 64, one call over T tokens).", "",
          "| model / kernel | figure | recorded 2026-11-29 (quiet machine) | before, this run | after, this run | after ÷ before | spread of after ÷ before over the rounds |",
          "|---|---|---:|---:|---:|---:|---|"]
    ratios = []
    for key in keys:
        b, a = _med(res["before"][key]), _med(res["after"][key])
        per = [x / y for x, y in zip(res["after"][key], res["before"][key])]
        ratios.append(a / b)
        rec = RECORDED.get(key)
        md.append(f"| {key[0]} | {key[1]} | {fmt(rec)} | {fmt(b)} | {fmt(a)} | **{a / b:.2f}×** | "
                  f"{min(per):.2f}–{max(per):.2f} |")
    gm = statistics.geometric_mean(ratios) if ratios else None
    md += ["", f"Geometric mean of after ÷ before over the {len(ratios)} figures: **{gm:.3f}×**; "
           f"smallest {min(ratios):.2f}×, largest {max(ratios):.2f}×." if gm else "",
           "", "Load average (1/5/15 min) at the start and after each round: " + "; ".join(loads)
           + f" ({benchutil.load_remark(loads)})."]
    return "\n".join(md)
