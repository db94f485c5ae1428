"""What the CPU's part of a split expert costs (``neural_expert.units``, the copy lane's ``decode_lane_split``) against
its share of a whole expert, at the 120b expert shape: ``python -m bench.kernel.head_cost [--threads 8]``.

One call computes 2 whole experts, 2 whole plus the first u units of a third, or 3 whole (the kernel's one-token
call, as decode's misses). The head's cost is T(2 + head u) - T(2), printed beside u/I of T(3) - T(2): the
split's model (engine/gpu/lane_split.best_units) charges PART_EXTRA of an expert more than that share. Rounds
alternate the cases; medians of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from engine.store.format import RecordLayout, encode_record
from engine.store.native_experts import expert_ref_from_record
from native.kernel import load_kernel

H = INTER = 2880


def random_parts(rng: np.random.Generator) -> dict[str, np.ndarray]:
    g = H // 32

    def bias(n: int) -> np.ndarray:
        return (rng.standard_normal(n).astype(np.float32) * 0.05).view(np.uint32).__rshift__(16).astype(np.uint16)

    return {"gu_codes": rng.integers(0, 256, (2 * INTER, g, 16), dtype=np.uint8),
            "gu_scales": rng.integers(122, 128, (2 * INTER, g), dtype=np.uint8),
            "dn_codes": rng.integers(0, 256, (H, INTER // 32, 16), dtype=np.uint8),
            "dn_scales": rng.integers(122, 128, (H, INTER // 32), dtype=np.uint8),
            "gu_bias": bias(2 * INTER), "dn_bias": bias(H)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=40, help="calls a case a round (each over different experts)")
    ap.add_argument("--experts", type=int, default=24, help="random experts in RAM (24: ~320 MB, beyond any cache)")
    a = ap.parse_args(argv)
    if a.experts < 3 or a.rounds < 1 or a.calls < 1 or a.threads < 1:
        ap.error("--experts must be at least 3; --rounds, --calls and --threads at least 1")
    k = load_kernel()
    k.set_threads(a.threads)
    rng = np.random.default_rng(0)
    layout = RecordLayout.build(H, INTER, "raw")
    recs = [encode_record(random_parts(rng), layout)[0] for _ in range(a.experts)]  # each call takes the next three
    refs = [expert_ref_from_record(k, r, layout, 0) for r in recs]
    shape = k.shape(H, INTER, "raw", 7.0, 1.702, layout.offsets, bf16_inputs=True)
    x = rng.standard_normal(H).astype(np.float32)
    out = np.zeros(H, np.float32)
    units = [0, 256, 704, 1440, 2176, 2624, INTER]
    times: dict[int, list[float]] = {u: [] for u in units}
    for _ in range(a.rounds):
        for u in units:
            t0 = time.perf_counter()
            for c in range(a.calls):
                e = [refs[(3 * c + j) % len(refs)] for j in range(3)]
                if u == 0:
                    call = e[:2]
                elif u == INTER:
                    call = e
                else:
                    call = [e[0], e[1], k.head(e[2], u)]
                k.moe_token(shape, call, np.full(len(call), 0.3, np.float32), x, out)
            times[u].append((time.perf_counter() - t0) * 1e3 / a.calls)
    med = {u: statistics.median(v) for u, v in times.items()}
    whole = med[INTER] - med[0]
    print(f"{a.threads} threads, {k.isa}; ms a call (medians of {a.rounds} rounds of {a.calls} calls): "
          f"2 whole {med[0]:.3f}, 3 whole {med[INTER]:.3f}; a third expert costs {whole:.3f}")
    print("| units | 2 + head, ms | head ms | u/INTER of a whole expert, ms | head / its share |")
    print("|---:|---:|---:|---:|---:|")
    for u in units[1:-1]:
        head = med[u] - med[0]
        share = whole * u / INTER
        print(f"| {u} | {med[u]:.3f} | {head:.3f} | {share:.3f} | {head / share:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
