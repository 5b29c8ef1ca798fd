"""Helpers shared by the bench sections (section_kernels.py, section_model.py, section_load.py).

Imported as a top-level module: run_all.py puts tools/bench on sys.path, and a section run as a
script has its own folder there already.
"""
import json
import os


def make_target(root, build, exe):
    """argv that builds the bench helper exe with the Makefile (`make bench-tools` builds them all)."""
    rel = os.path.relpath(exe, root)
    return ["make", "--no-print-directory", "BUILD=" + os.path.relpath(build, root), rel]


def jsonl(text):
    """The JSON objects of a benchmark's output, one per line starting with '{'."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
