"""The PyTorch twin of the recurd model: exactly the function of docs/MODEL.md.

    model = RecurModel(config)             # config: dict with the keys of docs/MODEL.md
    logits = model(tokens)                 # tokens LongTensor [B, T] -> logits [B, T, vocab]
    logits, state = model(tokens, state=state, return_state=True)   # resume / split calls

Parameter names are the safetensors tensor names of docs/MODEL.md, so
`model.state_dict().keys()` is exactly the set of tensors in model.safetensors.

Every mixer core has two independent implementations:

* ``recurrent`` — the token-by-token recurrence of docs/DESIGN.md §3, written as plainly as possible.
  It is the reference (run it in float64 with ``model.double()``).
* ``chunkwise`` — parallel inside chunks of ``chunk_size`` tokens, recurrent across chunks (the
  delta rule uses the WY/UT form with a unit-lower-triangular solve). It is what training uses.

``model.set_form("recurrent")`` / ``model.set_form("chunkwise", chunk_size=32)`` chooses the path.
Only non-positive numbers are exponentiated in either path.

Softmax layers attend over at most the last ``max_context`` tokens (a sliding window: the KV cache
keeps its newest ``max_context`` rows).

This file does not depend on librecur: it is the independent reference the C model is tested
against.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MIXER_KINDS = ("linear", "retention", "gla", "deltanet", "gated_deltanet", "softmax")

# Keys of config.json, in the order docs/MODEL.md lists them.
CONFIG_KEYS = ("name", "vocab_size", "d_model", "n_layers", "n_heads", "head_k", "head_v", "d_ff",
               "mixers", "tied_embeddings", "max_context", "norm_eps")
CONFIG_DEFAULTS = {"name": "recur", "tied_embeddings": True, "max_context": 4096, "norm_eps": 1e-5}

LINEAR_EPS = 1e-6   # denominator guard of normalised linear attention (RECUR_LINEAR_EPS)
L2NORM_EPS = 1e-6   # L2norm(x) = x / sqrt(sum(x^2) + 1e-6)
GLA_GATE_DIV = 16.0  # g = logsigmoid(gk_proj h) / 16


def validate_config(config):
    """Return a complete, checked copy of config (defaults filled in); raise ValueError otherwise."""
    if not isinstance(config, dict):
        raise ValueError("config must be a JSON object")
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError("unknown config key(s): %s" % ", ".join(unknown))
    cfg = dict(CONFIG_DEFAULTS)
    cfg.update(config)
    for key in CONFIG_KEYS:
        if key not in cfg:
            raise ValueError("missing config key: %s" % key)
    for key in ("vocab_size", "d_model", "n_layers", "n_heads", "head_k", "head_v", "d_ff",
                "max_context"):
        if not isinstance(cfg[key], int) or isinstance(cfg[key], bool) or cfg[key] < 1:
            raise ValueError("config key %s must be a positive integer" % key)
    if cfg["vocab_size"] < 2:
        raise ValueError("vocab_size must be >= 2")
    if not isinstance(cfg["name"], str):
        raise ValueError("name must be a string")
    if not isinstance(cfg["tied_embeddings"], bool):
        raise ValueError("tied_embeddings must be true or false")
    eps = cfg["norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or math.isinf(eps):
        raise ValueError("norm_eps must be a positive number")
    cfg["norm_eps"] = float(eps)
    mixers = cfg["mixers"]
    if not isinstance(mixers, list) or len(mixers) != cfg["n_layers"]:
        raise ValueError("mixers must be a list with one entry per layer (n_layers)")
    for m in mixers:
        if m not in MIXER_KINDS:
            raise ValueError("unknown mixer kind %r (one of %s)" % (m, ", ".join(MIXER_KINDS)))
    return {key: cfg[key] for key in CONFIG_KEYS}


def multiscale_decays(n_heads):
    """gamma_i = 1 - 2^(-5-i): RetNet's multi-scale decays (python floats, exact)."""
    return [1.0 - 2.0 ** (-5 - i) for i in range(n_heads)]


# --------------------------------------------------------------------------- small functions

def rms_norm(x, weight, eps):
    # RMSNorm_w(x) = x / sqrt(mean(x^2) + eps) * w
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def l2_norm(x):
    # L2norm(x) = x / sqrt(sum(x^2) + 1e-6), over the last dim (one head)
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)


def elu1(x):
    return F.elu(x) + 1.0


