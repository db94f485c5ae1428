"""StoreResidency on a real temp file: mincore before/after touching, after DONTNEED, past EOF."""

from __future__ import annotations

import os

import numpy as np
from conftest import EXPERTS, LAYERS, PAGE, RECORD, drop_cache, linux_only, skip_unless_cold, touched_bytes

from engine.residency import Mapping, Region, StoreResidency
from engine.residency.warmer import touch_pages

pytestmark = linux_only


def test_cold_file_reports_nothing_resident(store):
    m, regions = store
    skip_unless_cold(m)
    sr = StoreResidency(m, regions)
    assert sr.store_bytes == LAYERS * EXPERTS * RECORD
    assert sr.refresh() == 0
    assert sr.fraction() == 0.0


def test_touching_one_record_makes_exactly_its_pages_resident(store):
    m, regions = store
    skip_unless_cold(m)
    sr = StoreResidency(m, regions)
    target = regions[5]  # layer 1, expert 1
    touch_pages(m.view, m.address, target.offset, target.length)
    sr.refresh()
    base = m.address
    pages = set(range((base + target.offset) // PAGE, (base + target.end - 1) // PAGE + 1))
    assert sr.resident[1, 1] == target.length
    # neighbours share the first/last page only: exactly the overlapping bytes count
    for r in regions:
        assert sr.resident[r.layer, r.expert] == touched_bytes(r, pages, base), r.key
    assert sr.resident[0, 0] == 0 and sr.resident[2, 3] == 0
    assert list(sr.per_layer() > 0) == [False, True, False]


def test_dontneed_drops_residency_again(store):
    m, regions = store
    skip_unless_cold(m)
    sr = StoreResidency(m, regions)
    touch_pages(m.view, m.address, 0, m.size)
    assert sr.refresh() == sr.store_bytes
    drop_cache(m)
    assert sr.refresh() == 0


def test_refresh_subset_and_round_robin(store):
    m, regions = store
    sr = StoreResidency(m, regions)
    touch_pages(m.view, m.address, 0, m.size)
    sr.refresh([(2, 3)])  # only that record was re-sampled
    assert sr.resident_bytes == RECORD
    assert [sr.refresh_next() for _ in range(LAYERS + 1)] == [0, 1, 2, 0]
    assert sr.resident_bytes == sr.store_bytes


def test_region_past_end_of_file_is_missing_not_fatal(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(b"\1" * (3 * PAGE))
    regions = [Region(0, 0, 0, PAGE), Region(0, 1, 2 * PAGE, 2 * PAGE), Region(0, 2, 10 * PAGE, PAGE)]
    with Mapping.open(path) as m:
        sr = StoreResidency(m, regions)
        assert sr.missing_bytes.tolist() == [[0, PAGE, PAGE]]
        touch_pages(m.view, m.address, 0, m.size)
        sr.refresh()
        assert sr.resident.tolist() == [[PAGE, PAGE, 0]]


def test_truncated_after_mapping_reads_as_not_resident(tmp_path):
    path = tmp_path / "trunc.bin"
    path.write_bytes(b"\1" * (8 * PAGE))
    regions = [Region(0, 0, 0, 4 * PAGE), Region(0, 1, 4 * PAGE, 4 * PAGE)]
    with Mapping.open(path) as m:
        touch_pages(m.view, m.address, 0, m.size)
        os.truncate(path, 4 * PAGE)  # the store file lost its tail under us
        assert m.file_size() == 4 * PAGE
        sr = StoreResidency(m, regions)
        sr.refresh()  # mincore past EOF must not SIGBUS
        # whether the kernel still reports the cut-off pages varies (zapped PTEs or not); the part
        # that is still file-backed must be exact
        assert sr.resident[0, 0] == 4 * PAGE


def test_sparse_hole_counts_once_read(tmp_path):
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(16 * PAGE)  # all hole
    with Mapping.open(path) as m:
        sr = StoreResidency(m, [Region(0, 0, 0, 16 * PAGE)])
        before = sr.refresh()
        assert int(np.asarray(m.view[: 16 * PAGE]).sum()) == 0  # a hole reads as zeros
        assert sr.refresh() == 16 * PAGE >= before


def test_closed_mapping_reports_zero(store):
    m, regions = store
    sr = StoreResidency(m, regions)
    m.close()
    assert sr.refresh() == 0
