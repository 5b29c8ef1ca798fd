"""Every librecur mixer x form against the independent float64 reference (tests/reference).

Tolerance (issue 2): relative RMS error <= 1e-5 of outputs and final states, for every mixer,
form, shape, chunk size, gate regime and split. Chunk size never changes the result: every chunk
size meets the same bound against the reference, and any two chunk sizes agree within 2e-5.
Bad input raises ValueError carrying the C message, and touches none of the caller's arrays.

Axes (each value covered at least once per mixer and form, not every combination):
  shapes  H = 1..8, K in {16, 60, 64, 100}, V != K, T in {1, 63, 64, 65, 1000}
  chunks  {1, 3, 16, 64, T}
  gates   zero, mild, strong (mixer_cases.gates)
"""
import functools

import numpy as np
import pytest

import recur
import ref_mixers as R
from mixer_cases import (GATED, MIXERS, REGIMES, make_case, random_state, run_c, run_ref,
                         sliced, state_err)

TOL = 1e-5          # rel. RMS vs the float64 reference
TOL_CHUNKS = 2e-5   # rel. RMS between two chunk sizes / split vs single call
FORMS = ("recurrent", "parallel", "chunkwise")

# (T, H, K, V): H covers 1..8; K covers 16, 60, 64, 100; T covers 1, 63, 64, 65, 1000.
SHAPES = [
    (1, 3, 16, 24),
    (63, 2, 60, 60),
    (64, 1, 64, 64),
    (65, 4, 100, 48),
    (1000, 8, 16, 32),
    (200, 5, 64, 100),
    (130, 6, 16, 16),
    (65, 7, 60, 20),
]


@functools.lru_cache(maxsize=None)
def case_and_ref(mixer, shape, regime):
    c = make_case(mixer, *shape, regime=regime)
    return c, run_ref(c)


def _regime(mixer, regime="mild"):
    return regime if mixer in GATED else None


def check(o, st, ref_o, ref_st, what, tol=TOL):
    assert np.all(np.isfinite(o)), f"{what}: non-finite output"
    eo, es = R.rel_rms(o, ref_o), state_err(st, ref_st)
    assert eo <= tol, f"{what}: output rel. RMS error {eo:.3e} > {tol:g}"
    assert es <= tol, f"{what}: final state rel. RMS error {es:.3e} > {tol:g}"


# ---------------------------------------------------------------- every mixer x form x shape

@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "T%d-H%d-K%d-V%d" % s)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mixer", list(MIXERS))
def test_form_matches_reference(mixer, form, shape):
    c, (ro, rs) = case_and_ref(mixer, shape, _regime(mixer))
    o, st = run_c(c, form=form)
    assert o.shape == (shape[0], shape[1], shape[3]) and o.dtype == np.float32
    assert st[0].shape == (shape[1], shape[2], shape[3]) and st[0].dtype == np.float32
    check(o, st, ro, rs, f"{mixer} {form} {shape}")


# ---------------------------------------------------------------- chunk size invariance

CHUNK_SHAPES = [(65, 4, 100, 48), (1000, 2, 64, 32)]


@pytest.mark.parametrize("shape", CHUNK_SHAPES, ids=lambda s: "T%d-H%d-K%d-V%d" % s)
@pytest.mark.parametrize("mixer", list(MIXERS))
def test_chunk_size_never_changes_result(mixer, shape):
    T = shape[0]
    regime = _regime(mixer, "mild")     # strong gates x all chunk sizes: test_gate_regimes
    c, (ro, rs) = case_and_ref(mixer, shape, regime)
    outs = {}
    for C in (1, 3, 16, 64, T, T + 7):       # a chunk larger than T is one chunk
        o, st = run_c(c, form="chunkwise", chunk_size=C)
        check(o, st, ro, rs, f"{mixer} chunkwise C={C} {shape} {regime}")
        outs[C] = (o, st)
    o1, s1 = outs[1]
    for C, (o, st) in outs.items():
        d = max(R.rel_rms(o, o1), state_err(st, s1))
        assert d <= TOL_CHUNKS, f"{mixer}: chunk {C} vs chunk 1 differ by {d:.3e} > {TOL_CHUNKS:g}"


