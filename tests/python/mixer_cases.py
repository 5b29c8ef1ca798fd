"""Test inputs and a uniform calling convention for every recurrent mixer, so the tests can run
"librecur via the binding" and "the float64 reference" on the same float32 inputs.

A *case* is a dict of float32 inputs built from (mixer, T, H, K, V, regime, seed). run_c() calls
recur.<mixer>; run_ref() calls ref_mixers.<mixer>; both return (o, state_tuple) where
state_tuple is (S,) or (S, z) for linear attention.
"""
import numpy as np

import recur
import ref_mixers as R

# name -> (kind, options). Gated mixers take a gate regime.
MIXERS = {
    "linear_elu1": ("linear", dict(normalize=True, feature_map="elu1")),
    "linear_relu": ("linear", dict(normalize=True, feature_map="relu")),
    "linear_identity": ("linear", dict(normalize=False, feature_map="identity")),
    "linear_elu1_raw": ("linear", dict(normalize=False, feature_map="elu1")),
    "retention": ("retention", dict(gamma=None)),
    "retention_gamma": ("retention", dict(gamma="custom")),
    "gla_scalar": ("gla", dict(per_key=False)),
    "gla_vector": ("gla", dict(per_key=True)),
    "deltanet": ("delta", dict(gated=False)),
    "gated_deltanet": ("delta", dict(gated=True)),
    "gdr_rwkv": ("gdr", dict(erase="rwkv")),
    "gdr_general": ("gdr", dict(erase="general")),
}
GATED = ("gla_scalar", "gla_vector", "gated_deltanet", "gdr_rwkv", "gdr_general")
REGIMES = ("zero", "mild", "strong")


def gates(rng, shape, regime):
    """Natural-log gates g <= 0. zero: g = 0 (no decay); mild: e^g in ~[0.90, 0.999];
    strong: g in [-6, -0.5] with 5% of entries in [-60, -20] (a chunk's cumulative decay then
    underflows float32 many times over: only differences of cumulative gates may be exponentiated)."""
    if regime == "zero":
        return np.zeros(shape, np.float32)
    if regime == "mild":
        return (-rng.uniform(0.001, 0.1, shape)).astype(np.float32)
    if regime == "strong":
        g = -rng.uniform(0.5, 6.0, shape)
        hard = rng.random(shape) < 0.05
        g[hard] = -rng.uniform(20.0, 60.0, hard.sum())
        return g.astype(np.float32)
    raise ValueError(regime)


def make_case(mixer, T, H, K, V, regime="mild", seed=0):
    kind, opt = MIXERS[mixer]
    rng = np.random.default_rng([seed, T, H, K, V, REGIMES.index(regime) if regime else 9,
                                 list(MIXERS).index(mixer)])
    q = rng.standard_normal((T, H, K)).astype(np.float32)
    k = rng.standard_normal((T, H, K)).astype(np.float32)
    v = rng.standard_normal((T, H, V)).astype(np.float32)
    c = dict(mixer=mixer, kind=kind, q=q, k=k, v=v, T=T, H=H, K=K, V=V)
    if kind == "retention" and opt["gamma"] == "custom":
        # includes gamma = 1 (no decay) and a fast decay
        c["gamma"] = np.array([1.0, 0.9, 0.5, 0.99, 0.999, 0.75, 0.2, 0.95][:H] +
                              [0.97] * max(0, H - 8), np.float32)
    if kind == "gla":
        gshape = (T, H, K) if opt["per_key"] else (T, H)
        c["g"] = gates(rng, gshape, regime)
    if kind == "delta":
        kn = k.astype(np.float64)
        kn /= np.linalg.norm(kn, axis=-1, keepdims=True)
        c["k"] = kn.astype(np.float32)
        c["beta"] = rng.uniform(0.05, 0.95, (T, H)).astype(np.float32)
        if opt["gated"]:
            c["g"] = gates(rng, (T, H), regime)
    if kind == "gdr":
        c["g"] = gates(rng, (T, H, K), regime)
        c["a"], c["b"] = erase_vectors(rng, k, opt["erase"])
    return c


