"""Chunkwise forms of librecur's mixers in PyTorch (any dtype), for benchmarks and cross-checks.

Same layout and math as librecur (docs/DESIGN.md §3, core/recur.h): q, k [T,H,K], v [T,H,V], gates
[T,H] or [T,H,K] natural-log <= 0, beta [T,H], S [H,K,V] key-major, every form includes the
current token, scale defaults to K^-1/2. Inside a chunk the cumulative log decay b_t = sum_{i<=t} g_i
is only ever exponentiated as a difference b_t - b_j with j <= t (or b_t alone), so every
argument of exp is <= 0: strong gates underflow to 0 instead of overflowing.

These are written the way one would write them in PyTorch (batched over heads, matmuls), to be
the "same op in PyTorch" of docs/BENCHMARKS.md; tests/python/test_reference.py checks them in
float64 against the token-by-token reference.
"""
import torch
import torch.nn.functional as F


def _heads(x):
    return x.transpose(0, 1)  # [T,H,*] -> [H,T,*] (a view)


def linear_attention(q, k, v, *, normalize=True, feature_map="elu1", scale=None, chunk=64,
                     S=None, z=None):
    T, H, K = q.shape
    V = v.shape[2]
    s = K ** -0.5 if scale is None else scale
    phi = {"elu1": lambda x: F.elu(x) + 1, "relu": torch.relu, "identity": lambda x: x}[feature_map]
    Q, Kk, Vv = phi(_heads(q)) * s, phi(_heads(k)), _heads(v)
    S = q.new_zeros(H, K, V) if S is None else S.clone()
    z = q.new_zeros(H, K) if z is None else z.clone()
    o = q.new_empty(H, T, V)
    for a in range(0, T, chunk):
        e = min(a + chunk, T)
        Qc, Kc, Vc = Q[:, a:e], Kk[:, a:e], Vv[:, a:e]
        A = torch.tril(Qc @ Kc.transpose(1, 2))                         # [H,c,c]
        num = Qc @ S + A @ Vc                                            # inter + intra
        if normalize:
            den = (Qc @ z.unsqueeze(2)).squeeze(2) + A.sum(2) + 1e-6     # [H,c]
            o[:, a:e] = num / den.unsqueeze(2)
            z = z + Kc.sum(1)
        else:
            o[:, a:e] = num
        S = S + Kc.transpose(1, 2) @ Vc
    return o.transpose(0, 1), S, z


def gla(q, k, v, g, *, scale=None, chunk=64, S=None):
    """g [T,H] (scalar per head; retention is g = log gamma) or [T,H,K] (per key dim)."""
    T, H, K = q.shape
    V = v.shape[2]
    s = K ** -0.5 if scale is None else scale
    Q, Kk, Vv = _heads(q) * s, _heads(k), _heads(v)
    G = _heads(g)                                                        # [H,T] or [H,T,K]
    S = q.new_zeros(H, K, V) if S is None else S.clone()
    o = q.new_empty(H, T, V)
    for a in range(0, T, chunk):
        e = min(a + chunk, T)
        c = e - a
        Qc, Kc, Vc = Q[:, a:e], Kk[:, a:e], Vv[:, a:e]
        b = torch.cumsum(G[:, a:e], dim=1)                               # [H,c](,K) inclusive
        mask = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        if G.dim() == 2:
            diff = (b.unsqueeze(2) - b.unsqueeze(1)).masked_fill(~mask, 0.0)   # b_t - b_j <= 0
            D = torch.exp(diff) * mask
            A = (Qc @ Kc.transpose(1, 2)) * D
            o[:, a:e] = (Qc * torch.exp(b).unsqueeze(2)) @ S + A @ Vc
            bl = b[:, -1:]                                               # [H,1]
            S = torch.exp(bl).unsqueeze(2) * S + (Kc * torch.exp(bl - b).unsqueeze(2)).transpose(1, 2) @ Vc
        else:
            A = _gla_vector_scores(Qc, Kc, b, mask)
            o[:, a:e] = (Qc * torch.exp(b)) @ S + A @ Vc
            bl = b[:, -1:]                                               # [H,1,K]
            S = torch.exp(bl).transpose(1, 2) * S + (Kc * torch.exp(bl - b)).transpose(1, 2) @ Vc
    return o.transpose(0, 1), S


