"""One decode token's attention on the native kernel, per ISA table and thread count.

    python -m bench.kernel.attn_rate [--isas avx2,avx512] [--keys 4096] [--threads 1,2] [--reps 40]

Times ``neural_attn_decode_bf16`` over one layer of gpt-oss's shape (8 kv heads x 8 query heads, head_dim 64) with
``--keys`` bf16 keys and values (they stay in cache between repetitions: this is the kernel's compute, not the
cache's reads), prints ms per layer (MEASURED) and whether every ISA gave the same bits.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import numpy as np

from native.kernel import KernelError, load_kernel


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isas", default="avx2,avx512")
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--threads", type=_ints, default=[1, 2])
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args(argv)
    if a.keys < 1 or a.reps < 1 or not a.threads or min(a.threads) < 1:
        ap.error("--keys, --reps and --threads must be >= 1")
    k = load_kernel()
    kvh, g, d, t = 8, 8, 64, a.keys
    rng = np.random.default_rng(0)
    keys = (rng.standard_normal((kvh, t, d), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    values = (rng.standard_normal((kvh, t, d), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    q = rng.standard_normal((kvh * g, d)).astype(np.float32)
    sinks = rng.standard_normal(kvh * g).astype(np.float32)
    own, outs = k.isa, []
    try:
        for isa in [i for i in a.isas.split(",") if i]:
            k.set_isa(isa)
            for th in a.threads:
                k.set_threads(th)
                out = k.attn_decode_bf16(keys.ctypes.data, values.ctypes.data, t * d, kvh, t, q, sinks, 0.125, True)
                t0 = time.perf_counter()
                for _ in range(a.reps):
                    k.attn_decode_bf16(keys.ctypes.data, values.ctypes.data, t * d, kvh, t, q, sinks, 0.125, True)
                ms = (time.perf_counter() - t0) / a.reps * 1e3
                outs.append(out.view(np.uint32).copy())
                print(f"{isa} {t} keys, {th} threads: {ms:.3f} ms per layer MEASURED")
    except (KernelError, ValueError) as exc:
        print(f"attn_rate: {exc}", file=sys.stderr)
        return 2
    finally:
        k.set_isa(own)
    same = all(np.array_equal(o, outs[0]) for o in outs)
    digest = hashlib.sha256(outs[0].tobytes()).hexdigest()[:16]
    print(f"same bits on every ISA and thread count: {same} (sha256 {digest})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
