"""Batched decode is bit-identical to single steps for the Hugging Face families (issue 13), at the
rigour of tests/unit/test_batch_identity.c for the native mixers: 40 sessions that start at
different positions (prefills of 0..22 tokens, so the short convolutions' windows differ), and
every step a new random subset of them, of a random size 1..40 and in a random order, goes
through recur_model_step_batch. Each session has a twin stepped alone with recur_model_step; the
logits must be byte-equal at every step and the snapshots (recurrent state, conv window,
tokens_seen, logits) byte-equal at the end. Batches of up to 40 rows cross the packed GEMM's row
tiles, where a batch-dependent rounding would show. F32 and BF16 weights (a half model takes
another GEMM kernel path)."""
import numpy as np
import pytest

import export_hf
import export_mamba2 as ex
import mamba2_model as mm
import recur_model as rm

NS = 40
STEPS = 12


def fla(kind, **kw):
    cfg = {"model_type": kind, "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 97,
           "num_heads": 2}
    if kind == "gated_deltanet":
        cfg["head_dim"] = 16
    cfg.update(kw)
    return cfg


FOLDERS = {
    "gated_deltanet": fla("gated_deltanet"),
    "gated_deltanet_gva": fla("gated_deltanet", num_v_heads=4, allow_neg_eigval=True),
    "gla": fla("gla", use_short_conv=True),
    "delta_net": fla("delta_net", use_gate=True),
    "mamba2": None,
    "mamba2_groups2": {"n_groups": 2},
}


def write(tmp, name, dtype):
    d = str(tmp / f"{name}_{dtype}")
    cfg = FOLDERS[name]
    if name.startswith("mamba2"):
        raw = ex.raw_config(hidden_size=32, layers=2, state_size=8, head_dim=8, vocab=90,
                            **(cfg or {}))
        return ex.write_folder(d, raw, ex.random_params(mm.resolve_config(raw), 4, std=0.3), dtype, 1)
    export_hf.write_folder(d, cfg, export_hf.random_tensors(cfg, 4, std=0.1), dtype, 1)
    return d


@pytest.mark.parametrize("dtype", ["F32", "BF16"])
@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_batched_decode_bit_identical_any_composition(tmp_path, name, dtype):
    m = rm.Model.load(write(tmp_path, name, dtype), max_batch=NS)
    V = m.vocab
    rng = np.random.RandomState(7)
    batched = [m.state() for _ in range(NS)]
    single = [m.state() for _ in range(NS)]
    for i in range(NS):
        n = i % 23
        if n:
            pre = rng.randint(0, V, n).astype(np.int32)
            m.prefill(batched[i], pre, want_logits=False)
            m.prefill(single[i], pre, want_logits=False)
    for _ in range(STEPS):
        size = int(rng.randint(1, NS + 1))
        pick = rng.permutation(NS)[:size]
        toks = rng.randint(0, V, size).astype(np.int32)
        got = m.step_batch([batched[i] for i in pick], toks)
        for row, i in enumerate(pick):
            want = m.step(single[i], int(toks[row]))
            assert got[row].tobytes() == want.tobytes(), (name, dtype, size, row)
    for a, b in zip(batched, single):
        assert a.snapshot() == b.snapshot()
