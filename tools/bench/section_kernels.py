"""Benchmark section "kernels" (issue 2): librecur's mixers in every form, OpenBLAS sgemm's peak,
and the same chunkwise ops in PyTorch, in one run.

Builds tools/bench/bench_kernels.c against build/librecur.a (make build/bench/bench_kernels), runs
it and tools/bench/bench_torch_kernels.py, and returns the markdown: tokens/s per mixer x form x T,
chunkwise GFLOP/s against the sgemm peak, ratios, and issue 2's targets marked met / not met; then
issue 18's long-sequence targets from bench_kernels --paired runs (long_sequences).
"""
import json
import os
import statistics

import benchutil

TITLE = "Kernels: every mixer in every form (librecur vs OpenBLAS peak vs PyTorch)"
ORDER = 10

H, K, V, CHUNK = 4, 64, 64, 64
T_FULL = [1024, 4096, 16384]
T_QUICK = [1024, 4096]
MEM_MB = 2048          # parallel form: skipped when its workspace needs more than this
MIXERS = [("linear", "linear attention (elu+1, normalised)"), ("retention", "retention (multi-scale γ)"),
          ("gla_scalar", "GLA, scalar gate per head"), ("gla_vector", "GLA, per-key gate"),
          ("deltanet", "DeltaNet"), ("gated_deltanet", "gated DeltaNet"),
          ("gdr", "generalized delta rule (RWKV-7)")]
# issue 17's target for the generalized delta rule replaces issue 2's three
GDR_TORCH_TARGET = 2.0
BASELINES = [("softmax", "causal softmax attention"), ("block_topk", "block top-k (block 64, top 2, causal)")]
TARGET_T = 16384
# issue 18: every chunkwise form at T = 16k at >= 75 % of the sgemm peak and within 10 % of its
# T = 1k rate (nominal flops; both measured by CPU time, see long_sequences)
LONG_T, SHORT_T = 16384, 1024
LONG_PEAK_FRACTION, LONG_RATE_RATIO = 0.75, 0.90
PAGES = ("2m", "4k")   # bench_kernels.c --pages: the verdict's (the server's workspace), then malloc's
# rounds of the paired runs behind those verdicts (bench_kernels --paired --reps; --quick: 5)
PAIRED_ROUNDS = 21
PAGE_LABEL = {"2m": "2 MiB pages, as recurd's workspace (the verdict)", "4k": "4 KiB pages (plain malloc)"}


def _fmt_rate(x):
    if x is None:
        return "–"
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def _fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}×"


def run(ctx):
    Ts = T_QUICK if ctx.quick else T_FULL
    reps = "3" if ctx.quick else "5"
    tlist = ",".join(map(str, Ts))
    lib = os.path.join(ctx.build, "librecur.a")
    if not os.path.exists(lib):
        raise RuntimeError(f"{lib} is missing: run `make` first")
    exe = os.path.join(ctx.build, "bench", "bench_kernels")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    def rel(p):  # paths under the repository are shown relative to it
        r = os.path.relpath(p, ctx.root)
        return p if r.startswith("..") else r
    ctx.run(benchutil.make_target(ctx.root, ctx.build, exe))
    c_out = benchutil.jsonl(ctx.run([rel(exe), "--T", tlist, "--reps", reps, "--budget", "8",
                            "--mem-mb", str(MEM_MB), "--H", str(H), "--K", str(K), "--V", str(V),
                            "--chunk", str(CHUNK)], timeout=7200))
    # issue 18's long-sequence targets: the chunkwise form alone, T = 1k and 16k and the sgemm peak
    # sampled side by side in rounds (bench_kernels --paired), operands on 2 MiB pages (as the
    # server's workspace) and again on 4 KiB pages (bench_kernels.c --pages)
    long_runs = {}
    if LONG_T in Ts and SHORT_T in Ts:
        for pages in PAGES:
            long_runs[pages] = benchutil.jsonl(ctx.run(
                [rel(exe), "--paired", "--pages", pages, "--T", f"{SHORT_T},{LONG_T}", "--forms", "chunkwise",
                 "--mixers", ",".join(m for m, _ in MIXERS),
                 "--reps", str(5 if ctx.quick else PAIRED_ROUNDS), "--budget", "30",
                 "--mem-mb", str(MEM_MB), "--H", str(H), "--K", str(K), "--V", str(V),
                 "--chunk", str(CHUNK)], timeout=7200))
    t_out = benchutil.jsonl(ctx.run([ctx.python, "tools/bench/bench_torch_kernels.py", "--T", tlist,
                            "--reps", reps, "--budget", "8", "--H", str(H), "--K", str(K),
                            "--V", str(V), "--chunk", str(CHUNK)], timeout=7200))
    raw = os.path.join(ctx.build, "bench", "kernels_raw.jsonl")
    with open(raw, "w") as f:
        for r in c_out + t_out:
            f.write(json.dumps(r) + "\n")
        for pages, rows in long_runs.items():
            for r in rows:
                f.write(json.dumps(dict(r, run="paired", pages=pages)) + "\n")
    load = open("/proc/loadavg").read().split()[:3]
    return (render(c_out, t_out, Ts, long_runs) + f"\n\nLoad average when this section finished: {' '.join(load)} "
            f"(2 cores shared with other work: absolute figures are noisy, ratios from the same run "
            f"less so). Raw per-run data: `{rel(raw)}` (median and min of each configuration; the paired "
            f"runs' samples of every round).")


