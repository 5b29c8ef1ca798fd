"""The six sanity checks (a)-(f) of the seeds' reference script, reproduced against librecur
through the binding, with the seeds' own torch functions (tests/reference/seeds_reference.py,
run in float64) as the oracle where the script has one.

Mapping of the script's conventions onto librecur:
  - its linear attention has no feature map, no normaliser and no scale: librecur's
    linear_attention(feature_map="identity", normalize=False, scale=1.0) on one head;
  - its delta-rule state is [d_v, d_k] = S^T of librecur's key-major [K, V];
  - "additive" S += v k^T is librecur's unnormalised identity linear attention (also retention
    with gamma = 1 and gla with g = 0);
  - block_topk_attention is librecur's causal=False with the default scale d^-1/2.
Tolerances are the script's: 1e-5 absolute for (a), (b), (e), (f); (d) 1e-5 in float32.
"""
import numpy as np
import pytest
import torch

import recur
import seeds_reference as SR

L, D = 13, 6
SIZES = [1, 4, 7, L]
FORMS = ("recurrent", "parallel", "chunkwise")


@pytest.fixture(scope="module")
def qkv():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((L, D)).astype(np.float32) for _ in range(3))


def _t64(x):
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def _lin(Q, K, V, form="chunkwise", C=64):
    o, (S, _) = recur.linear_attention(Q[:, None], K[:, None], V[:, None], normalize=False,
                                       feature_map="identity", scale=1.0, form=form, chunk_size=C)
    return o[:, 0], S[0]


def test_a_chunkwise_equals_recurrent(qkv):
    """(a) chunkwise == recurrent for C in {1, 4, 7, L}: librecur against the script's
    linear_attn_recurrent (float64) and its own recurrent form; max |diff| < 1e-5."""
    Q, K, V = qkv
    ref = SR.linear_attn_recurrent(_t64(Q), _t64(K), _t64(V)).numpy()
    rec, _ = _lin(Q, K, V, form="recurrent")
    assert np.abs(rec - ref).max() < 1e-5
    for C in SIZES:
        o, _ = _lin(Q, K, V, C=C)
        assert np.abs(o - ref).max() < 1e-5, f"C={C}: {np.abs(o - ref).max():.2e}"
        assert np.abs(o - rec).max() < 1e-5
        # the script's own chunkwise agrees too (it is the thing being mirrored)
        sc = SR.linear_attn_chunkwise(_t64(Q), _t64(K), _t64(V), C=C).numpy()
        assert np.abs(o - sc).max() < 1e-5


def test_b_chunk_size_invariance(qkv):
    """(b) every chunk size gives the same output (allclose atol 1e-5), and parallel too."""
    Q, K, V = qkv
    outs = [_lin(Q, K, V, C=C)[0] for C in SIZES] + [_lin(Q, K, V, form="parallel")[0]]
    for o in outs[1:]:
        assert np.allclose(o, outs[0], atol=1e-5, rtol=0)


def test_c_state_shape_independent_of_L(qkv):
    """(c) the state is [d_k, d_v] whatever the length: decode token by token through the
    recurrent form, and prefill at several L, for every recurrent mixer."""
    Q, K, V = qkv
    shapes = set()
    st = None
    for t in range(L):
        _, st = recur.linear_attention(Q[t:t + 1, None], K[t:t + 1, None], V[t:t + 1, None],
                                       normalize=False, feature_map="identity", scale=1.0,
                                       form="recurrent", initial_state=st)
        shapes.add((st[0].shape, st[1].shape))
    assert shapes == {((1, D, D), (1, D))}
    rng = np.random.default_rng(1)
    for n in (1, L, 1000):
        q, k, v = (rng.standard_normal((n, 1, D)).astype(np.float32) for _ in range(3))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        g = np.full((n, 1), -0.1, np.float32)
        beta = np.full((n, 1), 0.5, np.float32)
        states = [recur.linear_attention(q, k, v)[1][0], recur.retention(q, k, v)[1],
                  recur.gla(q, k, v, g)[1], recur.delta_rule(q, k, v, beta)[1],
                  recur.delta_rule(q, k, v, beta, g=g)[1]]
        assert {s.shape for s in states} == {(1, D, D)}


def _additive_state(Kn, V):
    S = np.zeros((D, D))
    for t in range(len(Kn)):
        S += np.outer(V[t], Kn[t])            # the script's plain S += v k^T  ([d_v, d_k])
    return S


