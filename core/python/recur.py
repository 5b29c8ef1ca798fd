"""recur — ctypes + numpy binding of librecur (docs/DESIGN.md §3.1).

Arrays are float32, sequence-first, no batch dimension:
    q, k  [T, H, K]      v, o  [T, H, V]
    scalar gates / betas [T, H]      vector gates [T, H, K]
    states S [H, K, V]   z [H, K]
Inputs of any float dtype / memory layout are converted to contiguous float32 copies as needed;
the caller's arrays (including ``initial_state``) are never written. Every recurrent mixer returns
its final state, so a split call equals a single call. Invalid arguments raise ``ValueError``
carrying the C library's message (``recur_strerror``).

The library is ``$RECUR_BUILD/librecur.so`` (default ``<repo>/build/librecur.so``), loaded at
import. Symbols are looked up on first use, so a library that lacks one function still serves
the others (a call to the missing one raises ``RuntimeError``).
"""
import ctypes
import math
import os

import numpy as np

__all__ = [
    "linear_attention", "retention", "gla", "delta_rule", "generalized_delta", "softmax_attention",
    "block_topk_attention", "multiscale_decays", "strerror", "RecurError", "LIBRARY_PATH",
]

# ---------------------------------------------------------------- library

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_BUILD = os.environ.get("RECUR_BUILD") or os.path.join(_ROOT, "build")
LIBRARY_PATH = os.path.join(_BUILD, "librecur.so")

try:
    _lib = ctypes.CDLL(LIBRARY_PATH)
except OSError as e:  # pragma: no cover - depends on the build
    raise ImportError(f"recur: cannot load {LIBRARY_PATH} (run `make`; RECUR_BUILD={_BUILD!r}): {e}")

# error codes (recur.h)
RECUR_OK = 0
RECUR_EINVAL = -1
RECUR_ESHAPE = -2
RECUR_ENOMEM = -3
RECUR_ENONFINITE = -4
RECUR_ERANGE = -5
RECUR_MAX_DIM = 4096

_FORMS = {"recurrent": 0, "parallel": 1, "chunkwise": 2}
_FMAPS = {"elu1": 0, "relu": 1, "identity": 2}


class _Dims(ctypes.Structure):
    _fields_ = [("T", ctypes.c_int64), ("H", ctypes.c_int), ("K", ctypes.c_int), ("V", ctypes.c_int)]


_F = ctypes.POINTER(ctypes.c_float)
_U8 = ctypes.POINTER(ctypes.c_uint8)
_D = ctypes.POINTER(_Dims)
_i, _i64, _f = ctypes.c_int, ctypes.c_int64, ctypes.c_float

# name -> (restype, argtypes)
_SIGNATURES = {
    "recur_strerror": (ctypes.c_char_p, [_i]),
    "recur_linear_attention": (_i, [_D, _F, _F, _F, _i, _i, _f, _i, _i64, _F, _F, _F]),
    "recur_retention": (_i, [_D, _F, _F, _F, _F, _f, _i, _i64, _F, _F]),
    "recur_gla": (_i, [_D, _F, _F, _F, _F, _i, _f, _i, _i64, _F, _F]),
    "recur_delta_rule": (_i, [_D, _F, _F, _F, _F, _F, _f, _i, _i64, _F, _F]),
    "recur_generalized_delta": (_i, [_D, _F, _F, _F, _F, _F, _F, _f, _i, _i64, _F, _F]),
    "recur_softmax_attention": (_i, [_D, _F, _F, _F, _f, _F]),
    "recur_block_topk_attention": (_i, [_D, _F, _F, _F, _i64, _i64, _i, _f, _F, _U8]),
    "recur_multiscale_decays": (None, [_i, _F]),
}
_funcs = {}


def _fn(name):
    f = _funcs.get(name)
    if f is None:
        try:
            f = getattr(_lib, name)
        except AttributeError:
            raise RuntimeError(f"recur: {LIBRARY_PATH} has no symbol {name} (not built yet?)") from None
        f.restype, f.argtypes = _SIGNATURES[name]
        _funcs[name] = f
    return f


def strerror(code):
    """recur_strerror(code) as a Python str."""
    return _fn("recur_strerror")(int(code)).decode("utf-8", "replace")


