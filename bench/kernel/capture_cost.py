"""What copy-on-compute costs the CPU: one-token calls with and without a captured expert.

An admission to a VRAM slot (engine/gpu/admission.py) has the CPU kernel copy the expert's bytes
into a capture buffer while it computes the expert (capture_rows in native/neural_experts.c:
each row chunk streamed out with non-temporal stores right after its dot products), so the bytes
are read from RAM once. The read is shared; the write is not: 13.2 MB more memory traffic per
captured 120b expert, on the kernel's own threads. This measures that price, the number a policy
weighs an admission against (an admitted expert must save more CPU work than its capture cost).

    python -m bench.kernel.capture_cost [--threads 2] [--store-gib 2] [--rounds 8] [--calls 100]
        [--experts 2] [--path STORE] [--json]

Each call computes ``--experts`` random experts of a synthetic store larger than the LLC
(bench.kernel.kernel_bench's), as a decode layer does; the B calls capture one of them. Rounds
run A B B A so drifting load hits both; medians are reported. Every capture is checked against the
store's record bytes once.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from engine.store.native_experts import expert_ref_from_record
from engine.store.reader import ExpertStore
from native.kernel import load_kernel

from .kernel_bench import H120, I120, _store_at


@dataclass(frozen=True)
class CaptureCost:
    threads: int
    isa: str
    experts_per_call: int
    ms_per_call: float  # median, no capture
    ms_per_call_captured: float  # median, one expert of the call captured
    extra_ms: float  # what one capture adds
    extra_of_expert: float  # extra_ms / (ms_per_call / experts_per_call)
    capture_gbps: float  # the captured bytes over extra_ms
    record_bytes: int
    calls: int
    rounds: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def run_capture_cost(threads: int = 2, store_gib: float = 2.0, rounds: int = 8, calls: int = 100,
                     experts_per_call: int = 2, path: str | None = None, seed: int = 0) -> CaptureCost:
    if rounds < 1 or calls < 1 or experts_per_call < 1:
        raise ValueError("--rounds, --calls and --experts must be >= 1")
    k = load_kernel()
    k.set_threads(threads)
    with _store_at(path, store_gib, "raw", None) as p, ExpertStore.open(p) as store:
        n, layout = store.experts, store.layout
        if n < experts_per_call:
            raise ValueError(f"the store holds {n} experts; --experts {experts_per_call} needs as many")
        shape = k.shape(H120, I120, store.fmt, 7.0, 1.702, layout.offsets, bf16_inputs=True)
        rec_bytes = k.record_bytes(shape)
        base, owner = k.pointer(store.buf)
        plain = [expert_ref_from_record(k, base + store.offset(0, e), layout, store.n_exc(0, e)) for e in range(n)]
        buf = np.zeros(rec_bytes, np.uint8)
        rng = random.Random(seed)
        x = np.random.default_rng(seed).standard_normal(H120).astype(np.float32)
        out = np.empty(H120, np.float32)
        w = np.full(experts_per_call, 1.0 / experts_per_call, np.float32)

        def one(capture: bool) -> int:
            ids = rng.sample(range(n), experts_per_call)
            refs = [plain[i] for i in ids]
            if capture:  # a one-off descriptor that also writes the record, as Residency asks
                refs[0] = expert_ref_from_record(k, base + store.offset(0, ids[0]), layout, store.n_exc(0, ids[0]),
                                                 capture=buf)
            k.moe_token(shape, refs, w, x, out)
            return ids[0]

        e0 = one(True)
        if not np.array_equal(buf[: layout.fixed_bytes], store.record(0, e0)[: layout.fixed_bytes]):
            raise RuntimeError("the capture buffer does not hold the expert's record bytes")

        def timed(capture: bool) -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                one(capture)
            return (time.perf_counter() - t0) / calls

        timed(False)  # first touch of the mapping and warm team
        a: list[float] = []
        b: list[float] = []
        for _ in range(rounds):
            a.append(timed(False))
            b.append(timed(True))
            b.append(timed(True))
            a.append(timed(False))
        del owner
        ma, mb = statistics.median(a), statistics.median(b)
        extra = mb - ma
        return CaptureCost(k.threads, k.isa, experts_per_call, round(ma * 1e3, 4), round(mb * 1e3, 4),
                           round(extra * 1e3, 4), round(extra / (ma / experts_per_call), 3),
                           round(rec_bytes / extra / 1e9, 2) if extra > 0 else float("inf"), rec_bytes,
                           4 * rounds * calls, rounds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.capture_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--store-gib", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--calls", type=int, default=100, help="calls per timed batch")
    p.add_argument("--experts", type=int, default=2, help="experts per call (a decode layer's CPU misses)")
    p.add_argument("--path", default=None, help="keep the synthetic store here (reused if present)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        r = run_capture_cost(a.threads, a.store_gib, a.rounds, a.calls, a.experts, a.path)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r.as_dict()))
    else:
        print(f"{r.threads} threads, {r.isa}, {r.experts_per_call} experts per call (MEASURED, medians of "
              f"{2 * r.rounds} batches each, A B B A)")
        print(f"  no capture        : {r.ms_per_call:.3f} ms per call")
        print(f"  one expert captured: {r.ms_per_call_captured:.3f} ms per call")
        print(f"  a capture costs {r.extra_ms:.3f} ms = {r.extra_of_expert:.2f} of an expert's compute "
              f"({r.record_bytes / 1e6:.1f} MB at {r.capture_gbps:.1f} GB/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
