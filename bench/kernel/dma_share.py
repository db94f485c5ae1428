"""Can a decode step ship some CPU misses to the GPU over PCIe on this machine? The CPU kernel and the copy engine
alone and together, and what a per-layer split would save.

A decode layer's misses are computed by the CPU kernel from RAM. The GPU idles meanwhile. Copying one miss from the
registered (page-locked) mapping into a VRAM scratch slot and computing it there runs beside the CPU, but both read
the same DRAM. The server design measured this lane at -11% on its DDR4 target PC, where the CPU kernel alone fills
DRAM. On a machine whose kernel is compute-bound below its DRAM bandwidth the two may add up. This measures it:

    python -m bench.kernel.dma_share [--threads 8] [--store-gib 8] [--experts 2] [--rounds 3] [--seconds 2]
        [--hit 0.428] [--layers 18] [--json]

Per round, in the order kernel, copies, both, both, copies, kernel: the one-token kernel on ``--experts`` random
experts a call (as a decode layer's misses; GB/s and ms per expert), one expert record at a time copied to the GPU
and waited for (GB/s and ms per copy, as a layer would wait), and the two at once on separate threads. Medians.

Then a projection (CALCULATED, not a measured decode): each of ``--layers`` layers routes 4 experts, each a miss with
probability 1 - ``--hit``; a layer with k misses takes min over m of max(CPU on k - m experts, copies of m experts
plus the GPU's compute), at the rates measured together (alone where nothing runs beside). Needs CUDA for the copies.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from engine.gpu.lane_split import best_split
from engine.store.native_experts import expert_ref_from_record
from engine.store.reader import ExpertStore
from native.kernel import load_kernel

from .kernel_bench import H120, I120, _store_at

GPU_EXPERT_MS = 0.03  # the GPU's gate_up + down on one 120b expert in a slot (session 13 profile: ~20-30 us)


@dataclass(frozen=True)
class Share:
    threads: int
    experts_per_call: int
    record_mb: float
    kernel_alone_gbps: float
    kernel_beside_gbps: float
    kernel_ms_per_call_alone: float
    kernel_ms_per_call_beside: float
    copy_alone_gbps: float
    copy_beside_gbps: float
    copy_ms_alone: float
    copy_ms_beside: float
    projection: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def project(hit: float, layers: int, cpu_fixed_ms: float, cpu_ms: float, copy_ms: float,
            gpu_ms: float = GPU_EXPERT_MS, routed: int = 4) -> dict[str, float]:
    """Expected ms per token of the misses' phase without and with the copy lane (CALCULATED): misses per layer
    binomial(routed, 1 - hit); CPU time a + b*j for j > 0 experts; the lane m * (copy + gpu)."""
    p = 1.0 - hit
    now = lane = 0.0
    for k in range(routed + 1):
        pk = math.comb(routed, k) * p**k * (1 - p) ** (routed - k)
        now += pk * (cpu_fixed_ms + k * cpu_ms if k else 0.0)
        lane += pk * best_split(k, k, cpu_fixed_ms, cpu_ms, copy_ms + gpu_ms)[1]  # the engine's split, m unbounded
    return {"misses_per_token": round(layers * routed * p, 2), "cpu_phase_ms_now": round(layers * now, 3),
            "phase_ms_with_lane": round(layers * lane, 3)}


def run_share(threads: int = 8, store_gib: float = 8.0, experts: int = 2, rounds: int = 3, seconds: float = 2.0,
              hit: float = 0.428, layers: int = 18, path: str | None = None, seed: int = 0) -> Share:
    import torch

    from engine.gpu.prefill.direct import as_tensor, cuda_register, cuda_unregister

    if not torch.cuda.is_available():
        raise RuntimeError("the copies need a CUDA device")
    k = load_kernel()
    k.set_threads(threads)
    with _store_at(path, store_gib, "raw", None) as p, ExpertStore.open(p) as store:
        n, layout = store.experts, store.layout
        shape = k.shape(H120, I120, store.fmt, 7.0, 1.702, layout.offsets, bf16_inputs=True)
        rec = int(store.table["size"][0])
        base, owner = k.pointer(store.buf)
        refs = [expert_ref_from_record(k, base + store.offset(0, e), layout, store.n_exc(0, e)) for e in range(n)]
        addr = int(store.buf.ctypes.data)
        err = cuda_register(addr, store.buf.nbytes)
        if err:
            raise RuntimeError(f"cudaHostRegister failed with CUDA error {err}")
        try:
            src = as_tensor(store.buf)
            dst = torch.empty((4, rec), dtype=torch.uint8, device="cuda")
            stream = torch.cuda.Stream()
            x = np.random.default_rng(seed).standard_normal(H120).astype(np.float32)
            out = np.empty(H120, np.float32)
            w = np.full(experts, 1.0 / experts, np.float32)
            k.probe_read(base, store.buf.nbytes)  # first touch

            def kernel_for(stop: threading.Event, res: list[float]) -> None:
                rng, calls, t0 = random.Random(seed), 0, time.perf_counter()
                while not stop.is_set():
                    k.moe_token(shape, [refs[i] for i in rng.sample(range(n), experts)], w, x, out)
                    calls += 1
                res.append((time.perf_counter() - t0) / max(calls, 1))

            def copies_for(stop: threading.Event, res: list[float]) -> None:
                rng, copies, t0 = random.Random(seed + 1), 0, time.perf_counter()
                with torch.cuda.stream(stream):
                    while not stop.is_set():
                        e = rng.randrange(n)
                        off = store.offset(0, e)
                        dst[copies % 4].copy_(src[off : off + rec], non_blocking=True)
                        stream.synchronize()  # a layer waits for its copies before the GPU computes them
                        copies += 1
                res.append((time.perf_counter() - t0) / max(copies, 1))

            def phase(kind: str) -> tuple[float | None, float | None]:
                stop = threading.Event()
                kr: list[float] = []
                cr: list[float] = []
                ts = []
                if kind in ("kernel", "both"):
                    ts.append(threading.Thread(target=kernel_for, args=(stop, kr)))
                if kind in ("copies", "both"):
                    ts.append(threading.Thread(target=copies_for, args=(stop, cr)))
                for t in ts:
                    t.start()
                time.sleep(seconds)
                stop.set()
                for t in ts:
                    t.join()
                return (kr[0] if kr else None), (cr[0] if cr else None)

            phase("both")  # warm: team, copy engine, registration
            got: dict[str, list[tuple[float | None, float | None]]] = {"kernel": [], "copies": [], "both": []}
            for _ in range(rounds):
                for kind in ("kernel", "copies", "both", "both", "copies", "kernel"):
                    got[kind].append(phase(kind))
        finally:
            cuda_unregister(addr)
            del owner
    k_alone = statistics.median(v[0] for v in got["kernel"] if v[0])
    k_beside = statistics.median(v[0] for v in got["both"] if v[0])
    c_alone = statistics.median(v[1] for v in got["copies"] if v[1])
    c_beside = statistics.median(v[1] for v in got["both"] if v[1])
    fixed = 0.05  # ms, the one-token call's fixed cost (bench/kernel/call_cost.c on this host, session 11)
    per_cpu = (k_beside * 1e3 - fixed) / experts
    proj = project(hit, layers, fixed, per_cpu, c_beside * 1e3)
    proj["cpu_phase_ms_now"] = project(hit, layers, fixed, (k_alone * 1e3 - fixed) / experts,
                                       c_beside * 1e3)["cpu_phase_ms_now"]
    return Share(k.threads, experts, round(rec / 1e6, 2),
                 round(experts * rec / k_alone / 1e9, 2), round(experts * rec / k_beside / 1e9, 2),
                 round(k_alone * 1e3, 4), round(k_beside * 1e3, 4),
                 round(rec / c_alone / 1e9, 2), round(rec / c_beside / 1e9, 2),
                 round(c_alone * 1e3, 4), round(c_beside * 1e3, 4), proj)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.dma_share", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--store-gib", type=float, default=8.0)
    p.add_argument("--experts", type=int, default=2, help="experts per kernel call (a decode layer's misses)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0, help="per phase")
    p.add_argument("--hit", type=float, default=0.428, help="VRAM hit rate for the projection")
    p.add_argument("--layers", type=int, default=18)
    p.add_argument("--path", default=None, help="keep the synthetic store here (reused if present)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if not 0 <= a.hit < 1 or a.experts < 1 or a.rounds < 1 or a.seconds <= 0:
        p.error("--hit must be in [0, 1), --experts and --rounds >= 1, --seconds > 0")
    try:
        r = run_share(a.threads, a.store_gib, a.experts, a.rounds, a.seconds, a.hit, a.layers, a.path)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    d: dict[str, Any] = r.as_dict()
    if a.json:
        print(json.dumps(d))
        return 0
    print(f"{r.threads} threads, {r.experts_per_call} experts a call, {r.record_mb} MB records (MEASURED, medians)")
    print(f"  CPU kernel : alone {r.kernel_alone_gbps} GB/s ({r.kernel_ms_per_call_alone} ms a call), beside the "
          f"copies {r.kernel_beside_gbps} GB/s ({r.kernel_ms_per_call_beside} ms)")
    print(f"  copies     : alone {r.copy_alone_gbps} GB/s ({r.copy_ms_alone} ms an expert), beside the kernel "
          f"{r.copy_beside_gbps} GB/s ({r.copy_ms_beside} ms)")
    pr = r.projection
    print(f"  CALCULATED, {a.layers} layers at hit {a.hit}: {pr['misses_per_token']} misses a token, their phase "
          f"{pr['cpu_phase_ms_now']} ms now, {pr['phase_ms_with_lane']} ms with the copy lane")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
