"""The PyTorch twin of an RWKV-7 "Goose" Hugging Face folder (model_type "rwkv7", FLA's layout): the
function recurd computes for such a folder, written from the equations of docs/MODELS.md "RWKV-7"
(BlinkDL's x070 model, as RWKV-LM's RWKV-v7 inference demos compute it).

    params, cfg = load_folder(DIR)                       # {FLA name: float32 tensor}, resolved config
    logits, state = forward(params, cfg, tokens)         # tokens: 1-D LongTensor [T]; float64
    logits, state = forward(params, cfg, more, state=state)

The session state is, per layer, (att_shift [d], ffn_shift [d], S [H][N][N]): the two token-shift
vectors (the previous token's normed input of the time mix and of the channel mix) and the matrix
state in RWKV's layout S[value i][key j]. The value residual (layer 0's v) needs no state.

Per token, layer l (x: the residual stream, d = hidden_size, H heads of N = head_dim):
    x = LN_{pre_norm}(x)                                  (layer 0 only, when norm_first: BlinkDL's ln0)
    xa = LN_{attn_norm}(x);  dx = att_shift - xa;  att_shift = xa
    x_r | x_w | x_k | x_v | x_a | x_g = xa + dx * (x_r | x_w | x_k | x_v | x_a | x_g)
    r = W_r x_r ;  k = W_k x_k ;  v = W_v x_v
    w = exp(-e^-0.5 * sigmoid(w_lora(x_w)))               w_lora(x) = W2 tanh(W1 x) + w0
    v = v + (v_first - v) * sigmoid(v_lora(x_v))          (layer 0: v_first = v; v_lora = V2 V1 x + v0)
    a = sigmoid(a_lora(x_a))                              a_lora(x) = A2 A1 x + a0
    g = g_lora(x_g)                                       g_lora(x) = G2 sigmoid(G1 x)
    kk = (k * k_k) / max(||k * k_k||, 1e-12)  per head
    k = k * (1 + (a - 1) * k_a)
    per head:  S = S diag(w) - (S kk)(kk * a)^T + v k^T ;  o = S r
    o = GroupNorm_H(o) * g_norm.weight + g_norm.bias     (eps = head_dim * norm_eps: 64e-5 at 64)
    o = (o + (sum_j r_j k_j r_k_j) v) * g                 per head
    x = x + W_o o
    xf = LN_{ffn_norm}(x);  dx = ffn_shift - xf;  ffn_shift = xf
    x = x + W_value relu(W_key (xf + dx * ffn.x_k))^2
logits = lm_head LN_{norm}(x)      (LayerNorms with bias, eps norm_eps)

This file does not depend on librecur: it is the independent reference the C model is tested
against. Also: tensor_shapes (FLA's names), blinkdl_names (the .pth names of RWKV-LM for each FLA
tensor, used by tools/convert_rwkv7.py and its test), random_params (the seeded exporter's weights).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import read_safetensors  # noqa: E402

# FLA's RWKV7Config defaults (an absent key takes these)
DEFAULTS = {"hidden_size": 2048, "hidden_ratio": 4, "intermediate_size": None, "num_hidden_layers": 24,
            "head_dim": 64, "num_heads": None, "decay_low_rank_dim": 64, "gate_low_rank_dim": 128,
            "a_low_rank_dim": 64, "v_low_rank_dim": 16, "hidden_act": "sqrelu", "norm_first": True,
            "norm_bias": True, "norm_eps": 1e-5, "attn": None, "tie_word_embeddings": False,
            "vocab_size": 32000, "value_dim": None}
DECAY_SCALE = math.exp(-0.5)  # w = exp(-e^-0.5 sigmoid(.)): each decay in (e^-0.607, 1)


def resolve_config(raw):
    """config.json (a dict) -> the resolved dimensions. Raises ValueError on what the twin does
    not compute (recurd refuses the same, by name)."""
    c = dict(DEFAULTS)
    c.update(raw)  # null stays None: FLA's meaning (head_dim null: from num_heads)
    for k in ("decay_low_rank_dim", "a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim", "hidden_size",
              "num_hidden_layers", "vocab_size", "norm_eps"):
        if c[k] is None:
            raise ValueError("config: %s null is not supported" % k)
    if raw.get("model_type", "rwkv7") != "rwkv7":
        raise ValueError("config: model_type %r is not rwkv7" % raw.get("model_type"))
    if c["attn"] is not None:
        raise ValueError("config: attn (hybrid attention layers) is not supported")
    if c["hidden_act"] != "sqrelu":
        raise ValueError("config: hidden_act %r is not supported (sqrelu only)" % c["hidden_act"])
    if not c["norm_bias"]:
        raise ValueError("config: norm_bias false is not supported")
    d, L = int(c["hidden_size"]), int(c["num_hidden_layers"])
    # head_dim decides where both are given (FLA's layer does so; its converter writes a stale num_heads)
    if c["head_dim"] is not None:
        N = int(c["head_dim"])
    elif c["num_heads"] is not None:
        N = d // int(c["num_heads"])
    else:
        raise ValueError("config: head_dim or num_heads must be given")
    if N < 1 or d % N:
        raise ValueError("config: head_dim %d does not divide hidden_size %d" % (N, d))
    vd = c["value_dim"]
    if vd is not None and any(int(v) != d for v in (vd if isinstance(vd, list) else [vd] * L)):
        raise ValueError("config: value_dim other than hidden_size is not supported")
    ff = c["intermediate_size"]
    if ff is None:
        ff = int(d * (c["hidden_ratio"] or 4))
        ff = 32 * ((ff + 31) // 32)
    return {"vocab_size": int(c["vocab_size"]), "d": d, "n_layers": L, "H": d // N, "N": N, "ff": int(ff),
            "Dw": int(c["decay_low_rank_dim"]), "Da": int(c["a_low_rank_dim"]),
            "Dv": int(c["v_low_rank_dim"]), "Dg": int(c["gate_low_rank_dim"]),
            "ln0": bool(c["norm_first"]), "eps": float(c["norm_eps"]),
            "gn_eps": N * float(c["norm_eps"]), "tied": bool(c["tie_word_embeddings"])}


MIX = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")


def tensor_shapes(cfg):
    """{FLA tensor name: shape} of a folder with this resolved config, in the modeling code's order."""
    d, H, N, ff = cfg["d"], cfg["H"], cfg["N"], cfg["ff"]
    out = {"model.embeddings.weight": (cfg["vocab_size"], d)}
    for i in range(cfg["n_layers"]):
        p = "model.layers.%d." % i
        a = p + "attn."
        if i == 0 and cfg["ln0"]:
            out[p + "pre_norm.weight"] = (d,)
            out[p + "pre_norm.bias"] = (d,)
        out[p + "attn_norm.weight"] = (d,)
        out[p + "attn_norm.bias"] = (d,)
        for m in MIX:
            out[a + m] = (1, 1, d)
        out[a + "k_k"] = (d,)
        out[a + "k_a"] = (d,)
        out[a + "r_k"] = (H, N)
        for proj in ("r_proj", "k_proj", "v_proj"):
            out[a + proj + ".weight"] = (d, d)
        out[a + "o_proj.weight"] = (d, d)
        for name, rank, bias in (("w_lora", cfg["Dw"], True), ("v_lora", cfg["Dv"], True),
                                 ("a_lora", cfg["Da"], True), ("g_lora", cfg["Dg"], False)):
            if name == "v_lora" and i == 0:
                continue
            out[a + name + ".lora.0.weight"] = (rank, d)
            out[a + name + ".lora.2.weight"] = (d, rank)
            if bias:
                out[a + name + ".lora.2.bias"] = (d,)
        out[a + "g_norm.weight"] = (d,)
        out[a + "g_norm.bias"] = (d,)
        out[p + "ffn_norm.weight"] = (d,)
        out[p + "ffn_norm.bias"] = (d,)
        out[p + "ffn.x_k"] = (d,)
        out[p + "ffn.key.weight"] = (ff, d)
        out[p + "ffn.value.weight"] = (d, ff)
    out["model.norm.weight"] = (d,)
    out["model.norm.bias"] = (d,)
    if not cfg["tied"]:
        out["lm_head.weight"] = (cfg["vocab_size"], d)
    return out


