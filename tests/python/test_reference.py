"""The float64 reference checks itself before it judges librecur: the token-by-token recurrences
of tests/reference/ref_mixers.py against two independent formulations, in float64 (no librecur):
  - the chunkwise PyTorch ops of tools/bench/torch_chunkwise.py (also the benchmark's PyTorch side),
  - the delta rule with its transition matrix written out, and the seeds' torch script.
Tolerance: 1e-10 relative RMS (float64 round-off over a few hundred steps)."""
import numpy as np
import pytest
import torch

import ref_mixers as R
import seeds_reference as SR
from bench import torch_chunkwise as TC

TOL64 = 1e-10


def _data(T, H, K, V, seed=0, normalize_k=False):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((T, H, K)), rng.standard_normal((T, H, K))
    if normalize_k:
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return q, k, rng.standard_normal((T, H, V)), rng


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


@pytest.mark.parametrize("chunk", [1, 5, 64, 1000])
def test_linear_reference_vs_chunkwise(chunk):
    q, k, v, _ = _data(150, 3, 16, 12)
    for fm, norm in (("elu1", True), ("relu", True), ("identity", False)):
        ro, (rS, rz) = R.linear_attention(q, k, v, normalize=norm, feature_map_name=fm)
        o, S, z = TC.linear_attention(_t(q), _t(k), _t(v), normalize=norm, feature_map=fm, chunk=chunk)
        assert R.rel_rms(o.numpy(), ro) < TOL64 and R.rel_rms(S.numpy(), rS) < TOL64


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_gated_reference_vs_chunkwise(chunk):
    q, k, v, rng = _data(150, 3, 16, 12)
    gam = np.array([0.5, 0.97, 1.0])
    ro, rS = R.retention(q, k, v, gamma=gam)
    o, S = TC.retention(_t(q), _t(k), _t(v), _t(gam), chunk=chunk)
    assert R.rel_rms(o.numpy(), ro) < TOL64 and R.rel_rms(S.numpy(), rS) < TOL64
    for gshape in ((150, 3), (150, 3, 16)):
        g = -rng.uniform(0.0, 8.0, gshape)
        S0 = rng.standard_normal((3, 16, 12))
        ro, rS = R.gla(q, k, v, g, initial_state=S0)
        o, S = TC.gla(_t(q), _t(k), _t(v), _t(g), chunk=chunk, S=_t(S0))
        assert R.rel_rms(o.numpy(), ro) < TOL64 and R.rel_rms(S.numpy(), rS) < TOL64


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_delta_reference_vs_chunkwise(chunk):
    q, k, v, rng = _data(150, 2, 16, 12, normalize_k=True)
    beta = rng.uniform(0.05, 1.0, (150, 2))
    S0 = rng.standard_normal((2, 16, 12))
    for g in (None, -rng.uniform(0.0, 6.0, (150, 2))):
        ro, rS = R.delta_rule(q, k, v, beta, g=g, initial_state=S0)
        o, S = TC.delta_rule(_t(q), _t(k), _t(v), _t(beta), g=None if g is None else _t(g),
                             chunk=chunk, S=_t(S0))
        assert R.rel_rms(o.numpy(), ro) < TOL64 and R.rel_rms(S.numpy(), rS) < TOL64
        do, dS = R.delta_rule_dense(q[:40], k[:40], v[:40], beta[:40],
                                    g=None if g is None else g[:40], initial_state=S0)
        ro, rS = R.delta_rule(q[:40], k[:40], v[:40], beta[:40],
                              g=None if g is None else g[:40], initial_state=S0)
        assert R.rel_rms(do, ro) < TOL64 and R.rel_rms(dS, rS) < TOL64


@pytest.mark.parametrize("chunk", [1, 7, 16, 17, 64, 1000])
def test_generalized_delta_reference_vs_chunkwise(chunk):
    """RWKV-7's generalized delta rule: the V x K recurrence of ref_mixers against the torch DPLR
    chunk form, with strong per-key decays, RWKV's erase (a = -kappa_hat, b = kappa_hat a_gate)
    and a general b; a = 0 is GLA with per-key gates."""
    q, k, v, rng = _data(150, 2, 16, 12)
    S0 = rng.standard_normal((2, 16, 12))
    kh = rng.standard_normal((150, 2, 16))
    kh /= np.linalg.norm(kh, axis=-1, keepdims=True)
    gate = rng.uniform(0.05, 0.95, (150, 2, 16))
    for g, a, b in ((-rng.uniform(0.0, 8.0, (150, 2, 16)), -kh, kh * gate),
                    (-rng.uniform(0.0, 0.6, (150, 2, 16)), -kh, (kh + 0.5 * rng.standard_normal(kh.shape)) * gate),
                    (-rng.uniform(0.0, 3.0, (150, 2, 16)), 0 * kh, kh)):
        ro, rS = R.generalized_delta(q, k, v, g, a, b, initial_state=S0)
        o, S = TC.generalized_delta(_t(q), _t(k), _t(v), _t(g), _t(a), _t(b), chunk=chunk, S=_t(S0))
        assert R.rel_rms(o.numpy(), ro) < TOL64 and R.rel_rms(S.numpy(), rS) < TOL64
        if not a.any():
            go, gS = R.gla(q, k, v, g, initial_state=S0)
            assert R.rel_rms(go, ro) < TOL64 and R.rel_rms(gS, rS) < TOL64


def test_reference_vs_seeds_script():
    rng = np.random.default_rng(1)
    L, d = 13, 6
    Q, K, V = (rng.standard_normal((L, d)) for _ in range(3))
    o, _ = R.linear_attention(Q[:, None], K[:, None], V[:, None], normalize=False,
                              feature_map_name="identity", scale=1.0)
    assert np.abs(o[:, 0] - SR.linear_attn_recurrent(_t(Q), _t(K), _t(V)).numpy()).max() < 1e-12
    Kn = K / np.linalg.norm(K, axis=1, keepdims=True)
    beta = rng.uniform(0.1, 1.0, L)
    _, S = R.delta_rule(Q[:, None], Kn[:, None], V[:, None], beta[:, None])
    seeds_S = SR.delta_rule_recurrent(_t(Kn), _t(V), _t(beta))[-1].numpy()   # [d_v, d_k]
    assert np.abs(S[0] - seeds_S.T).max() < 1e-12
    for Lf in (12, 13):
        Qf, Kf, Vf = (rng.standard_normal((Lf, d)) for _ in range(3))
        out, keep = SR.block_topk_attention(_t(Qf), _t(Kf), _t(Vf), block=4, topk=2)
        o, rkeep, _ = R.block_topk_attention(Qf[:, None], Kf[:, None], Vf[:, None], block=4, topk=2,
                                             causal=False)
        assert np.abs(o[:, 0] - out.numpy()).max() < 1e-12
        assert np.array_equal(rkeep[:, 0], keep.numpy())


def test_softmax_reference_is_block_topk_with_every_block():
    q, k, v, _ = _data(50, 2, 8, 8)
    o1 = R.softmax_attention(q, k, v)
    o2, keep, _ = R.block_topk_attention(q, k, v, block=4, topk=13, causal=True)
    assert R.rel_rms(o2, o1) < TOL64
    # hand-written check of one row
    t, h = 17, 1
    w = np.exp(q[t, h] @ k[: t + 1, h].T / np.sqrt(8))
    assert np.allclose(o1[t, h], (w / w.sum()) @ v[: t + 1, h], rtol=1e-12, atol=1e-12)
