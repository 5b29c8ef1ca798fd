"""The README's examples run as pasted (issue 15): every ```sh and ```python block of README.md,
each in a fresh bash (python) process, in a fresh temp dir that holds links to this checkout's
build/, models/, config/, core/ and tools/ (so outputs such as s.bin or heldout.txt land in the
temp dir), against the daemon the block itself starts. Any command failing fails the test
(bash -e -o pipefail, and curl answers >= 400 count as failures through --fail-with-body).

What the runner changes, and only this (each stated where it happens below):
  * port 8080 becomes a free loopback port (a fresh daemon, never one already running here);
  * `make ...` lines are dry-run (`make -n`, from the checkout): `make test` is the suite this
    test belongs to, `make run` a foreground server; the target must exist and its recipe expand;
    the daemon blocks start their own `build/recurd ... &`;
  * the training budget `--minutes N` becomes `--steps 3` (the run, its progress line, the export
    and the final evaluation are the same code; thirty minutes are not a test);
  * background jobs a block leaves are killed when it ends.
"""
import os
import re
import signal
import subprocess

import pytest

from daemon import BUILD, ROOT, free_port, python_env

README = os.path.join(ROOT, "README.md")


def blocks():
    """(index, language, text) of every fenced sh / python block."""
    out, lang, buf = [], None, []
    for line in open(README).read().splitlines():
        m = re.match(r"^```(\w*)\s*$", line)
        if m and lang is None:
            lang, buf = m.group(1), []
        elif line.startswith("```") and lang is not None:
            if lang in ("sh", "python"):
                out.append((len(out), lang, "\n".join(buf) + "\n"))
            lang = None
        elif lang is not None:
            buf.append(line)
    return out


def adapt(text, port):
    """The block as run, and the lines it did not run (with why)."""
    lines, skipped = [], []
    for line in text.splitlines():
        if re.match(r"^\s*make(\s|$)", line):
            skipped.append(line.split("#")[0].strip())
            continue
        line = line.replace("8080", str(port))
        line = re.sub(r"--minutes \d+(\.\d+)?", "--steps 3 --eval-every 0 --no-stream-eval", line)
        lines.append(line)
    return "\n".join(lines) + "\n", skipped


@pytest.fixture
def workdir(tmp_path):
    for name in ("models", "config", "core", "tools"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    os.symlink(BUILD, tmp_path / "build")
    return tmp_path


CASES = blocks()


def test_readme_has_blocks():
    langs = [c[1] for c in CASES]
    assert langs.count("sh") >= 4 and "python" in langs


@pytest.mark.parametrize("case", CASES, ids=["block%d-%s" % (c[0], c[1]) for c in CASES])
def test_readme_block_runs_as_pasted(workdir, case):
    _, lang, text = case
    port = free_port()
    script, skipped = adapt(text, port)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", RECUR_BUILD=BUILD)
    if lang == "python":
        cmd = ["/usr/bin/python3", "-c", script]
        env = python_env(OPENBLAS_NUM_THREADS="1", RECUR_BUILD=BUILD)
    else:
        prelude = ("set -euo pipefail\n"
                   "curl() { command curl --fail-with-body \"$@\"; }\n")
        cmd = ["bash", "-c", prelude + script]
    for line in skipped:  # `make test`, `make run`: the target exists and its recipe expands
        r = subprocess.run(line.split()[:2] + ["-n"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip(), (line, r.stderr)
    # output to files, not pipes: a daemon a failed block leaves behind holds no pipe open
    with open(workdir / "out.log", "wb") as out, open(workdir / "err.log", "wb") as err:
        p = subprocess.Popen(cmd, cwd=str(workdir), env=env, stdout=out, stderr=err,
                             start_new_session=True)
        try:
            p.wait(timeout=600)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # a daemon the block left running
            except ProcessLookupError:
                pass
            p.wait()
    out, err = (open(workdir / n, "rb").read().decode(errors="replace") for n in ("out.log", "err.log"))
    assert p.returncode == 0, "block failed (%d):\n%s\n--- stdout\n%s\n--- stderr\n%s" % (
        p.returncode, script, out[-3000:], err[-3000:])
