"""A fresh CPU-engine process's first prompt against its second, after a wait between load and prompt (the RAM
warm-up maps the expert pages meanwhile, engine/residency/warmer.py), optionally with the first prompt profiled.

    python -m bench.harness.first_prompt_wait CKPT [--wait 20] [--tokens 100] [--threads 2] [--profile]

Each run is one process: run it once per wait to compare (session 31: 4-layer 120b shape, 2 threads, at once
0.816 / 0.504 s, after 20 s 0.577 / 0.487 s; the profile put the first prompt's extra in neural_expert_groups).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import numpy as np

from engine.session import Engine
from engine.settings import EngineSettings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ckpt")
    p.add_argument("--wait", type=float, default=0.0, help="seconds between load and the first prompt")
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="print the first prompt's top functions by own time")
    a = p.parse_args(argv)
    t = time.perf_counter()
    eng = Engine.load(a.ckpt, EngineSettings(backend="cpu", cpu_threads=a.threads))
    print(f"load {time.perf_counter() - t:.3f} s; backend {eng.info.backend_note or 'cpu'}")
    time.sleep(a.wait)
    rng = np.random.default_rng(0)
    vocab = eng.config.vocab_size
    for run in ("first", "second"):
        ids = [int(x) for x in rng.integers(10, vocab - 10, a.tokens)]  # a new prompt: nothing reused
        prof = cProfile.Profile() if a.profile and run == "first" else None
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        _, reused = eng.prefill(ids)
        if prof is not None:
            prof.disable()
        print(f"{run} prompt {time.perf_counter() - t:.3f} s ({a.tokens} tokens, {reused} reused), wait {a.wait:g} s")
        if prof is not None:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(8)
            print(s.getvalue())
    eng.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
