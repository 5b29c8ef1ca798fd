"""Training text: the fortunes of Debian's `fortunes` package, with a fixed held-out split.

Corpus (deterministic):
  * every regular file in /usr/share/games/fortunes/ whose name has no '.' (the plain text files;
    the .dat index files and the .u8 symlinks are skipped), in sorted file-name order;
  * each file is split into fortunes at lines that are exactly "%"; a fortune is its lines with
    leading and trailing blank lines removed, plus one final "\n"; empty fortunes are dropped;
  * fortunes are numbered 0, 1, 2, ... across all files in that order. Fortune i is HELD OUT when
    i % 20 == 0 (5 %), otherwise it is training text;
  * a split's text is its fortunes joined by "\n" (so fortunes are separated by one blank line),
    as raw bytes (byte-level model; the files are ASCII / UTF-8).

CLI:
  /usr/bin/python3 tools/data.py --heldout OUT.txt    # write the held-out text
  /usr/bin/python3 tools/data.py --train OUT.txt      # write the training text
  /usr/bin/python3 tools/data.py --stats              # counts and sizes
If the directory is missing: apt-get install -y fortunes
"""
import argparse
import hashlib
import os
import sys

FORTUNE_DIR = "/usr/share/games/fortunes"
HELDOUT_EVERY = 20


def fortune_files(root=FORTUNE_DIR):
    if not os.path.isdir(root):
        raise FileNotFoundError("%s not found: apt-get install -y fortunes" % root)
    names = sorted(n for n in os.listdir(root) if "." not in n)
    return [os.path.join(root, n) for n in names
            if os.path.isfile(os.path.join(root, n)) and not os.path.islink(os.path.join(root, n))]


def split_fortunes(raw):
    """bytes of one fortune file -> list of fortunes (bytes, each ending in one b"\\n")."""
    out, cur = [], []

    def flush():
        lines = list(cur)
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if lines:
            out.append(b"\n".join(line.rstrip(b"\r") for line in lines) + b"\n")
        cur.clear()

    for line in raw.split(b"\n"):
        if line.rstrip(b"\r") == b"%":
            flush()
        else:
            cur.append(line)
    flush()
    return out


def all_fortunes(root=FORTUNE_DIR):
    fortunes = []
    for path in fortune_files(root):
        with open(path, "rb") as f:
            fortunes.extend(split_fortunes(f.read()))
    return fortunes


def split(root=FORTUNE_DIR):
    """-> (train_bytes, heldout_bytes)."""
    fortunes = all_fortunes(root)
    train = [f for i, f in enumerate(fortunes) if i % HELDOUT_EVERY != 0]
    held = [f for i, f in enumerate(fortunes) if i % HELDOUT_EVERY == 0]
    return b"\n".join(train), b"\n".join(held)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heldout", metavar="OUT", help="write the held-out text to OUT")
    ap.add_argument("--train", metavar="OUT", help="write the training text to OUT")
    ap.add_argument("--stats", action="store_true", help="print counts, sizes and hashes")
    args = ap.parse_args(argv)
    train, held = split()
    if args.heldout:
        with open(args.heldout, "wb") as f:
            f.write(held)
    if args.train:
        with open(args.train, "wb") as f:
            f.write(train)
    if args.stats or not (args.heldout or args.train):
        n = len(all_fortunes())
        print("files %d, fortunes %d (held out %d: index %% %d == 0)"
              % (len(fortune_files()), n, (n + HELDOUT_EVERY - 1) // HELDOUT_EVERY, HELDOUT_EVERY))
        print("train   %8d bytes  sha256 %s" % (len(train), hashlib.sha256(train).hexdigest()[:16]))
        print("heldout %8d bytes  sha256 %s" % (len(held), hashlib.sha256(held).hexdigest()[:16]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
