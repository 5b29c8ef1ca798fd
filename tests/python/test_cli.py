"""build/recur (cli/recur.c): info, generate, score, bench on a model directory written by
tools/export.py, checked against the PyTorch twin where a number is printed."""
import json
import math
import os
import re
import subprocess

import pytest
import torch
import torch.nn.functional as F

import export as tw_export

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RECUR = os.path.join(os.environ.get("RECUR_BUILD") or os.path.join(ROOT, "build"), "recur")
CFG = {"name": "cli-test", "vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 2, "head_k": 16,
       "head_v": 16, "d_ff": 48, "mixers": ["gated_deltanet", "gla"], "tied_embeddings": True,
       "max_context": 4096, "norm_eps": 1e-5}

pytestmark = pytest.mark.skipif(not os.path.exists(RECUR), reason="build/recur not built")


def run(*args, check=True):
    p = subprocess.run([RECUR, *args], capture_output=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
                       timeout=120)
    if check and p.returncode != 0:
        raise AssertionError("recur %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.decode()))
    return p


def export_model(tmp_path_factory, name, cfg, seed):
    """A model folder with seeded weights for cfg (tools/export.py)."""
    d = tmp_path_factory.mktemp(name)
    (d / "arch.json").write_text(json.dumps(cfg))
    tw_export.main(["--config", str(d / "arch.json"), "--seed", str(seed), "--out", str(d), "--std", "0.2"])
    return d


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(export_model(tmp_path_factory, "cli_model", CFG, 2))


def test_info(model_dir):
    out = run("info", model_dir).stdout.decode()
    import model as tw_model
    assert "gated_deltanet gla" in out
    assert re.search(r"parameters\s+%d\b" % tw_model.RecurModel(CFG).n_params(), out)
    assert re.search(r"state_bytes\s+%d per session" % tw_model.state_bytes(CFG), out)
    assert re.search(r"weights\s+F32 in memory", out)


def run_isa(isa, *args):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", RECUR_ISA=isa)
    return subprocess.run([RECUR, *args], capture_output=True, env=env, timeout=120)


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def test_info_reports_the_forced_isa_and_refuses_a_missing_one(model_dir):
    """RECUR_ISA forces a kernel path `recur info` names; a path the CPU lacks, or an unknown
    name, fails the load with the named error (never a silent fallback)."""
    flags = cpu_flags()
    have = {"portable": True, "avx2": {"avx2", "fma", "f16c"} <= flags,
            "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "f16c"} <= flags}
    for isa, ok in have.items():
        p = run_isa(isa, "info", model_dir)
        if ok:
            assert p.returncode == 0, p.stderr
            assert re.search(r"^isa\s+%s\b" % isa, p.stdout.decode(), re.M), p.stdout
        else:
            assert p.returncode == 1 and b"RECUR_ISA=" + isa.encode() in p.stderr, p.stderr
    p = run_isa("sse9", "info", model_dir)
    assert p.returncode == 1 and b"RECUR_ISA=sse9" in p.stderr and b"kernel path" in p.stderr, p.stderr
    best = "avx512" if have["avx512"] else "avx2" if have["avx2"] else "portable"
    assert re.search(r"^isa\s+%s\b" % best, run_isa("", "info", model_dir).stdout.decode(), re.M)


def test_info_half_model_stays_half():
    """The shipped model's F16 matrices stay F16 in memory: less than 2.2 bytes per parameter
    (norms and the embedding table are fp32), where an fp32 copy would need 4."""
    out = run("info", os.path.join(ROOT, "models", "default")).stdout.decode()
    params = int(re.search(r"parameters\s+(\d+)", out).group(1))
    m = re.search(r"weights\s+F16 in memory, ([0-9.]+) MiB", out)
    assert m, out
    assert float(m.group(1)) * 1048576 < 2.2 * params


def test_generate_deterministic_and_seeded(model_dir):
    a = run("generate", model_dir, "--prompt", "Hello", "-n", "40").stdout
    b = run("generate", model_dir, "--prompt", "Hello", "-n", "40").stdout
    assert a == b and a.startswith(b"Hello") and len(a) == 5 + 40 + 1
    s1 = run("generate", model_dir, "--prompt", "Hi", "-n", "40", "--temperature", "1", "--top-p", "0.9",
             "--seed", "7").stdout
    s2 = run("generate", model_dir, "--prompt", "Hi", "-n", "40", "--temperature", "1", "--top-p", "0.9",
             "--seed", "7").stdout
    s3 = run("generate", model_dir, "--prompt", "Hi", "-n", "40", "--temperature", "1", "--top-p", "0.9",
             "--seed", "8").stdout
    assert s1 == s2 and s1 != s3
    # greedy continuation equals the twin's argmax decoding
    model, _ = tw_export.load(model_dir)
    model = model.double().set_form("recurrent").eval()
    toks = list(b"Hello")
    with torch.no_grad():
        for _ in range(10):
            toks.append(int(model(torch.tensor([toks]))[0, -1].argmax()))
    assert a[:15] == bytes(toks)


def test_score_matches_twin(model_dir, tmp_path):
    text = (b"The quick brown fox jumps over the lazy dog. " * 120)[:5000]
    f = tmp_path / "t.txt"
    f.write_bytes(text)
    out = run("score", model_dir, str(f)).stdout.decode()
    m = re.match(r"([0-9.]+) bits/byte over (\d+) bytes \((\d+) predicted\)", out)
    assert m and int(m.group(2)) == 5000 and int(m.group(3)) == 4999
    model, _ = tw_export.load(model_dir)
    model = model.double().set_form("chunkwise", 64).eval()
    t = torch.tensor(list(text))
    with torch.no_grad():
        logits = model(t[None, :-1])[0]
        ref = F.cross_entropy(logits, t[1:], reduction="mean").item() / math.log(2)
    assert abs(float(m.group(1)) - ref) < 1e-3


def test_errors_and_exit_codes(model_dir, tmp_path):
    p = run("info", str(tmp_path / "nope"), check=False)
    assert p.returncode == 1 and b"cannot load model" in p.stderr
    assert run("frobnicate", check=False).returncode == 2
    assert run("generate", model_dir, "-n", "x", check=False).returncode == 2
    assert run("generate", model_dir, "--top-p", "2", "-n", "3", check=False).returncode == 2
    assert run("score", model_dir, str(tmp_path / "missing.txt"), check=False).returncode == 1
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps(dict(CFG, d_model=48)))
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        (tmp_path / "bad" / "model.safetensors").write_bytes(f.read())
    p = run("info", str(tmp_path / "bad"), check=False)
    assert p.returncode == 1 and b"malformed" in p.stderr


def test_seeded_bench_runs(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(dict(CFG, mixers=["softmax", "deltanet"], max_context=64)))
    p = run("bench", "--config", str(cfg), "--seed", "1", "--batch", "1,4", "--steps", "80",
            "--prefill", "100")
    out = p.stdout.decode()
    assert re.search(r"decode  batch    1: +\d+ tokens/s", out)
    assert re.search(r"decode  batch    4: +\d+ tokens/s", out)
    assert "prefill 64 tokens" in out  # capped by max_context, and said so
    assert b"capped" in p.stderr


# ---------------------------------------------------------------------------- a real tokenizer
#
# A model folder with GPT-NeoX-20B's tokenizer.json (50277 ids; ../shared/tokenizers, never
# committed) and a vocabulary padded to 51200: the prompt is encoded with it, the output decoded
# with the streaming decoder, padded ids never drawn, and score reports bits per byte of text.

NEOX = os.path.join(ROOT, "..", "shared", "tokenizers", "gpt-neox-20b_tokenizer.json")
NEOX_CFG = dict(CFG, name="cli-neox", vocab_size=51200, d_model=32)


@pytest.fixture(scope="module")
def neox_dir(tmp_path_factory):
    import shutil
    from recur_tokenizer import Tokenizer
    d = export_model(tmp_path_factory, "cli_neox", NEOX_CFG, 4)
    shutil.copy(NEOX, d / "tokenizer.json")
    return str(d), Tokenizer.load(NEOX)


def test_generate_with_tokenizer_matches_twin(neox_dir):
    """Greedy generation encodes the prompt with the folder's tokenizer and prints the decoded
    continuation: the twin's argmax over the tokenizer's ids (never the padding), decoded."""
    d, tok = neox_dir
    prompt = "Hello, wörld — "
    out = run("generate", d, "--prompt", prompt, "-n", "12").stdout
    model, _ = tw_export.load(d)
    model = model.double().set_form("recurrent").eval()
    ids = list(tok.encode(prompt))
    gen = []
    with torch.no_grad():
        for _ in range(12):
            logits = model(torch.tensor([ids + gen]))[0, -1]
            logits[tok.vocab_size:] = -math.inf
            gen.append(int(logits.argmax()))
    assert out == (prompt + tok.decode(gen) + "\n").encode()
    # sampled at a high temperature: valid UTF-8, the same for the same seed
    a = run("generate", d, "--prompt", prompt, "-n", "64", "--temperature", "50", "--seed", "3").stdout
    b = run("generate", d, "--prompt", prompt, "-n", "64", "--temperature", "50", "--seed", "3").stdout
    assert a == b and a.decode("utf-8").startswith(prompt)


def test_score_with_tokenizer_is_bits_per_byte_of_text(neox_dir, tmp_path):
    """score encodes the text with the tokenizer; bits/byte = the predicted tokens' bits (every
    token but the first) over the bytes they cover (the text's bytes minus the first token's)."""
    d, tok = neox_dir
    text = ("Hello, wörld — ünïcödé 日本語 🙂 and plain words. " * 40)
    f = tmp_path / "t.txt"
    f.write_bytes(text.encode())
    out = run("score", d, str(f)).stdout.decode()
    m = re.match(r"([0-9.]+) bits/byte over (\d+) bytes \((\d+) predicted; (\d+) tokens, (\d+) predicted, "
                 r"([0-9.]+) bits/token\)", out)
    assert m, out
    ids = list(tok.encode(text))
    nbytes = len(text.encode())
    pbytes = nbytes - len(tok.decode(ids[:1]).encode())
    assert (int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))) == \
        (nbytes, pbytes, len(ids), len(ids) - 1)
    model, _ = tw_export.load(d)
    model = model.double().set_form("chunkwise", 64).eval()
    t = torch.tensor(ids)
    with torch.no_grad():
        logits = model(t[None, :-1])[0]
        bits = F.cross_entropy(logits, t[1:], reduction="sum").item() / math.log(2)
    assert abs(float(m.group(1)) - bits / pbytes) < 1e-3
    assert abs(float(m.group(6)) - bits / (len(ids) - 1)) < 1e-3
