"""The PyTorch twin of a Hugging Face Mamba-2 folder (model_type "mamba2"): the function recurd
computes for such a folder, written from the equations of docs/MODELS.md "Mamba-2".

    cfg = resolve_config(json.load(open(DIR + "/config.json")))     # transformers' and FLA's keys
    params = load_folder(DIR)                                       # {upstream name: float32 tensor}
    logits, state = forward(params, cfg, tokens, form="recurrent")  # tokens: 1-D LongTensor [T]
    logits, state = forward(params, cfg, more, state=state, form="chunked", chunk_size=64)

`form` is "recurrent" (token by token, the reference: run it in float64 with `dtype=torch.float64`)
or "chunked" (the SSD form: dense inside chunks, recurrent across them). Both take and return the
session state: per layer the conv window (the last conv_kernel-1 inputs of the convolution, oldest
first, [conv_dim][W-1]) and the SSM state h [H][P][N] (upstream's layout).

The block, per layer (state-spaces' Mamba2 with its defaults: norm_before_gate False):

    u = RMSNorm_{layers.l.norm}(x)
    z0 | x0 | z | xBC | dt = in_proj u   (+ bias)   widths d_mlp, d_mlp, d_ssm, d_ssm + 2GN, H
    xBC = silu(causal depthwise conv_W(xBC) + conv bias)
    x | B | C = xBC                                    widths d_ssm, GN, GN
    dt = clamp(softplus(dt + dt_bias), dt_min, dt_max);   A = -exp(A_log)
    head h, group g = h // (H / G):
        h_t = exp(dt_h A_h) h_{t-1} + dt_h x_h B_g^T      [P][N]
        y_h = h_t C_g + D_h x_h
    y = RMSNorm_group(y * silu(z)) * norm.weight       (each of the G groups of d_ssm/G normalised
                                                        apart; norm_before_gate: RMSNorm(y)*silu(z);
                                                        rmsnorm False: y * silu(z), no weight)
    y = silu(z0) * x0 | y                              (only when d_mlp > 0)
    x = x + out_proj y (+ bias)
    logits = lm_head RMSNorm_{norm_f}(x)              (tied: lm_head = embeddings)

This file does not depend on librecur: it is the independent reference the C model is tested
against. It never changes what it reads.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import read_safetensors  # noqa: E402

# transformers' Mamba2Config defaults (an absent key takes these); FLA's spelling of the same
# keys is accepted beside them (norm_eps, dt_limit, rmsnorm); both spellings present must agree.
DEFAULTS = {"vocab_size": 32768, "hidden_size": 4096, "state_size": 128, "num_hidden_layers": 64,
            "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4, "n_groups": 8,
            "use_bias": False, "use_conv_bias": True, "hidden_act": "silu", "num_heads": 128,
            "head_dim": 64, "time_step_limit": [0.0, math.inf], "tie_word_embeddings": False,
            "rmsnorm": True, "norm_before_gate": False, "D_has_hdim": False,
            "pad_vocab_size_multiple": 1}
SYNONYMS = {"norm_eps": "layer_norm_epsilon", "dt_limit": "time_step_limit"}


def resolve_config(raw):
    """config.json (a dict, Infinity allowed) -> the resolved dimensions and options. Raises
    ValueError on what the twin cannot compute (recurd refuses the same, by name)."""
    c = dict(DEFAULTS)
    for k, v in raw.items():
        c[SYNONYMS.get(k, k)] = v
    for fla, hf in SYNONYMS.items():
        if fla in raw and hf in raw and list(map(float, _aslist(raw[fla]))) != \
                list(map(float, _aslist(raw[hf]))):
            raise ValueError("config: %s and %s disagree" % (fla, hf))
    if raw.get("model_type", "mamba2") != "mamba2":
        raise ValueError("config: model_type %r is not mamba2" % raw.get("model_type"))
    if c["hidden_act"] not in ("silu", "swish"):
        raise ValueError("config: hidden_act %r is not supported (silu only)" % c["hidden_act"])
    d, H, P = int(c["hidden_size"]), int(c["num_heads"]), int(c["head_dim"])
    d_inner = int(c["expand"] * d)
    d_ssm = H * P
    if d_ssm > d_inner:
        raise ValueError("config: num_heads * head_dim (%d) exceeds expand * hidden_size (%d)"
                         % (d_ssm, d_inner))
    G, N = int(c["n_groups"]), int(c["state_size"])
    if G < 1 or H % G:
        raise ValueError("config: num_heads (%d) is not a multiple of n_groups (%d)" % (H, G))
    lo, hi = (float(v) for v in _aslist(c["time_step_limit"]))
    vocab = int(c["vocab_size"])
    mult = int(c["pad_vocab_size_multiple"])
    vocab_padded = (vocab + mult - 1) // mult * mult
    return {"vocab_size": vocab_padded, "d": d, "n_layers": int(c["num_hidden_layers"]),
            "N": N, "H": H, "P": P, "G": G, "d_inner": d_inner, "d_ssm": d_ssm,
            "d_mlp": d_inner - d_ssm, "conv_dim": d_ssm + 2 * G * N, "W": int(c["conv_kernel"]),
            "conv_bias": bool(c["use_conv_bias"]), "bias": bool(c["use_bias"]),
            "dt_min": lo, "dt_max": hi, "eps": float(c["layer_norm_epsilon"]),
            "rmsnorm": bool(c["rmsnorm"]), "norm_before_gate": bool(c["norm_before_gate"]),
            "D_has_hdim": bool(c["D_has_hdim"]), "tied": bool(c["tie_word_embeddings"])}


def _aslist(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def tensor_shapes(cfg):
    """{upstream tensor name: shape} of a folder with this resolved config, in file order."""
    d, L = cfg["d"], cfg["n_layers"]
    n_in = 2 * cfg["d_mlp"] + cfg["d_ssm"] + cfg["conv_dim"] + cfg["H"]
    out = {"backbone.embeddings.weight": (cfg["vocab_size"], d)}
    for i in range(L):
        p = "backbone.layers.%d." % i
        out[p + "norm.weight"] = (d,)
        out[p + "mixer.in_proj.weight"] = (n_in, d)
        if cfg["bias"]:
            out[p + "mixer.in_proj.bias"] = (n_in,)
        out[p + "mixer.conv1d.weight"] = (cfg["conv_dim"], 1, cfg["W"])
        if cfg["conv_bias"]:
            out[p + "mixer.conv1d.bias"] = (cfg["conv_dim"],)
        out[p + "mixer.dt_bias"] = (cfg["H"],)
        out[p + "mixer.A_log"] = (cfg["H"],)
        out[p + "mixer.D"] = (cfg["d_ssm"] if cfg["D_has_hdim"] else cfg["H"],)
        if cfg["rmsnorm"]:
            out[p + "mixer.norm.weight"] = (cfg["d_ssm"],)
        out[p + "mixer.out_proj.weight"] = (d, cfg["d_inner"])
        if cfg["bias"]:
            out[p + "mixer.out_proj.bias"] = (d,)
    out["backbone.norm_f.weight"] = (d,)
    if not cfg["tied"]:
        out["lm_head.weight"] = (cfg["vocab_size"], d)
    return out


def read_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)  # Python's json reads Infinity / NaN as written by transformers


def load_folder(folder):
    """{name: float32 tensor} from model.safetensors or model.safetensors.index.json + shards.
    Raises ValueError unless the tensors are exactly those of tensor_shapes (names and shapes)."""
    cfg = resolve_config(read_config(folder))
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        params = {}
        for shard in sorted(set(weight_map.values())):
            for name, t in read_safetensors(os.path.join(folder, shard)).items():
                if weight_map.get(name) != shard or name in params:
                    raise ValueError("%s: tensor %s is not mapped to %s" % (folder, name, shard))
                params[name] = t
    else:
        params = read_safetensors(os.path.join(folder, "model.safetensors"))
    want = tensor_shapes(cfg)
    if set(params) != set(want):
        raise ValueError("%s: tensors differ from the config's: %s"
                         % (folder, sorted(set(params) ^ set(want))))
    for name, shape in want.items():
        if tuple(params[name].shape) != tuple(shape):
            raise ValueError("%s: %s has shape %s, expected %s"
                             % (folder, name, list(params[name].shape), list(shape)))
    return params, cfg


# --------------------------------------------------------------------------- the pieces

def rms_norm(x, w, eps):
    # x / sqrt(mean(x^2) + eps) * w
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gated_norm(y, z, w, cfg):
    """The mixer's output norm over [T, d_ssm]: each of the G groups of d_ssm / G normalised apart
    (state-spaces' RMSNormGated with group_size = d_ssm / n_groups)."""
    if not cfg["rmsnorm"]:
        return y * F.silu(z)
    G = cfg["G"]
    if not cfg["norm_before_gate"]:
        y = y * F.silu(z)
    yg = y.reshape(y.shape[0], G, -1)
    y = (yg / torch.sqrt(yg.pow(2).mean(-1, keepdim=True) + cfg["eps"])).reshape(y.shape) * w
    if cfg["norm_before_gate"]:
        y = y * F.silu(z)
    return y


def causal_conv(xbc, window, weight, bias):
    """Depthwise causal conv over time: out[t, c] = sum_j w[c, j] in[t - (W-1) + j, c] + b[c],
    where in is window (the W-1 inputs before this call, oldest first) followed by xbc [T, C].
    Returns (out [T, C], new window [C, W-1] = the last W-1 inputs)."""
    W = weight.shape[-1]
    seq = torch.cat([window.transpose(0, 1), xbc], 0)             # [W-1+T, C]
    T = xbc.shape[0]
    out = sum(seq[j:j + T] * weight[:, 0, j] for j in range(W))
    if bias is not None:
        out = out + bias
    return out, seq[seq.shape[0] - (W - 1):].transpose(0, 1).contiguous()


def ssd_recurrent(x, dt, a, B, C, h):
    """x [T,H,P], dt [T,H], a = dt*A [T,H], B, C [T,H,N] (group-expanded), h [H,P,N]:
    h_t = exp(a_t) h_{t-1} + dt_t x_t B_t^T ; y_t = h_t C_t."""
    ys = []
    for t in range(x.shape[0]):
        h = torch.exp(a[t])[:, None, None] * h + (dt[t][:, None] * x[t])[:, :, None] * B[t][:, None, :]
        ys.append(torch.einsum("hpn,hn->hp", h, C[t]))
    return torch.stack(ys, 0), h


def ssd_chunked(x, dt, a, B, C, h, chunk_size):
    """The same function, chunk by chunk: with c_t the cumulative sum of a inside a chunk,
        y_t = sum_{s<=t} exp(c_t - c_s) (C_t . B_s) dt_s x_s + exp(c_t) h_0 C_t
        h_end = exp(c_last) h_0 + sum_s exp(c_last - c_s) dt_s x_s B_s^T
    (only non-positive numbers are exponentiated)."""
    ys = []
    for s0 in range(0, x.shape[0], chunk_size):
        sl = slice(s0, s0 + chunk_size)
        xs, Bs, Cs, ac = dt[sl][..., None] * x[sl], B[sl], C[sl], a[sl]
        c = torch.cumsum(ac, 0)                                    # [L,H]
        Lc = c.shape[0]
        diff = c[:, None, :] - c[None, :, :]                       # [t,s,H]
        mask = torch.tril(torch.ones(Lc, Lc, dtype=torch.bool))[..., None]
        decay = torch.exp(torch.where(mask, diff, torch.full_like(diff, -math.inf)))
        scores = torch.einsum("thn,shn->tsh", Cs, Bs) * decay
        y = torch.einsum("tsh,shp->thp", scores, xs)
        y = y + torch.exp(c)[..., None] * torch.einsum("hpn,thn->thp", h, Cs)
        last = c[-1]
        h = torch.exp(last)[:, None, None] * h + \
            torch.einsum("sh,shp,shn->hpn", torch.exp(last[None] - c), xs, Bs)
        ys.append(y)
    return torch.cat(ys, 0), h


def empty_state(cfg, dtype=torch.float64):
    return [(torch.zeros(cfg["conv_dim"], cfg["W"] - 1, dtype=dtype),
             torch.zeros(cfg["H"], cfg["P"], cfg["N"], dtype=dtype)) for _ in range(cfg["n_layers"])]


def mixer(p, pre, cfg, u, layer_state, form, chunk_size):
    """One Mamba-2 mixer over u [T, d]; returns (out [T, d], new layer state)."""
    H, P, N, G = cfg["H"], cfg["P"], cfg["N"], cfg["G"]
    d_mlp, d_ssm = cfg["d_mlp"], cfg["d_ssm"]
    zxbcdt = u @ p[pre + "in_proj.weight"].T
    if cfg["bias"]:
        zxbcdt = zxbcdt + p[pre + "in_proj.bias"]
    z0, x0, z, xbc, dt = torch.split(zxbcdt, [d_mlp, d_mlp, d_ssm, cfg["conv_dim"], H], -1)
    window, h = layer_state
    xbc, window = causal_conv(xbc, window, p[pre + "conv1d.weight"],
                              p.get(pre + "conv1d.bias") if cfg["conv_bias"] else None)
    xbc = F.silu(xbc)
    x, B, C = torch.split(xbc, [d_ssm, G * N, G * N], -1)
    T = u.shape[0]
    x = x.reshape(T, H, P)
    # head h reads the B / C of group h // (H / G)
    B = B.reshape(T, G, 1, N).expand(T, G, H // G, N).reshape(T, H, N)
    C = C.reshape(T, G, 1, N).expand(T, G, H // G, N).reshape(T, H, N)
    dt = torch.clamp(F.softplus(dt + p[pre + "dt_bias"]), cfg["dt_min"], cfg["dt_max"])
    a = dt * -torch.exp(p[pre + "A_log"])
    if form == "recurrent":
        y, h = ssd_recurrent(x, dt, a, B, C, h)
    elif form == "chunked":
        y, h = ssd_chunked(x, dt, a, B, C, h, chunk_size)
    else:
        raise ValueError("form must be recurrent or chunked")
    D = p[pre + "D"]
    y = y + (D.reshape(H, P) if cfg["D_has_hdim"] else D[:, None]) * x
    y = gated_norm(y.reshape(T, d_ssm), z, p.get(pre + "norm.weight"), cfg)
    if d_mlp:
        y = torch.cat([F.silu(z0) * x0, y], -1)
    out = y @ p[pre + "out_proj.weight"].T
    if cfg["bias"]:
        out = out + p[pre + "out_proj.bias"]
    return out, (window, h)


def forward(params, cfg, tokens, state=None, form="recurrent", chunk_size=256,
            dtype=torch.float64):
    """logits [T, vocab] and the new state for tokens (1-D) after state (None: empty)."""
    p = {k: v.to(dtype) for k, v in params.items()}
    state = empty_state(cfg, dtype) if state is None else [(w.to(dtype), h.to(dtype)) for w, h in state]
    x = p["backbone.embeddings.weight"][torch.as_tensor(tokens, dtype=torch.long)]
    new_state = []
    with torch.no_grad():
        for i in range(cfg["n_layers"]):
            pre = "backbone.layers.%d." % i
            out, st = mixer(p, pre + "mixer.", cfg, rms_norm(x, p[pre + "norm.weight"], cfg["eps"]),
                            state[i], form, chunk_size)
            x = x + out
            new_state.append(st)
        head = p["backbone.embeddings.weight"] if cfg["tied"] else p["lm_head.weight"]
        logits = rms_norm(x, p["backbone.norm_f.weight"], cfg["eps"]) @ head.T
    return logits, new_state


def state_bytes(cfg):
    """fp32 bytes of one session: layers x (H*P*N + (W-1)*conv_dim) x 4."""
    return cfg["n_layers"] * (cfg["H"] * cfg["P"] * cfg["N"] + (cfg["W"] - 1) * cfg["conv_dim"]) * 4
