"""Helpers shared by the bench sections (section_kernels.py, section_model.py).

Imported as a top-level module: run_all.py puts tools/bench on sys.path, and a section run as a
script has its own folder there already.
"""
import json
import subprocess


def pkg(flag):
    """pkg-config's flag ("--cflags" / "--libs") for OpenBLAS, or a plain -lopenblas."""
    try:
        out = subprocess.run(["pkg-config", flag, "openblas"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout.split()
    except OSError:
        out = []
    return out or (["-lopenblas"] if flag == "--libs" else [])


def jsonl(text):
    """The JSON objects of a benchmark's output, one per line starting with '{'."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
