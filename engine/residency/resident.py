"""How many bytes of each expert record are resident in RAM right now.

Linux: ``mincore`` over the mapped pages (bit 0 per page = in the page cache), one call per run
of adjacent records, so a whole layer costs one syscall. Windows: ``QueryWorkingSetEx`` on a
sample of pages per record (every ``win_stride``-th page), scaled up — the working set, not the
standby cache, which is what a soft fault would have to bring back.

Refreshing the whole 55 GiB store walks ~14 M page entries (~7 ns each measured here, so ~3 ms for
one 1.6 GB layer of gpt-oss-120b): too slow for the token path. Callers refresh a layer at a time
(:meth:`StoreResidency.refresh_next`) off the token path and read the latest numbers in between.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Sequence

import numpy as np

from . import os_memory
from .os_memory import PAGE
from .regions import ExpertKey, Mapping, Region, as_mappings, file_order

_RUN_GAP = 1 << 20  # records closer than this share one mincore call


def _runs(regions: list[Region]) -> list[list[int]]:
    """Indices of ``regions`` (sorted by file, offset) grouped into nearly contiguous runs of one file."""
    runs: list[list[int]] = []
    end, file = -1, -1
    for i, r in enumerate(regions):
        if runs and r.file == file and r.offset - end <= _RUN_GAP:
            runs[-1].append(i)
        else:
            runs.append([i])
            end = -1
        end, file = max(end, r.end), r.file
    return runs


class StoreResidency:
    """Resident bytes per (layer, expert) for the regions of one or more mappings."""

    def __init__(self, mappings: Mapping | Sequence[Mapping], regions: Sequence[Region],
                 win_stride: int = 16) -> None:
        if not regions:
            raise ValueError("no regions to watch")
        self.mappings = as_mappings(mappings)
        if max(r.file for r in regions) >= len(self.mappings):
            raise ValueError("a region names a file index without a mapping")
        self.layers = max(r.layer for r in regions) + 1
        self.experts = max(r.expert for r in regions) + 1
        self.win_stride = max(1, win_stride)
        self._by_layer: list[list[Region]] = [[] for _ in range(self.layers)]
        for r in sorted(regions, key=file_order):
            self._by_layer[r.layer].append(r)
        self._index: dict[ExpertKey, list[Region]] = {}
        for r in regions:  # a key may own several regions (e.g. one per tensor part)
            self._index.setdefault(r.key, []).append(r)
        self.record_bytes = np.zeros((self.layers, self.experts), dtype=np.int64)
        self.missing_bytes = np.zeros((self.layers, self.experts), dtype=np.int64)  # beyond the mapping
        for r in regions:
            self.record_bytes[r.layer, r.expert] += r.length
            _off, n = self.mappings[r.file].clip(r)
            self.missing_bytes[r.layer, r.expert] += r.length - n
        self.resident = np.zeros((self.layers, self.experts), dtype=np.int64)
        self._next_layer = 0
        self._lock = threading.Lock()

    @property
    def supported(self) -> bool:
        return sys.platform.startswith("linux") or sys.platform == "win32"

    @property
    def store_bytes(self) -> int:
        return int(self.record_bytes.sum())

    @property
    def resident_bytes(self) -> int:
        return int(self.resident.sum())

    def fraction(self) -> float:
        return self.resident_bytes / max(1, self.store_bytes)

    def per_layer(self) -> np.ndarray:
        return self.resident.sum(axis=1)

    def regions(self, key: ExpertKey) -> list[Region]:
        return self._index[key]

    # -- refreshing --------------------------------------------------------------------------
    def refresh_layer(self, layer: int) -> int:
        """Re-sample one layer's records; returns that layer's resident bytes."""
        regs = self._by_layer[layer]
        got = self._measure(regs)
        with self._lock:
            self.resident[layer, :] = 0
            for r, b in zip(regs, got, strict=True):
                self.resident[r.layer, r.expert] += b
            return int(self.resident[layer].sum())

    def refresh_next(self) -> int:
        """Refresh the next layer round-robin (bounded cost per call); returns the layer done."""
        layer = self._next_layer
        self._next_layer = (layer + 1) % self.layers
        self.refresh_layer(layer)
        return layer

    def refresh(self, keys: Iterable[ExpertKey] | None = None) -> int:
        """Re-sample the given records (default: all); returns the total resident bytes."""
        if keys is None:
            for layer in range(self.layers):
                self.refresh_layer(layer)
            return self.resident_bytes
        regs = [r for k in dict.fromkeys(keys) for r in self._index[k]]
        got = self._measure(regs)
        with self._lock:
            for r in regs:
                self.resident[r.layer, r.expert] = 0
            for r, b in zip(regs, got, strict=True):
                self.resident[r.layer, r.expert] += b
        return self.resident_bytes

    def _measure(self, regs: list[Region]) -> list[int]:
        if not regs:
            return []
        if sys.platform.startswith("linux"):
            return self._measure_mincore(regs)
        if sys.platform == "win32":
            return [self._measure_ws(r) for r in regs]
        return [0] * len(regs)

    def _measure_mincore(self, regs: list[Region]) -> list[int]:
        out = [0] * len(regs)
        if not sys.platform.startswith("linux"):
            return out
        order = sorted(range(len(regs)), key=lambda i: file_order(regs[i]))
        ordered = [regs[i] for i in order]
        for run in _runs(ordered):
            m = self.mappings[ordered[run[0]].file]
            if m.closed:
                continue
            base = m.address
            spans = [m.clip(ordered[i]) for i in run]
            present = [(o, n) for o, n in spans if n]
            if not present:
                continue
            lo = min(o for o, _n in present)
            hi = max(o + n for o, n in present)
            start, span = os_memory.page_span(base + lo, hi - lo)
            vec = np.zeros(span // PAGE, dtype=np.uint8)
            os_memory.mincore(start, span, vec.ctypes.data)
            res = vec & 1
            for i, (o, n) in zip(run, spans, strict=True):
                if n:
                    out[order[i]] = _resident_in(res, base + o - start, n)
        return out

    def _measure_ws(self, r: Region) -> int:  # pragma: no cover - Windows only
        m = self.mappings[r.file]
        off, n = m.clip(r)
        if not n or m.closed:
            return 0
        if sys.platform == "win32":
            valid = os_memory.working_set_pages(m.address + off, n)
            sample = valid[:: self.win_stride]
            return int(n * sum(sample) / max(1, len(sample)))
        return 0


def _resident_in(res: np.ndarray, a: int, n: int) -> int:
    """Resident bytes of byte range [a, a+n) given a 0/1 array per page starting at byte 0."""
    b = a + n
    p0, p1 = a // PAGE, (b - 1) // PAGE
    total = PAGE * int(res[p0 : p1 + 1].sum(dtype=np.int64))
    total -= (a - p0 * PAGE) * int(res[p0])  # the part of the first page before the record
    total -= ((p1 + 1) * PAGE - b) * int(res[p1])  # the part of the last page after it
    return total