# ---------------------------------------------------------------- gate regimes

@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mixer", GATED)
def test_gate_regimes(mixer, form, regime):
    shape = (200, 3, 64, 48)
    c, (ro, rs) = case_and_ref(mixer, shape, regime)
    for C in ((1, 3, 16, 64, 200) if form == "chunkwise" else (64,)):
        o, st = run_c(c, form=form, chunk_size=C)
        check(o, st, ro, rs, f"{mixer} {form} C={C} regime={regime}")


@pytest.mark.parametrize("form", ["parallel", "chunkwise"])
@pytest.mark.parametrize("mixer", GATED)
def test_strong_gates_one_long_chunk(mixer, form):
    """Strong gates over one 1000-token chunk: the in-chunk cumulative log decay reaches ~ -4000,
    where float32 spacing is ~2.4e-4, so a float32 prefix sum makes b_t - b_j wrong by that much
    (a float32 PyTorch version of this op measured 1.6e-5 to 2e-5 here). librecur accumulates the
    gates in double; the general bound 1e-5 applies."""
    c, (ro, rs) = case_and_ref(mixer, (1000, 2, 64, 32), "strong")
    o, st = run_c(c, form=form, chunk_size=1000)
    check(o, st, ro, rs, f"{mixer} {form} one chunk of 1000, strong gates")


def test_zero_gate_equals_ungated():
    """gla with g = 0 is linear attention without feature map / normaliser; gated DeltaNet with
    g = 0 is DeltaNet; retention with gamma = exp(g) is gla with a constant scalar gate."""
    T, H, K, V = 100, 2, 16, 24
    c = make_case("gla_scalar", T, H, K, V, regime="zero")
    o1, (S1,) = run_c(c)
    o2, (S2, _) = recur.linear_attention(c["q"], c["k"], c["v"], normalize=False,
                                         feature_map="identity")
    assert R.rel_rms(o1, o2) <= TOL and R.rel_rms(S1, S2) <= TOL
    d = make_case("gated_deltanet", T, H, K, V, regime="zero")
    o3, (S3,) = run_c(d)
    o4, S4 = recur.delta_rule(d["q"], d["k"], d["v"], d["beta"])
    assert R.rel_rms(o3, o4) <= TOL and R.rel_rms(S3, S4) <= TOL
    gam = np.array([0.9, 0.5], np.float32)
    o5, S5 = recur.retention(c["q"], c["k"], c["v"], gamma=gam)
    o6, S6 = recur.gla(c["q"], c["k"], c["v"], np.tile(np.log(gam), (T, 1)).astype(np.float32))
    assert R.rel_rms(o5, o6) <= TOL and R.rel_rms(S5, S6) <= TOL


# ---------------------------------------------------------------- generalized delta rule (RWKV-7)

def _gdr_case(T, H, K, V, regime, erase, seed=0):
    from mixer_cases import erase_vectors
    c = make_case("gdr_rwkv", T, H, K, V, regime=regime, seed=seed)
    c["a"], c["b"] = erase_vectors(np.random.default_rng([seed, 99]), c["k"], erase)
    return c


@pytest.mark.parametrize("regime", REGIMES)
def test_gdr_zero_erase_is_gla_per_key(regime):
    """a = 0 leaves S_t = Diag(e^g) S + k v^T: GLA with per-key gates, in every form."""
    c = _gdr_case(150, 3, 60, 40, regime, "zero")
    init = random_state(c)
    ro, rs = R.gla(c["q"], c["k"], c["v"], c["g"], initial_state=init[0])
    for form in FORMS:
        for C in ((1, 16, 64, 150) if form == "chunkwise" else (64,)):
            o, st = run_c(c, form=form, chunk_size=C, initial_state=init)
            check(o, st, ro, (rs,), f"gdr a=0 {form} C={C} regime={regime}")
            og, Sg = recur.gla(c["q"], c["k"], c["v"], c["g"], form=form, chunk_size=C,
                               initial_state=init[0])
            d = max(R.rel_rms(o, og), R.rel_rms(st[0], Sg))
            assert d <= TOL_CHUNKS, f"gdr a=0 vs gla {form} C={C}: {d:.3e}"