class RecurError(ValueError):
    """A librecur call returned a negative code; ``code`` holds it. A ValueError subclass."""

    def __init__(self, code, detail=""):
        self.code = code
        msg = strerror(code)
        super().__init__(f"{msg}: {detail}" if detail else msg)


def _check(rc, what):
    if rc == RECUR_ENOMEM:
        raise MemoryError(f"{what}: {strerror(rc)}")
    if rc != RECUR_OK:
        raise RecurError(rc, what)


# ---------------------------------------------------------------- argument helpers

def _f32(x, name):
    """A C-contiguous float32 array (a copy only if needed); never written by the C side."""
    try:
        a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    except (TypeError, ValueError) as e:
        raise RecurError(RECUR_EINVAL, f"{name} is not convertible to a float32 array ({e})") from None
    return a


def _f32_copy(x, name):
    """A fresh C-contiguous float32 copy (for IN/OUT states: the caller's array is never written)."""
    try:
        return np.array(x, dtype=np.float32, order="C", copy=True)
    except (TypeError, ValueError) as e:
        raise RecurError(RECUR_EINVAL, f"{name} is not convertible to a float32 array ({e})") from None


def _ptr(a):
    return a.ctypes.data_as(_F)


def _shape_error(name, got, want):
    raise RecurError(RECUR_ESHAPE, f"{name} has shape {tuple(got)}, expected {want}")


def _qkv(q, k, v):
    q, k, v = _f32(q, "q"), _f32(k, "k"), _f32(v, "v")
    if q.ndim != 3:
        _shape_error("q", q.shape, "[T, H, K]")
    T, H, K = q.shape
    if k.shape != q.shape:
        _shape_error("k", k.shape, f"{(T, H, K)} (same as q)")
    if v.ndim != 3 or v.shape[:2] != (T, H):
        _shape_error("v", v.shape, f"({T}, {H}, V)")
    V = v.shape[2]
    for nm, n in (("H", H), ("K", K), ("V", V)):
        if not 1 <= n <= RECUR_MAX_DIM:
            raise RecurError(RECUR_ESHAPE, f"{nm} = {n} outside [1, {RECUR_MAX_DIM}]")
    return q, k, v, _Dims(T, H, K, V)


def _form(form):
    if not isinstance(form, str) or form not in _FORMS:
        raise RecurError(RECUR_EINVAL, f"form must be one of {sorted(_FORMS)}, got {form!r}")
    return _FORMS[form]


def _chunk(chunk_size):
    if isinstance(chunk_size, (bool, np.bool_)) or not isinstance(chunk_size, (int, np.integer)):
        raise RecurError(RECUR_EINVAL, f"chunk_size must be a positive integer, got {chunk_size!r}")
    if chunk_size < 1:
        raise RecurError(RECUR_ESHAPE, f"chunk_size must be >= 1, got {chunk_size}")
    return int(chunk_size)


def _scale(scale):
    """None -> 0.0 (the C default K^-1/2). An explicit scale must be > 0; NaN/Inf go to C."""
    if scale is None:
        return 0.0
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise RecurError(RECUR_EINVAL, f"scale must be a number, got {scale!r}") from None
    if not math.isfinite(s):
        raise RecurError(RECUR_ENONFINITE, f"scale = {s}")
    if s <= 0.0:
        # C reads scale <= 0 as "the default"; an explicit non-positive scale is a mistake.
        raise RecurError(RECUR_ERANGE, f"scale must be > 0 (None means K**-0.5), got {s}")
    return s


def _state(initial_state, shape, name):
    if initial_state is None:
        return np.zeros(shape, dtype=np.float32)
    s = _f32_copy(initial_state, name)
    if s.shape != shape:
        _shape_error(name, s.shape, shape)
    return s


def _run_state_mixer(name, d, initial_state, *args):
    """``recur_<name>(dims, *args, S, o)`` with S [H,K,V] the initial state (zeros for None) and a
    fresh o [T,H,V]: returns ``(o, S)``."""
    S = _state(initial_state, (d.H, d.K, d.V), "initial_state")
    o = np.empty((d.T, d.H, d.V), dtype=np.float32)
    _check(_fn("recur_" + name)(ctypes.byref(d), *args, _ptr(S), _ptr(o)), name)
    return o, S


# ---------------------------------------------------------------- mixers

