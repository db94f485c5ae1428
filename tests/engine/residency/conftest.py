"""Fixtures: a small store-like file of (layer, expert) records on the real filesystem.

Records are deliberately *not* page-aligned, so shared first/last pages are exercised. The
mapping is advised MADV_RANDOM so the kernel neither reads ahead nor faults around: touching a
page brings in exactly that page, which makes residency assertions exact.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.residency import Mapping, Region, os_memory

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux memory calls")
PAGE = os_memory.PAGE
LAYERS, EXPERTS = 3, 4
RECORD = 5 * PAGE + 1234  # not a multiple of the page size
HEADER = 777  # records start at an unaligned offset


def make_file(path: Path, size: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    path.write_bytes(rng.integers(1, 255, size, dtype=np.uint8).tobytes())  # no zero pages
    return path


def layout() -> list[Region]:
    return [Region(layer, e, HEADER + (layer * EXPERTS + e) * RECORD, RECORD)
            for layer in range(LAYERS) for e in range(EXPERTS)]


def drop_cache(m: Mapping) -> None:
    """Unmap our pages (MADV_DONTNEED) then drop the file's clean cache (fadvise DONTNEED)."""
    os_memory.madvise(m.address, m.size, os_memory.MADV_DONTNEED)
    assert m.fd is not None
    os_memory.fadvise_dontneed(m.fd)


def skip_unless_cold(m: Mapping) -> None:
    """Skip when the page cache could not be dropped (e.g. /tmp on tmpfs keeps every page)."""
    from engine.residency import StoreResidency

    if StoreResidency(m, [Region(0, 0, 0, m.size)]).refresh() != 0:
        pytest.skip("the file system keeps these pages in RAM (tmpfs?); cannot make a cold file")


def touched_bytes(region: Region, pages: set[int], base: int) -> int:
    """Independent expectation: bytes of ``region`` that lie in the given resident page numbers."""
    total = 0
    for p in pages:
        lo, hi = p * PAGE - base, (p + 1) * PAGE - base
        total += max(0, min(hi, region.end) - max(lo, region.offset))
    return total


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Mapping, list[Region]]]:
    regions = layout()
    path = make_file(tmp_path / "store.bin", HEADER + LAYERS * EXPERTS * RECORD + 999)
    m = Mapping.open(path)
    if sys.platform.startswith("linux"):
        os_memory.madvise(m.address, m.size, 1)  # MADV_RANDOM: no readahead, no fault-around
        os.fsync(m.fd or 0)
        drop_cache(m)
    yield m, regions
    m.close()
