"""The torch functions of the seeds' reference script, copied verbatim.

Source: ../shared/seeds/linear_sparse_attention_reference.txt (linear_sparse_attention.py,
"Linear / Sparse Attention - minimal runnable implementation"). Only the functions are copied;
main() with its six sanity checks (a)-(f) is reproduced against librecur in
tests/python/test_seeds.py. Do not edit the function bodies: they are the oracle.

Conventions of this script (differ from librecur's; the tests convert):
  - one head, Q, K, V: [L, d]; no 1/sqrt(d) scale in linear attention;
  - delta_rule_recurrent keeps S as [d_v, d_k] (S <- S (I - b k k^T) + b v k^T), i.e. the
    transpose of librecur's key-major S [K, V];
  - block_topk_attention scales scores by d**-0.5 (librecur's default scale) and is non-causal.
"""
import torch
import torch.nn.functional as F


def linear_attn_recurrent(Q, K, V):
    """Token-by-token causal linear attention. Q,K,V: [L, d] -> O: [L, d].

    State S: [d_k, d_v] matrix (here d_k = d_v = d), accumulated outer products
    sum_{j<=t} k_j v_j^T. Self-inclusive: S is updated before reading o_t.
    """
    L, d = Q.shape
    S = torch.zeros(d, d, dtype=Q.dtype)              # [d_k, d_v] matrix state
    O = torch.zeros(L, d, dtype=Q.dtype)
    for t in range(L):
        S = S + torch.outer(K[t], V[t])               # S += k_t v_t^T
        O[t] = Q[t] @ S                               # o_t = q_t^T S
    return O


def linear_attn_chunkwise(Q, K, V, C=4):
    """Chunkwise parallel form. Mathematically identical to the recurrent form.

    Per chunk: inter = Q_c @ S (history state, tokens strictly before this chunk),
    intra = ((Q_c K_c^T) * tril) @ V_c (in-chunk causal, diagonal inclusive),
    then update S += K_c^T V_c. Handles ragged last chunk (L not divisible by C).
    """
    L, d = Q.shape
    S = torch.zeros(d, d, dtype=Q.dtype)              # cross-chunk state [d_k, d_v]
    O = torch.zeros(L, d, dtype=Q.dtype)
    tri = torch.tril(torch.ones(C, C, dtype=Q.dtype))  # in-chunk causal mask, diagonal incl.
    for s in range(0, L, C):
        e = min(s + C, L)
        Qc, Kc, Vc = Q[s:e], K[s:e], V[s:e]           # [c, d]
        c = e - s
        m = tri[:c, :c]                               # ragged-safe slice
        inter = Qc @ S                                # history-state contribution [c, d]
        intra = ((Qc @ Kc.t()) * m) @ Vc             # in-chunk causal attention [c, d]
        O[s:e] = inter + intra
        S = S + Kc.t() @ Vc                           # update state [d_k, d_v]
    return O


def delta_rule_recurrent(K, V, beta, use_delta=True):
    """DeltaNet recurrence. K,V: [L, d] (k assumed unit-norm), beta: [L] -> states [L, d, d].

    S_t = S_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T : the (I - beta k k^T) term
    first ERASES the old association in the k direction, then writes the new v k^T.
    use_delta=False with beta=1 falls back to additive linear attention S += v k^T.
    """
    L, d = K.shape
    S = torch.zeros(d, d, dtype=K.dtype)              # [d_k, d_v] matrix state
    I = torch.eye(d, dtype=K.dtype)
    states = []
    for t in range(L):
        k = K[t]                                      # [d]
        if use_delta:
            S = S @ (I - beta[t] * torch.outer(k, k))  # erase old association in k direction
        S = S + beta[t] * torch.outer(V[t], k)        # write new v k^T  (order: v k^T)
        states.append(S.clone())
    return torch.stack(states)                        # [L, d, d]


def block_topk_attention(Q, K, V, block=4, topk=2):
    """Top-k block-sparse attention: each query attends only its top-k key blocks
    (in-block softmax). Q,K,V: [L, d] -> out: [L, d], keep_blk: [L, nblk] bool.

    Block representative score = MEAN over the block's REAL key columns only (padding
    ignored), so L not divisible by `block` is handled correctly. The final attention
    still uses the original dense scores, restricted to the selected blocks.
    """
    L, d = Q.shape
    nblk = (L + block - 1) // block
    scores = (Q @ K.t()) / (d ** 0.5)                 # [Lq, Lk] full scores (select + final attn)
    pad = nblk * block - L
    # masked block mean: pad scores with 0, count real columns, divide by the count
    sc  = F.pad(scores, (0, pad), value=0.0).view(L, nblk, block)
    cnt = F.pad(torch.ones_like(scores), (0, pad)).view(L, nblk, block)
    blk_score = sc.sum(-1) / cnt.sum(-1).clamp(min=1)  # [Lq, nblk] mean over real cols only
    topk = min(topk, nblk)
    sel = blk_score.topk(topk, dim=-1).indices         # [Lq, topk]
    keep_blk = torch.zeros(L, nblk, dtype=torch.bool)
    keep_blk.scatter_(1, sel, True)                    # [Lq, nblk] True = keep this block
    keep = keep_blk.repeat_interleave(block, dim=1)[:, :L]   # token-level mask [Lq, Lk]
    masked = scores.masked_fill(~keep, float("-inf"))
    w = F.softmax(masked, dim=-1)                      # in-selected-block normalized, rows sum to 1
    return w @ V, keep_blk


def orthonormal_rows(n, d):
    """Return n orthonormal row vectors in R^d (n <= d), via QR of a random matrix."""
    q, _ = torch.linalg.qr(torch.randn(d, d))          # q: [d, d] orthonormal columns
    return q.t()[:n]                                   # [n, d] orthonormal rows