def _gla_vector_scores(Qc, Kc, b, mask, sub=16):
    """A_tj = sum_k q_tk k_jk exp(b_tk - b_jk) for j <= t, with per-key cumulative gates b [H,c,K].
    Sub-chunks of `sub` rows (as FLA and librecur do): for a query sub-chunk starting at r and keys
    j < r, exp(b_t - b_j) = exp(b_t - b_r) exp(b_r - b_j), both factors <= 1, so the off-diagonal
    part is one matmul; diagonal sub-blocks use the explicit [s, s, K] form."""
    H, c, K = Qc.shape
    A = Qc.new_zeros(H, c, c)
    for r in range(0, c, sub):
        e = min(r + sub, c)
        br = b[:, r:r + 1]                                                # [H,1,K]
        if r > 0:
            Qi = Qc[:, r:e] * torch.exp(b[:, r:e] - br)
            Kj = Kc[:, :r] * torch.exp(br - b[:, :r])
            A[:, r:e, :r] = Qi @ Kj.transpose(1, 2)
        bi = b[:, r:e]
        m = mask[r:e, r:e]
        diff = (bi.unsqueeze(2) - bi.unsqueeze(1)).masked_fill(~m.unsqueeze(2), 0.0)  # [H,s,s,K]
        A[:, r:e, r:e] = torch.einsum("htk,hjk,htjk->htj", Qc[:, r:e], Kc[:, r:e], torch.exp(diff)) * m
    return A


def retention(q, k, v, gamma, *, scale=None, chunk=64, S=None):
    T, H, _ = q.shape
    g = torch.log(gamma.to(q.dtype)).expand(T, H).contiguous()
    return gla(q, k, v, g, scale=scale, chunk=chunk, S=S)


def delta_rule(q, k, v, beta, *, g=None, scale=None, chunk=64, S=None):
    """WY/UT chunkwise delta rule. With b the in-chunk cumulative log decay and S0 the state
    entering the chunk, the written values u_t = beta_t (v_t - e^{g_t} S_{t-1}^T k_t) solve
        (I + A) U = diag(beta) V - diag(beta e^b) K S0,   A_tj = beta_t e^{b_t - b_j} k_t.k_j (j < t),
    then o_t = s (e^{b_t} q_t^T S0 + sum_{j<=t} e^{b_t-b_j} q_t.k_j u_j) and
    S = e^{b_C} S0 + sum_j e^{b_C - b_j} k_j u_j^T."""
    T, H, K = q.shape
    V = v.shape[2]
    s = K ** -0.5 if scale is None else scale
    Q, Kk, Vv, B = _heads(q) * s, _heads(k), _heads(v), _heads(beta)
    G = None if g is None else _heads(g)
    S = q.new_zeros(H, K, V) if S is None else S.clone()
    o = q.new_empty(H, T, V)
    for a in range(0, T, chunk):
        e = min(a + chunk, T)
        c = e - a
        Qc, Kc, Vc, Bc = Q[:, a:e], Kk[:, a:e], Vv[:, a:e], B[:, a:e].unsqueeze(2)
        mask = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        KK = Kc @ Kc.transpose(1, 2)
        if G is None:
            D = mask.to(q.dtype)
            eb = None
        else:
            b = torch.cumsum(G[:, a:e], dim=1)
            D = torch.exp((b.unsqueeze(2) - b.unsqueeze(1)).masked_fill(~mask, 0.0)) * mask
            eb = torch.exp(b).unsqueeze(2)                               # [H,c,1]
        L = torch.eye(c, dtype=q.dtype, device=q.device) + Bc * KK * D.tril(-1)
        rhs_v = Bc * Vc
        rhs_k = Bc * Kc if eb is None else Bc * eb * Kc
        W = torch.linalg.solve_triangular(L, rhs_k, upper=False, unitriangular=True)
        U = torch.linalg.solve_triangular(L, rhs_v, upper=False, unitriangular=True) - W @ S
        Qd = Qc if eb is None else Qc * eb
        o[:, a:e] = Qd @ S + ((Qc @ Kc.transpose(1, 2)) * D) @ U
        if G is None:
            S = S + Kc.transpose(1, 2) @ U
        else:
            bl = b[:, -1:]
            S = torch.exp(bl).unsqueeze(2) * S + (Kc * torch.exp(bl - b).unsqueeze(2)).transpose(1, 2) @ U
    return o.transpose(0, 1), S


