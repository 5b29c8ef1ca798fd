"""Write / read a recurd model directory: config.json + model.safetensors (docs/MODEL.md).

    export(model, config, out_dir, dtype="F32")   # dtype: F32, F16 or BF16
    model, config = load(model_dir)               # float32 RecurModel

CLI (a randomly initialised model, e.g. for parity tests):

    /usr/bin/python3 tools/export.py --config CFG.json --seed N --out DIR [--dtype F32|F16|BF16]
                                     [--std 0.02] [--unit-norms]

The safetensors file is written by hand: u64 little-endian header length N, N bytes of JSON
header ({"name": {"dtype", "shape", "data_offsets": [begin, end]}}, offsets relative to the end
of the header, padded with spaces so the data starts 8-byte aligned), then the tensors' bytes
back to back in the order of docs/MODEL.md. No "__metadata__" entry is written.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import RecurModel, validate_config  # noqa: E402

DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


def checkpoint_tensors_f32(tensors, dtype=None):
    """A converter's tensors {name: torch tensor} -> ({name: float32 tensor} (exact widening), the
    safetensors dtype to write: dtype, or when None the tensors' own when it is one of F32, F16,
    BF16 throughout; else ValueError)."""
    if dtype is None:
        names = {v[0]: k for k, v in DTYPES.items()}
        kinds = {names.get(t.dtype) for t in tensors.values()}
        if len(kinds) != 1 or None in kinds:
            raise ValueError("checkpoint mixes dtypes %s: pass --dtype" % sorted(map(str, kinds)))
        dtype = kinds.pop()
    return {n: t.to(torch.float32) for n, t in tensors.items()}, dtype


def tensor_names(config):
    """Tensor names in the order of the table in docs/MODEL.md."""
    cfg = validate_config(config)
    names = ["embed.weight"]
    for i, kind in enumerate(cfg["mixers"]):
        p = "layers.%d." % i
        names += [p + "attn_norm.weight", p + "mixer.q_proj.weight", p + "mixer.k_proj.weight",
                  p + "mixer.v_proj.weight"]
        if kind == "gla":
            names.append(p + "mixer.gk_proj.weight")
        if kind in ("deltanet", "gated_deltanet"):
            names.append(p + "mixer.b_proj.weight")
        if kind == "gated_deltanet":
            names += [p + "mixer.a_proj.weight", p + "mixer.A_log", p + "mixer.dt_bias"]
        names += [p + "mixer.g_proj.weight", p + "mixer.o_norm.weight", p + "mixer.o_proj.weight",
                  p + "mlp_norm.weight", p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                  p + "mlp.down_proj.weight"]
    names.append("norm_f.weight")
    if not cfg["tied_embeddings"]:
        names.append("lm_head.weight")
    return names


def _tensor_bytes(t, dtype):
    tdt, _ = DTYPES[dtype]
    t = t.detach().to("cpu", torch.float32).to(tdt).contiguous()
    if dtype == "BF16":
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    if dtype == "F16":
        return t.numpy().astype("<f2").tobytes()
    return t.numpy().astype("<f4").tobytes()


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: list of (name, torch.Tensor). Writes atomically (temp file + rename)."""
    if dtype not in DTYPES:
        raise ValueError("dtype must be one of F32, F16, BF16")
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        data = _tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def write_hf_folder(out, raw, params, names, dtype="F32", shards=1, tokenizer=None, tokenizer_name=None):
    """A Hugging Face folder: config.json (the dict raw, its torch_dtype set to dtype's; Infinity as
    Python writes it), the tensors params[name] for names in that order in model.safetensors or in
    shards model-0000i-of-0000n.safetensors with model.safetensors.index.json, and an optional copy of
    the file tokenizer (named tokenizer_name, default its own name). names must be params' keys."""
    if set(names) != set(params):
        raise ValueError("parameters differ from the config's tensors: %s" % sorted(set(names) ^ set(params)))
    os.makedirs(out, exist_ok=True)
    raw = dict(raw, torch_dtype={"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
        f.write("\n")
    if shards <= 1:
        write_safetensors(os.path.join(out, "model.safetensors"), [(n, params[n]) for n in names], dtype)
    else:
        per = (len(names) + shards - 1) // shards
        weight_map, total = {}, 0
        for i in range(shards):
            part = names[i * per:(i + 1) * per]
            fname = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
            write_safetensors(os.path.join(out, fname), [(n, params[n]) for n in part], dtype)
            for n in part:
                weight_map[n] = fname
                total += params[n].numel() * DTYPES[dtype][1]
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    if tokenizer:
        import shutil
        shutil.copy(tokenizer, os.path.join(out, tokenizer_name or os.path.basename(tokenizer)))
    return out


def read_safetensors(path):
    """-> dict name -> float32 torch.Tensor (copied), validating header and byte ranges."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: truncated (no header length)" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: truncated header" % path)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out, ranges = {}, []
    for name, info in header.items():
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dtype))
        tdt, size = DTYPES[dtype]
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * size or b < 0 or e > len(data):
            raise ValueError("%s: tensor %s has a bad byte range" % (path, name))
        ranges.append((b, e, name))
        buf = data[b:e]
        if dtype == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float32)
            t = torch.from_numpy(arr.copy())
        elif dtype == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float32)
            t = torch.from_numpy(arr.copy())
        else:
            arr = np.frombuffer(buf, dtype="<i2").copy()
            t = torch.from_numpy(arr).view(torch.bfloat16).to(torch.float32)
        out[name] = t.reshape(shape)
    ranges.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(ranges, ranges[1:]):
        if b1 < e0:
            raise ValueError("%s: tensors %s and %s overlap" % (path, n0, n1))
    return out


def export(model, config, out_dir, dtype="F32"):
    """Write out_dir/config.json and out_dir/model.safetensors for model (a RecurModel)."""
    cfg = validate_config(config)
    os.makedirs(out_dir, exist_ok=True)
    sd = model.state_dict()
    names = tensor_names(cfg)
    if set(names) != set(sd):
        raise ValueError("model parameters do not match the config's tensor list: %s"
                         % sorted(set(names) ^ set(sd)))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), [(n, sd[n]) for n in names],
                      dtype)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return out_dir


def load(model_dir):
    """-> (RecurModel in float32 with the stored weights, config dict)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = validate_config(json.load(f))
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    model = RecurModel(cfg)
    sd = model.state_dict()
    if set(tensors) != set(sd):
        raise ValueError("%s: tensors differ from the config's: %s"
                         % (model_dir, sorted(set(tensors) ^ set(sd))))
    for name, t in tensors.items():
        if tuple(t.shape) != tuple(sd[name].shape):
            raise ValueError("%s: tensor %s has shape %s, expected %s"
                             % (model_dir, name, list(t.shape), list(sd[name].shape)))
    model.load_state_dict(tensors, strict=True)
    return model, cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a randomly initialised recurd model directory.")
    ap.add_argument("--config", required=True, help="architecture config JSON (docs/MODEL.md)")
    ap.add_argument("--seed", type=int, default=0, help="torch generator seed")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", default="F32", choices=sorted(DTYPES))
    ap.add_argument("--std", type=float, default=0.02,
                    help="std of projections and embeddings (default 0.02)")
    ap.add_argument("--unit-norms", action="store_true",
                    help="norm weights exactly 1 (default: 1 + U[-0.5, 0.5], so parity tests "
                         "also check that norm weights are applied)")
    args = ap.parse_args(argv)
    with open(args.config) as f:
        cfg = validate_config(json.load(f))
    model = RecurModel(cfg)
    model.init_weights(torch.Generator().manual_seed(args.seed), std=args.std,
                       random_norms=not args.unit_norms)
    export(model, cfg, args.out, args.dtype)
    print("wrote %s (%d parameters, %s)" % (args.out, model.n_params(), args.dtype))


if __name__ == "__main__":
    main()
