"""A file mapped read-only at a 2 MiB-aligned address, so its pages can be mapped huge (Linux; bench.kernel.page_bench).

The CPU expert kernel streams 13 MB experts out of the page cache. Linux maps a cached 2 MiB folio with one
page-table entry (PMD) only where the virtual address and the file offset agree modulo 2 MiB. Python's mmap lets
the kernel pick the address; disk file systems align it, tmpfs does not unless its huge pages are switched on.
``MADV_HUGEPAGE`` asks read-ahead and khugepaged for 2 MiB folios; ``MADV_COLLAPSE`` (Linux 6.1+) rebuilds pages
already cached at 4 KiB as 2 MiB ones, in place: a copy, done once per file while it stays cached.

Elsewhere (Windows, macOS) :func:`map_aligned` returns None: Windows maps files with 4 KiB pages only.

Session 16 tried this as an engine setting (343ca4f) and measured no gain on the H200 host (docs/perf-kernel.md), so
the engine maps checkpoints as before and this stays a lab tool. One trap it found: a collapsed tmpfs file mapped
at an unaligned address ran CPU decode at about half speed on the 2-core VM (19-22 against 36 tok/s).
"""

from __future__ import annotations

import ctypes
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from engine.residency import os_memory

HUGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25  # Linux 6.1+
_PROT_NONE, _PROT_READ = 0, 1
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000

_libc: ctypes.CDLL | None = None
if os_memory.IS_LINUX:
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    _libc.munmap.restype = ctypes.c_int
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.madvise.restype = ctypes.c_int
    _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_FAILED = ctypes.c_void_p(-1).value


def _round_up(n: int, to: int) -> int:
    return n + -n % to


class _Owner:
    """Kept alive by every view of the mapping; unmaps it when the last view goes."""

    def __init__(self, address: int, length: int) -> None:
        assert _libc is not None
        self.address = address
        weakref.finalize(self, _libc.munmap, address, length)


def map_aligned(path: str | os.PathLike[str], advise_huge: bool = True) -> np.ndarray | None:
    """The whole file as a read-only uint8 array mapped at a 2 MiB-aligned address (``MADV_HUGEPAGE`` on it when
    ``advise_huge``); None where this is not Linux or the mapping fails (the caller maps it the ordinary way)."""
    if _libc is None:
        return None
    fd = os.open(Path(path), os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        length = _round_up(size, os_memory.PAGE)
        # reserve an address range one huge page longer, then map the file over its aligned part
        res = _libc.mmap(None, length + HUGE, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
        if res in (None, _FAILED):
            return None
        start = _round_up(res, HUGE)
        got = _libc.mmap(start, length, _PROT_READ, _MAP_SHARED | _MAP_FIXED, fd, 0)
        if got != start:
            _libc.munmap(res, length + HUGE)
            return None
        if start > res:
            _libc.munmap(res, start - res)
        if res + HUGE > start:
            _libc.munmap(start + length, res + HUGE - start)
    finally:
        os.close(fd)  # the mapping keeps the file
    if advise_huge:
        _libc.madvise(start, length, MADV_HUGEPAGE)  # advice only: EINVAL on kernels without THP is fine
    buf = (ctypes.c_uint8 * size).from_address(start)
    buf._owner = _Owner(start, length)  # type: ignore[attr-defined]  # numpy views keep buf, buf keeps the owner
    view = np.frombuffer(memoryview(buf), dtype=np.uint8)
    view.flags.writeable = False
    return view


def collapse(view: np.ndarray, threads: int = 4, chunk: int = 1 << 30) -> int:
    """Rebuild the cached pages under ``view`` as 2 MiB pages (``MADV_COLLAPSE``, ``threads`` chunks at a time:
    ctypes releases the GIL). Returns the bytes asked for; raises :class:`os_memory.OsCallError` if the kernel
    refuses (EINVAL: no THP, an unaligned mapping, or a file system without large folios)."""
    if _libc is None:
        raise os_memory.OsCallError(0, "MADV_COLLAPSE is Linux only")
    lib = _libc
    a = int(view.ctypes.data)
    lo, hi = _round_up(a, HUGE), (a + view.nbytes) // HUGE * HUGE
    spans = [(s, min(chunk, hi - s)) for s in range(lo, hi, chunk)]

    def one(span: tuple[int, int]) -> int:
        return 0 if lib.madvise(span[0], span[1], MADV_COLLAPSE) == 0 else ctypes.get_errno()

    with ThreadPoolExecutor(max(1, threads)) as ex:
        errs = [e for e in ex.map(one, spans) if e]
    if errs:
        raise os_memory.OsCallError(errs[0], f"MADV_COLLAPSE failed on {len(errs)} of {len(spans)} spans: "
                                             f"{os.strerror(errs[0])}")
    return max(0, hi - lo)


def pmd_mapped_bytes(view: np.ndarray) -> int:
    """Bytes of ``view``'s mapping that this process maps with 2 MiB entries (/proc/self/smaps; 0 elsewhere)."""
    if not os_memory.IS_LINUX:
        return 0
    a, end = int(view.ctypes.data), int(view.ctypes.data) + view.nbytes
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < end and hi > a
            elif inside and head in ("FilePmdMapped:", "ShmemPmdMapped:", "AnonHugePages:"):
                total += int(line.split()[1]) * 1024
    return total
