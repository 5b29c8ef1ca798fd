"""Issue 5 load benchmarks for `make bench`: section() returns a markdown section.

Scenarios, all driven by build/recur-load (which checks every answer, so no figure below is
counted on a wrong answer) against build/recurd on loopback:

  (2) throughput vs concurrent sessions 1, 4, 16, 64, 256 over HTTP, beside the in-process
      batched step rate at the same batch sizes (tools/bench/bench_batch.c), same run; one
      session streaming a greedy generation, and the loopback round trip of the minimal
      responder, for the single-session target in both modes;
  (1) memory vs tokens folded: one session folding up to 1M tokens (default recurrent model)
      and a hybrid with a softmax layer folding up to its max_context;
  (3) latency per token vs context position (1k ... 1M), measured on the session of (1);
  (4) capacity: RSS above baseline vs sessions x state_bytes at 10,000 sessions;
  (5) HTTP overhead: server CPU per single-token request with a tiny model vs a minimal
      libuv+llhttp responder (tools/bench/hello_server.c), same run.

Every scenario is bounded in time; a scenario that fails or runs out of time says so in the
section instead of breaking the bench. Plots are PNGs made with gnuplot, written to docs/.
For tools/bench/run_all.py: TITLE, ORDER and run(ctx): a 10-minute budget (3 with ctx.quick),
or RECUR_BENCH_LOAD_BUDGET seconds. The 1M-token fold needs about 8k tokens/s of prefill to fit;
on a busy machine the section stops earlier and says where.
Run alone:  /usr/bin/python3 tools/bench/section_load.py [--budget SECONDS] [--quick] > /tmp/load.md
"""
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import benchutil

TITLE = "Load: throughput, memory, latency, capacity, HTTP overhead (issue 5)"
ORDER = 50

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("RECUR_BUILD", os.path.join(ROOT, "build"))
OUT = os.path.join(BUILD, "bench", "load")
DOCS = os.path.join(ROOT, "docs")
RECURD = os.path.join(BUILD, "recurd")
LOAD = os.path.join(BUILD, "recur-load")
TINY_CONFIG = os.path.join(ROOT, "tests", "fixtures", "loadgen_model.json")
DEFAULT_MODEL_DIR = os.path.join(ROOT, "models", "default")

# docs/MODEL.md's default architecture, used with seeded weights when models/default is absent.
DEFAULT_CONFIG = {
    "name": "recur-default", "vocab_size": 256, "d_model": 256, "n_layers": 4, "n_heads": 4,
    "head_k": 64, "head_v": 64, "d_ff": 640,
    "mixers": ["gated_deltanet"] * 4, "tied_embeddings": True, "max_context": 4096,
    "norm_eps": 1e-5,
}
SOFTMAX_MAX_CONTEXT = 16384
SESSION_COUNTS = [1, 4, 16, 64, 256]
POSITIONS = [1024, 10240, 102400, 1048576]
CAPACITY_SESSIONS = 10000

ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


class Budget:
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds

    def left(self):
        return self.deadline - time.monotonic()


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- processes

