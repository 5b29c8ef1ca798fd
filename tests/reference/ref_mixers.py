"""Independent float64 reference of every librecur mixer (numpy only; never calls librecur).

Written from docs/DESIGN.md §3 and the comments of core/recur.h, as plain token-by-token recurrences
(vectorised over heads only) so that each line can be read against the math:

    linear      S_t = S_{t-1} + phi(k_t) v_t^T ; z_t = z_{t-1} + phi(k_t)
                normalised  o_t = (s phi(q_t))^T S_t / ((s phi(q_t))^T z_t + 1e-6)
                otherwise   o_t = s phi(q_t)^T S_t
    retention   S_t = gamma_h S_{t-1} + k_t v_t^T                          o_t = s S_t^T q_t
    gla         S_t = Diag(exp g_t) S_{t-1} + k_t v_t^T                    o_t = s S_t^T q_t
    delta       S_t = (I - b_t k_t k_t^T) exp(g_t) S_{t-1} + b_t k_t v_t^T  o_t = s S_t^T q_t
    generalized delta (RWKV-7), in the V x K writing P = S^T:
                P_t = P_{t-1} (Diag(exp g_t) + a_t b_t^T) + v_t k_t^T     o_t = s P_t q_t
    softmax     o_t = sum_{j<=t} softmax_j(s q_t.k_j) v_j
    block top-k recur.h's semantics (causal and non-causal; non-causal = the seeds' script)

Shapes as the binding: q, k [T,H,K]; v [T,H,V]; scalar gates / betas [T,H]; vector gates
[T,H,K]; S [H,K,V]; z [H,K]. Every form includes the current token. s = K^-1/2 by default.
All arithmetic is float64; inputs are converted with np.asarray(..., float64).
"""
import numpy as np

LINEAR_EPS = 1e-6  # RECUR_LINEAR_EPS


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _scale(scale, K):
    return K ** -0.5 if scale is None else float(scale)


def _state(initial, shape):
    return np.zeros(shape) if initial is None else np.array(initial, dtype=np.float64)


def _state_mixer_inputs(q, k, v, scale, initial_state):
    """float64 q, k, v; the scale s; the state S [H,K,V] (initial_state or zeros); o [T,H,V] zeros."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    T, H, K = q.shape
    V = v.shape[2]
    return q, k, v, _scale(scale, K), _state(initial_state, (H, K, V)), np.zeros((T, H, V))


def multiscale_decays(H):
    """gamma_h = 1 - 2^(-5-h), h = 0..H-1."""
    return 1.0 - 2.0 ** (-5.0 - np.arange(H, dtype=np.float64))


def feature_map(x, name):
    x = _f64(x)
    if name == "elu1":      # elu(x) + 1 = x + 1 for x > 0, exp(x) for x <= 0
        return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "identity":
        return x.copy()
    raise ValueError(name)


def linear_attention(q, k, v, *, normalize=True, feature_map_name="elu1", scale=None,
                     initial_state=None):
    """Returns o [T,H,V], (S [H,K,V], z [H,K]). With normalize=False z is returned unchanged."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    T, H, K = q.shape
    V = v.shape[2]
    s = _scale(scale, K)
    S0, z0 = (None, None) if initial_state is None else initial_state
    S, z = _state(S0, (H, K, V)), _state(z0, (H, K))
    pq, pk = feature_map(q, feature_map_name), feature_map(k, feature_map_name)
    o = np.zeros((T, H, V))
    for t in range(T):
        S += pk[t][:, :, None] * v[t][:, None, :]               # S_t = S_{t-1} + phi(k_t) v_t^T
        sq = s * pq[t]                                          # [H,K]
        num = np.einsum("hk,hkv->hv", sq, S)
        if normalize:
            z += pk[t]                                          # z_t = z_{t-1} + phi(k_t)
            den = np.einsum("hk,hk->h", sq, z) + LINEAR_EPS
            o[t] = num / den[:, None]
        else:
            o[t] = num
    return o, (S, z)


def retention(q, k, v, *, gamma=None, scale=None, initial_state=None):
    q, k, v, s, S, o = _state_mixer_inputs(q, k, v, scale, initial_state)
    T, H = q.shape[:2]
    gam = multiscale_decays(H) if gamma is None else _f64(gamma)
    qr = q[:, :, None, :]
    for t in range(T):
        S = gam[:, None, None] * S + k[t][:, :, None] * v[t][:, None, :]
        o[t] = s * (qr[t] @ S)[:, 0]                                    # s S_t^T q_t
    return o, S


def gla(q, k, v, g, *, scale=None, initial_state=None):
    """g [T,H] (scalar gate per head) or [T,H,K] (per key dim), natural log."""
    q, k, v, s, S, o = _state_mixer_inputs(q, k, v, scale, initial_state)
    T, H, K = q.shape
    g = _f64(g)
    if g.ndim == 2:
        g = np.broadcast_to(g[:, :, None], (T, H, K))
    for t in range(T):
        S = np.exp(g[t])[:, :, None] * S + k[t][:, :, None] * v[t][:, None, :]   # Diag(e^g) S
        o[t] = s * np.einsum("hk,hkv->hv", q[t], S)
    return o, S


