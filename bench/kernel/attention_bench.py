"""One decode token's attention on the native kernel (neural_attn_decode_bf16), alone:

    python -m bench.kernel.attention_bench [--isas avx2,avx512] [--threads 1,2] [--keys 4096] [--calls 200]

8 kv heads x 8 query heads of 64 (the 120b shape's full layer), random bf16 K/V (in cache between calls: the
kernel's compute, not DRAM reads); for each ISA table (default: the kernel's own) and thread count, prints ms per call
(median of 5 rounds, after a warm-up), then whether every one gave the same bits, with their sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time

import numpy as np
import torch

from bench.kernel.gemv_isa import int_list
from native.kernel import KernelError, load_kernel


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.attention_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--isas", help="ISA tables, comma-separated (default: the kernel's own)")
    p.add_argument("--threads", type=int_list, default=[2])
    p.add_argument("--keys", type=int, default=4096)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args(argv)
    if a.keys < 1 or a.calls < 1 or not a.threads or min(a.threads) < 1:
        p.error("--keys, --calls and --threads must be >= 1")
    k = load_kernel()
    own = k.isa
    isas = [i for i in (a.isas or own).split(",") if i]
    kvh, g, d = 8, 8, 64
    gen = torch.Generator().manual_seed(0)
    kb = torch.randn(kvh, a.keys, d, generator=gen).bfloat16()
    vb = torch.randn(kvh, a.keys, d, generator=gen).bfloat16()
    q = torch.randn(kvh * g, d, generator=gen).bfloat16().float().numpy()
    sinks = torch.randn(kvh * g, generator=gen).float().numpy()
    out = np.empty((kvh * g, d), np.float32)

    def call() -> None:
        k.attn_decode_bf16(kb.data_ptr(), vb.data_ptr(), a.keys * d, kvh, a.keys, q, sinks, d ** -0.5, True, out)

    outs = []
    try:
        for isa in isas:
            k.set_isa(isa)
            for threads in a.threads:
                k.set_threads(threads)
                for _ in range(5):
                    call()
                outs.append(out.view(np.uint32).copy())
                rounds = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        call()
                    rounds.append((time.perf_counter() - t0) / a.calls)
                print(f"{k.isa} {threads} threads, {a.keys} keys: {1e3 * statistics.median(rounds):.3f} ms per call "
                      f"(rounds {[round(1e3 * r, 3) for r in rounds]})")
    except (KernelError, ValueError) as exc:
        print(f"attention_bench: {exc}", file=sys.stderr)
        return 2
    finally:
        k.set_isa(own)
    same = all(np.array_equal(o, outs[0]) for o in outs)
    digest = hashlib.sha256(outs[0].tobytes()).hexdigest()[:16]
    print(f"same bits on every ISA and thread count: {same} (sha256 {digest})")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
