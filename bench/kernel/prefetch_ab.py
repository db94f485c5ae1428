"""The native kernel's software prefetch distance, A/B on the CPU engine's decode, in one process.

    python -m bench.kernel.prefetch_ab CKPT [--threads 2] [--tokens 128] [--rounds 3] [--distances 4096,8192]
                                           [--prompt N]

Loads CKPT on the CPU engine, warms it (and its pages) with three untimed completions, then decodes ``--tokens``
tokens through Engine.complete (temperature 0, the stop tokens biased away so every token is decoded) with each of
two prefetch distances (``NativeKernel.set_prefetch``) in the order A B B A, ``--rounds`` times, printing tok/s per
run and each distance's mean (MEASURED). With ``--prompt N`` it times N-token prompts instead (a new random prompt
each run, so no K/V is reused; the multi-token kernel). A prefetch moves no data the kernel computes with: the bits
are the same at every distance. Session 27 chose the default (8192) with it on the Zen 4 VM.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any


def decode_rate(eng: Any, tokens: int) -> float:
    """tok/s of ``tokens`` greedy tokens after a short prompt (Engine.complete, as `neural bench decode` runs it)."""
    from bench.harness.engine_bench import stops_biased_away
    from engine.types import Done, GenerationParams

    params = GenerationParams(max_tokens=tokens, temperature=0.0, seed=0, logit_bias=stops_biased_away(eng))
    done = next(ev for ev in eng.complete(list(range(100, 108)), params) if isinstance(ev, Done))
    if done.finish_reason == "error":
        raise RuntimeError(f"decode failed: {done.error}")
    return done.usage.completion_tokens / max(done.usage.decode_seconds, 1e-9)


def prompt_rate(eng: Any, tokens: int, seed: int) -> float:
    """tok/s of a fresh ``tokens``-token prompt (random ids, so nothing is cached) and one decoded token."""
    import random
    import time

    from engine.types import Done, GenerationParams

    rnd = random.Random(seed)
    ids = [rnd.randrange(16, min(eng.config.vocab_size, 8000)) for _ in range(tokens)]
    t0 = time.perf_counter()
    done = next(ev for ev in eng.complete(ids, GenerationParams(max_tokens=1, temperature=0.0, seed=0))
                if isinstance(ev, Done))
    if done.finish_reason == "error":
        raise RuntimeError(f"prompt failed: {done.error}")
    return tokens / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--distances", default="4096,8192", help="two prefetch distances in bytes, A,B (0 = off)")
    ap.add_argument("--prompt", type=int, default=0, help="time prompts of this many tokens instead of the decode")
    a = ap.parse_args(argv)
    try:
        dist = [int(x) for x in a.distances.split(",")]
    except ValueError:
        dist = []
    if len(dist) != 2 or min(dist) < 0:
        ap.error("--distances takes two byte counts >= 0, e.g. 4096,8192")
    if a.tokens < 2 or a.rounds < 1 or a.threads < 1 or a.prompt < 0:
        ap.error("--tokens must be >= 2, --rounds and --threads >= 1, --prompt >= 0")
    from engine.session import Engine
    from engine.settings import EngineSettings
    from native.kernel import load_kernel

    eng = Engine.load(a.ckpt, EngineSettings(backend="cpu", cpu_threads=a.threads))
    kernel = load_kernel()
    default = kernel.prefetch
    runs = 0

    def rate() -> float:
        nonlocal runs
        runs += 1
        return prompt_rate(eng, a.prompt, runs) if a.prompt else decode_rate(eng, a.tokens)

    for _ in range(3):  # untimed: the team, the pages, the caches
        rate()
    got: dict[int, list[float]] = {d: [] for d in dist}
    what = f"{a.prompt}-token prompt" if a.prompt else f"decode of {a.tokens} tokens"
    for _ in range(a.rounds):
        for d in (dist[0], dist[1], dist[1], dist[0]):
            kernel.set_prefetch(d)
            got[d].append(rate())
            print(f"prefetch {d:6d}: {got[d][-1]:.2f} tok/s ({what})", flush=True)
    kernel.set_prefetch(default)
    means = {d: statistics.mean(v) for d, v in got.items()}
    for d in dist:
        print(f"prefetch {d}: mean {means[d]:.2f} tok/s over {len(got[d])} runs (MEASURED)")
    if means[dist[0]] > 0:
        print(f"{dist[1]} / {dist[0]}: {means[dist[1]] / means[dist[0]]:.3f} (CALCULATED from the means); the "
              f"kernel's default is {default}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
