"""The pinned staging ring: a producer thread packs non-resident experts for the GPU.

A staged expert travels checkpoint (memory-mapped, page cache) -> pinned buffer (slot byte
layout, engine/gpu/layout.py) -> scratch slot in VRAM. The producer thread fills the ring's
``depth`` buffers ahead of the main thread, in the order the experts were submitted; the
main thread takes a filled buffer, issues its host-to-device copy on a copy stream, and
hands the buffer back together with the copy's CUDA event. The producer waits on that event
before it refills the buffer, so a buffer is never overwritten while the copy engine is
still reading it. Packing copies run on ``pack_threads`` threads (numpy releases the GIL for
plain copies), because one thread cannot read RAM as fast as PCIe can carry it.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ...checkpoint import Checkpoint
from ..layout import SLOT_PARTS, ExpertLayout

CHUNK = 2 << 20  # bytes per parallel packing copy
_STOP = object()


def _stream_copier() -> Any:
    """The native kernel's non-temporal copy (the CPU never reads a packed buffer back, so its
    stores need not fetch the destination first), else numpy's. Both release the GIL.
    Not the default: MEASURED 1.16-1.55x faster than numpy on the Zen 4 VM (1-2 threads) but
    0.92-0.94x at 4-8 threads on the H200 host (12.8 / 13.4 vs 11.8 / 12.6 GB/s);
    ``stream_copy=True`` selects it."""
    try:
        from native.kernel import load_kernel

        return load_kernel().copy_stream
    except Exception:  # no native extension here: plain copies, same bytes
        return np.copyto


class StagingError(RuntimeError):
    """The producer thread failed to pack an expert (the message says which and why)."""


class StagingRing:
    def __init__(self, ck: Checkpoint, layout: ExpertLayout, depth: int, pinned: bool, pack_threads: int = 4,
                 stream_copy: bool = False) -> None:
        if depth < 1:
            raise ValueError("the staging ring needs at least one buffer")
        self.ck = ck
        self.layout = layout
        self.buffers = [torch.zeros(layout.slot_bytes, dtype=torch.uint8, pin_memory=pinned) for _ in range(depth)]
        self._np = [b.numpy() for b in self.buffers]
        self._free: queue.Queue[tuple[int, Any]] = queue.Queue()
        for i in range(depth):
            self._free.put((i, None))
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._ready: queue.Queue[Any] = queue.Queue()
        self._pool = ThreadPoolExecutor(pack_threads, thread_name_prefix="neural-pack") if pack_threads > 1 else None
        self._copy = _stream_copier() if stream_copy else np.copyto
        self.pack_seconds = 0.0  # producer time spent packing (host memcpy)
        self.event_wait_seconds = 0.0  # producer time waiting for a buffer's copy to finish
        self.packed = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._produce, name="neural-stage", daemon=True)
        self._thread.start()

    # ---- main thread ------------------------------------------------------------------------
    def submit(self, layer: int, experts: list[int]) -> None:
        for e in experts:
            self._jobs.put((layer, int(e)))

    def take(self, timeout: float = 120.0) -> tuple[int, int, int]:
        """(layer, expert, buffer) of the next packed expert, in submission order."""
        try:
            item = self._ready.get(timeout=timeout)
        except queue.Empty as exc:
            raise StagingError(f"no staged expert arrived within {timeout:.0f} s") from exc
        if isinstance(item, BaseException):
            raise StagingError(f"packing a staged expert failed: {item}") from item
        return item  # type: ignore[no-any-return]

    def give_back(self, buffer: int, copy_done: Any) -> None:
        """The buffer's host-to-device copy was issued; ``copy_done`` (CUDA event or None) marks its end."""
        self._free.put((buffer, copy_done))

    def close(self) -> None:
        """Stop the producer, also when it is blocked on a buffer (after a failed prompt)."""
        self._stopped = True
        self._jobs.put(_STOP)
        self._free.put((-1, None))  # wakes a producer waiting for a free buffer
        self._thread.join(timeout=30)
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # ---- producer thread ----------------------------------------------------------------------
    def _produce(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP or self._stopped:
                return
            layer, e = job
            buf = -1
            try:
                t0 = time.perf_counter()
                buf, ev = self._free.get()
                if buf < 0 or self._stopped:
                    return
                if ev is not None:
                    ev.synchronize()
                t1 = time.perf_counter()
                self._pack(layer, e, self._np[buf])
                self.event_wait_seconds += t1 - t0
                self.pack_seconds += time.perf_counter() - t1
                self.packed += 1
                self._ready.put((layer, e, buf))
            except BaseException as exc:  # hand the failure to the main thread, keep serving
                if buf >= 0:
                    self._free.put((buf, None))
                self._ready.put(StagingError(f"layer {layer} expert {e}: {type(exc).__name__}: {exc}"))

    def _pack(self, layer: int, e: int, dst: np.ndarray) -> None:
        parts = self.ck.expert_arrays(layer, e)
        lay = self.layout
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        for part in SLOT_PARTS:
            src = np.ascontiguousarray(parts[part]).reshape(-1).view(np.uint8)
            if src.size != lay.sizes[part]:
                raise ValueError(f"{part}: {src.size} bytes, layout expects {lay.sizes[part]}")
            off = lay.offsets[part]
            for s in range(0, src.size, CHUNK):
                n = min(CHUNK, src.size - s)
                copies.append((dst[off + s : off + s + n], src[s : s + n]))
        copy = self._copy
        if self._pool is None or len(copies) == 1:
            for d, src_part in copies:
                copy(d, src_part)
        else:
            list(self._pool.map(lambda c: copy(c[0], c[1]), copies))
