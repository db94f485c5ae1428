"""Can the GPU copy experts straight from the checkpoint's mapping? (GPU machine)

``python3 -m bench.gpu.dma_probe DIR [GB]`` writes a GB-sized file in DIR (tmpfs or a disk's
page cache), maps it read-only as the checkpoint reader does and prints, in GB/s of expert bytes
(the six parts of a 120b expert, 13.2 MB, copied part by part into a VRAM slot):

* ``pinned``: from a pinned buffer (what the staging ring does after packing: the PCIe rate);
* ``pageable``: cudaMemcpyAsync straight from the unregistered mapping (the driver stages it);
* ``registered``: from the mapping after ``cudaHostRegister(..., ReadOnly)``, with the time to
  register and unregister a layer-sized window (1.6 GB) and the whole file;
* ``packed ring``: not here (bench.gpu.pack_probe measures it: 11.5-13.6 GB/s, session 5).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.config import ModelConfig
from engine.gpu.prefill.direct import as_tensor, cuda_register, cuda_unregister
from engine.plan import SLOT_PARTS, slot_parts
from engine.synth.shapes import PRESETS


def copy_rate(src: torch.Tensor, sizes: list[int], slot: torch.Tensor, experts: int, offset: int) -> float:
    """GB/s copying ``experts`` experts part by part from ``src`` (bytes from ``offset``)."""
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    at, nbytes = offset, 0
    with torch.cuda.stream(stream):
        for _ in range(experts):
            d = 0
            for n in sizes:
                slot[d : d + n].copy_(src[at : at + n], non_blocking=True)
                at += n
                d += n
            nbytes += sum(sizes)
    stream.synchronize()
    return nbytes / (time.perf_counter() - t0) / 1e9


def register(ptr: int, n: int) -> tuple[int, float]:
    """The engine's registration (direct.py: read-only, portable), timed: (CUDA error, seconds)."""
    t0 = time.perf_counter()
    err = cuda_register(ptr, n)
    return err, time.perf_counter() - t0


def unregister(ptr: int) -> float:
    t0 = time.perf_counter()
    cuda_unregister(ptr)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    where = Path(args[0])
    gb = float(args[1]) if len(args) > 1 else 4.0
    cfg = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())
    _, part_sizes, slot_bytes = slot_parts(cfg)
    sizes = [part_sizes[p] for p in SLOT_PARTS]
    expert = sum(sizes)
    path = where / "neural-dma-probe.bin"
    n = int(gb * 1e9) // 4096 * 4096
    out: dict[str, Any] = {"dir": str(where), "file_gb": n / 1e9, "expert_mb": expert / 1e6}
    t0 = time.perf_counter()
    block = np.arange(1 << 24, dtype=np.uint32).view(np.uint8)  # 64 MiB of varied bytes
    with open(path, "wb") as f:
        for s in range(0, n, block.size):
            f.write(block[: min(block.size, n - s)].tobytes())
    out["write_s"] = time.perf_counter() - t0
    m = np.memmap(path, dtype=np.uint8, mode="r")
    src = as_tensor(m)
    out["touch_s"] = _touch(m)  # page tables filled, as the checkpoint's pages are after a first prompt
    slot = torch.empty(slot_bytes, dtype=torch.uint8, device="cuda")
    window_experts = 120  # ~1.6 GB: one layer's non-resident experts
    win = window_experts * expert
    pinned = torch.empty(expert * 8, dtype=torch.uint8, pin_memory=True)
    copy_rate(pinned, sizes, slot, 2, 0)  # warm the copy path
    out["pinned_gbps"] = max(copy_rate(pinned, sizes, slot, 8, 0) for _ in range(3))
    out["pageable_gbps"] = copy_rate(src, sizes, slot, window_experts, 0)
    out["pageable_again_gbps"] = copy_rate(src, sizes, slot, window_experts, 0)
    # a layer-sized window: register, copy, unregister (three windows)
    page = 4096
    rows = []
    for w in range(1, 4):
        off = w * win
        if off + win > n:
            break
        a = m[off : off + win]
        ptr = a.ctypes.data // page * page
        length = (a.ctypes.data + win - ptr + page - 1) // page * page
        err, reg_s = register(ptr, length)
        row: dict[str, Any] = {"err": err, "register_s": reg_s, "gb": length / 1e9}
        if err == 0:
            row["copy_gbps"] = copy_rate(src, sizes, slot, window_experts, off)
            row["copy_again_gbps"] = copy_rate(src, sizes, slot, window_experts, off)
            row["unregister_s"] = unregister(ptr)
        rows.append(row)
    out["window"] = rows
    # the whole file at once
    ptr = m.ctypes.data
    err, reg_s = register(ptr, n)
    out["whole"] = {"err": err, "register_s": reg_s, "register_gbps": n / 1e9 / reg_s}
    if err == 0:
        k = min(n // expert - 1, 300)
        out["whole"]["copy_gbps"] = copy_rate(src, sizes, slot, k, 0)
        out["whole"]["unregister_s"] = unregister(ptr)
    del src, m
    path.unlink()
    print(json.dumps(out, indent=1))
    return 0


def _touch(m: np.ndarray) -> float:
    t0 = time.perf_counter()
    for s in range(0, m.size, 64 << 20):
        int(m[s : s + (64 << 20) : 4096].sum())
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