def render(c_out, t_out, Ts, long_runs=None):
    sgemm = [r for r in c_out if r["kind"] == "sgemm"]
    peak = max((r["gflops"] for r in sgemm), default=None)
    cpu_peak = max((r["gflops_cpu"] for r in sgemm if "gflops_cpu" in r), default=None)
    res = {(r["mixer"], r["form"], r["T"]): r for r in c_out if r["kind"] == "mixer"}
    torch_res = {(r["mixer"], r["T"]): r for r in t_out if r.get("kind") == "mixer"}
    torch_ver = next((r["version"] for r in t_out if r.get("kind") == "torch"), "?")

    def tps(m, f, T):
        r = res.get((m, f, T))
        return r["tokens_per_s"] if r and r.get("status") == "ok" else None

    def best(m, f, T):  # tokens/s of the fastest run (least disturbed by other load)
        r = res.get((m, f, T))
        return T / r["min_s"] if r and r.get("status") == "ok" else None

    def tbest(m, T):
        r = torch_res.get((m, T))
        return T / r["min_s"] if r else None

    def cell(m, f, T):
        r = res.get((m, f, T))
        if r is None:
            return "not run"
        if r.get("status") != "ok":
            return r["status"]
        return _fmt_rate(r["tokens_per_s"])

    out = []
    out.append(f"Per head K = V = {K}, H = {H} heads, chunk size {CHUNK}, fp32, one thread "
               f"(`OPENBLAS_NUM_THREADS=1`, `torch.set_num_threads(1)`). Tokens/s = T / median wall "
               f"time of one call over the whole sequence (all heads, zero initial state); each "
               f"configuration: one warm-up, then up to 5 timed calls within an 8 s budget (the "
               f"`reps` column of the raw data), the forms of a mixer taking turns call by call so "
               f"that load from other work on these shared cores falls on all of them alike. The parallel form is skipped where its workspace "
               f"would need more than {MEM_MB // 1024} GB (address-space cap, RECUR_ENOMEM).")
    out.append("")
    out.append("### OpenBLAS sgemm (the peak chunkwise is measured against)")
    out.append("")
    out.append("| M×N×K | GFLOP/s | by CPU time |")
    out.append("|---|---|---|")
    for r in sgemm:
        out.append(f"| {r['m']}×{r['n']}×{r['k']} | {r['gflops']:.1f} | "
                   f"{r['gflops_cpu']:.1f} |" if "gflops_cpu" in r else
                   f"| {r['m']}×{r['n']}×{r['k']} | {r['gflops']:.1f} | – |")
    out.append("")
    out.append(f"Peak used below: **{peak:.1f} GFLOP/s** by wall time, **{cpu_peak or 0:.1f} GFLOP/s** by "
               f"CPU time (best of the shapes above, 7 samples each at the start of the run; the "
               f"long-sequence verdicts of issue 18 sample their own peak, see there). CPU time is the calling thread's "
               f"(`CLOCK_THREAD_CPUTIME_ID`): the time the kernel held a core, not the time other work "
               f"on these shared cores held it; on a quiet machine the two agree."
               if peak else "sgemm was not measured.")
    core = next((r["core"] for r in c_out if r["kind"] == "blas"), None)
    if core:
        out.append("")
        out.append(f"OpenBLAS runs its `{core}` kernel on this CPU (`openblas_get_corename()`): the peak "
                   f"is that kernel's, so the % of peak below depend on which kernel OpenBLAS picks "
                   f"(an AVX2 one such as Haswell reaches about half of an AVX-512 core's peak, "
                   f"which recur__mm uses).")
    mm = [r for r in c_out if r["kind"] == "mm"]
    if mm:
        out.append("")
        out.append("The chunkwise forms run on librecur's own product kernel (`recur__mm`, core/chunk_mm.c: "
                   "6×64 register tiles, operands read in place, causal halves skipped), not on sgemm; "
                   "same run: " + "; ".join(
                       f"{r['m']}×{r['n']}×{r['k']}{' causal (A lower-triangular, useful flops)' if r['causal'] else ''}"
                       f" {r['gflops']:.1f} GFLOP/s" for r in mm) + ".")
    out.append("")
    out.append("### Tokens/s per mixer and form")
    out.append("")
    out.append("GFLOP/s counts matmul work only (nominal: full chunk×chunk blocks; the delta rule adds "
               "K Kᵀ, the two triangular solves and W S; see bench_kernels.c). "
               "Ratios: chunkwise ÷ recurrent, chunkwise ÷ parallel, chunkwise ÷ PyTorch chunkwise.")
    out.append("")
    out.append("| mixer | T | recurrent | parallel | chunkwise | chunkwise GFLOP/s (% of peak) "
               "| by CPU time (% of CPU-time peak) | PyTorch chunkwise | ÷ rec | ÷ par | ÷ torch |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    targets = []
    for m, label in MIXERS:
        for T in Ts:
            ch = res.get((m, "chunkwise", T))
            gf = (f"{ch['gflops']:.1f} ({100 * ch['gflops'] / peak:.0f} %)"
                  if ch and ch.get("status") == "ok" and peak else "–")
            gc = cpu_gflops(ch)
            gfc = f"{gc:.1f} ({100 * gc / cpu_peak:.0f} %)" if gc and cpu_peak else "–"
            tt = torch_res.get((m, T))
            ttps = tt["tokens_per_s"] if tt else None
            c = tps(m, "chunkwise", T)
            out.append(f"| {label} | {T} | {cell(m, 'recurrent', T)} | {cell(m, 'parallel', T)} | "
                       f"{cell(m, 'chunkwise', T)} | {gf} | {gfc} | {_fmt_rate(ttps)} | "
                       f"{_fmt_ratio(_ratio(c, tps(m, 'recurrent', T)))} | "
                       f"{_fmt_ratio(_ratio(c, tps(m, 'parallel', T)))} | {_fmt_ratio(_ratio(c, ttps))} |")
        if m == "gdr":  # issue 17: chunkwise >= 2x PyTorch's chunk form of the same math at T=16k
            tt = torch_res.get((m, TARGET_T))
            targets.append((label, f"chunkwise ≥ {GDR_TORCH_TARGET:g}× PyTorch chunkwise at T=16k (issue 17)",
                            _ratio(tps(m, "chunkwise", TARGET_T), tt["tokens_per_s"] if tt else None),
                            GDR_TORCH_TARGET, res.get((m, "chunkwise", TARGET_T)),
                            _ratio(best(m, "chunkwise", TARGET_T), tbest(m, TARGET_T))))
            continue
        # issue 2's targets
        c16 = tps(m, "chunkwise", TARGET_T)
        b16 = best(m, "chunkwise", TARGET_T)
        targets.append((label, "chunkwise ≥ 10× recurrent at T=16k",
                        _ratio(c16, tps(m, "recurrent", TARGET_T)), 10.0,
                        res.get((m, "recurrent", TARGET_T)), _ratio(b16, best(m, "recurrent", TARGET_T))))
        targets.append((label, "chunkwise ≥ 5× parallel at T=16k",
                        _ratio(c16, tps(m, "parallel", TARGET_T)), 5.0,
                        res.get((m, "parallel", TARGET_T)), _ratio(b16, best(m, "parallel", TARGET_T))))
        worst = None
        for T in Ts:
            tt = torch_res.get((m, T))
            r = _ratio(tps(m, "chunkwise", T), tt["tokens_per_s"] if tt else None)
            if r is not None and (worst is None or r < worst[0]):
                worst = (r, T, _ratio(best(m, "chunkwise", T), tbest(m, T)))
        targets.append((label, "chunkwise ≥ 1.0× PyTorch chunkwise (worst T" +
                        (f" = {worst[1]})" if worst else ")"), worst[0] if worst else None, 1.0, None,
                        worst[2] if worst else None))
    out.append("")
    out.extend(ceiling(res, peak, Ts))
    out.append("")
    out.append("### Baselines (one form)")
    out.append("")
    out.append("| op | " + " | ".join(f"T = {T}" for T in Ts) + " |")
    out.append("|---|" + "---|" * len(Ts))
    for m, label in BASELINES:
        out.append(f"| {label} | " + " | ".join(cell(m, "single", T) for T in Ts) + " |")
    out.append("")
    out.append("### Targets (issue 2)")
    out.append("")
    if TARGET_T not in Ts:
        out.append(f"_--quick run: T = {TARGET_T} was not measured, the T=16k targets are not evaluated._")
        out.append("")
    out.append("Verdicts use the medians. The last column is the same ratio from each side's fastest "
               "run, which is less disturbed by other load on these shared cores; where the two "
               "disagree on the verdict, the figure is within the noise of this machine.")
    out.append("")
    out.append("| mixer | target | measured (medians) | verdict | ratio of fastest runs |")
    out.append("|---|---|---|---|---|")
    met = total = 0
    for label, what, r, need, raw, rb in targets:
        if r is None:
            why = raw["status"] if raw and raw.get("status") != "ok" else "not measured"
            out.append(f"| {label} | {what} | – | not evaluated ({why}) | – |")
            continue
        total += 1
        ok = r >= need
        met += ok
        margin = (r / need - 1) * 100
        out.append(f"| {label} | {what} | {r:.2f}× | **{'met' if ok else 'not met'}** "
                   f"({'+' if margin >= 0 else ''}{margin:.0f} % vs {need:g}×) | {_fmt_ratio(rb)} |")
    out.append("")
    out.append(f"{met} of {total} evaluated targets met. PyTorch {torch_ver}: the chunkwise ops of "
               "`tools/bench/torch_chunkwise.py` (batched over heads, the same algorithm and "
               "chunk size; checked against the float64 reference by tests/python/test_reference.py).")
    out.append("")
    out.extend(long_sequences(long_runs or {}, res, cpu_peak, Ts))
    return "\n".join(out)


def cpu_gflops(r):
    """A configuration's GFLOP/s by the median CPU time of its calls (None if not measured)."""
    return r.get("gflops_cpu") if r and r.get("status") == "ok" else None


def long_sequences(long_runs, res_main, cpu_peak, Ts):
    """Issue 18's targets: every chunkwise form at T = 16k at >= 75 % of the sgemm peak and at >= 0.90
    of its own T = 1k rate, from long_runs ({pages: bench_kernels --paired rows}): the chunkwise form
    alone, operands on 2 MiB pages (the verdict: where the server's workspace keeps them) and on 4 KiB
    pages (beside it), each round one sgemm peak sample and one call at each T, by CPU time. Verdict
    figures are medians over rounds of same-round ratios (benchutil.median_ratio). res_main: the
    main run's rows (forms alternated), whose ratio is shown too; cpu_peak: the start-of-run peak."""
    out = ["### Chunkwise at long sequences (issue 18)", ""]
    if LONG_T not in Ts or SHORT_T not in Ts or not long_runs:
        return out + [f"_T = {SHORT_T} and T = {LONG_T} were not both measured: not evaluated._"]
    out.append(
        f"Targets: chunkwise at T = {LONG_T} at ≥ {100 * LONG_PEAK_FRACTION:.0f} % of the sgemm peak, and "
        f"its rate ≥ {LONG_RATE_RATIO:.2f} × the same form's rate at T = {SHORT_T} (nominal flops, as above; "
        f"CPU time). Measured by dedicated runs of bench_kernels with the chunkwise form alone, paired "
        f"(`--paired --forms chunkwise --T {SHORT_T},{LONG_T}`): per mixer, one warm-up round and then "
        f"rounds of one sgemm 64×64×64 sample (~0.2 GFLOP, as in the peak table above), one call at "
        f"T = {SHORT_T} and one at T = {LONG_T}, the order reversed every other round; each timed call "
        f"follows an untimed one at the same T, so its operands are as warm in the caches as in a "
        f"sequence of calls (a prefill). Why paired: the speed of these shared cores drifts 10-20 % "
        f"from one minute to the next, and a ratio of two figures measured at different times carries "
        f"that drift — two runs of the earlier method (all T = {SHORT_T} calls, then all T = {LONG_T} "
        f"calls, against a peak sampled once at program start) flipped several verdicts each way. A "
        f"round lasts tens of milliseconds, so the two sides of a same-round ratio see the same "
        f"machine. The verdict figures: % of peak = the median over rounds of (T = {LONG_T} rate ÷ "
        f"that round's sgemm rate); T = {LONG_T} ÷ T = {SHORT_T} = the median over rounds of the "
        f"same-round ratio. Beside them: each T's rate by its median CPU time, the peak as the median "
        f"of the mixer's own sgemm samples (the start-of-run peak of the table above, "
        f"{cpu_peak or 0:.1f} GFLOP/s by CPU time, is not used here), the rate ratio of each T's "
        f"fastest call, and the main table's ratio (\"forms alternated\": there, between two chunkwise "
        f"calls at T = {LONG_T}, the parallel form maps, fills and unmaps its T × T scores per head, "
        f"up to gigabytes). The rule is the same whichever way a verdict falls. Operands as in the "
        f"server's forward workspace (core/model_forward.c: one recur__big_alloc mapping, 2 MiB pages "
        f"where the kernel grants them: `--pages 2m`, the verdict); the second table has them in plain "
        f"malloc memory (4 KiB pages: `--pages 4k`), as a caller that does not ask for huge pages "
        f"would — at T = {LONG_T} the operands (~80 MB) span far more 4 KiB pages than the TLB maps. "
        f"Why CPU time: on a loaded machine a call at T = {SHORT_T} (about 1 ms) often runs within one "
        f"time slice while one at T = {LONG_T} is cut into many, so wall time charges the other "
        f"work's share of the cores to the long sequence.")
    for pages in PAGES:
        if pages not in long_runs:
            continue
        rows = {r["mixer"]: r for r in long_runs[pages] if r["kind"] == "paired"}
        out += ["", f"Operands on {PAGE_LABEL[pages]} (`--pages {pages}`):", ""]
        out += _long_table(rows, res_main)
    return out


def _paired_rates(r, key, flops):
    """GFLOP/s of each round's sample (key: "sgemm_cpu_s" or "cpu_s_<T>") of a --paired row."""
    return [flops / s * 1e-9 for s in r[key]]


def _long_table(rows, res_main):
    """The long-sequence rows and verdicts of one paired run (rows: {mixer: --paired row}), with the
    main run's ratio (res_main, forms alternated) beside (long_sequences)."""
    out = [f"| mixer | rounds | T = {SHORT_T} GFLOP/s | T = {LONG_T} GFLOP/s | sgemm peak in the rounds "
           f"| T = {LONG_T} % of peak (median of rounds) | verdict (≥ {100 * LONG_PEAK_FRACTION:.0f} %) "
           f"| T = {LONG_T} ÷ T = {SHORT_T} (median of rounds) | verdict (≥ {LONG_RATE_RATIO:.2f}) "
           f"| fastest runs | forms alternated |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    met = total = 0
    for m, label in MIXERS:
        r = rows.get(m)
        ms, ml = cpu_gflops(res_main.get((m, "chunkwise", SHORT_T))), cpu_gflops(res_main.get((m, "chunkwise", LONG_T)))
        alt = f"{ml / ms:.2f}×" if ms and ml else "–"
        if r is None or r.get("status") != "ok" or not r["rounds"]:
            why = r["status"] if r and r.get("status") != "ok" else "not measured"
            out.append(f"| {label} | – | – | – | – | – | not evaluated ({why}) | – | not evaluated | – | {alt} |")
            continue
        fs, fl = (r["flops"][r["T"].index(T)] for T in (SHORT_T, LONG_T))
        rs, rl = _paired_rates(r, f"cpu_s_{SHORT_T}", fs), _paired_rates(r, f"cpu_s_{LONG_T}", fl)
        rp = _paired_rates(r, "sgemm_cpu_s", r["sgemm_flops"])
        gs, gl = (f * 1e-9 / statistics.median(r[f"cpu_s_{T}"]) for f, T in ((fs, SHORT_T), (fl, LONG_T)))
        frac, ratio = benchutil.median_ratio(rl, rp), benchutil.median_ratio(rl, rs)
        ok_peak, ok_ratio = frac >= LONG_PEAK_FRACTION, ratio >= LONG_RATE_RATIO
        total += 2
        met += ok_peak + ok_ratio
        out.append(f"| {label} | {r['rounds']} | {gs:.1f} | {gl:.1f} | {statistics.median(rp):.1f} | "
                   f"{100 * frac:.0f} % | **{'met' if ok_peak else 'not met'}** "
                   f"({100 * (frac - LONG_PEAK_FRACTION):+.0f} points) | {ratio:.2f}× | "
                   f"**{'met' if ok_ratio else 'not met'}** ({100 * (ratio / LONG_RATE_RATIO - 1):+.0f} %) | "
                   f"{max(rl) / max(rs):.2f}× | {alt} |")
    out += ["", f"{met} of {total} evaluated targets met."]
    return out


def ceiling(res, peak, Ts):
    """What chunkwise ÷ recurrent can reach at T=16k: chunkwise executes the recurrent form's state
    products plus the causal halves of its in-chunk products, per token and head
        gated-linear  4KV + c (K + V)        (recurrent: 4KV)
        delta rule    6KV + 2c (K + V)       (recurrent: 6KV)
        gdr           8KV + 4c (K + V)       (recurrent: 10KV: the erase read-out is a 5th pass)
    so at the sgemm peak, with no other cost, it runs peak / (H x that) tokens/s."""
    T = TARGET_T if TARGET_T in Ts else max(Ts)
    if not peak:
        return []
    rows = []
    for m, label in MIXERS:
        rec = res.get((m, "recurrent", T))
        ch = res.get((m, "chunkwise", T))
        if not rec or rec.get("status") != "ok":
            continue
        delta = m in ("deltanet", "gated_deltanet")
        if m == "gdr":
            rec_fl, ch_fl = 10 * K * V, 8 * K * V + 4 * CHUNK * (K + V)
        else:
            rec_fl = (6 if delta else 4) * K * V
            ch_fl = rec_fl + (2 if delta else 1) * CHUNK * (K + V)
        rec_gf = rec["tokens_per_s"] * H * rec_fl * 1e-9
        ceil_tps = peak * 1e9 / (H * ch_fl)
        meas = ch["tokens_per_s"] / rec["tokens_per_s"] if ch and ch.get("status") == "ok" else None
        rows.append(f"| {label} | {_fmt_rate(rec['tokens_per_s'])} | {rec_gf:.1f} | {ch_fl / rec_fl:.2f}× | "
                    f"{_fmt_rate(ceil_tps)} | {_fmt_ratio(ceil_tps / rec['tokens_per_s'])} | {_fmt_ratio(meas)} |")
    if not rows:
        return []
    return ["### Ceiling of chunkwise ÷ recurrent (issue 2's 10× target)", "",
            f"Chunkwise cannot do less arithmetic than the recurrent form: every token's k v must enter "
            f"the state and every query must read it (K×V multiply-adds each, per chunk or per token "
            f"alike); on top come the causal halves of the in-chunk products. Executed flops per token "
            f"and head: 4KV + c(K+V) for the gated-linear family, 6KV + 2c(K+V) for the delta rule, "
            f"8KV + 4c(K+V) for the generalized delta rule (recurrent: 4KV, 6KV, 10KV; c = {CHUNK}). The ceiling is chunkwise at the peak of "
            f"{peak:.1f} GFLOP/s with no other cost at all; T = {T}, same run.", "",
            "| mixer | recurrent | recurrent GFLOP/s | chunkwise work ÷ recurrent | chunkwise ceiling "
            "| ceiling ÷ recurrent | measured ÷ recurrent |",
            "|---|---|---|---|---|---|---|"] + rows


if __name__ == "__main__":  # render saved raw output: section_kernels.py c.jsonl torch.jsonl
    import sys
    c = benchutil.jsonl(open(sys.argv[1]).read())
    t = benchutil.jsonl(open(sys.argv[2]).read())
    print(render(c, t, sorted({r["T"] for r in c if r["kind"] == "mixer"})))