def _decayed_scores(X, Y, xlog, b, strict, sub=16):
    """A_tj = sum_k X_tk Y_jk exp(xlog_tk - b_jk) for j <= t (j < t when strict), where b [H,c,K]
    is the in-chunk cumulative log decay and xlog is b (inclusive) or b - g (up to t - 1). For a
    row block starting at r and keys j < r the reference r - 1 splits every exponent in two
    non-positive ones; the diagonal block uses the explicit [s, s, K] form."""
    H, c, K = X.shape
    A = X.new_zeros(H, c, c)
    for r in range(0, c, sub):
        e = min(r + sub, c)
        if r > 0:
            br = b[:, r - 1:r]                                            # [H,1,K]
            Xi = X[:, r:e] * torch.exp(xlog[:, r:e] - br)
            Yj = Y[:, :r] * torch.exp(br - b[:, :r])
            A[:, r:e, :r] = Xi @ Yj.transpose(1, 2)
        m = torch.ones(e - r, e - r, dtype=torch.bool, device=X.device).tril(-1 if strict else 0)
        diff = (xlog[:, r:e].unsqueeze(2) - b[:, r:e].unsqueeze(1)).masked_fill(~m.unsqueeze(2), 0.0)
        A[:, r:e, r:e] = torch.einsum("htk,hjk,htjk->htj", X[:, r:e], Y[:, r:e], torch.exp(diff)) * m
    return A


def generalized_delta(q, k, v, g, a, b, *, scale=None, chunk=64, S=None):
    """RWKV-7's generalized delta rule S_t = Diag(e^{g_t}) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T
    (g, a, b [T,H,K]), chunkwise. With gam the in-chunk cumulative log decay (gam_{t-1} before
    token t) and u_t = a_t^T S_{t-1}, every token writes (b_t, u_t) and (k_t, v_t) into a
    diagonally decayed state, so
        (I - Aab) U = (a e^{gam_{t-1}}) S0 + Aak V,   Aab_tj = sum a_t b_j e^{gam_{t-1} - gam_j} (j < t)
    then o = s ((q e^{gam}) S0 + Mqb U + Mqk V) and S = e^{gam_C} S0 + (b e^{gam_C - gam})^T U
    + (k e^{gam_C - gam})^T V."""
    T, H, K = q.shape
    V = v.shape[2]
    s = K ** -0.5 if scale is None else scale
    Q, Kk, Vv, G, Aa, Bb = _heads(q) * s, _heads(k), _heads(v), _heads(g), _heads(a), _heads(b)
    S = q.new_zeros(H, K, V) if S is None else S.clone()
    o = q.new_empty(H, T, V)
    for t0 in range(0, T, chunk):
        e = min(t0 + chunk, T)
        c = e - t0
        Qc, Kc, Vc, Ac, Bc = Q[:, t0:e], Kk[:, t0:e], Vv[:, t0:e], Aa[:, t0:e], Bb[:, t0:e]
        gam = torch.cumsum(G[:, t0:e], dim=1)                             # [H,c,K]
        gprev = gam - G[:, t0:e]                                          # gam_{t-1}
        Aab = _decayed_scores(Ac, Bc, gprev, gam, True)
        Aak = _decayed_scores(Ac, Kc, gprev, gam, True)
        Mqb = _decayed_scores(Qc, Bc, gam, gam, False)
        Mqk = _decayed_scores(Qc, Kc, gam, gam, False)
        L = torch.eye(c, dtype=q.dtype, device=q.device) - Aab
        U = torch.linalg.solve_triangular(L, (Ac * torch.exp(gprev)) @ S + Aak @ Vc, upper=False,
                                          unitriangular=True)
        o[:, t0:e] = (Qc * torch.exp(gam)) @ S + Mqb @ U + Mqk @ Vc
        gl = gam[:, -1:]                                                  # [H,1,K]
        f = torch.exp(gl - gam)
        S = torch.exp(gl).transpose(1, 2) * S + (Bc * f).transpose(1, 2) @ U + (Kc * f).transpose(1, 2) @ Vc
    return o.transpose(0, 1), S
