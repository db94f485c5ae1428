"""CPU engine decode time per token vs torch's intra-op threads, the native team fixed.

A study behind ``engine/store/native_experts.py::share_cores`` (how many intra-op threads torch
gets beside the native team): a synthetic checkpoint at the real hidden/intermediate size (2880,
so attention and experts read about as many bytes per token as in gpt-oss), the reference model
in bf16 with the native experts, ``--tokens`` decode steps per run, torch thread counts
alternated over ``--rounds``; the experts' share of each step is timed apart.

    python -m bench.kernel.torch_threads --team 2 --torch 1,2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel
from engine.store.experts_cpu import native_experts_fn
from engine.synth import write_synthetic_checkpoint
from engine.synth.shapes import SynthShape

SHAPE = SynthShape(2880, 4, 16, 4, 64, 8, 64, 2880, 4096, sliding_window=128)


class Timed:
    """The experts function, timed: the rest of a step is torch (attention, router, lm_head)."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *a: object, **kw: object) -> torch.Tensor:
        t0 = time.perf_counter()
        try:
            return self.fn(*a, **kw)
        finally:
            self.seconds += time.perf_counter() - t0


def decode_ms(model: ReferenceModel, timed: Timed, tokens: int) -> tuple[float, float]:
    """(ms per token, of which ms in the native experts)."""
    cache = model.new_cache()
    model.forward([1, 2, 3, 4], cache)
    timed.seconds = 0.0
    t0 = time.perf_counter()
    for i in range(tokens):
        model.forward([5 + i], cache)
    return 1e3 * (time.perf_counter() - t0) / tokens, 1e3 * timed.seconds / tokens


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--team", type=int, default=2, help="native team threads")
    ap.add_argument("--torch", default="1,2", help="torch intra-op thread counts to compare")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", type=Path, help="an existing checkpoint (default: write a synthetic one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        d = args.model or write_synthetic_checkpoint(Path(tmp), SHAPE, seed=0)
        ck = Checkpoint.open(d)
        timed = Timed(native_experts_fn(ck, threads=args.team, bf16_inputs=True))  # sizes team and torch
        model = ReferenceModel(ck, torch.bfloat16, experts_fn=timed)
        counts = [int(x) for x in args.torch.split(",")]
        times: dict[int, list[tuple[float, float]]] = {n: [] for n in counts}
        decode_ms(model, timed, 2)  # warm: page in the weights, start both pools
        for _ in range(args.rounds):
            for n in counts:
                torch.set_num_threads(n)
                times[n].append(decode_ms(model, timed, args.tokens))
        ck.close()
    out = {n: {"median_ms": round(statistics.median(t for t, _ in v), 1),
               "median_experts_ms": round(statistics.median(e for _, e in v), 1),
               "runs_ms": [round(t, 1) for t, _ in v]} for n, v in times.items()}
    print(json.dumps({"team": args.team, "tokens": args.tokens, "torch_threads": out}, indent=1))


if __name__ == "__main__":
    main()