@pytest.mark.parametrize("regime", REGIMES)
def test_gdr_erase_orthogonal_to_key(regime):
    """kappa_hat orthogonal to k_t: the erase never touches what token t writes."""
    c = _gdr_case(200, 2, 64, 48, regime, "ortho")
    ro, rs = run_ref(c)
    for form in FORMS:
        for C in ((3, 64) if form == "chunkwise" else (64,)):
            o, st = run_c(c, form=form, chunk_size=C)
            check(o, st, ro, rs, f"gdr kappa_hat _|_ k {form} C={C} regime={regime}")


def test_gdr_recurrent_equals_chunkwise_on_16k_tokens():
    """16,384 tokens, RWKV-7's decays (w = exp(-e^-0.5 sigmoid(x))) and erase, scale 1:
    chunkwise (64) = recurrent within 1e-5 rel. RMS of every output and the final state."""
    T, H, K, V = 16384, 2, 64, 64
    rng = np.random.default_rng(16)
    c = _gdr_case(T, H, K, V, "zero", "rwkv", seed=16)
    c["g"] = (-np.exp(-0.5) / (1.0 + np.exp(-2.0 * rng.standard_normal((T, H, K))))).astype(np.float32)
    o_r, (S_r,) = run_c(c, form="recurrent", scale=1.0)
    o_c, (S_c,) = run_c(c, form="chunkwise", chunk_size=64, scale=1.0)
    assert np.isfinite(o_c).all() and np.isfinite(S_c).all()
    eo, es = R.rel_rms(o_c, o_r), R.rel_rms(S_c, S_r)
    assert eo <= TOL and es <= TOL, f"16k tokens: chunkwise vs recurrent o {eo:.3e}, S {es:.3e}"


def test_gdr_bad_arguments_raise():
    q, k, v, g, gv, beta, S, z = _base()
    a, b = -k, 0.5 * k
    arrs = [q, k, v, gv, a, b, S]
    for bad, code in ((0.1, recur.RECUR_ERANGE), (np.nan, recur.RECUR_ENONFINITE),
                      (np.inf, recur.RECUR_ENONFINITE)):
        gb = _with(gv, (5, 1, 7), bad)
        for form in FORMS:
            _expect_error(lambda: recur.generalized_delta(q, k, v, gb, a, b, form=form, chunk_size=4,
                                                          initial_state=S), arrs + [gb], code)
    for bad in (np.nan, -np.inf):
        for which in range(2):
            ab = [a, b]
            ab[which] = _with(ab[which], (19, 0, 15), bad)
            _expect_error(lambda: recur.generalized_delta(q, k, v, gv, *ab, initial_state=S),
                          arrs + ab, recur.RECUR_ENONFINITE)
    E = recur.RECUR_ESHAPE
    for fn in (lambda: recur.generalized_delta(q, k, v, g, a, b),              # g per head
               lambda: recur.generalized_delta(q, k, v, gv, a[:, :, :8], b),
               lambda: recur.generalized_delta(q, k, v, gv, a, b[:10]),
               lambda: recur.generalized_delta(q, k, v, gv, a, b, initial_state=S[:, :8])):
        _expect_error(fn, arrs, E)
    _expect_error(lambda: recur.generalized_delta(q, k, v, gv, a, b, chunk_size=0), arrs, E)


# ---------------------------------------------------------------- split-resume and decode