def _pad_time(x, n, dim=2):
    """Zero-pad dimension dim of x to length n (padded tokens leave states unchanged)."""
    extra = n - x.shape[dim]
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _chunks(x, C, dim=2):
    """[B,H,T,...] -> [B,H,N,C,...] after zero padding T up to a multiple of C."""
    T = x.shape[dim]
    N = (T + C - 1) // C
    x = _pad_time(x, N * C, dim)
    return x.reshape(*x.shape[:dim], N, C, *x.shape[dim + 1:])


def _unchunk(x, T):
    """[B,H,N,C,V] -> [B,H,T,V]."""
    B, H, N, C = x.shape[:4]
    return x.reshape(B, H, N * C, *x.shape[4:])[:, :, :T]


def _segment_decay(b, inclusive):
    """exp(b_i - b_j) for j <= i (inclusive) or j < i (strict), else 0.  b: [..., C] cumsum of
    log gates (non-increasing), so every exponentiated argument is <= 0."""
    C = b.shape[-1]
    idx = torch.arange(C, device=b.device)
    mask = (idx[None, :] <= idx[:, None]) if inclusive else (idx[None, :] < idx[:, None])
    diff = b[..., :, None] - b[..., None, :]
    return torch.exp(torch.where(mask, diff, torch.full_like(diff, -math.inf)))


# --------------------------------------------------------------------------- mixer cores
# All cores: q, k [B,H,T,K], v [B,H,T,V]; gates in natural log (<= 0); return (o [B,H,T,V], state).
# Every form includes the current token: S_t absorbs (k_t, v_t) before o_t = scale * S_t^T q_t.

def _state_or_zeros(q, v, state):
    """state, else a zero S [B,H,K,V] for q [B,H,T,K] and v [B,H,T,V]."""
    B, H, _, K = q.shape
    return q.new_zeros(B, H, K, v.shape[-1]) if state is None else state


def linear_recurrent(q, k, v, scale, state=None):
    """S_t = S_{t-1} + phi(k_t) v_t^T, z_t = z_{t-1} + phi(k_t),
    o_t = (scale phi(q_t))^T S_t / ((scale phi(q_t))^T z_t + 1e-6), phi = elu + 1."""
    B, H, T, K = q.shape
    V = v.shape[-1]
    S, z = (q.new_zeros(B, H, K, V), q.new_zeros(B, H, K)) if state is None else state
    pq, pk = elu1(q) * scale, elu1(k)
    outs = []
    for t in range(T):
        S = S + pk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + pk[:, :, t]
        num = torch.einsum("bhk,bhkv->bhv", pq[:, :, t], S)
        den = (pq[:, :, t] * z).sum(-1, keepdim=True)
        outs.append(num / (den + LINEAR_EPS))
    return torch.stack(outs, 2), (S, z)


def linear_chunkwise(q, k, v, scale, state=None, chunk_size=64):
    B, H, T, K = q.shape
    V = v.shape[-1]
    S, z = (q.new_zeros(B, H, K, V), q.new_zeros(B, H, K)) if state is None else state
    C = chunk_size
    pq, pk = _chunks(elu1(q) * scale, C), _chunks(elu1(k), C)
    # Padding is applied after phi, so padded keys are 0 and leave S and z unchanged.
    vc = _chunks(v, C)
    mask = torch.tril(q.new_ones(C, C))
    A = (pq @ pk.transpose(-1, -2)) * mask                      # [B,H,N,C,C]
    num_intra, den_intra = A @ vc, A.sum(-1, keepdim=True)
    outs = []
    # unbind once: indexing [:, :, n] inside the loop would cost a full-size zero tensor per
    # chunk in the backward pass.
    for nu_n, de_n, q_n, k_n, v_n in zip(num_intra.unbind(2), den_intra.unbind(2), pq.unbind(2),
                                        pk.unbind(2), vc.unbind(2)):
        num = nu_n + q_n @ S
        den = de_n + (q_n @ z[..., None])
        outs.append(num / (den + LINEAR_EPS))
        S = S + k_n.transpose(-1, -2) @ v_n
        z = z + k_n.sum(-2)
    return _unchunk(torch.stack(outs, 2), T), (S, z)


