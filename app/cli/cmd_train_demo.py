"""``neural train-demo``: reproduce the bundled demo model (needs the test extra: transformers)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .lab import ensure_lab

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
    p.add_argument("--eval-every", type=int, default=50,
                   help="steps between held-out evaluations (default 50; 0 = only after the last step)")
    p.add_argument("--eval-batches", type=int, default=0,
                   help="0 = the whole held-out split per evaluation (default); N = N seeded random batches")
    p.add_argument("--patience-evals", type=int, default=4,
                   help="stop after this many evaluations without a new best held-out loss (default 4; 0 = never)")
    p.add_argument("--min-delta", type=float, default=0.0,
                   help="a new best must beat the previous one by more than this (default 0)")
    p.add_argument("--export-last", action="store_true",
                   help="export the last step's weights instead of the best held-out ones (the 2026-11-29 recipe)")


def run(args: argparse.Namespace) -> int:
    ensure_lab()
    from bench.demo_training.run import run as run_recipe
    from bench.demo_training.train import TrainConfig

    cfg = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, hidden_size=args.hidden,
                      intermediate=args.hidden, layers=args.layers, experts=args.experts, vocab_size=args.vocab,
                      lr=args.lr, seed=args.seed, log_every=max(1, min(25, args.steps // 4)),
                      time_budget_s=args.minutes * 60, eval_every=args.eval_every, eval_batches=args.eval_batches,
                      patience_evals=args.patience_evals, min_delta=args.min_delta, keep_best=not args.export_last)
    run_recipe(Path(args.out), cfg, args.device, Path(args.corpus_root) if args.corpus_root else None)
    return 0
