"""The copy lane's queueing through one cudaMemcpyBatchAsync against its 2-D copies: host time and GPU time.

    python -m bench.gpu.batch_copy_probe [--rounds 200] [--flush-mib 256]

The decode copy lane queues each lane layer's experts with native/neural_lane.c::neural_lane_issue: one
cudaMemcpy2DAsync per part (six; two adjacent experts paired into two-row copies), ~26-54 us of host time a layer
warm (session 25, bench/gpu/zero_copy_probe.py), on the critical path before the CPU's misses start; in the decode
loop these calls run on caches the CPU experts have just streamed through. ``decode_lane_batch`` issues them as one
cudaMemcpyBatchAsync (CUDA 12.8+). This calls neural_lane_issue both ways over a file mapping in /dev/shm registered
as the engine registers the checkpoint's shards, with 120b expert parts, for one expert and for two (adjacent slots,
so the 2-D path pairs them, and apart):
- host time of the call, warm and after streaming ``--flush-mib`` through the CPU's caches (as the CPU experts do);
- GPU time of the copies (events around them) and the bytes in the slots, checked against the mapping.
Everything MEASURED; a SUMMARY line at the end. Without CUDA it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

# one 120b expert's six parts, bytes: gate_up codes, scales, bias; down codes, scales, bias (CALCULATED from the
# layout: 5,760 x 1,440 codes, 5,760 x 90 scales, 5,760 bf16 bias; 2,880 x 1,440, 2,880 x 90, 2,880 bf16)
PART_BYTES = (8_294_400, 518_400, 11_520, 4_147_200, 259_200, 5_760)
EXPERTS = 48  # experts per part region in the mapping (48 x 13.2 MB = 636 MB)
MAX_PITCH = (1 << 31) - 1


def layer_parts(base: int, experts: int = EXPERTS, sizes: tuple[int, ...] = PART_BYTES) -> np.ndarray:
    """int64 [parts, 3] as CopyLane.parts_array gives it: (address of expert 0's bytes, bytes per expert, offset
    in a slot), each part a region of ``experts`` consecutive experts from ``base``, slots packing the parts."""
    rows, src, off = [], base, 0
    for size in sizes:
        rows.append((src, size, off))
        src += experts * size
        off += size
    return np.asarray(rows, dtype=np.int64)


def slot_bytes(sizes: tuple[int, ...] = PART_BYTES) -> int:
    return sum(sizes)


def expected_slot(host: np.ndarray, parts: np.ndarray, base: int, expert: int) -> np.ndarray:
    """The bytes a slot must hold for ``expert``: its parts in slot order."""
    return np.concatenate([host[src - base + expert * size: src - base + (expert + 1) * size]
                           for src, size, _ in parts.tolist()])


def _stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"median_us": round(statistics.median(s), 2), "p90_us": round(s[int(0.9 * (len(s) - 1))], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--flush-mib", type=int, default=256, help="bytes streamed through the caches before a cold call")
    a = ap.parse_args(argv)
    if a.rounds < 2 or a.flush_mib < 1:
        ap.error("--rounds must be >= 2 and --flush-mib >= 1")
    import torch

    if not torch.cuda.is_available():
        print("batch_copy_probe: no CUDA device", file=sys.stderr)
        return 2
    from bench.gpu.mapped_file import random_mapping
    from engine.gpu import cudart
    from native.kernel import load_kernel

    rt = cudart.runtime()
    if rt is None:
        print("batch_copy_probe: the CUDA runtime's copy functions are not reachable", file=sys.stderr)
        return 1
    batch, abi = rt.batch_copy
    out: dict[str, Any] = {"runtime_version": rt.version, "batch_abi": abi}
    if not batch:
        print("SUMMARY " + json.dumps({**out, "error": "no cudaMemcpyBatchAsync in this runtime"}), flush=True)
        return 1
    kern = load_kernel()
    n = EXPERTS * slot_bytes()
    host = random_mapping("batch_copy_probe.bin", n)  # a file mapping, as the checkpoint's shards are
    hptr = host.ctypes.data
    err = int(torch.cuda.cudart().cudaHostRegister(hptr, n, 0x0B))  # portable | mapped | read-only, as the engine
    out["register_error"] = err
    if err:
        print("SUMMARY " + json.dumps(out), flush=True)
        return 1
    parts = layer_parts(hptr)
    sb = slot_bytes()
    pool = torch.zeros(4 * sb, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    raw = int(stream.cuda_stream)
    copy2d = rt.addresses[0]
    route = np.zeros(3 * 16, dtype=np.int32)
    flush = np.ones((a.flush_mib << 20) // 8, dtype=np.int64)
    sink = 0
    rows = []
    for label, experts, slots in (("one", [5], [0]), ("pair_adjacent", [5, 9], [0, 1]), ("pair_apart", [5, 9], [0, 2])):
        slot_np = np.asarray(slots, dtype=np.int32)
        for mode, fn, fabi in (("2d", copy2d, 0), ("batch", batch, abi)):
            times: dict[str, list[float]] = {"warm": [], "cold": []}
            gpu = []
            for r in range(a.rounds):
                cold = r % 2 == 1
                if cold:
                    sink += int(flush.sum())  # the CPU experts' streaming, as the decode loop leaves the caches
                ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev0.record(stream)
                t0 = time.perf_counter()
                kern.lane_issue(fn, 0, raw, 0, pool.data_ptr(), sb, MAX_PITCH, parts, slot_np, route, experts,
                                [0.5] * len(experts), fabi)
                times["cold" if cold else "warm"].append((time.perf_counter() - t0) * 1e6)
                ev1.record(stream)
                ev1.synchronize()
                gpu.append(ev0.elapsed_time(ev1) * 1e3)
            got = pool.cpu().numpy()
            same = all(np.array_equal(got[s * sb:(s + 1) * sb], expected_slot(host, parts, hptr, e))
                       for e, s in zip(experts, slots, strict=True))
            nbytes = len(experts) * sb
            row = {"experts": label, "mode": mode, "issue_warm": _stats(times["warm"][1:]),
                   "issue_cold": _stats(times["cold"]), "gpu": _stats(gpu), "GB_s": round(
                       nbytes / statistics.median(gpu) / 1e3, 1), "same_bytes": same}
            rows.append(row)
            print(json.dumps(row), flush=True)
            pool.zero_()
    torch.cuda.cudart().cudaHostUnregister(hptr)
    out["rows"] = rows
    out["checksum"] = sink & 0xFF
    print("SUMMARY " + json.dumps(out), flush=True)
    return 0 if all(r["same_bytes"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
