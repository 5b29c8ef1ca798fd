"""Long runs (issue 2): 1,000,000 tokens through every recurrent mixer, fed in pieces through the
binding (state passed from piece to piece, as a daemon session does), H = 2, K = V = 16.

  - recurrent form (and, on the same tokens, the chunkwise form): no NaN/Inf anywhere, states of
    decaying mixers stay bounded, and the two forms' final states agree (rel. RMS <= 1e-4);
  - retention, gated DeltaNet and the generalized delta rule (RWKV-7's decays and erase): 100,000 tokens against a float64 run of the reference
    recurrence; outputs over the last 2,000 positions and the final state within rel. RMS 1e-4.
"""
import numpy as np
import pytest

import recur
import ref_mixers as R

H, K, V = 2, 16, 16
N_LONG = 1_000_000
PIECE = 50_000
TOL_F64 = 1e-4
TOL_FORMS = 1e-4


def _piece(rng, n, mixer):
    f = np.float32
    q = rng.standard_normal((n, H, K), dtype=f)
    k = rng.standard_normal((n, H, K), dtype=f)
    v = rng.standard_normal((n, H, V), dtype=f)
    extra = {}
    if mixer in ("deltanet", "gated_deltanet"):
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        # beta = sigmoid(x), as a model's beta projection produces it
        extra["beta"] = (1.0 / (1.0 + np.exp(-rng.standard_normal((n, H), dtype=f)))).astype(f)
    if mixer in ("gla_scalar", "gated_deltanet"):
        extra["g"] = -rng.uniform(0.001, 0.2, (n, H)).astype(f)
    if mixer == "gla_vector":
        extra["g"] = -rng.uniform(0.001, 0.2, (n, H, K)).astype(f)
    if mixer == "gdr":
        # RWKV-7: w = exp(-e^-0.5 sigmoid(x)) per key, a = -kappa_hat, b = kappa_hat * sigmoid(y)
        sig = lambda x: 1.0 / (1.0 + np.exp(-x))
        extra["g"] = (-np.exp(-0.5) * sig(rng.standard_normal((n, H, K), dtype=f))).astype(f)
        kh = rng.standard_normal((n, H, K), dtype=f)
        kh /= np.linalg.norm(kh, axis=-1, keepdims=True)
        extra["a"] = -kh
        extra["b"] = (kh * sig(rng.standard_normal((n, H, K), dtype=f))).astype(f)
    return q, k, v, extra


def _call(mixer, q, k, v, extra, form, state):
    kw = dict(form=form, chunk_size=64, initial_state=state)
    if mixer == "linear":
        return recur.linear_attention(q, k, v, **kw)
    if mixer == "retention":
        return recur.retention(q, k, v, **kw)
    if mixer in ("gla_scalar", "gla_vector"):
        return recur.gla(q, k, v, extra["g"], **kw)
    if mixer == "gdr":
        return recur.generalized_delta(q, k, v, extra["g"], extra["a"], extra["b"], scale=1.0, **kw)
    return recur.delta_rule(q, k, v, extra["beta"], g=extra.get("g"), **kw)


def _states(st):
    return st if isinstance(st, tuple) else (st,)


@pytest.mark.parametrize("mixer", ["linear", "retention", "gla_scalar", "gla_vector", "deltanet",
                                   "gated_deltanet", "gdr"])
def test_million_tokens_finite(mixer):
    rng = np.random.default_rng(7)
    st = {"recurrent": None, "chunkwise": None}
    for start in range(0, N_LONG, PIECE):
        q, k, v, extra = _piece(rng, PIECE, mixer)
        for form in st:
            o, st[form] = _call(mixer, q, k, v, extra, form, st[form])
            assert np.isfinite(o).all(), f"{mixer} {form}: non-finite output in [{start}, {start + PIECE})"
            for s in _states(st[form]):
                assert np.isfinite(s).all(), f"{mixer} {form}: non-finite state after {start + PIECE}"
    rec, chk = _states(st["recurrent"]), _states(st["chunkwise"])
    if mixer != "linear":
        # a decaying (or, for DeltaNet, contractive) state forgets: it cannot grow with T
        assert np.abs(rec[0]).max() < 1e3, f"{mixer}: state grew to {np.abs(rec[0]).max():.3g}"
    for a, b in zip(rec, chk):
        e = R.rel_rms(b, a)
        assert e <= TOL_FORMS, f"{mixer}: chunkwise vs recurrent final state after 1M tokens: {e:.3e}"


@pytest.mark.parametrize("mixer", ["retention", "gated_deltanet", "gdr"])
def test_100k_tokens_match_float64(mixer):
    n = 100_000
    rng = np.random.default_rng(11)
    q, k, v, extra = _piece(rng, n, mixer)
    outs, st = [], None
    for a in range(0, n, 10_000):                       # the binding in pieces of 10k tokens
        sub = {key: x[a:a + 10_000] for key, x in extra.items()}
        o, st = _call(mixer, q[a:a + 10_000], k[a:a + 10_000], v[a:a + 10_000], sub, "recurrent", st)
        outs.append(o)
    o = np.concatenate(outs)
    if mixer == "retention":
        ro, rS = R.retention(q, k, v)
    elif mixer == "gdr":
        ro, rS = R.generalized_delta(q, k, v, extra["g"], extra["a"], extra["b"], scale=1.0)
    else:
        ro, rS = R.delta_rule(q, k, v, extra["beta"], g=extra["g"])
    assert np.isfinite(o).all()
    e_o = R.rel_rms(o[-2000:], ro[-2000:])
    e_s = R.rel_rms(st, rS)
    assert e_o <= TOL_F64, f"{mixer}: outputs over the last 2000 of 100k tokens: rel. RMS {e_o:.3e}"
    assert e_s <= TOL_F64, f"{mixer}: final state after 100k tokens: rel. RMS {e_s:.3e}"
    # and over the whole run, not just the end
    assert R.rel_rms(o, ro) <= TOL_F64
