"""FaultMeter: real fault deltas when touching fresh pages, and the per-token bookkeeping."""

from __future__ import annotations

import mmap
import threading
from functools import partial

import numpy as np
import pytest
from conftest import PAGE, linux_only, skip_unless_cold

from engine.residency import FaultCounts, FaultMeter, read_faults
from engine.residency.faults import measure
from engine.residency.warmer import touch_pages


def fresh_anonymous(pages: int) -> tuple[mmap.mmap, np.ndarray]:
    mm = mmap.mmap(-1, pages * PAGE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        mm.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per 4 KiB page, not per 2 MiB
    return mm, np.frombuffer(mm, dtype=np.uint8)


def test_meter_counts_faults_of_touching_fresh_pages():
    pages = 2048
    mm, view = fresh_anonymous(pages)
    meter = FaultMeter()
    with meter.token() as tok:
        view[::PAGE] = 1  # first write to each page: one minor fault per page
    assert tok.faults.minor >= 0.9 * pages
    with meter.token() as again:
        view[::PAGE] = 2  # already mapped: (almost) no faults
    assert again.faults.total < 0.1 * pages
    s = meter.summary()
    assert s.tokens == 2 and s.total.minor >= tok.faults.minor
    assert s.max_total == tok.faults.total
    del view
    mm.close()


@linux_only
def test_major_faults_after_dropping_the_cache(store):
    m, _regions = store  # the fixture dropped the file from the page cache
    skip_unless_cold(m)
    meter = FaultMeter()
    meter.start_token()
    touch_pages(m.view, m.address, 0, m.size)
    d = meter.end_token()
    pages = m.size // PAGE
    assert d.major >= 1  # pages had to come from disk
    assert d.total >= pages // 16  # at least one fault per fault-around window


def run_in_thread(fn) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


@linux_only
def test_thread_scope_sees_only_this_thread():
    pages = 1024
    mm, view = fresh_anonymous(pages)
    mm2, view2 = fresh_anonymous(pages)

    def write(v: np.ndarray) -> None:
        v[::PAGE] = 1

    here = measure(partial(run_in_thread, partial(write, view)), thread=True)
    assert here.minor < pages // 2  # the other thread's faults are not ours
    process = measure(partial(run_in_thread, partial(write, view2)), thread=False)
    assert process.minor >= 0.9 * pages
    del view, view2
    mm.close()
    mm2.close()


def test_meter_subtracts_excluded_faults_and_clamps():
    src = [FaultCounts(0, 0)]
    exc = [FaultCounts(0, 0)]
    meter = FaultMeter(source=lambda: src[0], exclude=lambda: exc[0], window=2)
    meter.start_token()
    src[0] = FaultCounts(10, 100)
    exc[0] = FaultCounts(4, 30)  # the warmer's own faults in the same interval
    assert meter.end_token() == FaultCounts(6, 70)
    meter.start_token()
    src[0] = FaultCounts(10, 101)
    exc[0] = FaultCounts(5, 40)  # warmer counted more than the process delta: never negative
    assert meter.end_token() == FaultCounts(0, 0)
    meter.start_token()
    src[0] = FaultCounts(12, 111)
    assert meter.end_token() == FaultCounts(2, 10)
    s = meter.summary()
    assert s.tokens == 3
    assert s.total == FaultCounts(8, 80)
    assert (s.major_per_token, s.minor_per_token) == pytest.approx((8 / 3, 80 / 3))
    assert (s.recent_major_per_token, s.recent_minor_per_token) == (1.0, 5.0)  # window of 2
    meter.reset()
    assert meter.summary().tokens == 0


def test_end_without_start_is_an_error():
    with pytest.raises(RuntimeError):
        FaultMeter().end_token()


def test_read_faults_is_monotonic():
    a = read_faults()
    b = read_faults()
    assert b.major >= a.major and b.minor >= a.minor