def blinkdl_names(cfg):
    """{FLA name: (RWKV-LM .pth name, how)}: how is "same", "t" (the .pth holds the transpose: the
    LoRA matrices w1 / w2 ...) or "flat" (the .pth holds [1, 1, d] where FLA holds [d], or the
    other way round for the token-shift mixes: x_r .. stay [1, 1, d] in both)."""
    out = {"model.embeddings.weight": ("emb.weight", "same"), "model.norm.weight": ("ln_out.weight", "same"),
           "model.norm.bias": ("ln_out.bias", "same")}
    if not cfg["tied"]:
        out["lm_head.weight"] = ("head.weight", "same")
    lora = {"w_lora": "w", "v_lora": "v", "a_lora": "a", "g_lora": "g"}
    proj = {"r_proj": "receptance", "k_proj": "key", "v_proj": "value", "o_proj": "output", "g_norm": "ln_x"}
    for name in tensor_shapes(cfg):
        if not name.startswith("model.layers."):
            continue
        parts = name.split(".")
        i, sub, rest = parts[2], parts[3], parts[4:]
        b = "blocks.%s." % i
        if sub in ("pre_norm", "attn_norm", "ffn_norm"):
            out[name] = (b + {"pre_norm": "ln0", "attn_norm": "ln1", "ffn_norm": "ln2"}[sub] + "." + rest[0], "same")
        elif sub == "ffn":
            out[name] = (b + "ffn." + ".".join(rest), "flat" if rest == ["x_k"] else "same")
        elif rest[0] in lora:
            n = {"0.weight": "1", "2.weight": "2", "2.bias": "0"}[".".join(rest[2:])]
            out[name] = (b + "att." + lora[rest[0]] + n, "flat" if n == "0" else "t")
        elif rest[0] in proj:
            out[name] = (b + "att." + proj[rest[0]] + "." + rest[1], "same")
        else:  # x_r .. x_g, k_k, k_a, r_k
            out[name] = (b + "att." + rest[0], "flat" if rest[0] in ("k_k", "k_a") else "same")
    return out