def gated_recurrent(q, k, v, g, scale, state=None, gamma=None):
    """S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T ; o_t = scale S_t^T q_t.
    g: [B,H,T] (scalar gate per head) or [B,H,T,K] (per key dim); or gamma [H] (retention: S_t =
    gamma S_{t-1} + k_t v_t^T, gamma used directly)."""
    B, H, T, K = q.shape
    S = _state_or_zeros(q, v, state)
    outs = []
    for t in range(T):
        if gamma is not None:
            decay = gamma.view(1, H, 1, 1)
        elif g.dim() == 3:
            decay = torch.exp(g[:, :, t])[..., None, None]
        else:
            decay = torch.exp(g[:, :, t])[..., None]
        S = decay * S + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    return torch.stack(outs, 2), S


def gated_chunkwise(q, k, v, g, scale, state=None, chunk_size=64):
    """Chunkwise form of gated_recurrent; g [B,H,T] (scalar) or [B,H,T,K] (vector)."""
    B, H, T, K = q.shape
    S = _state_or_zeros(q, v, state)
    C = chunk_size
    qc, kc, vc, gc = _chunks(q, C), _chunks(k, C), _chunks(v, C), _chunks(g, C)
    b = gc.cumsum(3)                                             # within-chunk cumulative log gate
    if g.dim() == 3:
        D = _segment_decay(b, inclusive=True)                    # [B,H,N,C,C]
        A = (qc @ kc.transpose(-1, -2)) * D * scale
        q_in = qc * torch.exp(b)[..., None]                      # decay from chunk start
        blast = b[:, :, :, -1:]                                  # [B,H,N,1]
        k_out = kc * torch.exp(blast - b)[..., None]             # decay to chunk end
        s_decay = torch.exp(blast)[..., None]                    # [B,H,N,1,1]
    else:
        idx = torch.arange(C, device=q.device)
        mask = (idx[None, :] <= idx[:, None])[..., None]        # [C,C,1]
        diff = b[..., :, None, :] - b[..., None, :, :]           # [B,H,N,C,C,K]
        E = torch.exp(torch.where(mask, diff, torch.full_like(diff, -math.inf)))
        A = (qc[..., :, None, :] * E * kc[..., None, :, :]).sum(-1) * scale
        q_in = qc * torch.exp(b)
        blast = b[:, :, :, -1:, :]                               # [B,H,N,1,K]
        k_out = kc * torch.exp(blast - b)
        s_decay = torch.exp(blast).transpose(-1, -2)             # [B,H,N,K,1]
    o_intra = A @ vc
    outs = []
    for oi_n, q_n, sd_n, k_n, v_n in zip(o_intra.unbind(2), q_in.unbind(2), s_decay.unbind(2),
                                         k_out.unbind(2), vc.unbind(2)):
        outs.append(oi_n + scale * (q_n @ S))
        S = sd_n * S + k_n.transpose(-1, -2) @ v_n
    return _unchunk(torch.stack(outs, 2), T), S