def unit(x):
    x = x.astype(np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def erase_vectors(rng, k, erase):
    """The generalized delta rule's rank-one erase (a, b) [T,H,K]. rwkv: RWKV-7's a = -kappa_hat,
    b = kappa_hat * a_gate (kappa_hat unit, a_gate in (0,1)); general: b leaves kappa_hat's
    direction (b = (kappa_hat + 0.5 xi) * a_gate), so the erase is not a projection; ortho:
    rwkv with kappa_hat orthogonal to k_t; zero: a = 0 (then the mixer is GLA with per-key
    gates)."""
    shape = k.shape
    kh = rng.standard_normal(shape)
    if erase == "ortho":
        kk = k.astype(np.float64)
        kh -= (kh * kk).sum(-1, keepdims=True) / (kk * kk).sum(-1, keepdims=True) * kk
    kh = unit(kh)
    gate = rng.uniform(0.05, 0.95, shape[:2] + (1,)) * rng.uniform(0.5, 1.0, shape)
    if erase == "general":
        b = (kh + 0.5 * unit(rng.standard_normal(shape))) * gate
    else:
        b = kh * gate
    a = np.zeros(shape) if erase == "zero" else -kh
    return a.astype(np.float32), b.astype(np.float32)


def sliced(c, a, b):
    """The case restricted to positions [a, b)."""
    d = dict(c)
    for key in ("q", "k", "v", "g", "beta", "a", "b"):
        if key in c:
            d[key] = c[key][a:b]
    d["T"] = b - a
    return d


def random_state(c, seed=1):
    """A plausible non-zero initial state (z positive so normalised denominators stay away from 0)."""
    rng = np.random.default_rng(seed)
    S = (rng.standard_normal((c["H"], c["K"], c["V"])) * 0.5).astype(np.float32)
    if c["kind"] == "linear":
        return (S, rng.uniform(0.5, 2.0, (c["H"], c["K"])).astype(np.float32))
    return (S,)


def run_c(c, form="chunkwise", chunk_size=64, initial_state=None, **extra):
    """librecur through the binding. Returns (o, state tuple)."""
    kind, opt = MIXERS[c["mixer"]]
    q, k, v = c["q"], c["k"], c["v"]
    common = dict(form=form, chunk_size=chunk_size, **extra)
    if kind == "linear":
        o, (S, z) = recur.linear_attention(q, k, v, normalize=opt["normalize"],
                                           feature_map=opt["feature_map"],
                                           initial_state=initial_state, **common)
        return o, (S, z)
    init = None if initial_state is None else initial_state[0]
    if kind == "retention":
        o, S = recur.retention(q, k, v, gamma=c.get("gamma"), initial_state=init, **common)
    elif kind == "gla":
        o, S = recur.gla(q, k, v, c["g"], initial_state=init, **common)
    elif kind == "gdr":
        o, S = recur.generalized_delta(q, k, v, c["g"], c["a"], c["b"], initial_state=init, **common)
    else:
        o, S = recur.delta_rule(q, k, v, c["beta"], g=c.get("g"), initial_state=init, **common)
    return o, (S,)


def run_ref(c, initial_state=None, scale=None):
    """The float64 reference on the same float32 inputs. Returns (o, state tuple)."""
    kind, opt = MIXERS[c["mixer"]]
    q, k, v = c["q"], c["k"], c["v"]
    if kind == "linear":
        o, (S, z) = R.linear_attention(q, k, v, normalize=opt["normalize"],
                                       feature_map_name=opt["feature_map"], scale=scale,
                                       initial_state=initial_state)
        return o, (S, z)
    init = None if initial_state is None else initial_state[0]
    if kind == "retention":
        o, S = R.retention(q, k, v, gamma=c.get("gamma"), scale=scale, initial_state=init)
    elif kind == "gla":
        o, S = R.gla(q, k, v, c["g"], scale=scale, initial_state=init)
    elif kind == "gdr":
        o, S = R.generalized_delta(q, k, v, c["g"], c["a"], c["b"], scale=scale, initial_state=init)
    else:
        o, S = R.delta_rule(q, k, v, c["beta"], g=c.get("g"), scale=scale, initial_state=init)
    return o, (S,)


def state_err(a, b):
    return max(R.rel_rms(x, y) for x, y in zip(a, b))
