"""The dense bf16 GEMV from DRAM with the kernels' prefetch off and on, mirrored (A B B A A B B A).

    python -m bench.kernel.gemv_prefetch [--isas avx512,avx2] [--rows 16384] [--mats 24] [--threads 1,2]

Cycles ``--mats`` bf16 matrices of ``--rows`` x 2880 (normal values, no denormals) through
``neural_linear_bf16`` at each thread count with ``neural_set_prefetch(0)`` and the default distance,
checks both give the same bits, and prints GB/s of weights per run. The interleaved GEMVs prefetch the
next 4-row group (gemv4_prefetch_next in native/neural_isa.c); this is the A/B that kept it.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from native.kernel import load_kernel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isas", default="avx512,avx2")
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--mats", type=int, default=24)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args(argv)
    isas = [i for i in a.isas.split(",") if i]
    k = load_kernel()
    rows, cols, nm = a.rows, 2880, a.mats
    rng = np.random.default_rng(0)
    base = ((rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).view(np.uint32) >> 16).astype(np.uint16)
    mats = [base ^ np.uint16(i) for i in range(nm)]  # distinct low mantissa bits, so each comes from DRAM
    x = rng.standard_normal(cols).astype(np.float32)
    nbytes = rows * cols * 2 * nm
    default = k.prefetch
    for isa in isas:
        k.set_isa(isa)
        for th in [int(t) for t in a.threads.split(",") if t]:
            k.set_threads(th)
            rates: dict[int, list[float]] = {0: [], default: []}
            ref = None
            for s in (0, default, default, 0, 0, default, default, 0):
                k.set_prefetch(s)
                t0 = time.perf_counter()
                for w in mats:
                    k.linear_bf16(w, rows, cols, x)
                rates[s].append(nbytes / (time.perf_counter() - t0) / 1e9)
                o = k.linear_bf16(mats[0], rows, cols, x).view(np.uint32).copy()
                if ref is not None and not np.array_equal(ref, o):
                    print(f"gemv_prefetch: {isa} changed bits with the prefetch", file=sys.stderr)
                    return 1
                ref = o
            for s in (0, default):
                label = "prefetch" if s else "off     "
                print(f"{isa} {th} threads {label} " + " ".join(f"{r:.1f}" for r in rates[s]) + " GB/s MEASURED")
    k.set_prefetch(default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
