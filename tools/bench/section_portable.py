"""Benchmark section "portable" (issue 15): the portable binary (plain `make`: -march=x86-64, the
hot files compiled once per kernel path, build/) against, for each kernel path P, the build a
user with a CPU whose best path is P would make with -march=native (docs/DESIGN.md §4.1):

    path      reference build (`make bench-isa-refs`)
    avx512    build-native/  -march=native on this machine (NATIVE=1)
    avx2      build-v3/      -march=x86-64-v3, single-path (ISA_MULTI=0)
    portable  build-v2/      -march=x86-64-v2, single-path: what -march=native gives on a pre-AVX2 x86

Both binaries run with RECUR_ISA=P (the reference's GEMMs follow it; the rest of its code is
compiled for P's instruction set, as on such a CPU). Models: models/default (F16) and the d512 of
tools/configs/bench_d512.json exported with --seed 1 --dtype F16 (the file section "quant" uses).
bench_model --model-only, one thread; runs alternate (reference, portable, then portable,
reference in the next round) so both see the same load. Rates are tokens per CPU second: decode
B = 1 and B = 64 (recur_model_step_batch) and prefill of 512 tokens; a run's rate = tokens / median
CPU seconds of its reps (benchutil.model_rates), a build's rate = the median over rounds. The
verdict's ratio = the median over rounds of (portable rate ÷ reference rate of the same round)
(benchutil.median_ratio): the two runs of a round are seconds apart, so the drift of these shared
cores' speed between minutes falls on both. Target (issue 15): that ratio >= 0.95 on every
measure.

Run alone: /usr/bin/python3 tools/bench/run_all.py --sections portable
Some rows only, printed (docs/BENCHMARKS.md untouched), e.g. the d512 rows with more rounds:
    /usr/bin/python3 tools/bench/section_portable.py --models d512 --rounds 7
The d512 decode at B = 1 streams 53 MB of F16 weights per token from memory: its rate varies
from one process to the next by more than the target's 5 % (a same-binary A/A pair at load 2.4
ranged 0.69-1.43 per round, 12 rounds), so that row needs more rounds than the compute-bound ones.
--aa runs the portable binary on both sides (an A/A: every ratio is 1 but for noise), printed, to
say how far the same load moves a ratio:
    /usr/bin/python3 tools/bench/section_portable.py --models default --rounds 5 --aa
"""
import argparse
import json
import os
import statistics
import sys

import benchutil

TITLE = "Portable build vs native build, per kernel path (issue 15)"
ORDER = 37

PORTABLE_BUILD = "build"
REFERENCE = {  # path -> (build directory, how it is compiled)
    "avx512": ("build-native", "-march=native"),
    "avx2": ("build-v3", "-march=x86-64-v3"),
    "portable": ("build-v2", "-march=x86-64-v2"),
}
D512_CONFIG = "tools/configs/bench_d512.json"
D512_DIR = "bench/d512_f16"
# (key, model directory, tokens per rep at B = 1, reps); d512: its directory under the build
MODELS = lambda d512: [("default", "models/default", 1024, 5), ("d512", d512, 128, 3)]  # noqa: E731
TARGET = 0.95
# Rounds in make bench: even, so each build runs first in half of them (the order alternates; with
# an odd count the reference ran first once more than the portable binary). More, shorter rounds
# did not narrow the A/A spread: default model, --aa, load 3.7-5.7, largest |ratio - 1| of the 9
# figures (median of same-round ratios): 5 rounds x 5 reps 0.044 and 0.060, 12 rounds x 2 reps
# 0.050 and 0.028 (ratios of the pooled medians of the same runs: 0.046, 0.063; 0.021, 0.066).
ROUNDS = 4


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