def linear_attention(q, k, v, *, normalize=True, feature_map="elu1", scale=None,
                     form="chunkwise", chunk_size=64, initial_state=None):
    """Linear attention. Returns ``(o [T,H,V], (S [H,K,V], z [H,K]))``.

    ``S_t = S_{t-1} + phi(k_t) v_t^T``, ``z_t = z_{t-1} + phi(k_t)``;
    normalised: ``o_t = (s phi(q_t))^T S_t / ((s phi(q_t))^T z_t + 1e-6)``, else ``o_t = s phi(q_t)^T S_t``.
    ``initial_state`` is ``(S, z)`` (either may be None) or a bare ``S``. With ``normalize=False``
    the normaliser is not maintained: the returned ``z`` is the initial ``z`` unchanged.
    """
    q, k, v, d = _qkv(q, k, v)
    H, K, V = d.H, d.K, d.V
    if not isinstance(feature_map, str) or feature_map not in _FMAPS:
        raise RecurError(RECUR_EINVAL, f"feature_map must be one of {sorted(_FMAPS)}, got {feature_map!r}")
    fm, f, cs, sc = _FMAPS[feature_map], _form(form), _chunk(chunk_size), _scale(scale)
    if initial_state is None:
        S0, z0 = None, None
    elif isinstance(initial_state, (tuple, list)):
        if len(initial_state) != 2:
            raise RecurError(RECUR_ESHAPE, "initial_state must be (S, z)")
        S0, z0 = initial_state
    else:
        S0, z0 = initial_state, None
    S = _state(S0, (H, K, V), "initial_state S")
    z = _state(z0, (H, K), "initial_state z")
    o = np.empty((d.T, H, V), dtype=np.float32)
    rc = _fn("recur_linear_attention")(ctypes.byref(d), _ptr(q), _ptr(k), _ptr(v), int(bool(normalize)),
                                       fm, sc, f, cs, _ptr(S), _ptr(z), _ptr(o))
    _check(rc, "linear_attention")
    return o, (S, z)


def retention(q, k, v, *, gamma=None, scale=None, form="chunkwise", chunk_size=64,
              initial_state=None):
    """Retention ``S_t = gamma_h S_{t-1} + k_t v_t^T``; ``gamma [H]`` in (0,1], None = multi-scale.
    Returns ``(o [T,H,V], S [H,K,V])``."""
    q, k, v, d = _qkv(q, k, v)
    f, cs, sc = _form(form), _chunk(chunk_size), _scale(scale)
    gp = None
    if gamma is not None:
        g = _f32(gamma, "gamma")
        if g.shape != (d.H,):
            _shape_error("gamma", g.shape, (d.H,))
        gp = _ptr(g)
    return _run_state_mixer("retention", d, initial_state, _ptr(q), _ptr(k), _ptr(v), gp, sc, f, cs)


def gla(q, k, v, g, *, scale=None, form="chunkwise", chunk_size=64, initial_state=None):
    """Gated linear attention ``S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T``; ``g`` is ``[T,H]``
    (one log gate per head) or ``[T,H,K]`` (per key dim), natural-log, <= 0.
    Returns ``(o [T,H,V], S [H,K,V])``."""
    q, k, v, d = _qkv(q, k, v)
    f, cs, sc = _form(form), _chunk(chunk_size), _scale(scale)
    g = _f32(g, "g")
    if g.shape == (d.T, d.H):
        per_key = 0
    elif g.shape == (d.T, d.H, d.K):
        per_key = 1
    else:
        _shape_error("g", g.shape, f"({d.T}, {d.H}) or ({d.T}, {d.H}, {d.K})")
    return _run_state_mixer("gla", d, initial_state, _ptr(q), _ptr(k), _ptr(v), _ptr(g), per_key, sc, f, cs)


def delta_rule(q, k, v, beta, *, g=None, scale=None, form="chunkwise", chunk_size=64,
               initial_state=None):
    """Delta rule ``S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T``.
    Keys are expected L2-normalised (not checked); ``beta [T,H]`` in (0,2]; ``g=None`` is DeltaNet,
    ``g [T,H]`` (<= 0) gated DeltaNet. Returns ``(o [T,H,V], S [H,K,V])``."""
    q, k, v, d = _qkv(q, k, v)
    f, cs, sc = _form(form), _chunk(chunk_size), _scale(scale)
    beta = _f32(beta, "beta")
    if beta.shape != (d.T, d.H):
        _shape_error("beta", beta.shape, (d.T, d.H))
    gp = None
    if g is not None:
        g = _f32(g, "g")
        if g.shape != (d.T, d.H):
            _shape_error("g", g.shape, (d.T, d.H))
        gp = _ptr(g)
    return _run_state_mixer("delta_rule", d, initial_state, _ptr(q), _ptr(k), _ptr(v), _ptr(beta), gp,
                            sc, f, cs)


