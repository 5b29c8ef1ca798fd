"""The quantized-weights cache (recur_model_quantize_cached, core/weights_cache.c; docs/MODEL.md
"The quantized-weights cache"): a model read from its cached file gives logits bit-identical to
quantizing at load (Q8_0 and Q4_0, the default model and an FLA folder); the file's format as
weights_cache.h documents it (header fields, header and payload checksums recomputed here from
their formulas); every kind of bad file (truncated, bit-flipped payload or header, another model's,
another dtype's, another format or layout version, trailing bytes, a directory in its place) is
refused by its named rule and replaced by a valid file, never used; the size bound; concurrent
writers leave one valid file and no temporary; recurd and `recur info` report where the weights
came from (GET /v1/model weights_origin, the startup log, stderr)."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
import requests

import export_hf
import recur_model as rm
from checksums import FNV_OFFSET, FNV_PRIME, M64, fnv1a
from daemon import Daemon, RECURD, ROOT, check_config

DEFAULT = os.path.join(ROOT, "models", "default")
RECUR = os.path.join(os.path.dirname(RECURD), "recur")
HEADER = 64


def payload_checksum(payload):
    """weights_cache.h: four lanes over the 64-bit LE words (word i into lane i mod 4), then
    FNV-1a 64 of the lanes and the length: the lane checksum (checksums.lanesum) as it was defined
    before it took a tail, written out again here so that cache files written then stay valid."""
    w = np.frombuffer(payload, dtype="<u8").reshape(-1, 4)
    lanes = [FNV_OFFSET + i for i in range(4)]
    for i in range(4):
        h = lanes[i]
        for x in w[:, i].tolist():
            h = ((h ^ x) * FNV_PRIME) & M64
        lanes[i] = h
    return fnv1a(struct.pack("<4QQ", *lanes, len(payload)))


def reseal_header(path, edit):
    """Apply edit(bytearray of the header) and recompute the header checksum (a file that is
    well-formed but says something else)."""
    with open(path, "r+b") as f:
        h = bytearray(f.read(HEADER))
        edit(h)
        h[56:64] = struct.pack("<Q", fnv1a(bytes(h[:56])))
        f.seek(0)
        f.write(h)


def run_tokens(m, n=300, seed=3):
    """Logits of a prefill of n tokens then 4 decode steps (both paths read every matrix)."""
    t = np.random.RandomState(seed).randint(0, m.vocab, n).astype(np.int32)
    s = m.state()
    out = [m.prefill(s, t)]
    for i in range(4):
        out.append(m.step(s, int(t[i]))[None])
    return np.concatenate(out)


def fla_folder(tmp):
    cfg = {"model_type": "gated_deltanet", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 97,
           "num_heads": 2, "head_dim": 16}
    d = str(tmp / "gdn")
    export_hf.write_folder(d, cfg, export_hf.random_tensors(cfg, 1, std=0.1), "BF16", 1)
    return d


def only_file(cache):
    names = os.listdir(cache)
    assert len(names) == 1, names  # one cache file, no temporary left behind
    return os.path.join(cache, names[0])


@pytest.fixture(scope="module")
def fla(tmp_path_factory):
    return fla_folder(tmp_path_factory.mktemp("wcache_fla"))


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
@pytest.mark.parametrize("which", ["default", "fla"])
def test_cached_load_bit_identical(tmp_path, fla, which, dtype):
    folder = DEFAULT if which == "default" else fla
    cache = str(tmp_path / "cache")  # created by the first load
    ref = rm.Model.load(folder, weights_dtype=dtype)
    assert ref.info["weights_origin"] == "quantized" and ref.weights_cache is None
    want = run_tokens(ref)
    first = rm.Model.load(folder, weights_dtype=dtype, weights_cache=cache)
    assert first.weights_cache["outcome"] == "written" and first.weights_cache["rule"] == ""
    assert first.info["weights_origin"] == "quantized"
    path = only_file(cache)
    assert first.weights_cache["path"] == path
    assert os.path.basename(path) == "%016x.%s.p1.qweights" % (ref.info["fingerprint"], dtype)
    hit = rm.Model.load(folder, weights_dtype=dtype, weights_cache=cache)
    assert hit.weights_cache["outcome"] == "hit" and hit.info["weights_origin"] == "cache"
    for k in ("fingerprint", "weight_bytes", "weights_dtype", "n_params", "state_bytes"):
        assert hit.info[k] == ref.info[k], k
    got = run_tokens(hit)
    assert np.isfinite(got).all()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # bit for bit
    # the file is what weights_cache.h says
    blob = open(path, "rb").read()
    src = rm.Model.load(folder)
    magic, ver, layout, src_fp, fp, dt, nmat, nbytes, psum, hsum = struct.unpack("<8sIIQQIIQQQ", blob[:HEADER])
    assert (magic, ver, layout) == (b"RECURWQC", 1, 1)
    assert src_fp == src.info["fingerprint"] and fp == ref.info["fingerprint"]
    assert dt == {"q8_0": 3, "q4_0": 4}[dtype] and nmat >= 3
    assert nbytes == len(blob) - HEADER and nbytes % 32 == 0
    assert hsum == fnv1a(blob[:56])
    assert psum == payload_checksum(blob[HEADER:])


def _spoil_truncate(path, other):
    os.truncate(path, os.path.getsize(path) // 2)


def _spoil_short_header(path, other):
    os.truncate(path, 40)


def _spoil_payload_bit(path, other):
    with open(path, "r+b") as f:
        f.seek(HEADER + 1234)
        b = f.read(1)
        f.seek(HEADER + 1234)
        f.write(bytes([b[0] ^ 0x10]))


def _spoil_last_byte(path, other):
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 1]))


def _spoil_header_bit(path, other):
    with open(path, "r+b") as f:
        f.seek(20)
        b = f.read(1)
        f.seek(20)
        f.write(bytes([b[0] ^ 4]))


def _spoil_magic(path, other):
    with open(path, "r+b") as f:
        f.write(b"GGUF")


def _spoil_other(kind):
    def spoil(path, other):
        shutil.copyfile(other[kind], path)
    return spoil


def _spoil_trailing(path, other):
    with open(path, "ab") as f:
        f.write(b"\0" * 32)


def _spoil_version(path, other):
    reseal_header(path, lambda h: h.__setitem__(slice(8, 12), struct.pack("<I", 2)))


def _spoil_layout(path, other):
    reseal_header(path, lambda h: h.__setitem__(slice(12, 16), struct.pack("<I", 0)))


def _spoil_shape(path, other):
    reseal_header(path, lambda h: h.__setitem__(slice(36, 40), struct.pack("<I", struct.unpack("<I", h[36:40])[0] + 1)))


def _spoil_dir(path, other):
    os.unlink(path)
    os.mkdir(path)


SPOILS = {
    "truncated": (_spoil_truncate, "weights_cache_truncated"),
    "short_header": (_spoil_short_header, "weights_cache_truncated"),
    "payload_bit": (_spoil_payload_bit, "weights_cache_checksum"),
    "last_byte": (_spoil_last_byte, "weights_cache_checksum"),
    "header_bit": (_spoil_header_bit, "weights_cache_header_checksum"),
    "magic": (_spoil_magic, "weights_cache_magic"),
    "other_model": (_spoil_other("model"), "weights_cache_model"),
    "other_dtype": (_spoil_other("dtype"), "weights_cache_dtype"),
    "trailing": (_spoil_trailing, "weights_cache_length"),
    "version": (_spoil_version, "weights_cache_version"),
    "layout": (_spoil_layout, "weights_cache_layout"),
    "shape": (_spoil_shape, "weights_cache_shape"),
}


@pytest.fixture(scope="module")
def spoil_env(tmp_path_factory):
    """The reference Q8_0 default model, its logits, and valid cache files of another model
    (a different seeded model's Q8_0) and of another dtype (the default model's Q4_0)."""
    tmp = tmp_path_factory.mktemp("wcache_spoil")
    ref = rm.Model.load(DEFAULT, weights_dtype="q8_0")
    other = {}
    c = str(tmp / "other_dtype")
    other["dtype"] = rm.Model.load(DEFAULT, weights_dtype="q4_0", weights_cache=c).weights_cache["path"]
    cfg = json.load(open(os.path.join(DEFAULT, "config.json")))
    c = str(tmp / "other_model")
    other["model"] = rm.Model.init_seed(cfg, 5, weights_dtype="q8_0", weights_cache=c).weights_cache["path"]
    return ref, run_tokens(ref), other


@pytest.mark.parametrize("name", sorted(SPOILS))
def test_bad_file_refused_by_rule_and_replaced(tmp_path, spoil_env, name):
    ref, want, other = spoil_env
    spoil, rule = SPOILS[name]
    cache = str(tmp_path)
    path = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache).weights_cache["path"]
    good = open(path, "rb").read()
    spoil(path, other)
    m = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache)
    r = m.weights_cache
    assert r["rule"] == rule, r
    assert m.info["weights_origin"] == "quantized"  # never used
    assert np.array_equal(run_tokens(m).view(np.uint32), want.view(np.uint32))
    assert r["outcome"] == "replaced", r
    assert only_file(cache) == path and open(path, "rb").read() == good  # replaced by a valid file
    again = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache)
    assert again.weights_cache["outcome"] == "hit"


def test_directory_in_place_refused_not_written(tmp_path, spoil_env):
    ref, want, other = spoil_env
    cache = str(tmp_path)
    path = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache).weights_cache["path"]
    _spoil_dir(path, other)
    m = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache)
    assert m.weights_cache["rule"] == "weights_cache_not_regular"
    assert m.weights_cache["outcome"] == "not_written" and "rename" in m.weights_cache["detail"]
    assert m.info["weights_origin"] == "quantized"
    assert np.array_equal(run_tokens(m).view(np.uint32), want.view(np.uint32))
    assert os.listdir(cache) == [os.path.basename(path)]  # the temporary was removed


def test_size_bound(tmp_path, spoil_env):
    ref, want, other = spoil_env
    cache = str(tmp_path)
    path = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache).weights_cache["path"]
    size = os.path.getsize(path)
    # a bound below the file: neither read nor written, quantized at load
    m = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache, weights_cache_max_bytes=size - 1)
    assert m.weights_cache["outcome"] == "not_written" and "weights_cache_max_bytes" in m.weights_cache["detail"]
    assert m.info["weights_origin"] == "quantized"
    assert np.array_equal(run_tokens(m).view(np.uint32), want.view(np.uint32))
    # the bound exactly at the file: read
    m = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache, weights_cache_max_bytes=size)
    assert m.weights_cache["outcome"] == "hit"
    # a file grown past the bound is refused before anything is read, then replaced
    with open(path, "ab") as f:
        f.truncate(size + 4096)
    m = rm.Model.load(DEFAULT, weights_dtype="q8_0", weights_cache=cache, weights_cache_max_bytes=size + 100)
    assert m.weights_cache["rule"] == "weights_cache_too_large" and m.weights_cache["outcome"] == "replaced"
    assert os.path.getsize(path) == size


def test_unwritable_directory_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"x")
    m = rm.Model.load(DEFAULT, weights_dtype="q4_0", weights_cache=str(blocker / "sub"))
    assert m.weights_cache["outcome"] == "not_written" and m.info["weights_origin"] == "quantized"


def test_concurrent_writers_leave_one_valid_file(tmp_path):
    """Three `recur info` processes on an empty cache, three times, then three replacing a corrupt
    file: every run succeeds, one file and no temporary remain, and it is valid (a hit whose
    logits are the quantized model's, bit for bit)."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"name": "wc", "vocab_size": 256, "d_model": 256, "n_layers": 4, "n_heads": 4,
                               "head_k": 64, "head_v": 64, "d_ff": 1024,
                               "mixers": ["gated_deltanet"] * 4}))
    cache = str(tmp_path / "cache")
    argv = [RECUR, "info", "--config", str(cfg), "--init-seed", "3", "--weights-dtype", "q8_0",
            "--weights-cache", cache]
    for rnd in range(4):
        if rnd == 3:
            _spoil_payload_bit(only_file(cache), None)
        elif os.path.isdir(cache):
            shutil.rmtree(cache)
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
            assert b"weights cache" in err
        only_file(cache)
    p = subprocess.run(argv, capture_output=True, timeout=300)
    assert p.returncode == 0 and b"weights cache hit" in p.stderr and b"weights_origin  cache" in p.stdout
    text = cfg.read_text()
    ref = rm.Model.init_seed(text, 3, weights_dtype="q8_0")
    hit = rm.Model.init_seed(text, 3, weights_dtype="q8_0", weights_cache=cache)
    assert hit.weights_cache["outcome"] == "hit"
    assert np.array_equal(run_tokens(hit).view(np.uint32), run_tokens(ref).view(np.uint32))