@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mixer", list(MIXERS))
def test_split_resume_equals_one_call(mixer, form):
    T = 150
    c, (ro, rs) = case_and_ref(mixer, (T, 3, 60, 40), _regime(mixer))
    o_one, s_one = run_c(c, form=form, chunk_size=16)
    for cut in (1, 37, 64, 149):
        oa, sa = run_c(sliced(c, 0, cut), form=form, chunk_size=16)
        ob, sb = run_c(sliced(c, cut, T), form=form, chunk_size=16, initial_state=sa)
        o = np.concatenate([oa, ob])
        d = max(R.rel_rms(o, o_one), state_err(sb, s_one))
        assert d <= TOL_CHUNKS, f"{mixer} {form} split at {cut}: differs from one call by {d:.3e}"
        check(o, sb, ro, rs, f"{mixer} {form} split at {cut}")
    # several uneven pieces, each with a non-zero state from the last
    st, outs = None, []
    for a, b in ((0, 5), (5, 6), (6, 70), (70, 71), (71, 150)):
        o, st = run_c(sliced(c, a, b), form=form, chunk_size=16, initial_state=st)
        outs.append(o)
    check(np.concatenate(outs), st, ro, rs, f"{mixer} {form} five pieces")


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_decode_steps_equal_prefill(mixer):
    """T = 1 calls of the recurrent form (the decode step) after a chunkwise prefill."""
    T, cut = 90, 70
    c, (ro, rs) = case_and_ref(mixer, (T, 2, 64, 64), _regime(mixer))
    o, st = run_c(sliced(c, 0, cut), form="chunkwise", chunk_size=64)
    outs = [o]
    for t in range(cut, T):
        o, st = run_c(sliced(c, t, t + 1), form="recurrent", initial_state=st)
        outs.append(o)
    check(np.concatenate(outs), st, ro, rs, f"{mixer} prefill + decode")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mixer", list(MIXERS))
def test_initial_state_is_used_and_not_mutated(mixer, form):
    c = make_case(mixer, 40, 2, 16, 20, regime=_regime(mixer))
    init = random_state(c)
    saved = [x.copy() for x in init]
    o, st = run_c(c, form=form, chunk_size=7, initial_state=init)
    for a, b in zip(init, saved):
        assert np.array_equal(a, b), "the caller's initial_state was modified"
    ro, rs = run_ref(c, initial_state=init)
    check(o, st, ro, rs, f"{mixer} {form} with initial state")
    assert all(x is not y for x, y in zip(st, init))


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_empty_sequence_keeps_state(mixer):
    c = make_case(mixer, 0, 2, 16, 8, regime=_regime(mixer))
    init = random_state(c)
    for form in FORMS:
        o, st = run_c(c, form=form, initial_state=init)
        assert o.shape == (0, 2, 8)
        for a, b in zip(st, init):
            assert np.array_equal(a, b)


# ---------------------------------------------------------------- constant state size

@pytest.mark.parametrize("mixer", list(MIXERS))
def test_state_size_independent_of_T(mixer):
    H, K, V = 2, 16, 24
    sizes = set()
    for T in (1, 65, 1000):
        c = make_case(mixer, T, H, K, V, regime=_regime(mixer))
        for form in FORMS:
            _, st = run_c(c, form=form)
            sizes.add(tuple((x.shape, x.nbytes) for x in st))
    assert len(sizes) == 1, f"state size depends on T: {sizes}"
    (shape_S, nbytes_S) = sizes.pop()[0]
    assert shape_S == (H, K, V) and nbytes_S == H * K * V * 4


# ---------------------------------------------------------------- scale, dtypes, layouts

@pytest.mark.parametrize("mixer", ["linear_elu1", "retention", "gla_vector", "gated_deltanet",
                                   "gdr_rwkv"])
def test_explicit_scale(mixer):
    c = make_case(mixer, 70, 2, 16, 16, regime=_regime(mixer))
    ro, rs = run_ref(c, scale=0.37)
    for form in FORMS:
        o, st = run_c(c, form=form, chunk_size=16, scale=0.37)
        check(o, st, ro, rs, f"{mixer} {form} scale=0.37")


def test_float64_and_strided_inputs_are_converted():
    c = make_case("gla_vector", 50, 3, 16, 16)
    o, S = recur.gla(c["q"], c["k"], c["v"], c["g"])
    # float64 inputs, and non-contiguous views with the same values
    q2 = np.asfortranarray(c["q"].astype(np.float64))
    k2 = np.concatenate([c["k"], c["k"]], axis=2)[:, :, :16]
    v2 = c["v"][::-1][::-1]
    g2 = np.transpose(np.transpose(c["g"]).copy())
    assert not k2.flags.c_contiguous and not g2.flags.c_contiguous
    o2, S2 = recur.gla(q2, k2, v2, g2)
    assert np.array_equal(o, o2) and np.array_equal(S, S2)


