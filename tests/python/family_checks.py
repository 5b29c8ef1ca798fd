"""Checks every checkpoint family's tests make on a loaded librecur model (test_family_mamba2.py,
test_family_rwkv7.py): prefill + decode against decode alone, split prefill, batched decode bit
for bit, snapshot / restore / fork exactness; and the helpers that spoil a folder for the hostile
tests. Each check asserts; tol is the caller's stated tolerance (relative RMS of logits)."""
import json
import os

import numpy as np
import pytest

import recur_model as rm


def rel_rms(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2)))


def tokens_for(vocab, n, seed=0):
    return np.random.RandomState(seed).randint(0, vocab, n).astype(np.int32)


def write_variants(tmp, variants, write):
    """{variant: folder}: write(tmp, name, **options) for each variant's options."""
    return {name: write(tmp, name, **kw) for name, kw in variants.items()}


def prefill_and_decode_match_twin(folder, twin_logits, tol, n, steps, seed):
    """librecur's prefill over n tokens and its decode over the first steps give the twin's logits
    (twin_logits(folder, tokens) -> [n][vocab]) within tol."""
    m = rm.Model.load(folder)
    toks = tokens_for(m.vocab, n, seed)
    ref = twin_logits(folder, toks)
    got = m.prefill(m.state(), toks)
    assert rel_rms(got, ref) <= tol, folder
    s2 = m.state()
    got = np.stack([m.step(s2, t) for t in toks[:steps]])
    assert rel_rms(got, ref[:steps]) <= tol, folder


def prefill_then_decode_equals_decode_only(m, tol, n=200, split=150, seed=5):
    toks = tokens_for(m.vocab, n, seed)
    a = m.state()
    m.prefill(a, toks[:split], want_logits=False)
    la = np.stack([m.step(a, t) for t in toks[split:]])
    b = m.state()
    lb = np.stack([m.step(b, t) for t in toks])[split:]
    assert rel_rms(la, lb) <= tol


def split_prefill_equals_one(m, tol, n=300, seed=6):
    toks = tokens_for(m.vocab, n, seed)
    a = m.state()
    la = m.prefill(a, toks)
    b = m.state()
    lb = np.concatenate([m.prefill(b, toks[:1]), m.prefill(b, toks[1:3]), m.prefill(b, toks[3:131]),
                         m.prefill(b, toks[131:])])
    assert rel_rms(lb, la) <= tol
    # and the states continue alike
    assert rel_rms(m.step(b, 5), m.step(a, 5)) <= tol


def batched_decode_is_bit_identical(m, B=5, steps=6):
    rng = np.random.RandomState(2)
    states = [m.state() for _ in range(B)]
    singles = [m.state() for _ in range(B)]
    for i, (s, s1) in enumerate(zip(states, singles)):
        pre = tokens_for(m.vocab, 7 + 13 * i, i)
        m.prefill(s, pre, want_logits=False)
        m.prefill(s1, pre, want_logits=False)
    for _ in range(steps):
        toks = rng.randint(0, m.vocab, B)
        batched = m.step_batch(states, toks)
        for b in range(B):
            assert np.array_equal(batched[b], m.step(singles[b], toks[b]))
    for s, s1 in zip(states, singles):
        assert s.snapshot() == s1.snapshot()


def snapshot_restore_continues_bit_identical(m, seed=8):
    """After a prefill and one decode step (so state written by both paths is in the snapshot)."""
    toks = tokens_for(m.vocab, 120, seed)
    a = m.state()
    m.prefill(a, toks[:100], want_logits=False)
    m.step(a, toks[100])
    blob = a.snapshot()
    b = m.state()
    b.restore(blob)
    assert b.tokens_seen == a.tokens_seen == 101
    for t in toks[101:]:
        assert np.array_equal(m.step(a, t), m.step(b, t))
    assert b.snapshot() == a.snapshot()


def snapshot_refused_by(a, b):
    s = a.state()
    a.step(s, 1)
    with pytest.raises(ValueError):
        b.state().restore(s.snapshot())


def fork_is_exact(m, seed=9):
    toks = tokens_for(m.vocab, 60, seed)
    a = m.state()
    m.prefill(a, toks[:40], want_logits=False)
    f = a.copy()
    for t in toks[40:]:
        assert np.array_equal(m.step(a, t), m.step(f, t))


class FamilyChecks:
    """The checks above as tests, for a test class of a family's file (class TestChecks(FamilyChecks))
    with a `folders` fixture {variant: folder}: the class attributes name the variants each runs on."""
    TOL = 1e-5
    PREFILL_DECODE = SPLIT = SNAPSHOT = FORK = "base"
    BATCHED = ("base",)
    OTHER = None  # a variant whose snapshot the base one refuses

    def test_prefill_then_decode_equals_decode_only(self, folders):
        prefill_then_decode_equals_decode_only(rm.Model.load(folders[self.PREFILL_DECODE]), self.TOL)

    def test_split_prefill_equals_one(self, folders):
        split_prefill_equals_one(rm.Model.load(folders[self.SPLIT]), self.TOL)

    def test_batched_decode_is_bit_identical(self, folders):
        for name in self.BATCHED:
            batched_decode_is_bit_identical(rm.Model.load(folders[name]))

    def test_snapshot_restore_continue_bit_identical(self, folders):
        # (without the layers' small states in the snapshot — conv window, token shift — the restored
        # session's next steps would differ)
        snapshot_restore_continues_bit_identical(rm.Model.load(folders[self.SNAPSHOT]))

    def test_snapshot_refused_by_another_model(self, folders):
        snapshot_refused_by(rm.Model.load(folders["base"]), rm.Model.load(folders[self.OTHER]))

    def test_fork_is_exact(self, folders):
        fork_is_exact(rm.Model.load(folders[self.FORK]))


# --------------------------------------------------------------------------- hostile folders

def edit_config(folder, drop=(), **changes):
    """Set keys of config.json (None writes JSON null) and remove the keys in drop."""
    p = os.path.join(folder, "config.json")
    c = json.load(open(p))
    c.update(changes)
    for k in drop:
        c.pop(k, None)
    json.dump(c, open(p, "w"))


def rewrite_tensors(folder, fn):
    from export import read_safetensors, write_safetensors
    p = os.path.join(folder, "model.safetensors")
    t = read_safetensors(p)
    fn(t)
    write_safetensors(p, list(t.items()))


def refused_by_name(folder, spoil, words, what=""):
    """folder loads; after spoil(folder) it is refused with a message holding words."""
    rm.Model.load(folder)
    spoil(folder)
    with pytest.raises(ValueError) as e:
        rm.Model.load(folder)
    assert e.value.code in (rm.EFORMAT, rm.ESHAPE, rm.ETRUNCATED), (what, str(e.value))
    assert words in str(e.value), (what, str(e.value))
