"""What a few microseconds of Python cost right after the CPU experts have streamed through the caches.

    python -m bench.kernel.cold_python [--mib 300] [--calls 200]

The GPU decode step runs Python between a layer's native CPU experts and the next layer's launch: the copy lane's
split (engine/gpu/lane_split.py) and queueing, ~1.3-2 ms a token at 18 layers on the H200 host (session 25's
``lane_start``), where the same code takes a few microseconds a layer warm. This times the lane's split decision
(``SplitRates.choose`` and the lists ``CopyLane.split`` builds) warm, then each call right after ``--mib`` MiB have
been read through the caches (a NumPy sum on this thread: one layer's misses are 2-3 experts of 13 MB each at the
120b shape). Medians and 90th percentiles in microseconds, MEASURED.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from engine.gpu.lane_split import SplitRates


def split_like(rates: SplitRates, experts: list[int], weights: list[float],
               keep: set[int]) -> tuple[list[int], list[float], list[int], list[float]]:
    """CopyLane.split's work without a lane: the free misses, the choice, the four lists."""
    free = [i for i, e in enumerate(experts) if e not in keep]
    best = rates.choose(len(experts), min(2, len(free)))
    lane = set(free[len(free) - best:]) if best else set()
    return ([e for i, e in enumerate(experts) if i not in lane], [w for i, w in enumerate(weights) if i not in lane],
            [e for i, e in enumerate(experts) if i in lane], [w for i, w in enumerate(weights) if i in lane])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=300)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    rates = SplitRates(cpu_ms=0.3, lane_ms=0.3)
    big = np.ones(a.mib << 20, dtype=np.uint8)
    out: dict[str, dict[str, float]] = {}
    for name, flush in (("warm", False), ("after_stream", True), ("warm_again", False)):
        ts = []
        for i in range(a.calls):
            if flush:
                big.sum()
            t = time.perf_counter()
            split_like(rates, [1 + i % 7, 40, 77], [0.3, 0.3, 0.4], set())
            ts.append(time.perf_counter() - t)
        out[name] = {"median_us": round(float(np.median(ts)) * 1e6, 2),
                     "p90_us": round(float(np.percentile(ts, 90)) * 1e6, 2)}
    ratio = round(out["after_stream"]["median_us"] / out["warm"]["median_us"], 1)
    print(json.dumps({**out, "ratio_median": ratio}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