def run(ctx, only=None, rounds=None, aa=False, reps=None):
    """The section; only: the model keys to measure (default every model), rounds: how many
    (default ROUNDS, 1 with --quick); aa: the portable binary stands in for every reference (A/A);
    reps: reps per run for every model (default each model's, MODELS)."""
    ctx.run(["make", "--no-print-directory", "bench-isa-refs"], timeout=3600)
    bench = lambda d: os.path.join(d, "bench", "bench_model")
    portable = bench(PORTABLE_BUILD)
    d512 = os.path.join(PORTABLE_BUILD, D512_DIR)
    if not os.path.exists(os.path.join(ctx.root, d512, "model.safetensors")):
        ctx.run([ctx.python, "tools/export.py", "--config", D512_CONFIG, "--seed", "1", "--out", d512,
                 "--dtype", "F16"], timeout=600)
    rounds = rounds or (1 if ctx.quick else ROUNDS)
    models = [(k, d, t, reps or n) for k, d, t, n in MODELS(d512) if not only or k in only]
    paths = _paths()
    outs = {}  # (model, path, "reference" | "portable") -> [run outputs]
    load = [open("/proc/loadavg").read().split()[:3]]
    for rnd in range(rounds):
        order = ["reference", "portable"] if rnd % 2 == 0 else ["portable", "reference"]
        for mkey, mdir, tokens, reps in models:
            for isa in paths:
                for b in order:
                    exe = portable if b == "portable" or aa else bench(REFERENCE[isa][0])
                    argv = ["env", f"RECUR_ISA={isa}", exe, "--model", mdir, "--batches", "1,64",
                            "--reps", str(reps), "--tokens-per-rep", str(tokens), "--prefill", "512",
                            "--prefill-reps", str(reps), "--model-only"]
                    outs.setdefault((mkey, isa, b), []).append(benchutil.jsonl(ctx.run(argv, timeout=900)))
        load.append(open("/proc/loadavg").read().split()[:3])
    raw = os.path.join(ctx.build, "bench", "portable_aa_raw.jsonl" if aa else "portable_raw.jsonl")
    os.makedirs(os.path.dirname(raw), exist_ok=True)
    with open(raw, "w") as f:
        for (mkey, isa, b), runs in outs.items():
            for i, out in enumerate(runs):
                for r in out:
                    f.write(json.dumps(dict(r, model=mkey, isa=isa, build=b, run=i)) + "\n")
    md = ["| model | path | reference build | decode B = 1 reference / portable (tok/CPU-s) | ratio "
          "| decode B = 64 reference / portable | ratio | prefill 512 reference / portable | ratio | ≥ 0.95 |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    met, missed = 0, []
    for mkey, *_ in models:
        for isa in reversed(paths):
            n = [benchutil.model_rates(o) for o in outs[(mkey, isa, "reference")]]  # per round
            p = [benchutil.model_rates(o) for o in outs[(mkey, isa, "portable")]]
            cells, ok = [], True
            for k in ("b1", "b64", "pre"):
                rat = benchutil.median_ratio([x[k] for x in p], [x[k] for x in n])
                ok = ok and rat is not None and rat >= TARGET
                cells.append(f"{statistics.median(x[k] for x in n):,.0f} / {statistics.median(x[k] for x in p):,.0f}"
                             f" | {rat:.2f}" if rat else "– | –")
            met += ok
            if not ok:
                missed.append(f"{mkey} {isa}")
            ref = f"`{PORTABLE_BUILD}` (A/A)" if aa else f"`{REFERENCE[isa][0]}` ({REFERENCE[isa][1]})"
            md.append(f"| {mkey} | {isa} | {ref} | " + " | ".join(cells)
                      + f" | {'met' if ok else 'NOT met'} |")
    total = len(models) * len(paths)
    verdict = (f"Target (portable ≥ {TARGET}× reference on every measure): met on {met} of {total} model × path rows"
               + (f"; not met: {', '.join(missed)}" if missed else "") + ".")
    if aa:
        verdict = f"A/A: `{portable}` on both sides; {verdict}"
    return ("\n".join(md) + "\n\n" + verdict + "\n\n"
            f"Portable: `{portable}` (plain `make`: -march=x86-64, per-ISA objects, docs/DESIGN.md §4.1). "
            "Reference for path P: the build a -march=native user gets on a CPU whose best path is P — "
            "avx512: this machine's -march=native (`make NATIVE=1`); avx2: -march=x86-64-v3; portable: "
            "-march=x86-64-v2 (a pre-AVX2 x86-64), the last two single-path (ISA_MULTI=0); all built by "
            "`make bench-isa-refs`. Both binaries run with RECUR_ISA=P. "
            f"{rounds} rounds, builds alternated; per run, reps of decode and of prefill "
            + ", ".join(f"{m[0]} {m[3]}" for m in models) + " (tokens per rep at B = 1: "
            + ", ".join(f"{m[0]} {m[2]}" for m in models) + "; bench_model --model-only). Rates: the "
            "median over rounds of each run's tokens ÷ median CPU seconds of its reps; ratio (the "
            "verdict figure): the median over rounds of portable ÷ reference in the same round, so it "
            "need not equal the quotient of the two rates beside it; "
            f"raw: `{os.path.relpath(raw, ctx.root)}`. "
            f"Load average before / after each round: {', '.join('/'.join(x) for x in load)}.\n")


def main():
    ap = argparse.ArgumentParser(description="Some rows of the portable section, printed (not written to "
                                             "docs/BENCHMARKS.md).")
    ap.add_argument("--models", default="default,d512", help="comma-separated: default, d512")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--aa", action="store_true", help="the portable binary on both sides (noise)")
    ap.add_argument("--reps", type=int, help="reps per run for every model (default: default 5, d512 3)")
    a = ap.parse_args()
    only = set(a.models.split(","))
    known = {k for k, *_ in MODELS("")}
    if not only <= known or a.rounds < 1 or (a.reps is not None and a.reps < 1):
        ap.error(f"--models: some of {sorted(known)}; --rounds >= 1; --reps >= 1")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run_all
    ctx = run_all.BenchContext()
    ctx.section = "portable"
    print(run(ctx, only=only, rounds=a.rounds, aa=a.aa, reps=a.reps))


if __name__ == "__main__":
    main()
