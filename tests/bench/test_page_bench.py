"""bench.kernel.huge_map: same bytes, read-only, alive while a view is, collapsible on tmpfs; page_bench runs."""

from __future__ import annotations

import gc
import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.kernel.huge_map import HUGE, collapse, map_aligned, pmd_mapped_bytes
from bench.kernel.page_bench import run_page_bench
from engine.residency import os_memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="aligned mappings are Linux only")


def _file(path: Path, n: int) -> bytes:
    data = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


@linux
def test_aligned_mapping_holds_the_files_bytes_read_only(tmp_path):
    data = _file(tmp_path / "a.bin", 3 * HUGE + 12345)  # not a whole number of pages
    v = map_aligned(tmp_path / "a.bin")
    assert v is not None
    assert int(v.ctypes.data) % HUGE == 0
    assert v.nbytes == len(data) and v.tobytes() == data
    with pytest.raises(ValueError):
        v[0] = 1


@linux
def test_a_slice_keeps_the_mapping_alive(tmp_path):
    data = _file(tmp_path / "a.bin", HUGE + 4096)
    v = map_aligned(tmp_path / "a.bin")
    assert v is not None
    tail = v[HUGE:]
    del v
    gc.collect()
    assert tail.tobytes() == data[HUGE:]  # a use-after-unmap would crash or differ here


def test_elsewhere_the_caller_keeps_its_ordinary_mapping(tmp_path, monkeypatch):
    import bench.kernel.huge_map as hm

    monkeypatch.setattr(hm, "_libc", None)
    _file(tmp_path / "a.bin", 4096)
    assert hm.map_aligned(tmp_path / "a.bin") is None
    with pytest.raises(os_memory.OsCallError):
        hm.collapse(np.zeros(HUGE, np.uint8))


@linux
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs tmpfs at /dev/shm")
def test_collapse_maps_a_tmpfs_file_with_2mib_entries():
    path = Path("/dev/shm") / f"neural-test-huge-{os.getpid()}.bin"
    try:
        data = _file(path, 4 * HUGE)
        v = map_aligned(path)
        assert v is not None
        assert v.tobytes() == data
        assert pmd_mapped_bytes(v) == 0  # tmpfs caches it in 4 KiB pages unless its huge pages are on
        try:
            collapse(v, threads=2)
        except os_memory.OsCallError as exc:
            pytest.skip(f"this kernel does not collapse tmpfs pages: {exc}")
        assert v.tobytes() == data
        assert pmd_mapped_bytes(v) == 4 * HUGE
    finally:
        path.unlink(missing_ok=True)


@linux
def test_page_bench_reads_each_mapping_and_reports_its_pages(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    r = run_page_bench(["tmpfs-4k", "anon-2m", "anon-4k"], threads=1, store_gib=0.06, shm=str(shm),
                       disk=str(tmp_path), rounds=1, seconds=0.05, dma=False, log=io.StringIO())
    rows = {row["mode"]: row for row in r["rows"]}
    assert list(rows) == ["tmpfs-4k", "anon-2m", "anon-4k"]
    assert all(row["probe_gbps"] > 0 and row["kernel_gbps"] > 0 for row in rows.values())
    assert rows["anon-4k"]["pmd_mib"] == 0  # MADV_NOHUGEPAGE held
    assert not list(shm.iterdir())  # the bench removes its store files
