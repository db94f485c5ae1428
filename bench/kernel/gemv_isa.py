"""The dense bf16 GEMV (one decode row's projections) from DRAM, one ISA table against another, mirrored.

    python -m bench.kernel.gemv_isa [--isas avx512,avx512bf16] [--rows 16384] [--cols 2880] [--mats 24]
                                    [--threads 1,2]

Cycles ``--mats`` bf16 matrices (normal values as trained weights have: random bits would hold denormals, which
Intel's FMA takes a slow assist on) through ``neural_linear_bf16`` so they come from DRAM, in the order
A B B A A B B A, and prints GB/s of weights per run, the same-run read probe, and whether both tables gave the same
bits. The tables differ in how the GEMV walks four rows: ``avx512`` interleaves them, ``avx512bf16`` (Zen 4's)
reads one row after another (gemv4_rows_avx512 in native/neural_isa.c).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isas", default="avx512,avx512bf16")
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=2880)
    ap.add_argument("--mats", type=int, default=24)
    ap.add_argument("--threads", type=_ints, default=[1, 2])
    a = ap.parse_args(argv)
    isas = [i for i in a.isas.split(",") if i]
    if len(isas) != 2:
        ap.error("--isas takes two tables, A,B")
    if a.cols % 16 or a.cols < 16 or a.rows < 1 or a.mats < 1:
        ap.error("--cols must be a positive multiple of 16; --rows and --mats at least 1")

    from native.kernel import KernelError, load_kernel

    k = load_kernel()
    for isa in isas:
        try:
            k.set_isa(isa)
        except KernelError as e:
            print(f"gemv_isa: {e}", file=sys.stderr)
            return 2
    rng = np.random.default_rng(0)
    base = ((rng.standard_normal((a.rows, a.cols), dtype=np.float32) * 0.02).view(np.uint32) >> 16).astype(np.uint16)
    mats = [base ^ np.uint16(i) for i in range(a.mats)]  # distinct low mantissa bits: no denormals
    x = rng.standard_normal(a.cols).astype(np.float32)
    nbytes = a.rows * a.cols * 2 * a.mats
    print(f"{a.mats} x {a.rows} x {a.cols} bf16 ({nbytes / 1e9:.2f} GB a pass), isa tables {isas[0]} / {isas[1]}")
    for threads in a.threads:
        k.set_threads(threads)
        k.probe_read(mats[0])
        t0 = time.perf_counter()
        for w in mats:
            k.probe_read(w)
        probe = nbytes / (time.perf_counter() - t0) / 1e9
        rates: dict[str, list[float]] = {i: [] for i in isas}
        for isa in isas + isas[::-1] + isas + isas[::-1]:
            k.set_isa(isa)
            t0 = time.perf_counter()
            for w in mats:
                k.linear_bf16(w, a.rows, a.cols, x)
            rates[isa].append(nbytes / (time.perf_counter() - t0) / 1e9)
        outs = []
        for isa in isas:
            k.set_isa(isa)
            outs.append(k.linear_bf16(mats[0], a.rows, a.cols, x).view(np.uint32).copy())
        same = np.array_equal(outs[0], outs[1])
        print(f"{threads} threads, probe {probe:.1f} GB/s; same bits: {same}")
        for isa in isas:
            print(f"  {isa:11s} " + " ".join(f"{r:.1f}" for r in rates[isa]) + " GB/s MEASURED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