def build_helpers():
    """The helpers, built by the Makefile (bench-tools): {name: path} and {name: error text}."""
    tools, errors = {}, {}
    for name in ("bench_batch", "hello_server"):
        exe = os.path.join(OUT, name)
        p = subprocess.run(benchutil.make_target(ROOT, BUILD, exe), cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
        if p.returncode == 0:
            tools[name] = exe
        else:
            errors[name] = (p.stderr or p.stdout)[-600:]
    return tools, errors


class Server:
    """A server process that logs a JSON line with "port" on stderr; stopped with SIGTERM."""

    def __init__(self, argv, what):
        self.what = what
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=ENV)
        self.port = None
        self.log = []
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                if len(self.log) < 200:
                    self.log.append(line)
                # recurd's "listening" line (hello_server's bare {"port":N}), never another
                # event's port (recurd logs the Redis port before it listens)
                if self.port is None and ('"event"' not in line or '"listening"' in line):
                    m = re.search(r'"port"\s*:\s*(\d+)', line)
                    if m and int(m.group(1)) > 0:
                        self.port = int(m.group(1))
                        ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        ready.wait(30)
        if self.port is None:
            self.stop()
            raise BenchError(f"{what} did not start: " + "".join(self.log[-5:])[-400:])

    @property
    def pid(self):
        return self.proc.pid

    def rss(self):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def metrics(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                parts = line.rsplit(" ", 1)
                try:
                    out[parts[0]] = float(parts[1])
                except (IndexError, ValueError):
                    pass
        return out

    def stop(self):
        benchutil.stop_process(self.proc, 15)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def write_config(name, cfg):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def default_model_args():
    if os.path.exists(os.path.join(DEFAULT_MODEL_DIR, "config.json")):
        return ["--model", DEFAULT_MODEL_DIR], "models/default"
    path = write_config("default_config.json", DEFAULT_CONFIG)
    return ["--model-config", path, "--model-seed", "1"], "default architecture, seeded weights"


def shown(args):
    """Command-line arguments as they read in the docs: paths relative to the repository."""
    return " ".join(os.path.relpath(a, ROOT) if os.path.isabs(a) else a for a in args)


def recurd(model_args, extra=()):
    return Server([RECURD, "--host", "127.0.0.1", "--port", "0"] + list(model_args) + list(extra),
                  "recurd")


def load(port, args, budget, name, min_time=30):
    """Run recur-load; returns its JSON report. Raises BenchError on setup failure, a failed check
    or an abort (so that no figure is ever taken from a run with wrong answers)."""
    if budget.left() < 5:
        raise BenchError("time budget exhausted")
    max_time = max(5.0, min(budget.left() - 2, 86400))
    path = os.path.join(OUT, name + ".json")
    if os.path.exists(path):
        os.unlink(path)
    cmd = [LOAD, "--port", str(port), "--json", path, "--quiet", "--max-time", f"{max_time:.0f}"]
    cmd += [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max_time + 30)
    if not os.path.exists(path):
        raise BenchError(f"recur-load wrote no report (exit {p.returncode}): {p.stderr[-300:]}")
    with open(path) as f:
        rep = json.load(f)
    shown = cmd[cmd.index("--max-time") + 2:]
    for i, a in enumerate(shown[:-1]):
        if a in ("--server-pid", "--session"):
            shown[i + 1] = "PID" if a == "--server-pid" else "ID"
    rep["_cmd"] = "build/recur-load " + " ".join(shown)
    if rep.get("setup_error"):
        raise BenchError(f"recur-load setup failed: {rep['setup_error']}")
    return rep


def require_ok(rep):
    if rep["check_failures"]:
        raise BenchError("recur-load checks FAILED: " + "; ".join(rep["failure_examples"][:3]))
    if rep.get("aborted"):
        raise BenchError("recur-load aborted: " + rep["aborted"])
    return rep


def bench_batch(tool, model_args, batches, min_time, budget):
    """The in-process rate: {batch: {"tokens_per_s", ...}} from bench_batch's JSON lines."""
    if budget.left() < 5:
        raise BenchError("time budget exhausted")
    argv = [tool]
    if "--model" in model_args:
        argv += ["--model", model_args[model_args.index("--model") + 1]]
    else:
        argv += ["--config", model_args[model_args.index("--model-config") + 1], "--seed",
                 model_args[model_args.index("--model-seed") + 1]]
    argv += ["--batches", ",".join(str(b) for b in batches), "--min-time", str(min_time)]
    p = subprocess.run(argv, capture_output=True, text=True, env=ENV,
                       timeout=max(10, min(budget.left(), 300)))
    if p.returncode != 0:
        raise BenchError("bench_batch failed: " + p.stderr[-300:])
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return {r["batch"]: r for r in rows}


def gnuplot(name, script):
    """Render a gnuplot script to docs/<name>.png; returns a markdown image or a note."""
    if not shutil.which("gnuplot"):
        return "_(no plot: gnuplot is not installed; `make deps` installs gnuplot-nox)_"
    png = os.path.join(DOCS, name + ".png")
    os.makedirs(DOCS, exist_ok=True)
    full = (f"set terminal pngcairo size 900,540 noenhanced font ',10'\nset output '{png}'\n"
            "set grid\nset key top left\n" + script)
    p = subprocess.run(["gnuplot"], input=full, capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or not os.path.exists(png):
        return f"_(plot failed: {p.stderr.strip()[-200:]})_"
    return f"![{name}]({name}.png)"


def data_file(name, rows):
    path = os.path.join(OUT, name + ".dat")
    with open(path, "w") as f:
        for r in rows:
            f.write(" ".join(str(x) for x in r) + "\n")
    return path


def mib(x):
    return "–" if x is None else f"{x / 1048576:.2f}"


def fmt(x, nd=1):
    return "–" if x is None else f"{x:,.{nd}f}"


def median_run(reps, key):
    """The report whose key(report) is the median of the repeated runs."""
    reps = sorted(reps, key=key)
    return reps[len(reps) // 2]


REPEATS = 3
THROUGHPUT_SECONDS = 3


def create_session(port):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sessions", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["id"]


# ---------------------------------------------------------------- (2) throughput vs sessions

def scenario_throughput(tools, budget):
    margs, mname = default_model_args()
    rows = []
    avg_batch = {}
    with recurd(margs) as srv:
        for s in SESSION_COUNTS:
            m0 = srv.metrics()
            reps = [require_ok(load(srv.port, [
                "--sessions", s, "--connections", s, "--mode", "tokens", "--duration", THROUGHPUT_SECONDS,
                "--server-pid", srv.pid, "--metrics-interval", 0, "--seed", 10 * s + i], budget,
                f"throughput_{s}_{i}")) for i in range(REPEATS)]
            m1 = srv.metrics()
            nb = m1.get("recurd_decode_batches_total", 0) - m0.get("recurd_decode_batches_total", 0)
            nt = (m1.get("recurd_decode_batched_tokens_total", 0)
                  - m0.get("recurd_decode_batched_tokens_total", 0))
            avg_batch[s] = nt / nb if nb else None
            rows.append((s, median_run(reps, lambda r: r["tokens_per_s"])))
        cmd = rows[-1][1]["_cmd"]
        # One session streaming a greedy generation: the worker steps on without a loop round
        # trip per token (server/generation.h), so this mode is bound by the model step.
        gen_reps = [require_ok(load(srv.port, [
            "--sessions", 1, "--connections", 1, "--mode", "generate", "--max-tokens", 512,
            "--temperature", 0, "--duration", THROUGHPUT_SECONDS, "--server-pid", srv.pid,
            "--metrics-interval", 0, "--seed", 7 + i], budget, f"generate_1_{i}"))
            for i in range(REPEATS)]
        gen = median_run(gen_reps, lambda r: r["tokens_per_s"])
    # What one request's loopback round trip costs with no model at all: the same
    # single-session /tokens drive against the minimal responder.
    hello_rt = None
    if "hello_server" in tools:
        try:
            with Server([tools["hello_server"], "--port", "0"], "hello_server") as hello:
                hreps = [require_ok(load(hello.port, [
                    "--sessions", 1, "--connections", 1, "--mode", "tokens", "--duration",
                    THROUGHPUT_SECONDS, "--metrics-interval", 0, "--seed", 11 + i], budget,
                    f"roundtrip_hello_{i}")) for i in range(REPEATS)]
            hello_rt = median_run(hreps, lambda r: r["requests_per_s"])
        except BenchError:
            hello_rt = None
    bb = {}
    note = ""
    if "bench_batch" in tools:
        try:
            bb = bench_batch(tools["bench_batch"], margs, SESSION_COUNTS, 1.0, budget)
        except BenchError as e:
            note = f"\nIn-process rate unavailable: {e}\n"
    else:
        note = "\nIn-process rate unavailable: bench_batch did not build.\n"

    md = [f"Model: {mname}; recurd defaults (workers, max_batch); one connection per session; "
          f"single-token `/tokens` requests; each point is the median of {REPEATS} run(s) of {THROUGHPUT_SECONDS} s.\n",
          "| sessions | HTTP tokens/s | p50 ms | p99 ms | recurd's mean decode batch | in-process B=sessions tokens/s | HTTP / in-process |",
          "|---:|---:|---:|---:|---:|---:|---:|"]
    dat = []
    for s, rep in rows:
        ip = bb.get(s, {}).get("tokens_per_s")
        ratio = rep["tokens_per_s"] / ip if ip else None
        md.append(f"| {s} | {fmt(rep['tokens_per_s'])} | {rep['latency_ms']['p50']:.3f} | "
                  f"{rep['latency_ms']['p99']:.3f} | {fmt(avg_batch.get(s), 1)} | {fmt(ip)} | "
                  f"{fmt(ratio, 2)} |")
        dat.append((s, f"{rep['tokens_per_s']:.1f}", f"{ip:.1f}" if ip else "NaN"))
    http = {s: rep["tokens_per_s"] for s, rep in rows}
    md.append("")
    if bb.get(1) and bb.get(64):
        ip1 = bb[1]["tokens_per_s"]
        md.append("Targets: HTTP at 64 sessions ≥ 0.8 × in-process B=64: "
                  f"**{http[64] / bb[64]['tokens_per_s']:.2f}×**; ≥ 1.8 × single-session HTTP: "
                  f"**{http[64] / http[1]:.2f}×**; single session ≥ 0.85 × in-process step "
                  f"({fmt(ip1)} tokens/s, {1e6 / ip1:.0f} µs per step; unbatched `recur_model_step`: "
                  f"{fmt(bb[1].get('unbatched_tokens_per_s'))} tokens/s), in both modes:\n")
        md.append("| single session | tokens/s | µs per token | × in-process step | chunk gap p50 ms | p99 ms |")
        md.append("|---|---:|---:|---:|---:|---:|")
        r1 = rows[0][1]
        md.append(f"| generate stream (greedy, 512 tokens per request, median of {REPEATS}) | "
                  f"{fmt(gen['tokens_per_s'])} | {1e6 / gen['tokens_per_s']:.0f} | "
                  f"**{gen['tokens_per_s'] / ip1:.2f}×** | {gen['gap_ms']['p50']:.3f} | "
                  f"{gen['gap_ms']['p99']:.3f} |")
        md.append(f"| `/tokens`, one token per request | {fmt(r1['tokens_per_s'])} | "
                  f"{1e6 / r1['tokens_per_s']:.0f} | **{r1['tokens_per_s'] / ip1:.2f}×** | – | – |")
        if hello_rt and hello_rt.get("requests_per_s"):
            rt = 1e6 / hello_rt["requests_per_s"]
            ceiling = 1e6 / (1e6 / ip1 + rt)
            rest = 1e6 / r1["tokens_per_s"] - 1e6 / ip1 - rt
            md.append(f"\nA `/tokens` request is a loopback round trip: against the minimal "
                      f"responder (no model) the same single-connection drive makes "
                      f"{fmt(hello_rt['requests_per_s'])} requests/s, {rt:.0f} µs per round trip "
                      f"(client and server included). Step plus round trip cap per-request mode at "
                      f"{fmt(ceiling)} tokens/s = {ceiling / ip1:.2f}× the in-process step; the "
                      f"remaining {rest:.0f} µs per request are recurd's own: parsing and routing, "
                      f"and the hand-off to a worker and back (a futex wake-up of the sleeping "
                      f"worker, an eventfd wake-up of the loop). The generate stream has no round "
                      f"trip and no hand-off per token.")
    md.append(note)
    path = data_file("throughput", dat)
    md.append(gnuplot("bench_throughput", f"""
set title 'recurd: aggregate decode throughput vs concurrent sessions ({mname})'
set logscale x 2
set xlabel 'concurrent sessions (= in-process batch size)'
set ylabel 'tokens/s'
set yrange [0:*]
plot '{path}' using 1:2 with linespoints lw 2 pt 7 title 'HTTP (recur-load, verified answers)', \\
     '{path}' using 1:3 with linespoints lw 2 pt 5 title 'in-process recur_model_step_batch'
"""))
    md.append(f"\nReproduce: `{cmd}` against `build/recurd {shown(margs)}` for each session "
              "count; in-process: `bench_batch` (built from tools/bench/bench_batch.c) "
              f"`--batches {','.join(map(str, SESSION_COUNTS))} --min-time 1`; generate stream: "
              f"`{gen['_cmd']}`; round trip: the `/tokens` drive with `--sessions 1 --connections 1` "
              "against `hello_server --port 0`.")
    return "\n".join(md)


# ---------------------------------------------------------------- (1) memory and (3) latency vs position

def fold_series(srv, sid, start, n, batch, budget, name):
    """Fold n tokens into session sid; returns (tokens folded, [(position, rss bytes)])."""
    rep = load(srv.port, ["--session", sid, "--tokens", n, "--batch", batch, "--top-k", 0,
                          "--server-pid", srv.pid, "--metrics-interval", 500], budget, name)
    if rep["check_failures"]:
        raise BenchError("recur-load checks FAILED: " + "; ".join(rep["failure_examples"][:3]))
    pts = [(start + s["tokens"], s["proc_rss_bytes"]) for s in rep["memory"]["samples"]
           if s.get("proc_rss_bytes") and s["phase"] in ("drive", "done")]
    return rep["tokens"], pts, rep


LAT_ROUNDS, LAT_TOKENS = 4, 250


def latency_at(srv, deep, ref, budget, target):
    """Single-token latency of the deep session, alternated with a reference session near
    position 1k in the same time window (so that other load on the machine hits both alike).
    Returns (deep p50, deep p99, ref p50, ref p99), each the median over the rounds."""
    got = {"deep": [], "ref": []}
    for r in range(LAT_ROUNDS):
        for name, sid in (("deep", deep), ("ref", ref)):
            rep = require_ok(load(srv.port, ["--session", sid, "--tokens", LAT_TOKENS, "--batch", 1,
                                             "--metrics-interval", 0, "--seed", r + 1], budget,
                                  f"latency_{target}_{name}_{r}"))
            got[name].append((rep["latency_ms"]["p50"], rep["latency_ms"]["p99"]))

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    return tuple(med([x[i] for x in got[k]]) for k in ("deep", "ref") for i in (0, 1))


def scenario_memory_latency(tools, budget):
    margs, mname = default_model_args()
    mem_rec, lat_rows, notes = [], [], []
    # the hybrid with a softmax layer first: it is bounded (max_context), the long fold is not
    soft = dict(DEFAULT_CONFIG, name="hybrid-softmax", max_context=SOFTMAX_MAX_CONTEXT,
                mixers=["gated_deltanet"] * 3 + ["softmax"])
    spath = write_config("softmax_config.json", soft)
    mem_soft = []
    soft_note = ""
    try:
        with recurd(["--model-config", spath, "--model-seed", "1"]) as srv:
            sid = create_session(srv.port)
            mem_soft.append((0, srv.rss()))
            scur = 0
            for target in sorted({t for t in (1024, 4096, 8192) if t < SOFTMAX_MAX_CONTEXT}
                                 | {SOFTMAX_MAX_CONTEXT}):
                if budget.left() < 60:
                    soft_note = f"softmax run stopped at {scur:,} tokens (time budget)"
                    break
                folded, pts, rep = fold_series(srv, sid, scur, target - scur, 1024, budget,
                                               f"softmax_{target}")
                mem_soft += pts
                scur += folded
                mem_soft.append((scur, srv.rss()))
                if rep.get("aborted"):
                    soft_note = f"softmax run stopped at {scur:,} tokens: {rep['aborted']}"
                    break
    except BenchError as e:
        soft_note = f"softmax run failed: {e}"

    cur = 0
    fold_rate = None
    with recurd(margs) as srv:
        sid = create_session(srv.port)
        ref = create_session(srv.port)
        base = srv.rss()
        mem_rec.append((0, base))
        for target in POSITIONS:
            n = target - cur
            # leave time for the latency rounds after the fold
            if fold_rate and n / fold_rate > budget.left() - 40:
                notes.append(f"stopped before position {target:,}: at {fold_rate:,.0f} tokens/s "
                             "the fold would exceed the time budget")
                break
            t0 = time.monotonic()
            folded, pts, rep = fold_series(srv, sid, cur, n, 8192, budget, f"fold_{target}")
            fold_rate = folded / max(time.monotonic() - t0, 1e-3)
            mem_rec += pts
            cur += folded
            if rep.get("aborted"):
                notes.append(f"fold to {target:,} stopped early: {rep['aborted']}")
                break
            if target == POSITIONS[0]:
                require_ok(load(srv.port, ["--session", ref, "--tokens", 1024, "--batch", 1024,
                                           "--top-k", 0, "--metrics-interval", 0], budget, "fold_ref"))
            lat_rows.append((cur, latency_at(srv, sid, ref, budget, target)))
            cur += LAT_ROUNDS * LAT_TOKENS
            mem_rec.append((cur, srv.rss()))

    md = []
    # (1) memory
    def span(points, start):
        """(end - first, max - min) of the RSS samples from position start on, in bytes."""
        rs = [r for p, r in points if p >= start and r]
        return (rs[-1] - rs[0], max(rs) - min(rs)) if len(rs) >= 2 else (None, None)

    # By position 10k every code path has run once (prefill slices, single-token decode, the
    # reference session of (3)); what grows after that grows with the tokens folded.
    warm = POSITIONS[1] if len(POSITIONS) > 1 else POSITIONS[0]
    g1_end, g1_spread = span(mem_rec, POSITIONS[0])
    gw_end, gw_spread = span(mem_rec, warm)
    md.append(f"**(1) Memory vs tokens folded.** Model: {mname}. One session folds {cur:,} tokens "
              "(`/tokens` requests of 8192 tokens, chunkwise prefill, `top_k` 0), RSS of recurd "
              "sampled from /proc every 0.5 s.\n")
    md.append(f"| model | tokens folded | RSS at start MiB | RSS at end MiB | growth from {warm:,} tokens to the end MiB |")
    md.append("|---|---:|---:|---:|---:|")
    md.append(f"| {mname} | {cur:,} | {mib(mem_rec[0][1])} | {mib(mem_rec[-1][1])} | {mib(gw_end)} |")
    if mem_soft:
        sg = span(mem_soft, warm)[0]
        md.append(f"| hybrid 3×gated_deltanet + softmax (max_context {SOFTMAX_MAX_CONTEXT:,}) | "
                  f"{mem_soft[-1][0]:,} | {mib(mem_soft[0][1])} | {mib(mem_soft[-1][1])} | {mib(sg)} |")
    md.append("")
    if gw_end is not None:
        md.append(f"Target RSS growth < 1 MiB over the fold: from position {warm:,} to {cur:,}, "
                  f"end − start = **{gw_end / 1048576:.3f} MiB** (max − min {gw_spread / 1048576:.3f} MiB); "
                  f"from position {POSITIONS[0]:,}, which still includes the first single-token steps "
                  f"and the reference session: {g1_end / 1048576:.3f} MiB.")
    for n in notes + ([soft_note] if soft_note else []):
        md.append(f"\nNote: {n}.")
    p1 = data_file("memory_recurrent", [(p, f"{r / 1048576:.3f}") for p, r in mem_rec if r])
    p2 = data_file("memory_softmax", [(p, f"{r / 1048576:.3f}") for p, r in mem_soft if r])
    plot2 = (f", \\\n     '{p2}' using 1:2 axes x2y1 with linespoints lw 2 pt 5 "
             f"title 'hybrid 3 x gated_deltanet + softmax, max_context {SOFTMAX_MAX_CONTEXT} (top axis)'"
             if mem_soft else "")
    md.append("")
    md.append(gnuplot("bench_memory", f"""
set title 'recurd resident memory while one session folds tokens'
set xlabel 'tokens folded, recurrent model (bottom axis)'
set x2label 'tokens folded, hybrid with a softmax layer (top axis)'
set xrange [0:*]
set x2range [0:{SOFTMAX_MAX_CONTEXT}]
set xtics nomirror
set x2tics
set format x '%.0f'
set ylabel 'recurd RSS (MiB)'
set yrange [0:*]
set key bottom right
plot '{p1}' using 1:2 axes x1y1 with linespoints lw 2 pt 7 title '{mname} (recurrent)'{plot2}
"""))
    # (3) latency vs position
    md.append(f"\n**(3) Latency per token vs context position.** Same session; at each position "
              f"{LAT_ROUNDS} rounds of {LAT_TOKENS} single-token `/tokens` requests, one at a time, "
              "alternated with the same on a reference session near position 1k (same time window, "
              "so other load on the machine hits both); medians over the rounds.\n")
    md.append("| position | p50 ms | p99 ms | reference p50 ms | reference p99 ms | p99 / reference p99 |")
    md.append("|---:|---:|---:|---:|---:|---:|")
    dat = []
    for pos, (p50, p99, r50, r99) in lat_rows:
        md.append(f"| {pos:,} | {p50:.3f} | {p99:.3f} | {r50:.3f} | {r99:.3f} | {p99 / r99:.2f} |")
        dat.append((pos, f"{p50:.4f}", f"{p99:.4f}", f"{r50:.4f}", f"{r99:.4f}"))
    if len(lat_rows) >= 2:
        (p0, (a50, a99, _, _)), (p1, (b50, b99, _, r99)) = lat_rows[0], lat_rows[-1]
        md.append(f"\nTarget p99 at position {p1:,} ≤ 1.1 × p99 at {p0:,}: **{b99 / a99:.2f}×** "
                  f"(p50 {b50 / a50:.2f}×); against the reference session in the same window: "
                  f"**{b99 / r99:.2f}×**.")
    p3 = data_file("latency_position", dat)
    md.append("")
    md.append(gnuplot("bench_latency_position", f"""
set title 'recurd: single-token request latency vs context position ({mname})'
set logscale x 10
set format x '%.0f'
set xlabel 'tokens already folded into the session'
set ylabel 'latency (ms)'
set yrange [0:*]
plot '{p3}' using 1:2 with linespoints lw 2 pt 7 title 'p50', \\
     '{p3}' using 1:3 with linespoints lw 2 pt 5 title 'p99', \\
     '{p3}' using 1:4 with linespoints lw 1 dt 2 pt 6 title 'reference session near 1k: p50', \\
     '{p3}' using 1:5 with linespoints lw 1 dt 2 pt 4 title 'reference session near 1k: p99'
"""))
    md.append("\nReproduce: create a session, then `build/recur-load --session ID --tokens N --batch "
              "8192 --top-k 0 --server-pid PID` to fold, and `build/recur-load --session ID --tokens "
              f"{LAT_TOKENS} --batch 1` at each position.")
    return "\n".join(md)


# ---------------------------------------------------------------- (4) capacity

def scenario_capacity(tools, budget):
    margs, mname = default_model_args()
    n = CAPACITY_SESSIONS
    with recurd(margs, ["--max-sessions", str(n + 100)]) as srv:
        # warm up workspaces and the allocator, then take the baseline
        require_ok(load(srv.port, ["--sessions", 4, "--tokens", 64, "--metrics-interval", 0],
                        budget, "capacity_warmup"))
        time.sleep(0.5)
        base = srv.rss()
        rep = require_ok(load(srv.port, [
            "--sessions", n, "--connections", 64, "--tokens", n, "--batch", 1, "--keep-sessions",
            "--server-pid", srv.pid, "--metrics-interval", 1000], budget, "capacity"))
        time.sleep(0.5)
        rss = srv.rss()
        m = srv.metrics()
    sessions = m.get("recurd_sessions")
    state_bytes = rep["model"]["state_bytes"]
    want = n * state_bytes
    above = rss - base if rss and base else None
    md = [f"Model: {mname}, state_bytes {state_bytes:,}. {n:,} sessions created and each fed one "
          "token (so every state is touched), then recurd's RSS from /proc.\n",
          "| sessions resident | baseline RSS MiB | RSS MiB | above baseline MiB | sessions × state_bytes MiB | ratio |",
          "|---:|---:|---:|---:|---:|---:|",
          f"| {fmt(sessions, 0)} | {mib(base)} | {mib(rss)} | {mib(above)} | {mib(want)} | "
          f"**{above / want:.3f}** |" if above and want else "| – | – | – | – | – | – |",
          "",
          f"Target ratio ≤ 1.1. recurd_state_bytes reported {fmt(m.get('recurd_state_bytes'), 0)} bytes. "
          f"Creating and feeding the {n:,} sessions took {rep['elapsed_s']:.1f} s of driving "
          f"({rep['tokens_per_s']:,.0f} tokens/s, p99 {rep['latency_ms']['p99']:.2f} ms).",
          f"\nReproduce: `{rep['_cmd']}` against `build/recurd {shown(margs)} --max-sessions {n + 100}`."]
    return "\n".join(md)


# ---------------------------------------------------------------- (5) HTTP overhead

def scenario_overhead(tools, budget):
    if "hello_server" not in tools:
        raise BenchError("hello_server did not build")
    args = ["--sessions", 16, "--connections", 16, "--duration", 3, "--metrics-interval", 0]
    hs, rs = [], []
    with Server([tools["hello_server"], "--port", "0"], "hello_server") as hello, \
            recurd(["--model-config", TINY_CONFIG, "--model-seed", "1"]) as srv:
        m0 = srv.metrics()
        for i in range(REPEATS):  # alternated, so that other load on the machine hits both alike
            hs.append(require_ok(load(hello.port, args + ["--server-pid", hello.pid], budget,
                                      f"overhead_hello_{i}")))
            rs.append(require_ok(load(srv.port, args + ["--server-pid", srv.pid], budget,
                                      f"overhead_recurd_{i}")))
        m1 = srv.metrics()
    h = median_run(hs, lambda r: r["server"]["cpu_us_per_request"] or 0)
    r = median_run(rs, lambda r: r["server"]["cpu_us_per_request"] or 0)
    batches = m1.get("recurd_decode_batches_total", 0) - m0.get("recurd_decode_batches_total", 0)
    steps = (m1.get("recurd_decode_batched_tokens_total", 0)
             - m0.get("recurd_decode_batched_tokens_total", 0))
    avg_b = steps / batches if batches else None
    model_us = None
    if "bench_batch" in tools and avg_b:
        try:
            bb = bench_batch(tools["bench_batch"], ["--model-config", TINY_CONFIG, "--model-seed", "1"],
                             [1, 2, 4, 8, 16], 0.5, budget)
            nearest = min(bb, key=lambda b: abs(b - avg_b))
            model_us = 1e6 / bb[nearest]["tokens_per_s"]
        except BenchError:
            pass
    hc = h["server"]["cpu_us_per_request"]
    rc = r["server"]["cpu_us_per_request"]
    excl = rc - model_us if rc is not None and model_us is not None else None
    md = ["Both servers driven by the same recur-load command (16 sessions, 16 connections, 3 s, "
          "single-token `/tokens` requests, every answer checked), alternated "
          f"{REPEATS} times, median run shown; server CPU = utime + stime of the server process over "
          "the drive phase, from /proc.\n",
          "| server | requests/s | server CPU µs/request | p50 ms | p99 ms |",
          "|---|---:|---:|---:|---:|",
          f"| hello_server (libuv + llhttp, no model) | {fmt(h['requests_per_s'])} | {fmt(hc, 2)} | "
          f"{h['latency_ms']['p50']:.3f} | {h['latency_ms']['p99']:.3f} |",
          f"| recurd, tiny model ({os.path.basename(TINY_CONFIG)}) | {fmt(r['requests_per_s'])} | "
          f"{fmt(rc, 2)} | {r['latency_ms']['p50']:.3f} | {r['latency_ms']['p99']:.3f} |",
          ""]
    if excl is not None:
        md.append(f"Average decode batch in recurd: {avg_b:.2f}; the model's own cost at that batch "
                  f"size (bench_batch): {model_us:.2f} µs/token. recurd CPU per request with the model "
                  f"excluded: {excl:.2f} µs = **{excl / hc:.2f}×** the minimal responder (target ≤ 2×).")
    else:
        md.append("The model's own cost could not be measured; the ratio above includes the model.")
    md.append(f"\nReproduce: `{h['_cmd']}` against `hello_server --port 0` and against "
              f"`build/recurd --model-config {os.path.relpath(TINY_CONFIG, ROOT)} --model-seed 1`.")
    return "\n".join(md)


# ---------------------------------------------------------------- the section

def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def section(budget_seconds=600, header=True, quick=False):
    """The markdown of every scenario, within budget_seconds (about; each recur-load run is
    bounded by --max-time). header=False leaves out the heading and the machine line; quick
    runs smaller sizes (one run per point, 2,000 sessions, positions up to 100k)."""
    global REPEATS, THROUGHPUT_SECONDS, CAPACITY_SESSIONS, POSITIONS
    if quick:
        REPEATS, THROUGHPUT_SECONDS, CAPACITY_SESSIONS = 1, 2, 2000
        POSITIONS = [p for p in POSITIONS if p <= 102400]
    t0 = time.monotonic()
    budget = Budget(budget_seconds)
    out = ([f"## {TITLE}", "", f"Machine: {machine()}."] if header else []) + [
           "All figures from build/recur-load, which checks every answer "
           "(status, chunked NDJSON framing, token echo, positions, logprobs, `tokens_seen` advancing "
           "by exactly the tokens folded); a run with a failed check is reported as a failure, "
           "never as a figure. 2 shared cores: the load generator and the daemon compete for them, "
           "so ratios mean more than absolute numbers.", ""]
    missing = [p for p in (RECURD, LOAD) if not os.path.exists(p)]
    if missing:
        out.append("**Not run**: missing " + ", ".join(os.path.relpath(p, ROOT) for p in missing)
                   + " (run `make`).")
        return "\n".join(out)
    try:
        tools, errors = build_helpers()
    except Exception as e:  # noqa: BLE001 - a bench section must not crash the bench
        tools, errors = {}, {"helpers": str(e)}
    for k, v in errors.items():
        out.append(f"Note: {k} did not build: `{v.strip().splitlines()[-1] if v.strip() else v}`\n")

    # shares of the budget, in the order that matters most for the targets
    plan = [("(2) Throughput vs concurrent sessions", scenario_throughput, 0.20),
            ("(5) HTTP overhead vs a minimal responder", scenario_overhead, 0.07),
            ("(4) Capacity: resident sessions", scenario_capacity, 0.18),
            ("(1) Memory vs tokens folded, (3) latency vs position", scenario_memory_latency, 0.55)]
    for i, (title, fn, share) in enumerate(plan):
        out.append(f"### {title}\n")
        ts = time.monotonic()
        # a scenario gets its share, plus what earlier scenarios left unused
        reserved = budget_seconds * sum(sh for _, _, sh in plan[i + 1:])
        sub = Budget(max(10.0, budget.left() - reserved))
        try:
            out.append(fn(tools, sub))
        except Exception as e:  # noqa: BLE001 - a failed scenario must not break the bench
            out.append(f"**Failed**: {type(e).__name__}: {e}")
        out.append(f"\n_({time.monotonic() - ts:.0f} s)_\n")
    out.append(f"_Load section total: {time.monotonic() - t0:.0f} s._")
    return "\n".join(out)


def run(ctx):
    """tools/bench/run_all.py entry point."""
    global BUILD, RECURD, LOAD, OUT
    BUILD = ctx.build
    RECURD, LOAD = os.path.join(BUILD, "recurd"), os.path.join(BUILD, "recur-load")
    OUT = os.path.join(BUILD, "bench", "load")
    budget = float(os.environ.get("RECUR_BENCH_LOAD_BUDGET", 180 if ctx.quick else 600))
    return section(budget, header=False, quick=ctx.quick)


if __name__ == "__main__":
    budget = float(os.environ.get("RECUR_BENCH_LOAD_BUDGET", 600))
    quick = "--quick" in sys.argv
    if "--budget" in sys.argv:
        budget = float(sys.argv[sys.argv.index("--budget") + 1])
    print(section(budget, quick=quick))
