"""A follow-up deep in a conversation on the CPU engine: the context's prompt, then a few
follow-ups of N new tokens (each rewound before the next), timed in one process.

    python bench/peer/followup_depth.py MODEL_DIR DEPTH N [--threads 2]

Run from a checkout's root with PYTHONPATH set to it to time that checkout's engine (the A/B
in docs/performance.md ran an older worktree and this one in the order A B B A).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import engine.reference
from bench.harness.engine_bench import computing
from engine.session import Engine
from engine.settings import EngineSettings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("depth", type=int, help="tokens of context before the follow-ups")
    ap.add_argument("tokens", type=int, help="new tokens per follow-up")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    settings = dataclasses.replace(EngineSettings(), backend="cpu", cpu_threads=args.threads)
    eng = Engine.load(args.model_dir, settings)
    be = eng.backend
    with computing(eng):  # the RAM warm-up pauses while the engine computes, as in its own generation
        t = time.perf_counter()
        be.forward(list(range(100, 100 + args.depth)))
        ctx = time.perf_counter() - t
        times = []
        for r in range(args.repeats):
            t = time.perf_counter()
            be.forward(list(range(5000 + r, 5000 + r + args.tokens)))
            times.append(time.perf_counter() - t)
            be.truncate(args.depth)
    runs = " ".join(f"{x:.2f}" for x in times)
    print(f"{engine.reference.__file__}: context {args.depth} in {ctx:.1f} s; follow-up of {args.tokens} tokens: "
          f"{runs} s (median {statistics.median(times):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
