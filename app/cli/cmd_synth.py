"""``neural synth``: write a synthetic gpt-oss checkpoint in the exact HF layout."""

from __future__ import annotations

import argparse
import sys
import time

from .common import fail

NAME = "synth"
HELP = "Write a synthetic (random-weight) gpt-oss checkpoint in the Hugging Face layout."


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engine.synth import PRESETS

    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    for k in ("layers", "experts", "hidden", "intermediate", "vocab", "top-k", "window"):
        p.add_argument(f"--{k}", type=int, default=None)
    p.add_argument("--skew", type=float, default=0.0,
                   help="router-bias skew of expert popularity (0 = uniform; 1-2 = skewed like real routing)")
    p.add_argument("--fast", action="store_true", help="tiled random expert bytes (speed tests only)")
    p.add_argument("--shard-gib", type=float, default=2.0)


def run(args: argparse.Namespace) -> int:
    from engine.synth import shape_with, write_synthetic_checkpoint

    try:
        shape = shape_with(args.preset, num_hidden_layers=args.layers, num_local_experts=args.experts,
                           hidden_size=args.hidden, intermediate_size=args.intermediate, vocab_size=args.vocab,
                           num_experts_per_tok=args.top_k, sliding_window=args.window)
    except TypeError as exc:
        return fail(str(exc))
    t0 = time.perf_counter()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 0.5 or done == total:
            last[0] = now
            print(f"\r  {done / 2**30:7.2f} / {total / 2**30:.2f} GiB", end="", file=sys.stderr, flush=True)

    try:
        out = write_synthetic_checkpoint(args.out, shape, seed=args.seed, skew=args.skew, fast=args.fast,
                                         max_shard_bytes=int(args.shard_gib * 2**30), progress=progress)
    except ValueError as exc:
        return fail(str(exc))
    print(file=sys.stderr)
    routing = f"skewed (router bias skew {args.skew})" if args.skew else "uniform (no router bias skew)"
    print(f"wrote {out} ({shape.num_hidden_layers} layers, {shape.num_local_experts} experts, "
          f"hidden {shape.hidden_size}; routing {routing}) in {time.perf_counter() - t0:.1f} s")
    return 0
