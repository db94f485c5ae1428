"""Warmer: order, pause/resume, cancellation, missing pages, fallbacks; prefetch."""

from __future__ import annotations

import errno
import os
import threading
import time

import numpy as np
import pytest
from conftest import PAGE, RECORD, drop_cache, linux_only, skip_unless_cold

from engine.residency import ExpertRanking, Mapping, Region, StoreResidency, Warmer, WarmupPlan, os_memory, prefetch
from engine.residency.os_memory import OsCallError

pytestmark = linux_only


class SpyWarmer(Warmer):
    """Records each chunk's offset; optional per-chunk delay to make pausing observable."""

    def __init__(self, *a, delay: float = 0.0, **kw) -> None:
        super().__init__(*a, **kw)
        self.chunks: list[int] = []
        self.delay = delay

    def _warm_chunk(self, m: Mapping, off: int, n: int) -> None:
        self.chunks.append(off)
        if self.delay:
            time.sleep(self.delay)
        super()._warm_chunk(m, off, n)


def region_of(regions: list[Region], off: int) -> tuple[int, int]:
    return next(r.key for r in regions if r.offset <= off < r.end)


def wait_for(cond, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


@pytest.mark.parametrize("method", ["auto", "read", "touch"])
def test_warms_in_plan_order_and_makes_pages_resident(store, method):
    m, regions = store
    skip_unless_cold(m)
    ranking = ExpertRanking(np.array([[0, 0, 0, 0], [0, 0, 5, 0], [9, 0, 0, 0]]))
    plan = WarmupPlan.build(regions, budget_bytes=5 * RECORD, hot=[(1, 3)], ranking=ranking)
    seen: list[str] = []
    w = SpyWarmer(m, plan, method=method, chunk_bytes=2 * PAGE, progress=lambda p: seen.append(p.state))
    w.start()
    assert w.join(10)
    order = list(dict.fromkeys(region_of(regions, off) for off in w.chunks))
    assert order == plan.keys == [(1, 3), (2, 0), (1, 2), (0, 0), (0, 1)]
    p = w.progress()
    assert (p.state, p.regions_done, p.done_bytes, p.fraction) == ("done", 5, 5 * RECORD, 1.0)
    assert seen[0] == "running" and seen[-1] == "done"
    sr = StoreResidency(m, regions)
    sr.refresh()
    for k in plan.keys:
        assert sr.resident[k] == RECORD, k
    if method != "read":  # file reads through the fd get the kernel's readahead (~128 KiB past the end)
        assert sr.resident[2, 3] == 0  # outside the budget: left cold


def test_pause_holds_the_warmer_and_resume_finishes(store):
    m, regions = store
    w = SpyWarmer(m, regions, chunk_bytes=PAGE, delay=0.002)
    w.start()
    assert wait_for(lambda: w.progress().done_bytes > 0)
    w.pause()
    time.sleep(0.02)  # the chunk in flight may still land
    held = w.progress().done_bytes
    time.sleep(0.1)
    assert w.progress().done_bytes == held < w.progress().total_bytes
    assert w.progress().state == "paused"
    w.resume()
    assert w.join(10)
    assert w.progress().state == "done" and w.pause_waits >= 1


def test_paused_context_and_paused_before_start(store):
    m, regions = store
    w = Warmer(m, regions)
    w.pause()
    w.start()
    assert wait_for(lambda: w.progress().state == "paused")
    time.sleep(0.05)
    assert w.progress().done_bytes == 0
    w.resume()
    assert w.join(10) and w.progress().state == "done"
    w2 = Warmer(m, regions)
    with w2.paused():
        w2.start()
        time.sleep(0.05)
        assert w2.progress().done_bytes == 0
    assert w2.join(10)


def test_cancel_stops_between_chunks(store):
    m, regions = store
    w = SpyWarmer(m, regions, chunk_bytes=PAGE, delay=0.002)
    w.start()
    assert wait_for(lambda: w.progress().regions_done >= 2)
    w.cancel()
    assert w.join(5)
    p = w.progress()
    assert p.state == "cancelled" and 2 <= p.regions_done < len(regions)


def test_cancel_while_paused(store):
    m, regions = store
    done = []
    w = Warmer(m, regions, on_done=lambda _w: done.append(1))
    w.pause()
    w.start()
    w.cancel()
    assert w.join(5)
    assert w.progress().state == "cancelled" and w.progress().regions_done == 0 and not done


def test_missing_pages_past_eof_are_reported_not_touched(tmp_path):
    path = tmp_path / "s.bin"
    path.write_bytes(b"\3" * (8 * PAGE))
    regions = [Region(0, 0, 0, 4 * PAGE), Region(0, 1, 4 * PAGE, 4 * PAGE), Region(0, 2, 8 * PAGE, 4 * PAGE)]
    with Mapping.open(path) as m:
        os.truncate(path, 6 * PAGE)  # a damaged store: the tail is gone; touching it would SIGBUS
        for method in ("auto", "read", "touch"):
            w = Warmer(m, regions, method=method)
            w.start()
            assert w.join(10)
            p = w.progress()
            assert p.state == "done", p.message
            assert p.missing_bytes == 2 * PAGE + 4 * PAGE
            assert p.done_bytes == p.total_bytes


def test_sparse_region_warms(tmp_path):
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(32 * PAGE)
    with Mapping.open(path) as m:
        w = Warmer(m, [Region(0, 0, 0, 32 * PAGE)])
        w.start()
        assert w.join(10) and w.progress().state == "done"
        assert StoreResidency(m, [Region(0, 0, 0, 32 * PAGE)]).refresh() == 32 * PAGE


def test_populate_falls_back_to_read_on_old_kernels(store, monkeypatch):
    m, regions = store
    real = os_memory.madvise

    def old_kernel(addr: int, n: int, advice: int) -> None:
        if advice == os_memory.MADV_POPULATE_READ:
            raise OsCallError(errno.EINVAL, "madvise failed: Invalid argument")
        real(addr, n, advice)

    monkeypatch.setattr(os_memory, "madvise", old_kernel)
    w = Warmer(m, regions[:2])
    assert w.method == "populate"
    w.start()
    assert w.join(10)
    assert w.progress().state == "done" and w.method == "read" and w.progress().method == "read"
    assert StoreResidency(m, regions).refresh([(0, 0), (0, 1)]) >= 2 * RECORD


def test_unreadable_record_is_skipped_and_reported(store, monkeypatch):
    m, regions = store
    real = os_memory.madvise
    bad = m.address + regions[2].offset

    def one_bad_record(addr: int, n: int, advice: int) -> None:
        if addr == bad:
            raise OsCallError(errno.EIO, "madvise failed: Input/output error")
        real(addr, n, advice)

    monkeypatch.setattr(os_memory, "madvise", one_bad_record)
    w = Warmer(m, regions)
    w.start()
    assert w.join(5)
    p = w.progress()
    assert p.state == "done" and p.regions_done == len(regions)
    assert p.message.startswith("1 of 12 records could not be read (first: (0, 2)")


def test_nothing_readable_ends_in_error_without_raising(store, monkeypatch):
    m, regions = store

    def broken(addr: int, n: int, advice: int) -> None:
        raise OsCallError(errno.EIO, "madvise failed: Input/output error")

    monkeypatch.setattr(os_memory, "madvise", broken)
    done = []
    w = Warmer(m, regions, on_done=lambda _w: done.append(1))
    w.start()
    assert w.join(5)
    p = w.progress()
    assert p.state == "error" and "Input/output error" in p.message and not done


def test_unexpected_failure_ends_in_error(store):
    m, regions = store
    w = Warmer(m, regions)
    m.close()  # the engine closed the store under the warmer
    w.start()
    assert w.join(5)
    assert w.progress().state == "error" and "closed" in w.progress().message


def test_warmer_faults_are_its_own(store):
    m, regions = store
    w = Warmer(m, regions, method="touch")
    main_before = os_memory.read_faults(thread=True)
    w.start()
    assert w.join(10)
    assert w.faults().total > 0
    assert (os_memory.read_faults(thread=True) - main_before).total < w.faults().total


def test_on_done_runs_on_the_warmer_thread(store):
    m, regions = store
    where: list[str] = []
    w = Warmer(m, regions[:1], on_done=lambda _w: where.append(threading.current_thread().name))
    w.start()
    assert w.join(5) and where == ["neural-warmup"]
    with pytest.raises(RuntimeError):
        w.start()


def test_prefetch_reads_ahead_asynchronously(store):
    m, regions = store
    skip_unless_cold(m)
    sr = StoreResidency(m, regions)
    assert sr.refresh() == 0
    advised = prefetch(m, regions[3:5])
    assert advised == 2 * RECORD
    assert wait_for(lambda: sr.refresh([(0, 3), (1, 0)]) >= 2 * RECORD)
    assert prefetch(m, []) == 0
    drop_cache(m)


def test_prefetch_after_close_is_a_no_op(store):
    m, regions = store
    m.close()
    assert prefetch(m, regions) == 0