def delta_recurrent(q, k, v, beta, g, scale, state=None):
    """S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T ; o_t = scale S_t^T q_t.
    beta [B,H,T]; g [B,H,T] or None (DeltaNet)."""
    B, H, T, K = q.shape
    S = _state_or_zeros(q, v, state)
    outs = []
    for t in range(T):
        if g is not None:
            S = torch.exp(g[:, :, t])[..., None, None] * S
        kt, vt, bt = k[:, :, t], v[:, :, t], beta[:, :, t]
        kS = torch.einsum("bhk,bhkv->bhv", kt, S)                # S'^T k_t
        S = S + bt[..., None, None] * kt[..., :, None] * (vt - kS)[..., None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    return torch.stack(outs, 2), S


def delta_chunkwise(q, k, v, beta, g, scale, state=None, chunk_size=64):
    """WY/UT chunkwise form of delta_recurrent.

    Inside a chunk with S0 the state at its start and b_t = sum_{s<=t} g_s:
      S_t = e^{b_t} S0 + sum_{j<=t} e^{b_t-b_j} k_j u_j^T,
      u_t = beta_t (v_t - e^{b_t} S0^T k_t - sum_{j<t} e^{b_t-b_j} (k_t.k_j) u_j)
    i.e. (I + A) U = beta*V - (beta e^b)*K S0 with A_tj = beta_t e^{b_t-b_j} k_t.k_j (j<t):
      U = U0 - W S0,  U0 = (I+A)^-1 (beta*V),  W = (I+A)^-1 ((beta e^b)*K).
    """
    B, H, T, K = q.shape
    S = _state_or_zeros(q, v, state)
    C = chunk_size
    qc, kc, vc, bc = _chunks(q, C), _chunks(k, C), _chunks(v, C), _chunks(beta, C)
    if g is None:
        b = torch.zeros_like(bc)
    else:
        b = _chunks(g, C).cumsum(3)
    KK = kc @ kc.transpose(-1, -2)                               # [B,H,N,C,C]
    A = bc[..., :, None] * KK * _segment_decay(b, inclusive=False)
    L = A + torch.eye(C, dtype=q.dtype, device=q.device)
    U0 = torch.linalg.solve_triangular(L, bc[..., None] * vc, upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(L, (bc * torch.exp(b))[..., None] * kc, upper=False,
                                      unitriangular=True)
    P = (qc @ kc.transpose(-1, -2)) * _segment_decay(b, inclusive=True) * scale
    q_in = qc * (torch.exp(b) * scale)[..., None]
    blast = b[:, :, :, -1:]
    k_out = kc * torch.exp(blast - b)[..., None]
    s_decay = torch.exp(blast)[..., None]
    outs = []
    for u0_n, w_n, q_n, p_n, sd_n, k_n in zip(U0.unbind(2), W.unbind(2), q_in.unbind(2),
                                              P.unbind(2), s_decay.unbind(2), k_out.unbind(2)):
        U = u0_n - w_n @ S
        outs.append(q_n @ S + p_n @ U)
        S = sd_n * S + k_n.transpose(-1, -2) @ U
    return _unchunk(torch.stack(outs, 2), T), S


def softmax_attention(q, k, v, scale, state=None, max_context=4096, query_block=1024):
    """o_t = sum_j softmax_j(scale q_t.k_j) v_j over the last max_context tokens j <= t.
    state = (K cache [B,H,n,K], V cache [B,H,n,V]) of earlier tokens; the new cache keeps the
    newest max_context rows. Queries are processed in blocks (bounded memory)."""
    T = q.shape[2]
    if state is not None and state[0].shape[2] > 0:
        kc, vc = torch.cat([state[0], k], 2), torch.cat([state[1], v], 2)
    else:
        kc, vc = k, v
    P = kc.shape[2] - T                                          # cached tokens before q
    outs = []
    for s in range(0, T, query_block):
        e = min(T, s + query_block)
        lo = max(0, P + s - max_context + 1)
        hi = P + e
        qi = torch.arange(P + s, P + e, device=q.device)[:, None]
        kj = torch.arange(lo, hi, device=q.device)[None, :]
        allowed = (kj <= qi) & (kj > qi - max_context)
        scores = (q[:, :, s:e] @ kc[:, :, lo:hi].transpose(-1, -2)) * scale
        scores = scores.masked_fill(~allowed, -math.inf)
        outs.append(torch.softmax(scores, -1) @ vc[:, :, lo:hi])
    new_state = (kc[:, :, -max_context:], vc[:, :, -max_context:])
    return torch.cat(outs, 2), new_state


def softmax_recurrent(q, k, v, scale, state=None, max_context=4096):
    """Token by token with a KV cache of at most max_context rows (the reference)."""
    B, H, T, K = q.shape
    if state is None:
        kc, vc = q.new_zeros(B, H, 0, K), v.new_zeros(B, H, 0, v.shape[-1])
    else:
        kc, vc = state
    outs = []
    for t in range(T):
        kc = torch.cat([kc, k[:, :, t:t + 1]], 2)[:, :, -max_context:]
        vc = torch.cat([vc, v[:, :, t:t + 1]], 2)[:, :, -max_context:]
        w = torch.softmax(torch.einsum("bhk,bhnk->bhn", q[:, :, t], kc) * scale, -1)
        outs.append(torch.einsum("bhn,bhnv->bhv", w, vc))
    return torch.stack(outs, 2), (kc, vc)


# --------------------------------------------------------------------------- modules

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def _linear(n_out, n_in):
    return nn.Linear(n_in, n_out, bias=False)


class Mixer(nn.Module):
    """One multi-head mixer layer (docs/MODEL.md "Mixer_l(h)")."""

    def __init__(self, kind, cfg):
        super().__init__()
        d, H, K, V = cfg["d_model"], cfg["n_heads"], cfg["head_k"], cfg["head_v"]
        self.kind, self.H, self.K, self.V = kind, H, K, V
        self.max_context = cfg["max_context"]
        self.scale = K ** -0.5
        self.q_proj = _linear(H * K, d)
        self.k_proj = _linear(H * K, d)
        self.v_proj = _linear(H * V, d)
        if kind == "gla":
            self.gk_proj = _linear(H * K, d)
        if kind in ("deltanet", "gated_deltanet"):
            self.b_proj = _linear(H, d)
        if kind == "gated_deltanet":
            self.a_proj = _linear(H, d)
            self.A_log = nn.Parameter(torch.zeros(H))
            self.dt_bias = nn.Parameter(torch.zeros(H))
        self.g_proj = _linear(H * V, d)
        self.o_norm = RMSNorm(V, cfg["norm_eps"])
        self.o_proj = _linear(d, H * V)

    def _heads(self, x, dim):
        B, T, _ = x.shape
        return x.view(B, T, self.H, dim).transpose(1, 2)         # [B,H,T,dim]

    def forward(self, h, state=None, form="chunkwise", chunk_size=32):
        B, T, _ = h.shape
        q = self._heads(self.q_proj(h), self.K)
        k = self._heads(self.k_proj(h), self.K)
        v = self._heads(self.v_proj(h), self.V)
        rec = form == "recurrent"
        kind, scale = self.kind, self.scale
        if kind == "linear":
            o, state = (linear_recurrent(q, k, v, scale, state) if rec else
                        linear_chunkwise(q, k, v, scale, state, chunk_size))
        elif kind == "retention":
            gamma = torch.tensor(multiscale_decays(self.H), dtype=q.dtype, device=q.device)
            if rec:
                o, state = gated_recurrent(q, k, v, None, scale, state, gamma=gamma)
            else:
                g = torch.log(gamma).view(1, self.H, 1).expand(B, self.H, T)
                o, state = gated_chunkwise(q, k, v, g, scale, state, chunk_size)
        elif kind == "gla":
            g = self._heads(F.logsigmoid(self.gk_proj(h)) / GLA_GATE_DIV, self.K)
            o, state = (gated_recurrent(q, k, v, g, scale, state) if rec else
                        gated_chunkwise(q, k, v, g, scale, state, min(chunk_size, 16)))
        elif kind in ("deltanet", "gated_deltanet"):
            q, k = l2_norm(F.silu(q)), l2_norm(F.silu(k))
            beta = torch.sigmoid(self.b_proj(h)).transpose(1, 2)  # [B,H,T]
            g = None
            if kind == "gated_deltanet":
                g = -torch.exp(self.A_log) * F.softplus(self.a_proj(h) + self.dt_bias)
                g = g.transpose(1, 2)                              # [B,H,T]
            o, state = (delta_recurrent(q, k, v, beta, g, scale, state) if rec else
                        delta_chunkwise(q, k, v, beta, g, scale, state, chunk_size))
        elif kind == "softmax":
            o, state = (softmax_recurrent(q, k, v, scale, state, self.max_context) if rec else
                        softmax_attention(q, k, v, scale, state, self.max_context))
        else:
            raise ValueError("unknown mixer kind %r" % kind)
        o = self.o_norm(o.transpose(1, 2))                       # [B,T,H,V], per head over V
        o = o.reshape(B, T, self.H * self.V) * F.silu(self.g_proj(h))
        return self.o_proj(o), state


class MLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate_proj = _linear(d_ff, d)
        self.up_proj = _linear(d_ff, d)
        self.down_proj = _linear(d, d_ff)

    def forward(self, h):
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Block(nn.Module):
    def __init__(self, kind, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        self.mixer = Mixer(kind, cfg)
        self.mlp_norm = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        self.mlp = MLP(cfg["d_model"], cfg["d_ff"])


class RecurModel(nn.Module):
    """The recurd model stack (docs/MODEL.md). Parameters are named like the safetensors tensors."""

    def __init__(self, config):
        super().__init__()
        cfg = validate_config(config)
        self.config = cfg
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.layers = nn.ModuleList([Block(kind, cfg) for kind in cfg["mixers"]])
        self.norm_f = RMSNorm(cfg["d_model"], cfg["norm_eps"])
        if not cfg["tied_embeddings"]:
            self.lm_head = _linear(cfg["vocab_size"], cfg["d_model"])
        self.form = "chunkwise"
        self.chunk_size = 32
        self.init_weights(torch.Generator().manual_seed(0))

    def set_form(self, form, chunk_size=None):
        """"recurrent" (token-by-token reference) or "chunkwise" (training / prefill path)."""
        if form not in ("recurrent", "chunkwise"):
            raise ValueError("form must be 'recurrent' or 'chunkwise'")
        self.form = form
        if chunk_size is not None:
            if chunk_size < 1:
                raise ValueError("chunk_size must be >= 1")
            self.chunk_size = int(chunk_size)
        return self

    @torch.no_grad()
    def init_weights(self, generator, std=0.02, random_norms=False):
        """docs/MODEL.md initialisation with torch's generator: projections and embeddings
        N(0, std), norms 1 (or 1 + U[-0.5, 0.5] with random_norms, for meaningful parity tests),
        A_log = log U[1, 16], dt_bias = log(expm1(U[1e-3, 1e-1]))."""
        for name, p in self.named_parameters():
            if name.endswith("A_log"):
                u = torch.empty(p.shape, dtype=torch.float64).uniform_(1.0, 16.0, generator=generator)
                p.copy_(torch.log(u))
            elif name.endswith("dt_bias"):
                u = torch.empty(p.shape, dtype=torch.float64).uniform_(1e-3, 1e-1, generator=generator)
                p.copy_(torch.log(torch.expm1(u)))
            elif name.endswith("norm.weight") or name == "norm_f.weight":
                if random_norms:
                    p.copy_(1.0 + torch.empty(p.shape, dtype=torch.float64).uniform_(
                        -0.5, 0.5, generator=generator))
                else:
                    p.fill_(1.0)
            else:
                p.copy_(torch.empty(p.shape, dtype=torch.float64).normal_(0.0, std, generator=generator))
        return self

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def state_bytes(self):
        """A session's state size in the C engine (fp32), every layer at its largest."""
        return state_bytes(self.config)

    def forward(self, tokens, state=None, return_state=False):
        """tokens LongTensor [B,T] -> logits [B,T,vocab]. state: list with one entry per layer
        (as returned with return_state=True) to resume after earlier tokens."""
        if tokens.dim() != 2:
            raise ValueError("tokens must be [B, T]")
        x = self.embed(tokens)
        new_state = []
        for i, layer in enumerate(self.layers):
            h = layer.attn_norm(x)
            o, s = layer.mixer(h, None if state is None else state[i], self.form, self.chunk_size)
            x = x + o
            x = x + layer.mlp(layer.mlp_norm(x))
            new_state.append(s)
        x = self.norm_f(x)
        w = self.embed.weight if self.config["tied_embeddings"] else self.lm_head.weight
        logits = F.linear(x, w)
        return (logits, new_state) if return_state else logits


def state_bytes(config, state_dtype="f32"):
    """Per-session state bytes (docs/MODEL.md "Session state"): softmax at max_context (fp32), the
    recurrent layers' state in state_dtype ("f32", or 2 bytes a value for "bf16" / "f16")."""
    cfg = validate_config(config)
    H, K, V = cfg["n_heads"], cfg["head_k"], cfg["head_v"]
    e = 4 if state_dtype == "f32" else 2
    total = 0
    for kind in cfg["mixers"]:
        if kind == "softmax":
            total += cfg["max_context"] * H * (K + V) * 4
        else:
            total += (H * K * V + (H * K if kind == "linear" else 0)) * e
    return total


STATE_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def round_state(state, mixers, state_dtype):
    """The engine's half-precision state (docs/MODEL.md "State dtype"): every recurrent layer's
    state as fp32 rounded once to bfloat16 / float16, nearest even (torch's conversions), kept in
    the state's own dtype; softmax layers' KV rows are left as they are (fp32 in the engine)."""
    if state_dtype in (None, "f32"):
        return state
    half = STATE_DTYPES[state_dtype]

    def rnd(x):
        if isinstance(x, (tuple, list)):
            return type(x)(rnd(y) for y in x)
        return x.to(torch.float32).to(half).to(x.dtype)
    return [s if kind == "softmax" else rnd(s) for s, kind in zip(state, mixers)]


@torch.no_grad()
def decode_rounded(model, tokens, state_dtype, state=None):
    """Token by token (recurrent form), the state rounded after every token as recurd stores a
    bf16 / f16 session state at decode: tokens [B,T] -> (logits [B,T,vocab], state)."""
    form = model.form
    model.set_form("recurrent")
    out = []
    try:
        for t in range(tokens.shape[1]):
            logits, state = model(tokens[:, t:t + 1], state=state, return_state=True)
            state = round_state(state, model.config["mixers"], state_dtype)
            out.append(logits)
    finally:
        model.form = form
    return torch.cat(out, 1), state