def read_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def load_folder(folder):
    """({name: float32 tensor}, resolved config) from model.safetensors; the tensors must be
    exactly those of tensor_shapes (names and shapes)."""
    cfg = resolve_config(read_config(folder))
    params = read_safetensors(os.path.join(folder, "model.safetensors"))
    want = tensor_shapes(cfg)
    if set(params) != set(want):
        raise ValueError("%s: tensors differ from the config's: %s" % (folder, sorted(set(params) ^ set(want))))
    for name, shape in want.items():
        if tuple(params[name].shape) != tuple(shape):
            raise ValueError("%s: %s has shape %s, expected %s" % (folder, name, list(params[name].shape),
                                                                 list(shape)))
    return params, cfg


# --------------------------------------------------------------------------- the pieces

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def empty_state(cfg, dtype=torch.float64):
    d, H, N = cfg["d"], cfg["H"], cfg["N"]
    return [(torch.zeros(d, dtype=dtype), torch.zeros(d, dtype=dtype), torch.zeros(H, N, N, dtype=dtype))
            for _ in range(cfg["n_layers"])]


def time_mix(p, a, cfg, xa, prev, v_first, S, first):
    """One token's time mix: (out [d], v_first, new S)."""
    H, N = cfg["H"], cfg["N"]
    dx = prev - xa
    xr, xw, xk, xv, xa_, xg = (xa + dx * p[a + m].reshape(-1) for m in MIX)
    r = p[a + "r_proj.weight"] @ xr
    k = p[a + "k_proj.weight"] @ xk
    v = p[a + "v_proj.weight"] @ xv
    wl = p[a + "w_lora.lora.2.weight"] @ torch.tanh(p[a + "w_lora.lora.0.weight"] @ xw) + p[a + "w_lora.lora.2.bias"]
    w = torch.exp(-DECAY_SCALE * torch.sigmoid(wl))
    if first:
        v_first = v
    else:
        s = torch.sigmoid(p[a + "v_lora.lora.2.weight"] @ (p[a + "v_lora.lora.0.weight"] @ xv)
                          + p[a + "v_lora.lora.2.bias"])
        v = v + (v_first - v) * s
    al = torch.sigmoid(p[a + "a_lora.lora.2.weight"] @ (p[a + "a_lora.lora.0.weight"] @ xa_)
                       + p[a + "a_lora.lora.2.bias"])
    g = p[a + "g_lora.lora.2.weight"] @ torch.sigmoid(p[a + "g_lora.lora.0.weight"] @ xg)
    kk = (k * p[a + "k_k"]).reshape(H, N)
    kk = kk / torch.clamp(kk.norm(dim=-1, keepdim=True), min=1e-12)
    k = k * (1 + (al - 1) * p[a + "k_a"])
    rh, wh, kh, vh, ah = (t.reshape(H, N) for t in (r, w, k, v, al))
    # S[h] (value i, key j): S diag(w) - (S kk)(kk a)^T + v k^T ; o = S r
    S = S * wh[:, None, :] - torch.einsum("hij,hj->hi", S, kk)[:, :, None] * (kk * ah)[:, None, :] \
        + vh[:, :, None] * kh[:, None, :]
    o = torch.einsum("hij,hj->hi", S, rh)
    mu = o.mean(-1, keepdim=True)
    var = ((o - mu) ** 2).mean(-1, keepdim=True)
    o = ((o - mu) / torch.sqrt(var + cfg["gn_eps"])).reshape(-1) * p[a + "g_norm.weight"] + p[a + "g_norm.bias"]
    bonus = ((rh * kh * p[a + "r_k"]).sum(-1, keepdim=True) * vh).reshape(-1)
    out = p[a + "o_proj.weight"] @ ((o + bonus) * g)
    return out, v_first, S