def test_cli_reports_origin(tmp_path):
    cache = str(tmp_path / "c")
    argv = [RECUR, "info", DEFAULT, "--weights-dtype", "q4_0", "--weights-cache", cache]
    p = subprocess.run(argv, capture_output=True, timeout=60)
    assert p.returncode == 0 and b"weights cache written: " in p.stderr and b"weights_origin  quantized" in p.stdout
    p = subprocess.run(argv, capture_output=True, timeout=60)
    assert p.returncode == 0 and b"weights cache hit: " in p.stderr and b"weights_origin  cache" in p.stdout
    _spoil_truncate(only_file(cache), None)
    p = subprocess.run(argv, capture_output=True, timeout=60)
    assert p.returncode == 0 and b"refused by rule weights_cache_truncated" in p.stderr
    p = subprocess.run([RECUR, "info", DEFAULT], capture_output=True, timeout=60)
    assert b"weights_origin  file" in p.stdout
    p = subprocess.run(argv + ["--weights-cache-max-bytes", "0"], capture_output=True, timeout=60)
    assert p.returncode == 2 and b"--weights-cache-max-bytes" in p.stderr


def _log_events(d):
    out = []
    for line in d.logs():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_recurd_reports_origin_and_refusal(tmp_path):
    cache = str(tmp_path / "c")
    args = ("--model", DEFAULT, "--weights-dtype", "q8_0", "--weights-cache", cache)
    origins = []
    for rnd in range(3):
        if rnd == 2:
            _spoil_header_bit(only_file(cache), None)
        with Daemon(*args, model_config=None) as d:
            info = requests.get(d.url("/v1/model"), timeout=10).json()
            origins.append(info["weights_origin"])
            ev = _log_events(d)
        wc = [e for e in ev if str(e.get("event", "")).startswith("weights_cache")]
        listening = [e for e in ev if e.get("event") == "listening"]
        assert listening and listening[0]["weights_origin"] == info["weights_origin"]
        if rnd == 0:
            assert [e["event"] for e in wc] == ["weights_cache"] and wc[0]["outcome"] == "written"
        elif rnd == 1:
            assert wc[0]["outcome"] == "hit" and wc[0]["path"] == only_file(cache)
        else:
            assert wc[0]["event"] == "weights_cache_refused" and wc[0]["rule"] == "weights_cache_header_checksum"
            assert wc[1]["outcome"] == "replaced"
    assert origins == ["quantized", "cache", "quantized"]
    with Daemon("--model", DEFAULT, model_config=None) as d:
        assert requests.get(d.url("/v1/model"), timeout=10).json()["weights_origin"] == "file"


def test_recurd_config_keys():
    rc, out = check_config("--weights-cache-max-bytes", "100")
    assert rc != 0 and b"weights_cache_max_bytes" in out
    rc, out = check_config("--weights-cache", "/tmp/x", "--weights-cache-max-bytes", "1048576")
    assert rc == 0, out
