"""Helpers shared by the bench sections (section_kernels.py, section_model.py, section_load.py)
and tools/docs_examples.py.

Imported as a top-level module: run_all.py puts tools/bench on sys.path, and a section run as a
script has its own folder there already (docs_examples.py imports it as bench.benchutil).
"""
import json
import os
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