def forward(params, cfg, tokens, state=None, dtype=torch.float64):
    """logits [T, vocab] and the new state for tokens (1-D) after state (None: empty)."""
    p = {k: v.to(dtype) for k, v in params.items()}
    st = empty_state(cfg, dtype) if state is None else [tuple(t.to(dtype) for t in ls) for ls in state]
    st = [list(ls) for ls in st]
    eps = cfg["eps"]
    out = []
    with torch.no_grad():
        for tok in torch.as_tensor(tokens, dtype=torch.long).reshape(-1).tolist():
            x = p["model.embeddings.weight"][tok]
            v_first = None
            for i in range(cfg["n_layers"]):
                pre = "model.layers.%d." % i
                if i == 0 and cfg["ln0"]:
                    x = layer_norm(x, p[pre + "pre_norm.weight"], p[pre + "pre_norm.bias"], eps)
                xa = layer_norm(x, p[pre + "attn_norm.weight"], p[pre + "attn_norm.bias"], eps)
                dx, v_first, st[i][2] = time_mix(p, pre + "attn.", cfg, xa, st[i][0], v_first, st[i][2], i == 0)
                st[i][0] = xa
                x = x + dx
                xf = layer_norm(x, p[pre + "ffn_norm.weight"], p[pre + "ffn_norm.bias"], eps)
                kf = xf + (st[i][1] - xf) * p[pre + "ffn.x_k"]
                st[i][1] = xf
                x = x + p[pre + "ffn.value.weight"] @ (torch.relu(p[pre + "ffn.key.weight"] @ kf) ** 2)
            head = p["model.embeddings.weight"] if cfg["tied"] else p["lm_head.weight"]
            out.append(head @ layer_norm(x, p["model.norm.weight"], p["model.norm.bias"], eps))
    return torch.stack(out, 0), [tuple(ls) for ls in st]


def state_bytes(cfg):
    """fp32 bytes of one session: layers x (H N N + 2 d) x 4."""
    return cfg["n_layers"] * (cfg["H"] * cfg["N"] * cfg["N"] + 2 * cfg["d"]) * 4


# --------------------------------------------------------------------------- seeded weights

def random_params(cfg, seed, std=0.02):
    """Seeded random tensors for a resolved config, chosen so every component matters: matrices
    uniform with the given std; LayerNorm / GroupNorm weights 1 + U[-0.5, 0.5], biases U[-0.3, 0.3];
    token-shift mixes U[0, 1]; the decay bias w0 U[-6, 1] (decays from ~1 down to ~e^-0.44); a0 and
    v0 U[-1, 1]; k_k 0.7 + U[-0.2, 0.2]; k_a 1 + U[-0.3, 0.3]; r_k U[-0.5, 0.5]."""
    g = torch.Generator().manual_seed(seed)
    amp = std * math.sqrt(3.0)
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        u = torch.rand(shape, generator=g, dtype=torch.float64)
        last = name.rsplit(".", 1)[-1]
        if name.endswith("norm.weight"):
            t = 0.5 + u
        elif name.endswith("norm.bias"):
            t = 0.6 * u - 0.3
        elif last in MIX or name.endswith("ffn.x_k"):
            t = u
        elif name.endswith("w_lora.lora.2.bias"):
            t = -6.0 + 7.0 * u
        elif name.endswith("lora.2.bias"):
            t = 2 * u - 1
        elif last == "k_k":
            t = 0.5 + 0.4 * u
        elif last == "k_a":
            t = 0.7 + 0.6 * u
        elif last == "r_k":
            t = u - 0.5
        else:
            t = (2 * u - 1) * amp
        out[name] = t.to(torch.float32)
    return out
