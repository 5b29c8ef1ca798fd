"""Helpers shared by the bench sections (section_kernels.py, section_model.py, section_load.py,
section_quant.py, section_portable.py) and tools/docs_examples.py.

Imported as a top-level module: run_all.py puts tools/bench on sys.path, and a section run as a
script has its own folder there already (docs_examples.py imports it as bench.benchutil).
"""
import json
import os
import statistics
import subprocess
import time


def make_target(root, build, exe):
    """argv that builds the bench helper exe with the Makefile (`make bench-tools` builds them all)."""
    rel = os.path.relpath(exe, root)
    return ["make", "--no-print-directory", "BUILD=" + os.path.relpath(build, root), rel]


def jsonl(text):
    """The JSON objects of a benchmark's output, one per line starting with '{'."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def stop_process(proc, grace):
    """SIGTERM proc unless it has exited, wait up to grace seconds, then SIGKILL it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def timed(fn):
    """Run fn(); its (wall seconds, process CPU seconds)."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def load_remark(loads):
    """How to read figures given the 1-minute load averages seen during a section ("1.2 0.8 0.3"
    strings): the bench itself keeps about one of the two cores busy, so above 3 other work shared
    the machine."""
    peak = max(float(s.split()[0]) for s in loads)
    if peak > 3:
        return (f"other work shared the 2 cores (1-minute load up to {peak:.1f}): absolute figures are "
                "below quiet-machine ones; the same-run ratios are the comparison")
    return f"quiet machine (1-minute load at most {peak:.1f})"


def resume_client(root, build, port, requests_, rate=0.0, timeout=600):
    """Send requests_ ([(method, path, body dict or None)]) one at a time over one keep-alive
    connection with build/bench/resume/resume_client (tools/bench/resume_client.c, built here if
    missing): a closed loop (rate 0: the next request when the answer is read) or paced at rate
    per second on an absolute schedule. Each request is timed in C with CLOCK_MONOTONIC, first
    byte written to last byte read, so no Python interpreter is in the figure. Returns the
    milliseconds of each, in order; raises RuntimeError on a status other than 200."""
    exe = os.path.join(build, "bench", "resume", "resume_client")
    if not os.path.exists(exe):
        subprocess.run(make_target(root, build, exe), cwd=root, check=True, capture_output=True,
                       timeout=300)
    lines = "".join(f"{m} {p}" + (" " + json.dumps(b, separators=(",", ":")) if b else "") + "\n"
                    for m, p, b in requests_)
    argv = [exe, "--port", str(port)] + (["--rate", str(rate)] if rate else [])
    p = subprocess.run(argv, input=lines, capture_output=True, text=True, timeout=timeout)
    out = [line.split() for line in p.stdout.splitlines() if line.strip()]
    if p.returncode != 0 or len(out) != len(requests_) or any(s != "200" for s, _ in out):
        bad = next((s for s, _ in out if s != "200"), None)
        raise RuntimeError(f"resume_client: exit {p.returncode}, {len(out)} of {len(requests_)} "
                           f"answered, status {bad}: {p.stderr.strip()[-300:]}")
    return [float(us) / 1e3 for _, us in out]


def proc_cpu_s(pid, tid=None):
    """CPU seconds of process pid (all its threads) or of its thread tid, from schedstat
    (nanoseconds, not 10 ms clock ticks); a thread that exits meanwhile is left out."""
    tids = [tid] if tid is not None else os.listdir(f"/proc/{pid}/task")
    ns = 0
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
        except OSError:
            pass
    return ns / 1e9


def proc_minflt(pid, tid=None):
    """Minor page faults so far of process pid (all its threads) or of its thread tid."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def median_ratio(nums, dens):
    """Median over rounds of nums[i] / dens[i], the two figures of a pair measured in the same round
    (side by side, seconds apart): the machine's speed drifts 10-20 % from minute to minute on these
    shared cores, and a same-round ratio cancels what the drift does to both. A ratio of medians
    taken over all rounds does not (the two medians can come from different minutes). Pairs with a
    None or zero denominator are left out; None if none is left."""
    r = [n / d for n, d in zip(nums, dens) if n is not None and d]
    return statistics.median(r) if r else None


def model_rates(out):
    """One bench_model run's rates in tokens per CPU second (tokens / median CPU seconds of its
    reps): decode at B = 1 and B = 64 (recur_model_step_batch) and prefill; None where the run has
    no such record. out: the run's JSON records (jsonl)."""
    sel = {"b1": lambda r: r["kind"] == "decode" and r["api"] == "step_batch" and r["B"] == 1,
           "b64": lambda r: r["kind"] == "decode" and r["api"] == "step_batch" and r["B"] == 64,
           "pre": lambda r: r["kind"] == "prefill"}
    res = {}
    for key, f in sel.items():
        r = next((r for r in out if f(r)), None)
        res[key] = r["tokens"] / statistics.median(r["cpu_s"]) if r else None
    return res
