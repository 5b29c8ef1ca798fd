"""PyTorch twin of recurd's FLA families (docs/MODELS.md): gated_deltanet, gla, delta_net.

Written from the equations of docs/MODELS.md (not from FLA's code), on FLA's Hugging Face folders
(config.json + model.safetensors or a sharded index), in float64 by default. The mixer cores are
tools/model.py's reference recurrences (one home per recurrence); this file adds the FLA block
around them: short causal conv, activations, L2 norm, grouped value heads, gates, gated RMSNorm,
SwiGLU MLP.

    m = FlaModel.load(DIR)                 # or FlaModel(config_dict, {name: tensor})
    logits, state = m.forward(tokens)      # logits [T, vocab]; state carries S and conv inputs
    logits2, state = m.forward(more, state)
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import read_safetensors  # noqa: E402
from model import delta_recurrent, gated_recurrent  # noqa: E402

FAMILIES = ("gated_deltanet", "gla", "delta_net")


def fla_config(cfg):
    """config.json dict -> resolved settings with FLA's config-class defaults (docs/MODELS.md)."""
    t = cfg["model_type"]
    if t not in FAMILIES:
        raise ValueError("model_type %r is not an FLA family of recurd" % t)
    gdn, gla = t == "gated_deltanet", t == "gla"
    d = cfg.get("hidden_size", 2048)
    r = {"type": t, "d": d, "vocab": cfg.get("vocab_size", 32000),
         "layers": cfg.get("num_hidden_layers", 21 if gdn else 24),
         "heads": cfg.get("num_heads", 6 if gdn else 4 if gla else 16),
         "eps": cfg.get("norm_eps", 1e-6), "tied": cfg.get("tie_word_embeddings", False),
         "conv": cfg.get("use_short_conv", not gla), "W": cfg.get("conv_size", 4)}
    if cfg.get("attn") is not None or cfg.get("hidden_act", "swish") != "swish":
        raise ValueError("not implemented: hybrid attn / hidden_act")
    ratio = cfg.get("hidden_ratio") or 4
    ff = cfg.get("intermediate_size")
    if ff is None:
        ff = int(d * ratio * 2 / 3)
        ff = 256 * ((ff + 256 - 1) // 256)
    r["ff"] = ff
    ev = cfg.get("expand_v", 2.0 if gdn else 1.0)
    if gdn:
        hd = cfg.get("head_dim", 256)
        r.update(K=hd, V=int(hd * ev), qk_heads=r["heads"],
                 heads=cfg.get("num_v_heads") or r["heads"], gate=cfg.get("use_gate", True),
                 beta_scale=2.0 if cfg.get("allow_neg_eigval", False) else 1.0, use_beta=True,
                 qk_act="silu")
    else:
        ek = cfg.get("expand_k", 0.5 if gla else 1.0)
        r.update(K=int(d * ek) // r["heads"], V=int(d * ev) // r["heads"], qk_heads=r["heads"])
        if gla:
            r.update(gate=cfg.get("use_output_gate", True), clamp=cfg.get("clamp_min"),
                     affine=cfg.get("elementwise_affine", True),
                     fused=cfg.get("fuse_norm", True) and cfg.get("use_output_gate", True))
        else:
            r.update(gate=cfg.get("use_gate", False), use_beta=cfg.get("use_beta", True),
                     beta_scale=2.0 if cfg.get("allow_neg_eigval", False) else 1.0,
                     qk_act=cfg.get("qk_activation", "silu"))
    return r


def rms(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last dim (w None: no weight)."""
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def causal_conv(x, w, hist):
    """y_t[c] = sum_j w[c, j] x_{t-W+1+j}[c]; x [T, C], w [C, W], hist [W-1, C] (inputs before row 0).
    -> y [T, C], new hist (the last W-1 inputs)."""
    W = w.shape[1]
    xp = torch.cat([hist, x], 0)                                 # [W-1+T, C]
    y = F.conv1d(xp.t()[None], w[:, None, :], groups=x.shape[1])[0].t()
    return y, xp[-(W - 1):]


def act(x, name):
    if name == "silu":
        return F.silu(x)
    if name == "relu":
        return torch.relu(x)
    if name == "elu":
        return F.elu(x) + 1.0
    if name in ("identity", None):
        return x
    raise ValueError(name)


def l2(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


class FlaModel:
    def __init__(self, config, tensors, dtype=torch.float64):
        self.cfg = fla_config(config)
        self.t = {k: v.to(dtype) for k, v in tensors.items()}
        self.dtype = dtype

    @classmethod
    def load(cls, path, dtype=torch.float64):
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        single = os.path.join(path, "model.safetensors")
        if os.path.exists(single):
            tensors = read_safetensors(single)
        else:
            with open(os.path.join(path, "model.safetensors.index.json")) as f:
                index = json.load(f)
            tensors = {}
            for shard in sorted(set(index["weight_map"].values())):
                tensors.update(read_safetensors(os.path.join(path, shard)))
        return cls(cfg, tensors, dtype)

    def w(self, name):
        return self.t[name]

    def zero_state(self):
        c = self.cfg
        st = []
        for _ in range(c["layers"]):
            S = torch.zeros(1, c["heads"], c["K"], c["V"], dtype=self.dtype)
            conv = None
            if c["conv"]:
                qk = c["qk_heads"] * c["K"]
                conv = [torch.zeros(c["W"] - 1, n, dtype=self.dtype) for n in (qk, qk, c["heads"] * c["V"])]
            st.append((S, conv))
        return st

    def mixer(self, l, h, state):
        c = self.cfg
        p = "model.layers.%d.attn." % l
        T, H, Hq, K, V = h.shape[0], c["heads"], c["qk_heads"], c["K"], c["V"]
        S, conv = state
        q, k, v = h @ self.w(p + "q_proj.weight").t(), h @ self.w(p + "k_proj.weight").t(), h @ self.w(p + "v_proj.weight").t()
        if c["conv"]:
            outs, hists = [], []
            for x, name, hist in ((q, "q", conv[0]), (k, "k", conv[1]), (v, "v", conv[2])):
                y, nh = causal_conv(x, self.w(p + name + "_conv1d.weight")[:, 0, :], hist)
                outs.append(y)
                hists.append(nh)
            q, k, v = outs
            conv = hists
        t = c["type"]
        if t == "gla":
            if c["conv"]:
                q, k, v = F.silu(q), F.silu(k), F.silu(v)
        else:
            # gated_deltanet: silu on q, k, v (conv's activation, or F.silu); delta_net: qk_activation
            q, k = act(q, c["qk_act"]), act(k, c["qk_act"])
            v = F.silu(v)
        q = q.view(T, Hq, K)
        k = k.view(T, Hq, K)
        if t != "gla":
            q, k = l2(q), l2(k)
        G = H // Hq
        if G > 1:  # mixer head h reads q/k head h // G
            q, k = q.repeat_interleave(G, 1), k.repeat_interleave(G, 1)
        v = v.view(T, H, V)
        to_bhtk = lambda x: x.permute(1, 0, 2)[None]  # noqa: E731
        scale = K ** -0.5
        if t == "gla":
            gk = (h @ self.w(p + "gk_proj.0.weight").t()) @ self.w(p + "gk_proj.1.weight").t() + self.w(p + "gk_proj.1.bias")
            g = F.logsigmoid(gk) / 16.0
            if c["clamp"] is not None:
                g = torch.clamp_min(g, c["clamp"])
            o, S = gated_recurrent(to_bhtk(q), to_bhtk(k), to_bhtk(v), to_bhtk(g.view(T, H, K)), scale, S)
        else:
            if c["use_beta"]:
                beta = torch.sigmoid(h @ self.w(p + "b_proj.weight").t()) * c["beta_scale"]
            else:
                beta = torch.full((T, H), c["beta_scale"], dtype=self.dtype)
            g = None
            if t == "gated_deltanet":
                a = h @ self.w(p + "a_proj.weight").t()
                g = -torch.exp(self.w(p + "A_log")) * F.softplus(a + self.w(p + "dt_bias"))
                g = g.t()[None]
            o, S = delta_recurrent(to_bhtk(q), to_bhtk(k), to_bhtk(v), beta.t()[None], g, scale, S)
        o = o[0].permute(1, 0, 2)                                 # [T, H, V]
        if t == "gla":
            wname = p + ("g_norm_swish_gate.weight" if c["fused"] else "g_norm.weight")
            wn = self.t.get(wname) if c["affine"] else None
        else:
            wn = self.w(p + "o_norm.weight")
        o = rms(o, wn, c["eps"])
        if c["gate"]:
            o = o * F.silu((h @ self.w(p + "g_proj.weight").t()).view(T, H, V))
        return o.reshape(T, H * V) @ self.w(p + "o_proj.weight").t(), (S, conv)

    def forward(self, tokens, state=None):
        """tokens [T] ints -> logits [T, vocab], new state."""
        c = self.cfg
        state = self.zero_state() if state is None else state
        x = self.w("model.embeddings.weight")[torch.as_tensor(tokens, dtype=torch.long)]
        new = []
        for l in range(c["layers"]):
            p = "model.layers.%d." % l
            o, st = self.mixer(l, rms(x, self.w(p + "attn_norm.weight"), c["eps"]), state[l])
            new.append(st)
            x = x + o
            h = rms(x, self.w(p + "mlp_norm.weight"), c["eps"])
            f = F.silu(h @ self.w(p + "mlp.gate_proj.weight").t()) * (h @ self.w(p + "mlp.up_proj.weight").t())
            x = x + f @ self.w(p + "mlp.down_proj.weight").t()
        x = rms(x, self.w("model.norm.weight"), c["eps"])
        head = self.w("model.embeddings.weight") if c["tied"] else self.w("lm_head.weight")
        return x @ head.t(), new


def state_bytes(config):
    """fp32 bytes of one session's state (docs/MODELS.md): per layer H*K*V + (W-1)*(2*Hq*K + H*V)."""
    c = fla_config(config)
    per = c["heads"] * c["K"] * c["V"]
    if c["conv"]:
        per += (c["W"] - 1) * (2 * c["qk_heads"] * c["K"] + c["heads"] * c["V"])
    return 4 * c["layers"] * per


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("tokens", nargs="*", type=int, default=[1, 2, 3])
    a = ap.parse_args()
    with open(os.path.join(a.dir, "config.json")) as f:
        sb = state_bytes(json.load(f))
    logits, _ = FlaModel.load(a.dir).forward(a.tokens)
    print(json.dumps({"argmax": logits.argmax(-1).tolist(), "state_bytes": sb}))
