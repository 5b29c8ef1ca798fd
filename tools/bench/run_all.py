"""`make bench`: run every benchmark section and write docs/BENCHMARKS.md.

    /usr/bin/python3 tools/bench/run_all.py [--sections kernels,...] [--quick] [--out FILE]

Sections are modules tools/bench/section_<name>.py, each with
    TITLE = "..."            heading of the section (default: the name)
    ORDER = 10               position in the document (lower first; default 100)
    def run(ctx) -> str      markdown body; ctx is a BenchContext (see below)
or, instead of run(ctx), a plain `def section() -> str` returning markdown that starts with its
own "## " heading. A module with ON_REQUEST = True runs only when --sections names it (a one-off
comparison, e.g. against an older build); otherwise its block is kept from the existing file.
Adding a benchmark (model, daemon, ...) means adding one such module: nothing here changes.

The document starts with the machine (lscpu model, cores, memory), the date, library versions
and the environment; each section lists the commands it ran (ctx.run records them). With
--sections, only those sections are re-run and the others are kept from the existing file (each
section is delimited by <!-- section:NAME --> ... <!-- /section:NAME --> markers).
A section that raises is reported in the document as failed; the other sections still run.
"""
import argparse
import datetime
import glob
import importlib
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.dirname(HERE))      # tools/ (import bench.section_x)
sys.path.insert(0, HERE)                       # tools/bench (the sections import benchutil)


class BenchContext:
    """What a section gets: paths, the environment benchmarks run in, and a command runner that
    records every command for the document."""

    def __init__(self, quick=False):
        self.root = ROOT
        self.build = os.environ.get("RECUR_BUILD") or os.path.join(ROOT, "build")
        self.python = "/usr/bin/python3"
        self.quick = quick
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                        RECUR_BUILD=self.build)
        self.commands = []          # (section, command string)
        self.section = None

    def run(self, argv, timeout=3600, check=True):
        """Run argv from the repository root with the benchmark environment; return stdout."""
        cmd = " ".join(shlex.quote(a) for a in argv)
        self.commands.append((self.section, cmd))
        t0 = time.time()
        p = subprocess.run(argv, cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
        sys.stderr.write(f"[bench] {cmd}  ({time.time() - t0:.1f} s, exit {p.returncode})\n")
        if check and p.returncode != 0:
            raise RuntimeError(f"`{cmd}` exited {p.returncode}:\n{p.stderr[-2000:]}")
        return p.stdout

    def section_commands(self, name):
        return [c for s, c in self.commands if s == name]


def _sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, timeout=30).stdout.strip()
    except Exception:
        return ""


def machine_markdown(load_at_start=None):
    lscpu = _sh("lscpu")
    field = lambda name: (re.search(rf"^{name}:\s*(.+)$", lscpu, re.M) or [None, "?"])[1]  # noqa: E731
    mem = _sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
    flags = field("Flags")
    simd = " ".join(f for f in ("avx2", "fma", "avx512f") if f in flags.split())
    cpus, per_socket, per_core = field(r"CPU\(s\)"), field(r"Core\(s\) per socket"), field(r"Thread\(s\) per core")
    rows = [
        ("CPU", f"{field('Model name')} ({field('Vendor ID')}, family {field('CPU family')} model {field('Model')})"),
        ("cores", f"{cpus} logical, {per_socket} per socket, {per_core} thread(s) per core; "
                  f"SIMD: {simd or '?'}"),
        ("caches", f"L1d {field('L1d cache')}, L2 {field('L2 cache')}, L3 {field('L3 cache')}"),
        ("memory", mem),
        ("hypervisor", field("Hypervisor vendor")),
        ("load at start", (load_at_start or _sh("cut -d' ' -f1-3 /proc/loadavg")) +
         " (1/5/15 min): other work shares these cores"),
        ("kernel", platform.release()),
        ("compiler", _sh("cc --version | head -1")),
        ("OpenBLAS", _sh("dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null") +
         " (Debian pthread flavour), OPENBLAS_NUM_THREADS=1"),
        ("PyTorch", _sh("/usr/bin/python3 -c 'import torch; print(torch.__version__)'") +
         " (Debian python3-torch), torch.set_num_threads(1)"),
        ("git", _sh(f"git -C {shlex.quote(ROOT)} log -1 --format='%h %s'")),
    ]
    return "\n".join(f"| {k} | {v} |" for k, v in rows)


def discover_sections():
    mods = []
    for path in sorted(glob.glob(os.path.join(HERE, "section_*.py"))):
        name = os.path.basename(path)[len("section_"):-3]
        mod = importlib.import_module(f"bench.section_{name}")
        mods.append((getattr(mod, "ORDER", 100), name, mod))
    return [(name, mod) for _, name, mod in sorted(mods)]


def existing_sections(path):
    if not os.path.exists(path):
        return {}
    text = open(path, encoding="utf-8").read()
    return {m.group(1): m.group(0) for m in
            re.finditer(r"<!-- section:(\w+) -->.*?<!-- /section:\1 -->", text, re.S)}


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run the benchmarks and write docs/BENCHMARKS.md.")
    ap.add_argument("--sections", help="comma-separated subset to re-run (others kept from --out)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for trying the driver")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "BENCHMARKS.md"))
    a = ap.parse_args(argv)

    sections = discover_sections()
    wanted = (set(a.sections.split(",")) if a.sections else
              {n for n, m in sections if not getattr(m, "ON_REQUEST", False)})
    unknown = wanted - {n for n, _ in sections}
    if unknown:
        ap.error(f"unknown section(s) {sorted(unknown)}; have {[n for n, _ in sections]}")
    old = existing_sections(a.out)
    ctx = BenchContext(quick=a.quick)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_at_start = _sh("cut -d' ' -f1-3 /proc/loadavg")

    blocks = []
    for name, mod in sections:
        if name not in wanted:
            if name in old:
                blocks.append(old[name])
            continue
        ctx.section = name
        t0 = time.time()
        try:
            if hasattr(mod, "run"):
                body = mod.run(ctx)
            else:                   # a module with only section() -> markdown (its own heading)
                body = mod.section()
        except Exception:
            body = "**This section failed to run:**\n\n```\n" + traceback.format_exc()[-3000:] + "```\n"
        cmds = ctx.section_commands(name)
        cmd_md = ("\nCommands (from the repository root, environment `OPENBLAS_NUM_THREADS=1`):\n\n```\n"
                  + "\n".join(cmds) + "\n```\n") if cmds else ""
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        body = body.strip()
        stamp = f"_Run {when}, {time.time() - t0:.0f} s{', --quick' if a.quick else ''}._"
        if body.startswith("## "):  # the section wrote its own heading
            head, _, rest = body.partition("\n")
            text = f"{head}\n\n{stamp}\n{rest}"
        else:
            text = f"## {getattr(mod, 'TITLE', name)}\n\n{stamp}\n\n{body}"
        blocks.append(f"<!-- section:{name} -->\n{text}\n{cmd_md}<!-- /section:{name} -->")

    doc = [
        "# recurd benchmarks",
        "",
        "Written by `make bench` (`/usr/bin/python3 tools/bench/run_all.py`); do not edit by hand.",
        f"Generated {started.strftime('%Y-%m-%d %H:%M UTC')}. Figures are medians of repeated runs "
        "on the machine below, single-threaded unless a section says otherwise.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        machine_markdown(load_at_start),
        "",
    ]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(doc) + "\n" + "\n\n".join(blocks) + "\n")
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {os.path.relpath(a.out, ROOT)}")


if __name__ == "__main__":
    main()
