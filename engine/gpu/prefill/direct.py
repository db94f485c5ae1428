"""Staged experts copied straight from the checkpoint's mapping: no packing.

The staging ring (staging.py) packs each non-resident expert into a pinned buffer before the
copy engine can read it, and packing is the prompt path's wall: 11.5-13.6 GB/s on the H200 host
against 50 GB/s of PCIe (bench.gpu.pack_probe, MEASURED). Registering the checkpoint's shard
mappings with CUDA (``cudaHostRegister``, read-only) page-locks the page-cache pages the
mapping already holds, and the copy engine then reads an expert's six parts where they lie:
51.7 GB/s on the H200 host, the same as from a pinned buffer; registering cost 21-41 GB/s,
once (bench.gpu.dma_probe, MEASURED on tmpfs and on a disk's page cache).

Registration runs on a background thread at load, shard by shard in the order the layers need
them, up to a byte budget (page-locked pages cannot be evicted, so the budget leaves the OS its
headroom); a layer whose expert tensors all lie in registered shards is copied directly, any
other layer goes through the ring as before. The bytes that reach a slot are the same either
way (a test compares them), so the split between the two paths never changes the results.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...checkpoint import Checkpoint
from ...plan import SLOT_PARTS, direct_copies_possible
from .. import cudart
from ..layout import ExpertLayout

log = logging.getLogger(__name__)
HOST_REGISTER_PORTABLE, HOST_REGISTER_MAPPED, HOST_REGISTER_READ_ONLY = 0x01, 0x02, 0x08
HEADROOM = 16 << 30  # RAM left unlocked for the OS, the app and the rest of the page cache (auto budget)
RegisterFn = Callable[[int, int], int]  # (address, bytes) -> CUDA error code (0 = registered)


def cuda_register(ptr: int, n: int) -> int:
    # the mapping is read-only; mapped: the decode lane's pull kernel reads it from the GPU (kernels/pull.py)
    flags = HOST_REGISTER_PORTABLE | HOST_REGISTER_MAPPED | HOST_REGISTER_READ_ONLY
    return int(torch.cuda.cudart().cudaHostRegister(ptr, n, flags))


def cuda_unregister(ptr: int) -> None:
    torch.cuda.cudart().cudaHostUnregister(ptr)


def auto_budget(mode: str) -> int:
    """Bytes the registration may lock: "off" none; "on" no limit; "auto" the machine's RAM less
    ``HEADROOM`` on Linux, none elsewhere (never measured on Windows, where file mappings and
    page-locking work differently)."""
    if not direct_copies_possible(mode):
        return 0
    if mode == "on":
        return 1 << 62
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return max(0, ram - HEADROOM)


def as_tensor(a: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():  # the mapping is read-only and only ever read
        warnings.simplefilter("ignore")
        return torch.from_numpy(a)


class MappedExperts:
    """Which layers can be copied from the registered mapping, and the source of each part."""

    def __init__(self, ck: Checkpoint, layout: ExpertLayout, budget: int, *,
                 register: RegisterFn = cuda_register, unregister: Callable[[int], None] = cuda_unregister,
                 background: bool = True) -> None:
        self.layout = layout
        self.budget = budget
        self._register, self._unregister = register, unregister
        cfg = ck.config
        # per layer and part: (shard, first byte, bytes per expert); shards in the order needed
        self.spans: list[dict[str, tuple[str, int, int]]] = []
        order: list[str] = []
        for layer in range(cfg.num_hidden_layers):
            row = {}
            for part in SLOT_PARTS:
                shard, start, end = ck.tensor_span(f"model.layers.{layer}.mlp.experts.{part}")
                row[part] = (shard, start, (end - start) // cfg.num_local_experts)
                if shard not in order:
                    order.append(shard)
            self.spans.append(row)
        self._maps = {s: ck.shard_mapping(s) for s in order}
        self._order = order
        self._src: dict[str, torch.Tensor] = {}
        self._registered: dict[str, int] = {}  # shard -> address registered
        self.locked_bytes = 0
        self.error: str | None = None  # why registration stopped early, if it did
        self._stop = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self.register_all, name="neural-register", daemon=True)
            self._thread.start()
        else:
            self.register_all()

    def register_all(self) -> None:
        for shard in self._order:
            if self._stop:
                return
            m = self._maps[shard]
            n = int(m.size)
            if self.locked_bytes + n > self.budget:
                self.error = f"RAM budget: {shard} would lock {(self.locked_bytes + n) / 2**30:.1f} GiB"
                return
            ptr = int(m.ctypes.data)
            err = self._register(ptr, n)
            if err != 0:
                self.error = f"cudaHostRegister({shard}) failed with CUDA error {err}"
                log.info("direct expert copies stop at %s: %s", shard, self.error)
                return
            with self._lock:
                self._src[shard] = as_tensor(m)
                self._registered[shard] = ptr
                self.locked_bytes += n

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def ready(self, layer: int) -> bool:
        row = self.spans[layer]
        with self._lock:
            return all(row[p][0] in self._src for p in SLOT_PARTS)

    def source(self, shard: str) -> torch.Tensor:
        with self._lock:
            return self._src[shard]

    def address(self, shard: str) -> int:
        with self._lock:
            return self._registered[shard]

    @property
    def ready_layers(self) -> int:
        return sum(self.ready(layer) for layer in range(len(self.spans)))

    def close(self) -> None:
        self._stop = True
        self.wait()
        with self._lock:
            for ptr in self._registered.values():
                try:
                    self._unregister(ptr)
                except Exception:  # a faulted context at exit: the process is ending anyway
                    log.exception("cudaHostUnregister")
            self._registered.clear()
            self._src.clear()
            self.locked_bytes = 0


@dataclass(frozen=True)
class Copy2D:
    """``height`` rows of ``width`` bytes: source rows ``spitch`` apart from byte ``src`` of a
    registered shard, destination rows ``dpitch`` apart from byte ``dst`` of the slot pool."""

    shard: str
    src: int
    spitch: int
    dst: int
    dpitch: int
    width: int
    height: int


def runs(experts: Sequence[int], slots: Sequence[int]) -> list[tuple[int, int, int]]:
    """(first expert, first slot, length) of each run of consecutive experts in consecutive slots."""
    out: list[tuple[int, int, int]] = []
    for e, s in zip(experts, slots, strict=True):
        if out and e == out[-1][0] + out[-1][2] and s == out[-1][1] + out[-1][2]:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((e, s, 1))
    return out


def plan_copies(m: MappedExperts, layer: int, experts: Sequence[int], slots: Sequence[int],
                slot_bytes: int) -> list[Copy2D]:
    """A wave's copies: one per part and run (a layer's experts lie one after another in each of
    its part tensors, and a wave's scratch slots are consecutive), instead of six per expert."""
    row = m.spans[layer]
    out = []
    for part in SLOT_PARTS:
        shard, start, size = row[part]
        off = m.layout.offsets[part]
        for e0, s0, n in runs(experts, slots):
            out.append(Copy2D(shard, start + e0 * size, size, s0 * slot_bytes + off, slot_bytes, size, n))
    return out


def run_copies(m: MappedExperts, pool: torch.Tensor, copies: list[Copy2D]) -> None:
    """Queue the copies on the current stream: 2-D runtime copies on CUDA, tensor copies row by
    row elsewhere (and where the runtime library cannot be found); the same bytes either way."""
    rt = cudart.runtime() if pool.is_cuda else None
    if rt is None:
        for c in copies:
            src = m.source(c.shard)
            for r in range(c.height):
                a, d = c.src + r * c.spitch, c.dst + r * c.dpitch
                pool[d : d + c.width].copy_(src[a : a + c.width], non_blocking=pool.is_cuda)
        return
    stream = torch.cuda.current_stream(pool.device).cuda_stream
    base = pool.data_ptr()
    for c in copies:
        rt.copy_2d(base + c.dst, c.dpitch, m.address(c.shard) + c.src, c.spitch, c.width, c.height, stream)
