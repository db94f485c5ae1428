"""Where each expert's bytes sit in memory-mapped files: regions and the mappings that hold them.

A :class:`Region` is (part of) one (layer, expert) at ``offset``/``length`` inside mapping number
``file`` — the expert store is one file (one region per record), while the checkpoint's experts
are six tensor slices per expert spread over shard files.
A :class:`Mapping` gives the mapping's base address (for mincore/madvise/mlock) and, when it
is backed by a file, the file's *current* size: touching a mapped page past the end of a file
that was truncated after mapping raises SIGBUS, so everything that touches pages clips to it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ExpertKey = tuple[int, int]  # (layer, expert)


@dataclass(frozen=True)
class Region:
    layer: int
    expert: int
    offset: int  # bytes from the start of the mapping
    length: int
    file: int = 0  # index into the list of mappings

    @property
    def key(self) -> ExpertKey:
        return (self.layer, self.expert)

    @property
    def end(self) -> int:
        return self.offset + self.length


def total_bytes(regions: Iterable[Region]) -> int:
    return sum(r.length for r in regions)


def file_order(r: Region) -> tuple[int, int]:
    return (r.file, r.offset)


class Mapping:
    """A read-only mapped byte range with a stable base address.

    Holds a numpy view of the buffer, which keeps the owner (an ``mmap.mmap``) from being
    closed while we may still touch it; :meth:`close` drops the view (and the mmap if we
    opened it).
    """

    def __init__(self, buf: Any, fd: int | None = None, path: Path | None = None, owns: bool = False) -> None:
        view = np.asarray(buf) if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
        self.view: np.ndarray | None = view.reshape(-1).view(np.uint8)
        self.address = int(self.view.ctypes.data)
        self.size = int(self.view.nbytes)
        self.fd = fd
        self.path = path
        self._buf = buf if owns else None
        self._owns_fd = owns and fd is not None

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Mapping:
        """Map a whole file read-only (the store file, or a test file)."""
        p = Path(path)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise ValueError(f"{p} is empty; nothing to map")
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        return cls(mm, fd=fd, path=p, owns=True)

    @classmethod
    def from_buffer(cls, buf: Any, path: str | os.PathLike[str] | None = None) -> Mapping:
        """Wrap a mapping someone else owns (an mmap or numpy memmap of the store).

        With ``path`` the file's current size is checked before touching pages."""
        fd = None
        if path is not None:
            fd = os.open(Path(path), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        m = cls(buf, fd=fd, path=Path(path) if path is not None else None)
        m._owns_fd = fd is not None
        return m

    def file_size(self) -> int:
        """Bytes of the mapping that are backed by the file right now."""
        if self.fd is None:
            return self.size
        return min(self.size, os.fstat(self.fd).st_size)

    def clip(self, region: Region, limit: int | None = None) -> tuple[int, int]:
        """(offset, length) of the part of ``region`` that exists; length 0 if none does."""
        end = min(region.end, self.size if limit is None else limit)
        start = min(max(region.offset, 0), end)
        return start, end - start

    @property
    def closed(self) -> bool:
        return self.view is None

    def close(self) -> None:
        self.view = None
        if self._buf is not None:
            self._buf.close()
            self._buf = None
        if self._owns_fd and self.fd is not None:
            os.close(self.fd)
        self.fd = None

    def __enter__(self) -> Mapping:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def store_regions(store: Any) -> list[Region]:
    """One region per record of an :class:`engine.store.reader.ExpertStore` (its record table)."""
    experts = int(store.experts)
    return [Region(i // experts, i % experts, int(t["off"]), int(t["size"])) for i, t in enumerate(store.table)]


def store_mapping(store: Any) -> Mapping:
    """A :class:`Mapping` over an open ExpertStore's buffer; the file size is re-checked before touching."""
    return Mapping.from_buffer(store.buf, path=store.path)



def as_mappings(m: Mapping | Sequence[Mapping]) -> list[Mapping]:
    return [m] if isinstance(m, Mapping) else list(m)


def checkpoint_regions(ck: Any) -> tuple[list[Path], list[Region]]:
    """Expert regions of a safetensors checkpoint (an :class:`engine.checkpoint.Checkpoint`):
    six tensor slices per expert, over the shard files that hold them. Returns (files, regions);
    open the files with :meth:`Mapping.open` — a second mapping shares the page cache with the
    engine's, so warming, measuring and locking through it act on the same RAM."""
    from ..checkpoint import EXPERT_PARTS
    from ..safetensors_io import SafetensorsFile

    cfg = ck.config
    files: list[Path] = []
    headers: dict[Path, SafetensorsFile] = {}
    regions: list[Region] = []
    for layer in range(cfg.num_hidden_layers):
        for part in EXPERT_PARTS:
            name = f"model.layers.{layer}.mlp.experts.{part}"
            path = Path(ck.file_of(name))
            if path not in headers:
                headers[path] = SafetensorsFile(path)
                files.append(path)
            info = headers[path].tensors[name]
            per = info.nbytes // cfg.num_local_experts
            fi = files.index(path)
            regions += [Region(layer, e, info.start + e * per, per, fi) for e in range(cfg.num_local_experts)]
    return files, regions


def live_spans(mappings: Sequence[Mapping], regions: Iterable[Region]) -> list[tuple[Region, int, int]]:
    """(region, address, length) of the part of each region its file still backs; closed mappings skipped."""
    limits: dict[int, int] = {}
    out = []
    for r in regions:
        m = mappings[r.file]
        if m.closed:
            continue
        if r.file not in limits:
            limits[r.file] = m.file_size()
        off, n = m.clip(r, limits[r.file])
        if n:
            out.append((r, m.address + off, n))
    return out
