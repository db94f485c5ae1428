"""The dense bf16 GEMV (one decode row's projections) from DRAM, one variant against another, mirrored.

    python -m bench.kernel.gemv_isa [--isas avx2,avx512bf16 | --prefetch-ab ISA] [--rows 16384] [--cols 2880]
                                    [--mats 24] [--threads 1,2]

Cycles ``--mats`` bf16 matrices (normal values as trained weights have: random bits would hold denormals, which
Intel's FMA takes a slow assist on) through ``neural_linear_bf16`` so they come from DRAM, in the order
A B B A A B B A, and prints GB/s of weights per run, the same-run read probe, and whether both variants gave the same
bits. ``--isas A,B``: two ISA tables (since session 29 every table walks a row as one stream with four fma chains,
gemv4w_* in native/neural_isa.c; AVX2 and AVX-512 differ in vector width). Two builds of ``native/`` (a loop
against the one before it) are compared by running this in each, or through whole decodes as
bench/peer/prompt_vs_llama_cpp.sh does with NEURAL_BEFORE. ``--prefetch-ab ISA``: one table with the kernels'
prefetch off (``neural_set_prefetch(0)``) and at its default distance, which the GEMV reads ahead of its stream.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NamedTuple

import numpy as np


class Variant(NamedTuple):
    label: str
    isa: str
    prefetch: int  # bytes, as neural_set_prefetch takes them


def int_list(text: str) -> list[int]:
    """``1,2,8`` -> [1, 2, 8] (an argparse type for thread counts)."""
    return [int(t) for t in text.split(",") if t]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--isas", default="avx2,avx512bf16")
    ap.add_argument("--prefetch-ab", metavar="ISA", help="one ISA table, prefetch off against on")
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=2880)
    ap.add_argument("--mats", type=int, default=24)
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    a = ap.parse_args(argv)
    isas = [i for i in a.isas.split(",") if i]
    if a.prefetch_ab is None and len(isas) != 2:
        ap.error("--isas takes two tables, A,B")
    if a.cols % 16 or a.cols < 16 or a.rows < 1 or a.mats < 1:
        ap.error("--cols must be a positive multiple of 16; --rows and --mats at least 1")

    from native.kernel import KernelError, load_kernel

    k = load_kernel()
    default = k.prefetch
    if a.prefetch_ab is not None:
        variants = [Variant("off", a.prefetch_ab, 0), Variant("prefetch", a.prefetch_ab, default)]
        what = f"isa table {a.prefetch_ab}, prefetch off / {default} B"
    else:
        variants = [Variant(i, i, default) for i in isas]
        what = f"isa tables {isas[0]} / {isas[1]}"
    for v in variants:
        try:
            k.set_isa(v.isa)
        except KernelError as e:
            print(f"gemv_isa: {e}", file=sys.stderr)
            return 2
    rng = np.random.default_rng(0)
    base = ((rng.standard_normal((a.rows, a.cols), dtype=np.float32) * 0.02).view(np.uint32) >> 16).astype(np.uint16)
    mats = [base ^ np.uint16(i) for i in range(a.mats)]  # distinct low mantissa bits: no denormals
    x = rng.standard_normal(a.cols).astype(np.float32)
    nbytes = a.rows * a.cols * 2 * a.mats

    def use(v: Variant) -> None:
        k.set_isa(v.isa)
        k.set_prefetch(v.prefetch)

    print(f"{a.mats} x {a.rows} x {a.cols} bf16 ({nbytes / 1e9:.2f} GB a pass), {what}")
    try:
        for threads in a.threads:
            k.set_threads(threads)
            k.probe_read(mats[0])
            t0 = time.perf_counter()
            for w in mats:
                k.probe_read(w)
            probe = nbytes / (time.perf_counter() - t0) / 1e9
            rates: dict[str, list[float]] = {v.label: [] for v in variants}
            for v in variants + variants[::-1] + variants + variants[::-1]:
                use(v)
                t0 = time.perf_counter()
                for w in mats:
                    k.linear_bf16(w, a.rows, a.cols, x)
                rates[v.label].append(nbytes / (time.perf_counter() - t0) / 1e9)
            outs = []
            for v in variants:
                use(v)
                outs.append(k.linear_bf16(mats[0], a.rows, a.cols, x).view(np.uint32).copy())
            same = np.array_equal(outs[0], outs[1])
            print(f"{threads} threads, probe {probe:.1f} GB/s; same bits: {same}")
            for v in variants:
                print(f"  {v.label:11s} " + " ".join(f"{r:.1f}" for r in rates[v.label]) + " GB/s MEASURED")
    finally:
        k.set_prefetch(default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
