"""The DRAM read probe with every ISA's read loop: what the memory gives, not what one loop takes from it.

The read rate depends on the loop's shape. On a 2-core Intel VM (session 22) the AVX2 loop read 32.0 GB/s over a
checkpoint's expert bytes and 35.7-36.9 over an anonymous buffer, where the AVX-512 loop read 28.6-29.0 and
30.0-30.6 (MEASURED). A floor or a ratio against one loop's probe can sit below what the memory can give, so the
benches take the best of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

Read = tuple[Any, int]  # a buffer or pointer, and its bytes


def probe_each_isa(kernel: Any, reads: Sequence[Read], reps: int = 1) -> dict[str, float]:
    """Bytes a second of the kernel's thread team reading ``reads`` ``reps`` times, with each ISA's read loop in
    turn after one warm pass; the kernel's own ISA is restored, also on error."""
    if reps < 1 or not reads:
        raise ValueError("probe_each_isa needs at least one read and one repetition")
    own = kernel.isa
    total = reps * sum(n for _, n in reads)
    rates: dict[str, float] = {}
    try:
        for isa in kernel.available_isas():
            kernel.set_isa(isa)
            kernel.probe_read(*reads[0])  # warm
            t0 = time.perf_counter()
            for _ in range(reps):
                for buf, n in reads:
                    kernel.probe_read(buf, n)
            rates[isa] = total / (time.perf_counter() - t0)
    finally:
        kernel.set_isa(own)
    return rates


def best(rates: dict[str, float]) -> tuple[str, float]:
    """The ISA whose loop read fastest, and its bytes a second."""
    isa = max(rates, key=lambda k: rates[k])
    return isa, rates[isa]