def delta_rule(q, k, v, beta, *, g=None, scale=None, initial_state=None):
    """S_t = (I - b k k^T) e^{g} S_{t-1} + b k v^T  ==  A - b k (k^T A - v^T) with A = e^g S_{t-1}."""
    q, k, v, s, S, o = _state_mixer_inputs(q, k, v, scale, initial_state)
    T = q.shape[0]
    beta = _f64(beta)
    decay = None if g is None else np.exp(_f64(g))[:, :, None, None]   # [T,H,1,1]
    qr, kr = q[:, :, None, :], k[:, :, None, :]                         # rows [T,H,1,K]
    kc = k[:, :, :, None] * beta[:, :, None, None]                      # b_t k_t as columns
    for t in range(T):
        if decay is not None:
            S = decay[t] * S                                            # A = e^g S_{t-1}
        kS = kr[t] @ S                                                  # k_t^T A   [H,1,V]
        S = S - kc[t] @ (kS - v[t][:, None, :])                         # A - b k (k^T A - v^T)
        o[t] = s * (qr[t] @ S)[:, 0]
    return o, S


def generalized_delta(q, k, v, g, a, b, *, scale=None, initial_state=None):
    """RWKV-7's state update as its authors write it, on P = S^T [H,V,K]:
    P_t = P_{t-1} Diag(e^{g_t}) + (P_{t-1} a_t) b_t^T + v_t k_t^T ;  o_t = s P_t q_t.
    Returns (o, S) with S = P^T [H,K,V] (the key-major layout of every mixer)."""
    q, k, v, s, S, o = _state_mixer_inputs(q, k, v, scale, initial_state)
    g, a, b = _f64(g), _f64(a), _f64(b)
    P = np.ascontiguousarray(np.swapaxes(S, 1, 2))                      # [H,V,K]
    for t in range(q.shape[0]):
        Pa = np.einsum("hvk,hk->hv", P, a[t])                           # P_{t-1} a_t
        P = (P * np.exp(g[t])[:, None, :] + Pa[:, :, None] * b[t][:, None, :]
             + v[t][:, :, None] * k[t][:, None, :])
        o[t] = s * np.einsum("hvk,hk->hv", P, q[t])
    return o, np.ascontiguousarray(np.swapaxes(P, 1, 2))


def delta_rule_dense(q, k, v, beta, *, g=None, scale=None, initial_state=None):
    """The same recurrence with the transition matrix written out: (I - b k k^T) e^g S + b k v^T.
    Slower; used to cross-check delta_rule()."""
    q, k, v, s, S, o = _state_mixer_inputs(q, k, v, scale, initial_state)
    T, H, K = q.shape
    beta = _f64(beta)
    I = np.eye(K)
    for t in range(T):
        for h in range(H):
            A = I - beta[t, h] * np.outer(k[t, h], k[t, h])
            decay = 1.0 if g is None else np.exp(float(_f64(g)[t, h]))
            S[h] = A @ (decay * S[h]) + beta[t, h] * np.outer(k[t, h], v[t, h])
            o[t, h] = s * S[h].T @ q[t, h]
    return o, S


def _softmax_masked(scores, mask):
    """Row softmax of scores over mask (True = attend); rows without any True give 0."""
    x = np.where(mask, scores, -np.inf)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(mask, np.exp(x - m), 0.0)
    den = e.sum(-1, keepdims=True)
    return e / np.where(den > 0, den, 1.0)


def softmax_attention(q, k, v, *, scale=None):
    q, k, v = _f64(q), _f64(k), _f64(v)
    T, H, K = q.shape
    s = _scale(scale, K)
    scores = s * np.einsum("thk,jhk->htj", q, k)            # [H,T,T]
    causal = np.tril(np.ones((T, T), dtype=bool))
    w = _softmax_masked(scores, causal[None])
    return np.einsum("htj,jhv->thv", w, v)


def block_topk_attention(q, k, v, *, block=64, topk=2, causal=True, scale=None):
    """recur.h: keys cut into ceil(T/block) blocks; a block's score is the mean of s q.k_j over its
    real keys (causal: keys j <= t; blocks with no such key are not candidates); keep the top
    min(topk, candidates) blocks, ties to the lower block index; softmax over the kept keys
    (causal: kept keys j <= t). Returns o [T,H,V], keep [T,H,nb] bool, and the block scores
    [T,H,nb] (NaN for non-candidates) so tests can tell near-ties apart."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    T, H, K = q.shape
    V = v.shape[2]
    s = _scale(scale, K)
    nb = -(-T // block)
    scores = s * np.einsum("thk,jhk->thj", q, k)            # [T,H,T]
    keep = np.zeros((T, H, nb), dtype=bool)
    bscore = np.full((T, H, nb), np.nan)
    o = np.zeros((T, H, V))
    for t in range(T):
        last = t if causal else T - 1                       # keys j <= last are visible
        for h in range(H):
            cand = []
            for b in range(nb):
                lo, hi = b * block, min((b + 1) * block, last + 1)
                if hi <= lo:
                    continue
                bscore[t, h, b] = scores[t, h, lo:hi].mean()
                cand.append(b)
            n = min(topk, len(cand))
            # sort by score descending, ties to the lower block index (stable sort on -score)
            order = sorted(cand, key=lambda b: (-bscore[t, h, b], b))[:n]
            keep[t, h, order] = True
            mask = np.zeros(T, dtype=bool)
            for b in order:
                mask[b * block:min((b + 1) * block, last + 1)] = True
            w = _softmax_masked(scores[t, h][None], mask[None])[0]
            o[t, h] = w @ v[:, h]
    return o, keep, bscore


def rel_rms(a, ref):
    """||a - ref||_2 / ||ref||_2 in float64 (ref all zero: absolute RMS)."""
    a, ref = _f64(a), _f64(ref)
    num = np.sqrt(np.mean((a - ref) ** 2)) if a.size else 0.0
    den = np.sqrt(np.mean(ref ** 2)) if ref.size else 0.0
    return float(num / den) if den > 0 else float(num)