def test_multiscale_decays():
    for H in (1, 4, 8, 13):
        g = recur.multiscale_decays(H)
        assert g.shape == (H,) and g.dtype == np.float32
        assert np.allclose(g, R.multiscale_decays(H), rtol=0, atol=1e-7)
    c = make_case("retention", 30, 4, 16, 16)
    o1, S1 = recur.retention(c["q"], c["k"], c["v"])
    o2, S2 = recur.retention(c["q"], c["k"], c["v"], gamma=recur.multiscale_decays(4))
    assert np.allclose(o1, o2, rtol=1e-6, atol=1e-7) and np.allclose(S1, S2, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- softmax and block top-k

@pytest.mark.parametrize("shape", [(1, 1, 16, 8), (63, 3, 60, 60), (65, 8, 100, 24),
                                   (300, 2, 64, 64)], ids=lambda s: "T%d-H%d-K%d-V%d" % s)
def test_softmax_attention(shape):
    rng = np.random.default_rng(list(shape))
    T, H, K, V = shape
    q = (rng.standard_normal((T, H, K)) * 2).astype(np.float32)
    k = rng.standard_normal((T, H, K)).astype(np.float32)
    v = rng.standard_normal((T, H, V)).astype(np.float32)
    o = recur.softmax_attention(q, k, v)
    assert o.shape == (T, H, V) and o.dtype == np.float32
    e = R.rel_rms(o, R.softmax_attention(q, k, v))
    assert e <= TOL, f"softmax {shape}: rel. RMS {e:.3e}"
    e = R.rel_rms(recur.softmax_attention(q, k, v, scale=0.5), R.softmax_attention(q, k, v, scale=0.5))
    assert e <= TOL, f"softmax scale=0.5 {shape}: rel. RMS {e:.3e}"
    # the first token attends to itself only
    assert np.allclose(o[0], v[0], rtol=1e-6, atol=1e-6)


BLOCK_CASES = [  # (T, H, K, V, block, topk)
    (12, 1, 16, 16, 4, 2), (13, 2, 16, 8, 4, 2), (64, 3, 60, 60, 16, 2), (65, 2, 64, 32, 16, 3),
    (130, 4, 16, 24, 64, 2), (100, 2, 100, 16, 7, 5), (40, 2, 16, 16, 1, 3), (50, 1, 16, 16, 8, 99),
    (1, 2, 16, 8, 64, 2),
]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("case", BLOCK_CASES, ids=lambda c: "T%d-H%d-K%d-V%d-b%d-k%d" % c)
def test_block_topk_attention(case, causal):
    T, H, K, V, block, topk = case
    rng = np.random.default_rng(list(case) + [causal])
    q = (rng.standard_normal((T, H, K)) * 2).astype(np.float32)
    k = rng.standard_normal((T, H, K)).astype(np.float32)
    v = rng.standard_normal((T, H, V)).astype(np.float32)
    o, keep = recur.block_topk_attention(q, k, v, block=block, topk=topk, causal=causal)
    nb = -(-T // block)
    assert o.shape == (T, H, V) and keep.shape == (T, H, nb) and keep.dtype == bool
    ro, rkeep, bscore = R.block_topk_attention(q, k, v, block=block, topk=topk, causal=causal)
    # rows whose k-th and (k+1)-th block scores are within float32 noise may legitimately differ
    ok = np.ones((T, H), dtype=bool)
    for t in range(T):
        for h in range(H):
            s = np.sort(bscore[t, h][~np.isnan(bscore[t, h])])[::-1]
            if topk < len(s) and s[topk - 1] - s[topk] < 1e-5:
                ok[t, h] = False
    assert ok.mean() > 0.95
    assert np.array_equal(keep[ok], rkeep[ok]), "kept blocks differ from the reference"
    e = R.rel_rms(o[ok], ro[ok])
    assert e <= TOL, f"block top-k {case} causal={causal}: rel. RMS {e:.3e}"
    # exactly min(topk, candidates) blocks per query; causal never keeps a future-only block
    n_cand = np.minimum(np.arange(T) // block + 1, nb) if causal else np.full(T, nb)
    assert np.array_equal(keep.sum(-1), np.minimum(topk, n_cand)[:, None].repeat(H, 1))
    if causal:
        fut = np.arange(nb)[None, :] * block > np.arange(T)[:, None]
        assert not keep[fut[:, None, :].repeat(H, 1)].any()
    # softmax weights sum to 1: with v = 1 every output is 1
    o1, _ = recur.block_topk_attention(q, k, np.ones_like(v), block=block, topk=topk, causal=causal)
    assert np.allclose(o1, 1.0, rtol=0, atol=1e-5)


def test_block_topk_keeping_everything_is_softmax():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((70, 2, 16)).astype(np.float32) for _ in range(3))
    o, keep = recur.block_topk_attention(q, k, v, block=8, topk=9, causal=True)
    assert R.rel_rms(o, recur.softmax_attention(q, k, v)) <= TOL


# ---------------------------------------------------------------- invalid arguments

def _snapshot(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _unchanged(args, saved):
    for a, b in zip(args, saved):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b, equal_nan=True), "an input array was modified"


def _base(T=20, H=2, K=16, V=8, seed=3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((T, H, K)).astype(np.float32)
    k = rng.standard_normal((T, H, K)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((T, H, V)).astype(np.float32)
    g = -rng.uniform(0.01, 0.5, (T, H)).astype(np.float32)
    gv = -rng.uniform(0.01, 0.5, (T, H, K)).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (T, H)).astype(np.float32)
    S = rng.standard_normal((H, K, V)).astype(np.float32)
    z = rng.uniform(0.5, 1, (H, K)).astype(np.float32)
    return q, k, v, g, gv, beta, S, z


def _expect_error(fn, arrays, code=None):
    saved = _snapshot(arrays)
    with pytest.raises(ValueError) as ei:
        fn()
    _unchanged(arrays, saved)
    if code is not None:
        msg = recur.strerror(code)
        assert str(ei.value).startswith(msg), f"message {str(ei.value)!r} lacks {msg!r}"
    return ei.value


def _with(a, idx, val):
    b = a.copy()
    b[idx] = val
    return b


@pytest.mark.parametrize("form", FORMS)
def test_bad_gates_raise(form):
    q, k, v, g, gv, beta, S, z = _base()
    kw = dict(form=form, chunk_size=4)
    for bad, code in ((0.1, recur.RECUR_ERANGE), (1e-6, recur.RECUR_ERANGE),
                      (np.nan, recur.RECUR_ENONFINITE), (np.inf, recur.RECUR_ENONFINITE),
                      (-np.inf, recur.RECUR_ENONFINITE)):
        gb, gvb = _with(g, (13, 1), bad), _with(gv, (5, 0, 7), bad)
        arrs = [q, k, v, gb, gvb, beta, S]
        _expect_error(lambda: recur.gla(q, k, v, gb, initial_state=S, **kw), arrs, code)
        _expect_error(lambda: recur.gla(q, k, v, gvb, initial_state=S, **kw), arrs, code)
        _expect_error(lambda: recur.delta_rule(q, k, v, beta, g=gb, initial_state=S, **kw), arrs, code)


@pytest.mark.parametrize("form", FORMS)
def test_bad_gamma_and_beta_raise(form):
    q, k, v, g, gv, beta, S, z = _base()
    kw = dict(form=form, chunk_size=4)
    for bad, code in ((0.0, recur.RECUR_ERANGE), (-0.5, recur.RECUR_ERANGE), (1.5, recur.RECUR_ERANGE),
                      (1.0000001, recur.RECUR_ERANGE), (np.nan, recur.RECUR_ENONFINITE),
                      (np.inf, recur.RECUR_ENONFINITE)):
        gam = np.array([0.9, bad], np.float32)
        _expect_error(lambda: recur.retention(q, k, v, gamma=gam, initial_state=S, **kw),
                      [q, k, v, gam, S], code)
    for bad, code in ((0.0, recur.RECUR_ERANGE), (-0.1, recur.RECUR_ERANGE), (2.5, recur.RECUR_ERANGE),
                      (2.0001, recur.RECUR_ERANGE), (np.nan, recur.RECUR_ENONFINITE),
                      (-np.inf, recur.RECUR_ENONFINITE)):
        bb = _with(beta, (19, 0), bad)
        _expect_error(lambda: recur.delta_rule(q, k, v, bb, initial_state=S, **kw), [q, k, v, bb, S], code)
        _expect_error(lambda: recur.delta_rule(q, k, v, bb, g=g, initial_state=S, **kw),
                      [q, k, v, bb, g, S], code)
    # boundary values that are allowed: gamma = 1 and beta = 2 (recur.h: (0,1], (0,2])
    recur.retention(q, k, v, gamma=np.array([1.0, 1.0], np.float32), **kw)
    recur.delta_rule(q, k, v, np.ones_like(beta), **kw)
    recur.delta_rule(q, k, v, 2 * np.ones_like(beta), **kw)


def test_bad_shapes_raise():
    q, k, v, g, gv, beta, S, z = _base()
    E = recur.RECUR_ESHAPE
    arrs = [q, k, v, g, gv, beta, S, z]
    cases = [
        lambda: recur.linear_attention(q, k[:, :, :8], v),             # K mismatch
        lambda: recur.linear_attention(q, k, v[:10]),                   # T mismatch
        lambda: recur.linear_attention(q, k[:, :1], v),                 # H mismatch
        lambda: recur.linear_attention(q[0], k[0], v[0]),               # 2-D
        lambda: recur.linear_attention(q, k, v, initial_state=(S[:, :, :4], z)),
        lambda: recur.linear_attention(q, k, v, initial_state=(S, z[:, :4])),
        lambda: recur.retention(q, k, v, gamma=np.array([0.9], np.float32)),
        lambda: recur.retention(q, k, v, initial_state=S[:1]),
        lambda: recur.gla(q, k, v, g[:, :1]),
        lambda: recur.gla(q, k, v, gv[:, :, :3]),
        lambda: recur.gla(q, k, v, g[:5]),
        lambda: recur.delta_rule(q, k, v, beta[:, :1]),
        lambda: recur.delta_rule(q, k, v, beta, g=gv),
        lambda: recur.delta_rule(q, k, v, beta, initial_state=np.zeros((2, 8, 16), np.float32)),
        lambda: recur.softmax_attention(q, k[:, :, :4], v),
        lambda: recur.block_topk_attention(q, k, v[:, :1]),
        lambda: recur.linear_attention(np.zeros((3, 2, 5000), np.float32),
                                       np.zeros((3, 2, 5000), np.float32), v[:3]),  # K > MAX_DIM
    ]
    for i, fn in enumerate(cases):
        _expect_error(fn, arrs, E)


def test_bad_options_raise():
    q, k, v, g, gv, beta, S, z = _base()
    arrs = [q, k, v, g, beta, S, z]
    for fn in (
        lambda: recur.linear_attention(q, k, v, form="blockwise"),
        lambda: recur.linear_attention(q, k, v, feature_map="gelu"),
        lambda: recur.retention(q, k, v, chunk_size=0),
        lambda: recur.gla(q, k, v, g, chunk_size=-3),
        lambda: recur.delta_rule(q, k, v, beta, chunk_size=2.5),
        lambda: recur.retention(q, k, v, scale=float("nan")),
        lambda: recur.retention(q, k, v, scale=-1.0),
        lambda: recur.block_topk_attention(q, k, v, block=0),
        lambda: recur.block_topk_attention(q, k, v, topk=0),
        lambda: recur.softmax_attention(q, k, v, scale=float("inf")),
    ):
        e = _expect_error(fn, arrs)
        assert isinstance(e, recur.RecurError)
