"""Benchmark section "portable" (issue 15): the portable build (`make bench-portable`: the
Makefile's PORTABLE_OPT, -march=x86-64, into build-portable/, as `make test-isa` builds it)
against the native build (-march=native, ctx.build) — C model speed per kernel path.

Both builds' bench_model run the same models (models/default F16 and the d512 of
tools/configs/bench_d512.json exported with --seed 1 --dtype F16, the file section "quant" uses)
with RECUR_ISA forced to each path this CPU has (core/isa.h), one thread; runs alternate
(native, portable, then portable, native in the next round) so both see the same load. Rates are
tokens per CPU second, the median over every rep of every round: decode B = 1 and B = 64
(recur_model_step_batch) and prefill. Target (issue 15): portable / native >= 0.95 per path.

The fair comparison is with the native build forced to the same path: there the GEMMs follow
RECUR_ISA in both builds, but the native build compiles the rest of core once for the build
machine (its AVX-512 code runs under RECUR_ISA=avx2 / portable too), while the portable build
runs that path's per-ISA objects (Makefile ISA_FILES). So for avx2 and portable the native
figure is an upper bound the portable build should not be expected to beat.

Run alone: /usr/bin/python3 tools/bench/run_all.py --sections portable
"""
import json
import os
import statistics

import benchutil

TITLE = "Portable build vs native build, per kernel path (issue 15)"
ORDER = 37

PORTABLE_BUILD = "build-portable"
D512_CONFIG = "tools/configs/bench_d512.json"
D512_DIR = "bench/d512_f16"
TARGET = 0.95


def _paths():
    """The paths this CPU has, as tests/test_isa.sh lists them (best last)."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    paths = ["portable"]
    if {"avx2", "fma", "f16c"} <= flags:
        paths.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "f16c"} <= flags:
        paths.append("avx512")
    return paths


def _rates(outs):
    """tokens / median CPU seconds of each measure, pooling the reps of every run."""
    res = {}
    for key, sel in (("b1", lambda r: r["kind"] == "decode" and r["api"] == "step_batch" and r["B"] == 1),
                     ("b64", lambda r: r["kind"] == "decode" and r["api"] == "step_batch" and r["B"] == 64),
                     ("pre", lambda r: r["kind"] == "prefill")):
        cpu, tokens = [], None
        for out in outs:
            for r in out:
                if sel(r):
                    cpu += r["cpu_s"]
                    tokens = r["tokens"]
        res[key] = tokens / statistics.median(cpu) if cpu else None
    return res


def run(ctx):
    native = os.path.join(ctx.build, "bench", "bench_model")
    ctx.run(benchutil.make_target(ctx.root, ctx.build, native))
    ctx.run(["make", "--no-print-directory", "bench-portable"], timeout=3600)
    portable = os.path.join(ctx.root, PORTABLE_BUILD, "bench", "bench_model")
    d512 = os.path.relpath(os.path.join(ctx.build, D512_DIR), ctx.root)
    if not os.path.exists(os.path.join(ctx.root, d512, "model.safetensors")):
        ctx.run([ctx.python, "tools/export.py", "--config", D512_CONFIG, "--seed", "1", "--out", d512,
                 "--dtype", "F16"], timeout=600)
    rounds = 1 if ctx.quick else 2
    models = [("default", "models/default", 256, 3), ("d512", d512, 64, 3)]
    paths = _paths()
    builds = {"native": os.path.relpath(native, ctx.root), "portable": os.path.relpath(portable, ctx.root)}
    outs = {}  # (model, path, build) -> [run outputs]
    load = [open("/proc/loadavg").read().split()[:3]]
    for rnd in range(rounds):
        order = ["native", "portable"] if rnd % 2 == 0 else ["portable", "native"]
        for mkey, mdir, tokens, reps in models:
            for isa in paths:
                for b in order:
                    argv = ["env", f"RECUR_ISA={isa}", builds[b], "--model", mdir, "--batches", "1,64",
                            "--reps", str(reps), "--tokens-per-rep", str(tokens), "--prefill", "512",
                            "--prefill-reps", str(reps), "--sgemm-m", "1", "--prefill-sgemm-m", "0"]
                    outs.setdefault((mkey, isa, b), []).append(benchutil.jsonl(ctx.run(argv, timeout=900)))
        load.append(open("/proc/loadavg").read().split()[:3])
    raw = os.path.join(ctx.build, "bench", "portable_raw.jsonl")
    with open(raw, "w") as f:
        for (mkey, isa, b), runs in outs.items():
            for i, out in enumerate(runs):
                for r in out:
                    f.write(json.dumps(dict(r, model=mkey, isa=isa, build=b, run=i)) + "\n")
    md = ["| model | path | decode B = 1 native / portable (tok/CPU-s) | ratio | decode B = 64 native / portable "
          "| ratio | prefill 512 native / portable | ratio | ≥ 0.95 |",
          "|---|---|---|---|---|---|---|---|---|"]
    met, missed = 0, []
    for mkey, *_ in models:
        for isa in reversed(paths):
            n, p = _rates(outs[(mkey, isa, "native")]), _rates(outs[(mkey, isa, "portable")])
            cells, ok = [], True
            for k in ("b1", "b64", "pre"):
                rat = p[k] / n[k] if n[k] and p[k] else None
                ok = ok and rat is not None and rat >= TARGET
                cells.append(f"{n[k]:,.0f} / {p[k]:,.0f} | {rat:.2f}" if rat else "– | –")
            met += ok
            if not ok:
                missed.append(f"{mkey} {isa}")
            md.append(f"| {mkey} | {isa} | " + " | ".join(cells) + f" | {'met' if ok else 'NOT met'} |")
    total = len(models) * len(paths)
    verdict = (f"Target (portable ≥ {TARGET}× native on every measure): met on {met} of {total} model × path rows"
               + (f"; not met: {', '.join(missed)}" if missed else "") + ".")
    return ("\n".join(md) + "\n\n" + verdict + "\n\n"
            f"Native: `{builds['native']}` (-march=native); portable: `{builds['portable']}` (`make bench-portable`, "
            "-march=x86-64, per-ISA objects: docs/DESIGN.md §4.1). Each path is forced with RECUR_ISA in both builds; "
            "under RECUR_ISA=avx2 or portable the native build still runs its -march=native code outside the GEMMs "
            "(compiled once there), so for those rows native is the upper bound and a ratio below 1 is the price of "
            "the narrower instruction set, not of dispatch. "
            f"{rounds} rounds, builds alternated; per run 3 reps of decode (tokens per rep at B = 1: "
            + ", ".join(f"{m[0]} {m[2]}" for m in models) + ") and of prefill, medians over all reps; "
            f"raw: `{os.path.relpath(raw, ctx.root)}`. "
            f"Load average before / after each round: {', '.join('/'.join(x) for x in load)}.\n")
