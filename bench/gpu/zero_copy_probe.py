"""Can the GPU pull an expert out of the page-locked checkpoint mapping faster, in host time, than the DMA copies?

    python -m bench.gpu.zero_copy_probe [--mib 1024] [--flags 0x0b]

The decode copy lane (engine/gpu/copy_lane.py) queues six ``cudaMemcpy2DAsync`` and a graph launch per layer:
1.1-2.1 ms of host time a token at 18 layers, on the critical path (session 24, ``lane_start``). A kernel that reads
the registered mapping itself (zero-copy, over PCIe) would need one graph launch a layer. This measures, on a file
mapping in /dev/shm registered as the engine registers the checkpoint's shards (plus the mapped flag):
- whether the device pointer of the registration is the host pointer (``cudaHostGetDevicePointer``);
- the copy rate of the DMA path (one ``cudaMemcpy2DAsync``) and of a Triton copy kernel over the mapping, at expert
  sizes and several grids, GPU-timed, with the bytes checked;
- the host time of issuing them: six ``cudaMemcpy2DAsync`` (one expert pair's parts) against one graph launch.
Everything MEASURED; one JSON line at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from bench.gpu.mapped_file import random_mapping
from engine.gpu import cudart


@triton.jit
def pull_kernel(src_addr, dst_ptr, n_words, BLOCK: tl.constexpr):
    """n_words int64 words from the host address src_addr to dst_ptr, programs striding over blocks."""
    src = src_addr.to(tl.pointer_type(tl.int64))
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n_words, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n_words
        tl.store(dst_ptr + offs, tl.load(src + offs, mask=m), mask=m)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--flags", type=lambda s: int(s, 0), default=0x0B, help="cudaHostRegister flags "
                    "(0x01 portable, 0x02 mapped, 0x08 read-only)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    n = a.mib << 20
    host = random_mapping("zero_copy_probe.bin", n)  # a file mapping, as the checkpoint's shards are
    hptr = host.ctypes.data
    out: dict[str, object] = {"mib": a.mib, "flags": a.flags}
    err = int(torch.cuda.cudart().cudaHostRegister(hptr, n, a.flags))
    out["register_error"] = err
    lib = ctypes.CDLL(cudart._candidates()[0])
    dptr = ctypes.c_void_p()
    e2 = lib.cudaHostGetDevicePointer(ctypes.byref(dptr), ctypes.c_void_p(hptr), 0)
    out["device_pointer_error"] = int(e2)
    out["device_pointer_is_host_pointer"] = dptr.value == hptr
    print(json.dumps(out), flush=True)
    if err or e2:
        return 1
    src = int(dptr.value or 0)
    rt = cudart.runtime()
    assert rt is not None
    dst = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
    dst64 = dst.view(torch.int64)  # the kernel stores whole words (a byte view took 1 of every 8: call 1's 49.4 GB/s)
    stream = torch.cuda.current_stream().cuda_stream
    expert = 13_271_040  # one 120b expert's six parts, bytes (CALCULATED from the layout)
    rows: list[dict[str, float | int | str | bool]] = []

    def timed(fn: Any, reps: int = 10) -> float:
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for r in range(reps):
            s.record()
            fn(r)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        return statistics.median(ts)

    for size in (expert, 2 * expert):
        off_max = n - size
        rng = np.random.default_rng(1)
        offs = [int(x) // 4096 * 4096 for x in rng.integers(0, off_max, 16)]  # a fresh stretch each time (no L2 reuse)

        def dma(r: int = 0, size: int = size, offs: list[int] = offs) -> None:
            rt.copy_2d(dst.data_ptr(), size, hptr + offs[r % 16], size, size, 1, stream)

        ms = timed(dma)
        rows.append({"what": "dma", "bytes": size, "ms": ms, "GB_s": size / ms / 1e6})
        ok = torch.equal(dst[:size].cpu(), torch.from_numpy(host[offs[9 % 16]: offs[9 % 16] + size].copy()))
        rows[-1]["same_bytes"] = ok
        for grid in (66, 132, 264, 528, 1056):
            for block, warps in ((512, 4), (1024, 8), (2048, 8)):
                words = size // 8

                def pull(r: int = 0, grid: int = grid, block: int = block, warps: int = warps,
                         words: int = words, offs: list[int] = offs) -> None:
                    pull_kernel[(grid,)](src + offs[r % 16], dst64, words, BLOCK=block, num_warps=warps)

                ms = timed(pull)
                got = torch.equal(dst[:size].cpu(), torch.from_numpy(host[offs[9 % 16]: offs[9 % 16] + size].copy()))
                rows.append({"what": "pull", "grid": grid, "block": block, "warps": warps, "bytes": size, "ms": ms,
                             "GB_s": size / ms / 1e6, "same_bytes": got})
        for r in rows[-16:]:
            print(json.dumps(r), flush=True)

    # host time to issue: six 2-D copies (one expert pair's parts) against one captured graph launch
    parts = [(0, 2 * 8_294_400), (16_588_800, 2 * 518_400), (17_625_600, 2 * 4_147_200), (25_920_000, 2 * 259_200),
             (26_438_400, 2 * 11_520), (26_461_440, 2 * 5_760)]
    torch.cuda.synchronize()
    t = []
    for i in range(200):
        a0 = time.perf_counter()
        for o, sz in parts:
            rt.copy_2d(dst.data_ptr() + o, sz // 2, hptr + o + (i % 16) * 4096, sz // 2, sz // 2, 2, stream)
        t.append(time.perf_counter() - a0)
        torch.cuda.synchronize()
    issue_dma = statistics.median(t) * 1e6
    g = torch.cuda.CUDAGraph()
    s2 = torch.cuda.Stream()
    with torch.cuda.stream(s2):
        pull_kernel[(264,)](src, dst64, (2 * expert) // 8, BLOCK=1024, num_warps=8)
    torch.cuda.synchronize()
    with torch.cuda.graph(g, stream=s2):
        pull_kernel[(264,)](src, dst64, (2 * expert) // 8, BLOCK=1024, num_warps=8)
    exe = int(g.raw_cuda_graph_exec())
    t = []
    for _ in range(200):
        a0 = time.perf_counter()
        rt.graph_launch(exe, stream)
        t.append(time.perf_counter() - a0)
        torch.cuda.synchronize()
    issue_graph = statistics.median(t) * 1e6
    best = max((r for r in rows if r["what"] == "pull" and r["bytes"] == 2 * expert), key=lambda r: float(r["GB_s"]))
    dma2 = next(r for r in rows if r["what"] == "dma" and r["bytes"] == 2 * expert)
    summary = {"issue_six_copies_us": issue_dma, "issue_graph_launch_us": issue_graph, "best_pull": best,
               "dma_pair": dma2, **out}
    print("SUMMARY " + json.dumps(summary), flush=True)
    torch.cuda.cudart().cudaHostUnregister(hptr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
