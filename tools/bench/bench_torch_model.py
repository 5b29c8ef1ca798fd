"""The PyTorch twin's decode and prefill rates (issue 3, "Benchmarks"), for section_model.py.

    /usr/bin/python3 tools/bench/bench_torch_model.py (--model DIR | --config FILE)
        [--batches 1,8,64] [--reps R] [--tokens-per-rep N] [--prefill N] [--prefill-reps R]
        [--chunks 32,64]

The twin is tools/model.py's RecurModel in float32 with torch.set_num_threads(1), under
torch.inference_mode(). With --model its weights are loaded (tools/export.py); with --config it
is initialised by its own generator (same shapes as the C model's seeded weights; timing does not
depend on the values).

decode:  the twin's incremental API: model.set_form("recurrent"), then per step
         logits, state = model(tokens[B, 1], state=state, return_state=True) with the state
         carried from step to step (the twin's per-token recurrent reference path, batched over
         B sessions). A rep is max(4, N/B) steps after 4 warm-up steps.
prefill: model.set_form("chunkwise", chunk_size=C); model(tokens[1, N]) from a zero state
         (the chunkwise forward, which computes logits for every position: the twin has no
         state-only path). Each chunk size in --chunks is timed; the section uses the fastest.
Prints one JSON object per line, times per rep: wall (perf_counter) and process CPU time.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchutil import timed  # noqa: E402
from model import RecurModel  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--model")
    g.add_argument("--config")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens-per-rep", type=int, default=512)
    ap.add_argument("--prefill", type=int, default=4096)
    ap.add_argument("--prefill-reps", type=int, default=3)
    ap.add_argument("--chunks", default="32,64")
    a = ap.parse_args(argv)

    torch.set_num_threads(1)
    if a.model:
        from export import load
        model, config = load(a.model)
        source = "the same weights (tools/export.py load)"
    else:
        config = json.load(open(a.config))
        model = RecurModel(config)
        source = "its own seeded init (same shapes; values do not change the timing)"
    model = model.float().eval()
    vocab = model.config["vocab_size"]
    print(json.dumps({"kind": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                      "params": model.n_params(), "source": source}), flush=True)

    with torch.inference_mode():
        model.set_form("recurrent")
        for B in [int(b) for b in a.batches.split(",")]:
            steps = max(4, a.tokens_per_rep // B)
            state = [None]
            i = [0]

            def run(n):
                s = state[0]
                for _ in range(n):
                    tok = (torch.arange(B) * 7 + i[0] * 31 + 3) % vocab
                    _, s = model(tok.view(B, 1), state=s, return_state=True)
                    i[0] += 1
                state[0] = s

            run(4)
            ws, cs = [], []
            for _ in range(a.reps):
                w, c = timed(lambda: run(steps))
                ws.append(w)
                cs.append(c)
            print(json.dumps({"kind": "decode", "B": B, "steps": steps, "tokens": steps * B,
                              "wall_s": ws, "cpu_s": cs}), flush=True)

        if a.prefill > 0 and a.prefill_reps > 0:
            tok = ((torch.arange(a.prefill) * 131 + 7) % vocab).view(1, -1)
            for C in [int(c) for c in a.chunks.split(",")]:
                model.set_form("chunkwise", chunk_size=C)
                model(tok[:, :256])  # warm-up
                ws, cs = [], []
                for _ in range(a.prefill_reps):
                    w, c = timed(lambda: model(tok))
                    ws.append(w)
                    cs.append(c)
                print(json.dumps({"kind": "prefill", "tokens": a.prefill, "chunk": C,
                                  "wall_s": ws, "cpu_s": cs}), flush=True)


if __name__ == "__main__":
    main()