def generalized_delta(q, k, v, g, a, b, *, scale=None, form="chunkwise", chunk_size=64,
                      initial_state=None):
    """Generalized (DPLR) delta rule, RWKV-7's time mix:
    ``S_t = Diag(exp g_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T``, ``o_t = scale S_t^T q_t``.
    ``g, a, b [T,H,K]``: natural-log decay per key (<= 0) and the rank-one erase (any finite
    values; RWKV-7: ``a = -kappa_hat``, ``b = kappa_hat * a_gate``, ``scale=1.0``).
    Returns ``(o [T,H,V], S [H,K,V])``."""
    q, k, v, d = _qkv(q, k, v)
    f, cs, sc = _form(form), _chunk(chunk_size), _scale(scale)
    arrs = []
    for nm, x in (("g", g), ("a", a), ("b", b)):
        x = _f32(x, nm)
        if x.shape != (d.T, d.H, d.K):
            _shape_error(nm, x.shape, (d.T, d.H, d.K))
        arrs.append(x)
    g, a, b = arrs
    return _run_state_mixer("generalized_delta", d, initial_state, _ptr(q), _ptr(k), _ptr(v), _ptr(g),
                            _ptr(a), _ptr(b), sc, f, cs)


def softmax_attention(q, k, v, *, scale=None):
    """Causal softmax attention ``o_t = sum_{j<=t} softmax_j(scale q_t.k_j) v_j``. Returns ``o``."""
    q, k, v, d = _qkv(q, k, v)
    sc = _scale(scale)
    o = np.empty((d.T, d.H, d.V), dtype=np.float32)
    rc = _fn("recur_softmax_attention")(ctypes.byref(d), _ptr(q), _ptr(k), _ptr(v), sc, _ptr(o))
    _check(rc, "softmax_attention")
    return o


def block_topk_attention(q, k, v, *, block=64, topk=2, causal=True, scale=None):
    """Block top-k sparse attention (recur.h). Returns ``(o [T,H,V], keep [T,H,n_blocks] bool)``
    with ``n_blocks = ceil(T / block)``."""
    q, k, v, d = _qkv(q, k, v)
    sc = _scale(scale)
    for nm, x in (("block", block), ("topk", topk)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise RecurError(RECUR_EINVAL, f"{nm} must be a positive integer, got {x!r}")
        if x < 1:
            raise RecurError(RECUR_ESHAPE, f"{nm} must be >= 1, got {x}")
    nb = -(-d.T // int(block)) if d.T > 0 else 0
    o = np.empty((d.T, d.H, d.V), dtype=np.float32)
    keep = np.zeros((d.T, d.H, nb), dtype=np.uint8)
    rc = _fn("recur_block_topk_attention")(ctypes.byref(d), _ptr(q), _ptr(k), _ptr(v), int(block),
                                           int(topk), int(bool(causal)), sc, _ptr(o),
                                           keep.ctypes.data_as(_U8))
    _check(rc, "block_topk_attention")
    return o, keep.astype(bool)


def multiscale_decays(n_heads):
    """RetNet's multi-scale decays ``gamma_h = 1 - 2^(-5-h)``, float32 ``[n_heads]``."""
    if isinstance(n_heads, (bool, np.bool_)) or not isinstance(n_heads, (int, np.integer)):
        raise RecurError(RECUR_EINVAL, f"n_heads must be a positive integer, got {n_heads!r}")
    if not 1 <= n_heads <= RECUR_MAX_DIM:
        raise RecurError(RECUR_ESHAPE, f"n_heads = {n_heads} outside [1, {RECUR_MAX_DIM}]")
    gamma = np.empty(int(n_heads), dtype=np.float32)
    _fn("recur_multiscale_decays")(int(n_heads), _ptr(gamma))
    return gamma
