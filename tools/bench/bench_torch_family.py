"""The PyTorch twins' decode and prefill rates on a Hugging Face folder (issue 13 "Speed"), for
tools/bench/section_families.py: tools/fla_model.py (gated_deltanet, gla, delta_net) and
tools/mamba2_model.py (mamba2), tools/rwkv7_model.py (rwkv7, for section_rwkv7.py), in float32, torch.set_num_threads(1), under inference_mode.

    /usr/bin/python3 tools/bench/bench_torch_family.py --model DIR [--decode-tokens N] [--reps R]
        [--prefill N] [--prefill-reps R]

decode:  batch 1 (the twins carry one session's state): one forward of a single token per step
         with the state carried, N steps per rep after 2 warm-up steps.
prefill: one forward of N tokens from a zero state (FLA: the twin's recurrent kernels over the
         sequence, its only form; Mamba-2: its chunked SSD form, chunk 256; RWKV-7: the twin's
         token-by-token recurrence, its only form), logits computed.
Prints one JSON object per line (as bench_torch_model.py): times per rep, wall and process CPU.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchutil import timed  # noqa: E402
import fla_model  # noqa: E402
import mamba2_model  # noqa: E402
import rwkv7_model  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--decode-tokens", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--prefill-reps", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    with open(os.path.join(a.model, "config.json")) as f:
        kind = json.load(f)["model_type"]
    if kind == "mamba2":
        params, cfg = mamba2_model.load_folder(a.model)
        params = {k: v.float() for k, v in params.items()}
        vocab = params["backbone.embeddings.weight"].shape[0]

        def run(tokens, state, form):
            return mamba2_model.forward(params, cfg, tokens, state, form=form, chunk_size=256,
                                        dtype=torch.float32)
        step = lambda t, s: run([t], s, "recurrent")  # noqa: E731
        prefill = lambda toks: run(toks, None, "chunked")  # noqa: E731
        zero = None
    elif kind == "rwkv7":
        params, cfg = rwkv7_model.load_folder(a.model)
        params = {k: v.float() for k, v in params.items()}
        vocab = cfg["vocab_size"]
        step = lambda t, s: rwkv7_model.forward(params, cfg, [t], s, dtype=torch.float32)  # noqa: E731
        prefill = lambda toks: rwkv7_model.forward(params, cfg, toks, None, dtype=torch.float32)  # noqa: E731
        zero = None
    else:
        m = fla_model.FlaModel.load(a.model, dtype=torch.float32)
        vocab = m.cfg["vocab"]
        step = lambda t, s: m.forward([t], s)  # noqa: E731
        prefill = lambda toks: m.forward(toks)  # noqa: E731
        zero = m.zero_state()
    print(json.dumps({"kind": "torch", "family": kind, "version": torch.__version__,
                      "source": {"mamba2": "tools/mamba2_model.py", "rwkv7": "tools/rwkv7_model.py"}.get(
                          kind, "tools/fla_model.py")}))
    with torch.inference_mode():
        state = zero
        i = 0
        for _ in range(2):
            _, state = step(i % vocab, state)
            i += 1
        w, c = [], []
        for _ in range(a.reps):
            def rep():
                nonlocal state, i
                for _ in range(a.decode_tokens):
                    _, state = step((i * 31 + 3) % vocab, state)
                    i += 1
            ww, cc = timed(rep)
            w.append(ww)
            c.append(cc)
        print(json.dumps({"kind": "decode", "B": 1, "steps": a.decode_tokens, "tokens": a.decode_tokens,
                          "wall_s": w, "cpu_s": c}), flush=True)
        toks = [(j * 131 + 7) % vocab for j in range(a.prefill)]
        w, c = [], []
        for _ in range(a.prefill_reps):
            ww, cc = timed(lambda: prefill(toks))
            w.append(ww)
            c.append(cc)
        print(json.dumps({"kind": "prefill", "tokens": a.prefill, "wall_s": w, "cpu_s": c}), flush=True)


if __name__ == "__main__":
    main()
