"""``neural train-demo``: reproduce the bundled demo model (needs the test extra: transformers)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "train-demo"
HELP = "Train the small demo model on Python stdlib code and export it in the gpt-oss HF layout."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder (the model lands in OUT/model)")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=0.0, help="fit the step count to this training time budget")
    p.add_argument("--corpus-root", default=None, help="source folder (default: this Python's standard library)")


def run(args: argparse.Namespace) -> int:
    from app.demo_training.run import run as run_recipe
    from app.demo_training.train import TrainConfig

    cfg = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, hidden_size=args.hidden,
                      intermediate=args.hidden, layers=args.layers, experts=args.experts, vocab_size=args.vocab,
                      lr=args.lr, seed=args.seed, log_every=max(1, min(25, args.steps // 4)),
                      time_budget_s=args.minutes * 60)
    run_recipe(Path(args.out), cfg, args.device, Path(args.corpus_root) if args.corpus_root else None)
    return 0
