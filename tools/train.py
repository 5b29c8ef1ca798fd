"""Train a recurd model (tools/model.py) on the fortunes text (tools/data.py) and export it.

    /usr/bin/python3 tools/train.py --config CFG.json --steps 2000 --out DIR [--seed 0]
    /usr/bin/python3 tools/train.py --config CFG.json --minutes 20 --out DIR

Byte-level (vocab 256), batches of random windows of the training text, AdamW with linear warmup
and a cosine schedule (over --steps, or over the wall-clock budget of --minutes), gradient clipping
at 1.0, seeded. A progress bar (redrawn in place on a terminal, a line every 20 steps in a log)
shows the step, steps/s, bytes/s, the ETA and the recent train loss. With --minutes the budget
holds the final held-out evaluation too: its time is estimated before training and kept back. Held-out bits per byte are measured two ways at the end:

  * windowed: the held-out text cut into consecutive windows of --seq bytes (each window scored
    from an empty state, every byte after the first one of the file predicted once);
  * stream: the whole held-out text folded in as ONE sequence (state carried across, exactly what
    `recur score` does; softmax layers see their last max_context tokens).

Writes DIR/config.json, DIR/model.safetensors (tools/export.py) and DIR/train_summary.json.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from export import export  # noqa: E402
from model import RecurModel, state_bytes, validate_config  # noqa: E402

LN2 = math.log(2.0)


class Progress:
    """One progress line: a bar, the step, steps/s and training bytes/s, the ETA, the recent
    train loss. Redrawn in place (carriage return) on a terminal, printed every `every` steps
    otherwise (logs, pipes)."""

    def __init__(self, total_steps, budget_s, bytes_per_step, every=20, out=sys.stdout):
        self.total_steps, self.budget_s, self.bytes_per_step = total_steps, budget_s, bytes_per_step
        self.every, self.out, self.tty = every, out, out.isatty()
        self.t0 = time.time()

    def fraction(self, step):
        if self.total_steps > 0:
            return min(1.0, step / self.total_steps)
        return min(1.0, (time.time() - self.t0) / self.budget_s)

    def line(self, step, train_bpb):
        el = time.time() - self.t0
        frac = self.fraction(step)
        rate = step / el if el > 0 else 0.0
        if self.total_steps > 0:
            eta = (self.total_steps - step) / rate if rate > 0 else float("inf")
        else:
            eta = max(0.0, self.budget_s - el)
        width = 24
        fill = int(round(frac * width))
        eta_s = "--:--" if math.isinf(eta) else "%d:%02d" % (eta // 60, eta % 60)
        return "[%s%s] %5.1f%%  step %d%s  %.2f steps/s  %.0f B/s  elapsed %d:%02d  ETA %s  train %.3f bpb" % (
            "#" * fill, "-" * (width - fill), 100 * frac, step,
            "/%d" % self.total_steps if self.total_steps > 0 else "", rate, rate * self.bytes_per_step,
            el // 60, el % 60, eta_s, train_bpb)

    def update(self, step, train_bpb):
        if self.tty:
            self.out.write("\r" + self.line(step, train_bpb))
            self.out.flush()
        elif step % self.every == 0:
            print(self.line(step, train_bpb), file=self.out, flush=True)

    def note(self, text):
        """A line of its own (an evaluation), not overwritten by the bar."""
        print(("\r\033[K" if self.tty else "") + text, file=self.out, flush=True)


@torch.no_grad()
def bpb_windowed(model, text, seq, batch=16, max_bytes=None):
    """Bits per byte over consecutive windows of seq predicted bytes (empty state per window)."""
    model.eval()
    t = text if max_bytes is None else text[:max_bytes]
    n_pred = len(t) - 1
    starts = list(range(0, n_pred, seq))
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        group = starts[i:i + batch]
        L = max(min(seq, n_pred - s) for s in group)
        # equal-length batch; a short last window is run on its own
        full = [s for s in group if n_pred - s >= L]
        rest = [s for s in group if n_pred - s < L]
        for grp in ([full] if full else []) + [[s] for s in rest]:
            Lg = min(seq, n_pred - grp[0])
            x = torch.stack([t[s:s + Lg] for s in grp]).long()
            y = torch.stack([t[s + 1:s + Lg + 1] for s in grp]).long()
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                                     reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count / LN2


@torch.no_grad()
def bpb_stream(model, text, piece=4096):
    """Bits per byte of the whole text as one stream (state carried between pieces)."""
    model.eval()
    x_all = text[:-1].long()[None]
    y_all = text[1:].long()[None]
    state, total = None, 0.0
    for s in range(0, x_all.shape[1], piece):
        logits, state = model(x_all[:, s:s + piece], state=state, return_state=True)
        total += F.cross_entropy(logits[0].float(), y_all[0, s:s + piece], reduction="sum").item()
    model.train()
    return total / y_all.numel() / LN2


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_at(frac, warm_frac, lr, min_ratio):
    if frac < warm_frac:
        return lr * frac / warm_frac
    p = min(1.0, (frac - warm_frac) / max(1e-9, 1.0 - warm_frac))
    return lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p)))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Train a recurd model on the fortunes corpus.")
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=0, help="number of optimizer steps")
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="wall-clock training budget (used when --steps is 0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.05, help="warm-up fraction of the schedule")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--chunk", type=int, default=32, help="chunk size of the chunkwise forms")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"],
                    help="dtype of the exported weights")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-bytes", type=int, default=16384,
                    help="held-out bytes used by the periodic evaluation")
    ap.add_argument("--save-every-eval", action="store_true",
                    help="also export the model to --out at every periodic evaluation")
    ap.add_argument("--no-stream-eval", action="store_true",
                    help="skip the final whole-stream held-out evaluation")
    args = ap.parse_args(argv)
    if args.steps <= 0 and args.minutes <= 0:
        ap.error("give --steps or --minutes")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    with open(args.config) as f:
        cfg = validate_config(json.load(f))
    train_bytes, held_bytes = data.split()
    train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8)
    held = torch.frombuffer(bytearray(held_bytes), dtype=torch.uint8)

    model = RecurModel(cfg).set_form("chunkwise", args.chunk)
    model.init_weights(torch.Generator().manual_seed(args.seed))
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr,
                            betas=(0.9, 0.95), eps=1e-8)
    print("config %s: %d parameters, state %d bytes/session; train %d bytes, held-out %d bytes"
          % (cfg["name"], model.n_params(), state_bytes(cfg), len(train), len(held)), flush=True)

    # With --minutes the budget covers everything: training, periodic evaluations and the final
    # held-out evaluation. The final one's cost is estimated from a timed evaluation of
    # --eval-bytes before training (bytes/s of the windowed scorer; the stream pass scores the
    # same bytes once more) and kept back from the training time.
    budget = args.minutes * 60.0
    reserve = 0.0
    if args.steps <= 0:
        t = time.time()
        bpb_windowed(model, held, args.seq, max_bytes=args.eval_bytes)
        eval_rate = min(args.eval_bytes, len(held)) / max(1e-6, time.time() - t)
        final_bytes = len(held) * (1 if args.no_stream_eval else 2)
        reserve = 1.2 * final_bytes / eval_rate
        if reserve >= 0.5 * budget:
            ap.error("--minutes %.1f leaves no time to train: the final evaluation alone takes "
                     "about %.0f s" % (args.minutes, reserve))
        print("final evaluation estimated at %.0f s (%.0f bytes/s): training for %.0f s"
              % (reserve, eval_rate, budget - reserve), flush=True)
    train_budget = budget - reserve

    t0 = time.time()
    progress = Progress(args.steps, train_budget, args.batch * args.seq)
    step, losses, history = 0, [], []
    while True:
        elapsed = time.time() - t0
        if args.steps > 0:
            if step >= args.steps:
                break
            frac = step / args.steps
        else:
            frac = elapsed / train_budget
            if frac >= 1.0:
                break
        lr = lr_at(frac, args.warmup, args.lr, args.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train) - args.seq - 1, (args.batch,), generator=gen)
        idx = starts[:, None] + torch.arange(args.seq + 1)[None]
        win = train[idx].long()
        logits = model(win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        progress.update(step, sum(losses[-20:]) / len(losses[-20:]) / LN2)
        if args.eval_every > 0 and step % args.eval_every == 0:
            b = bpb_windowed(model, held, args.seq, max_bytes=args.eval_bytes)
            history.append({"step": step, "seconds": round(time.time() - t0, 1), "heldout_bpb": b})
            progress.note("step %5d  lr %.2e  held-out (first %d bytes, windowed) %.4f bpb" % (
                step, lr, args.eval_bytes, b))
            if args.save_every_eval:
                export(model, cfg, args.out, args.dtype)   # a usable model if the run is cut short
    train_seconds = time.time() - t0
    progress.note(progress.line(step, sum(losses[-20:]) / max(1, len(losses[-20:])) / LN2))

    export(model, cfg, args.out, args.dtype)
    summary = {
        "command": "/usr/bin/python3 tools/train.py " + " ".join(argv if argv is not None
                                                               else sys.argv[1:]),
        "config": cfg, "n_params": model.n_params(), "state_bytes": state_bytes(cfg),
        "steps": step, "batch": args.batch, "seq": args.seq, "seed": args.seed,
        "train_seconds": round(train_seconds, 1), "train_bytes_seen": step * args.batch * args.seq,
        "final_train_bpb_last50": sum(losses[-50:]) / len(losses[-50:]) / LN2,
        "history": history,
    }
    # Evaluate the exported weights (e.g. rounded to F16), not the float32 training copy.
    from export import load
    model, _ = load(args.out)
    model.set_form("chunkwise", args.chunk)
    torch.set_num_threads(args.threads)
    t1 = time.time()
    summary["heldout_bpb_windowed"] = bpb_windowed(model, held, args.seq)
    print("held-out windowed (seq %d): %.4f bpb" % (args.seq, summary["heldout_bpb_windowed"]),
          flush=True)
    if not args.no_stream_eval:
        summary["heldout_bpb_stream"] = bpb_stream(model, held)
        print("held-out stream (whole file): %.4f bpb" % summary["heldout_bpb_stream"], flush=True)
    summary["eval_seconds"] = round(time.time() - t1, 1)
    if args.steps <= 0:
        summary["eval_seconds_reserved"] = round(reserve, 1)
        summary["total_seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("history", "config")}),
          flush=True)


if __name__ == "__main__":
    main()
