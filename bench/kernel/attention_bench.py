"""One decode token's attention on the native kernel (neural_attn_decode_bf16), alone:

    python -m bench.kernel.attention_bench [--threads 2] [--keys 4096] [--calls 200]

8 kv heads x 8 query heads of 64 (the 120b shape's full layer), random bf16 K/V; prints ms per call
(median of 5 rounds, after a warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from native.kernel import load_kernel


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.attention_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keys", type=int, default=4096)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args(argv)
    k = load_kernel()
    k.set_threads(a.threads)
    kvh, g, d = 8, 8, 64
    gen = torch.Generator().manual_seed(0)
    kb = torch.randn(kvh, a.keys, d, generator=gen).bfloat16()
    vb = torch.randn(kvh, a.keys, d, generator=gen).bfloat16()
    q = torch.randn(kvh * g, d, generator=gen).bfloat16().float().numpy()
    sinks = torch.randn(kvh * g, generator=gen).float().numpy()
    out = np.empty((kvh * g, d), np.float32)

    def call() -> None:
        k.attn_decode_bf16(kb.data_ptr(), vb.data_ptr(), a.keys * d, kvh, a.keys, q, sinks, d ** -0.5, True, out)

    for _ in range(5):
        call()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(a.calls):
            call()
        rounds.append((time.perf_counter() - t0) / a.calls)
    print(f"{k.isa} {a.threads} threads, {a.keys} keys: {1e3 * statistics.median(rounds):.3f} ms per call "
          f"(rounds {[round(1e3 * r, 3) for r in rounds]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