@pytest.mark.parametrize("form", FORMS)
def test_d_no_erase_beta1_is_additive(qkv, form):
    """(d) the delta rule with the erase term dropped and beta = 1 is additive linear attention.
    librecur has no "drop the erase term" switch; its additive mixers (identity linear attention,
    retention with gamma = 1, gla with g = 0) must equal the script's
    delta_rule_recurrent(use_delta=False, beta=1) state (transposed), within 1e-5."""
    _, _, V = qkv
    rng = np.random.default_rng(2)
    Kn = rng.standard_normal((L, D))
    Kn = (Kn / np.linalg.norm(Kn, axis=1, keepdims=True)).astype(np.float32)
    Q = rng.standard_normal((L, D)).astype(np.float32)
    seeds_S = SR.delta_rule_recurrent(_t64(Kn), _t64(V), torch.ones(L, dtype=torch.float64),
                                      use_delta=False)[-1].numpy()
    assert np.allclose(seeds_S, _additive_state(Kn, V), atol=1e-12)
    S_lin = _lin(Q, Kn, V, form=form, C=4)[1]
    S_ret = recur.retention(Q[:, None], Kn[:, None], V[:, None], gamma=np.ones(1, np.float32),
                            form=form, chunk_size=4)[1][0]
    S_gla = recur.gla(Q[:, None], Kn[:, None], V[:, None], np.zeros((L, 1), np.float32),
                      form=form, chunk_size=4)[1][0]
    for name, S in (("linear", S_lin), ("retention gamma=1", S_ret), ("gla g=0", S_gla)):
        assert np.abs(S.T - seeds_S).max() < 1e-5, f"{name} {form}: {np.abs(S.T - seeds_S).max():.2e}"


@pytest.mark.parametrize("form", FORMS)
def test_e_overwrite_term(qkv, form):
    """(e) librecur's delta rule with beta = 1: for non-orthogonal unit keys it differs from
    additive (||diff|| > 1e-3) and equals the script's delta_rule_recurrent (1e-5); for L = d
    orthonormal keys it equals additive (max |diff| < 1e-5)."""
    _, _, V = qkv
    rng = np.random.default_rng(3)
    Kn = rng.standard_normal((L, D))
    Kn = (Kn / np.linalg.norm(Kn, axis=1, keepdims=True)).astype(np.float32)
    Q = rng.standard_normal((L, D)).astype(np.float32)
    ones = np.ones((L, 1), np.float32)
    _, S = recur.delta_rule(Q[:, None], Kn[:, None], V[:, None], ones, form=form, chunk_size=4)
    seeds_delta = SR.delta_rule_recurrent(_t64(Kn), _t64(V), torch.ones(L, dtype=torch.float64))[-1].numpy()
    seeds_add = SR.delta_rule_recurrent(_t64(Kn), _t64(V), torch.ones(L, dtype=torch.float64),
                                        use_delta=False)[-1].numpy()
    assert np.abs(S[0].T - seeds_delta).max() < 1e-5
    assert np.linalg.norm(S[0].T - seeds_add) > 1e-3, "overwrite term inactive"
    # orthonormal keys (QR of a random matrix, as the script's orthonormal_rows)
    Ko = np.linalg.qr(rng.standard_normal((D, D)))[0].T.astype(np.float32)
    Vo = rng.standard_normal((D, D)).astype(np.float32)
    Qo = rng.standard_normal((D, D)).astype(np.float32)
    _, So = recur.delta_rule(Qo[:, None], Ko[:, None], Vo[:, None], np.ones((D, 1), np.float32),
                             form=form, chunk_size=4)
    So_add = _lin(Qo, Ko, Vo, form=form, C=4)[1]
    assert np.abs(So[0] - So_add).max() < 1e-5
    seeds_o = SR.delta_rule_recurrent(_t64(Ko), _t64(Vo), torch.ones(D, dtype=torch.float64))[-1].numpy()
    assert np.abs(So[0].T - seeds_o).max() < 1e-5


@pytest.mark.parametrize("Lf", [12, 13])
def test_f_block_topk_noncausal(Lf):
    """(f) non-causal block top-k (block 4, top 2): exactly min(2, n_blocks) blocks per query,
    softmax rows sum to 1 (v = 1 gives o = 1), output and keep mask equal to the script's
    block_topk_attention (float64) within 1e-5."""
    rng = np.random.default_rng(Lf)
    Qf, Kf, Vf = (rng.standard_normal((Lf, D)).astype(np.float32) for _ in range(3))
    o, keep = recur.block_topk_attention(Qf[:, None], Kf[:, None], Vf[:, None], block=4, topk=2,
                                         causal=False)
    nblk = (Lf + 3) // 4
    assert keep.shape == (Lf, 1, nblk) and o.shape == (Lf, 1, D)
    assert (keep.sum(-1) == min(2, nblk)).all()
    ones, _ = recur.block_topk_attention(Qf[:, None], Kf[:, None], np.ones((Lf, 1, D), np.float32),
                                         block=4, topk=2, causal=False)
    assert np.allclose(ones, 1.0, atol=1e-5, rtol=0)
    ref_o, ref_keep = SR.block_topk_attention(_t64(Qf), _t64(Kf), _t64(Vf), block=4, topk=2)
    assert np.array_equal(keep[:, 0], ref_keep.numpy())
    assert np.abs(o[:, 0] - ref_o.numpy()).max() < 1e-5
