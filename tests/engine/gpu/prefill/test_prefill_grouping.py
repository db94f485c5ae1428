"""Expert grouping plan and the pinned staging ring (no Triton needed)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.checkpoint import Checkpoint
from engine.gpu.layout import ExpertLayout
from engine.gpu.prefill.grouping import plan_layer
from engine.gpu.prefill.staging import StagingError, StagingRing


def test_plan_splits_resident_cpu_and_staged() -> None:
    counts = np.array([0, 40, 3, 16, 17, 100, 1, 64])
    table = np.array([-1, 7, 2, -1, -1, -1, 5, -1], dtype=np.int32)
    plan = plan_layer(counts, table, scratch_base=10, n_scratch=2, cpu_max=16, block_m=32, max_rows=96)
    assert plan.resident == [1, 2, 6]  # resident whatever their size
    assert plan.cpu == [3]  # non-resident, <= 16 pairs
    assert plan.staged == [4, 5, 7]
    assert plan.staged_slots == [10, 11, 10]  # round-robin over the scratch slots
    assert plan.cpu_rows == 16 and plan.gpu_rows == int(counts.sum()) - 16
    # tiles cover every GPU row exactly once, each within one expert and <= block_m rows
    covered = np.zeros(int(counts.sum()), dtype=int)
    for slot, r0, n, _a0 in plan.tiles:
        assert 1 <= n <= 32
        e = int(np.searchsorted(plan.offsets, r0, side="right") - 1)
        assert r0 + n <= plan.offsets[e + 1]
        expected_slot = table[e] if table[e] >= 0 else plan.staged_slots[plan.staged.index(e)]
        assert slot == expected_slot
        covered[r0 : r0 + n] += 1
    cpu_lo, cpu_hi = plan.rows_of(3)
    assert (covered[cpu_lo:cpu_hi] == 0).all()
    covered[cpu_lo:cpu_hi] = 1
    assert (covered == 1).all()
    # waves: bounded rows, workspace rows restart at 0, staged experts never share a wave
    for w in plan.waves:
        rows = plan.tiles[w.tile0 : w.tile0 + w.n_tiles]
        assert w.rows == int(rows[:, 2].sum()) and (w.rows <= 96 or w.n_tiles == 1)
        assert rows[0, 3] == 0 and (rows[1:, 3] == np.cumsum(rows[:-1, 2])).all()
        slots = set(rows[:, 0].tolist())
        assert (w.needs >= 0) == bool(slots & {10, 11})
        if w.needs >= 0:
            assert slots == {plan.staged_slots[w.needs]}
    assert [w.needs for w in plan.waves if w.needs >= 0] == [0, 1, 1, 2]  # expert 5: 100 rows, 2 waves
    assert [w.frees for w in plan.waves if w.needs >= 0] == [(0,), (), (1,), (2,)]


@pytest.mark.parametrize("group,n_scratch", [(2, 4), (3, 3), (8, 2)])
def test_plan_groups_staged_experts(group: int, n_scratch: int) -> None:
    counts = np.array([20, 30, 17, 40, 25, 18, 33])
    table = np.full(7, -1, dtype=np.int32)
    plan = plan_layer(counts, table, scratch_base=4, n_scratch=n_scratch, cpu_max=16, block_m=16, max_rows=64,
                      staged_group=group)
    assert plan.staged == list(range(7))  # expert id == staged index here
    g = min(group, n_scratch)
    readers: dict[int, list[int]] = {}
    for i, w in enumerate(plan.waves):
        rows = plan.tiles[w.tile0 : w.tile0 + w.n_tiles]
        here = {int(np.searchsorted(plan.offsets, r0, side="right") - 1) for r0 in rows[:, 1]}
        assert len(here) <= g and len({j // g for j in here}) == 1  # one group, fits the scratch slots
        assert w.needs == max(here)
        for j in here:
            readers.setdefault(j, []).append(i)
    for i, w in enumerate(plan.waves):
        assert set(w.frees) == {j for j, r in readers.items() if max(r) == i}
    freed = [j for w in plan.waves for j in w.frees]
    assert freed == list(range(7))
    # an expert's slot is reused only after the wave that last reads its previous occupant
    first = {j: min(r) for j, r in readers.items()}
    last = {j: max(r) for j, r in readers.items()}
    for j in range(n_scratch, 7):
        assert plan.staged_slots[j] == plan.staged_slots[j - n_scratch]
        assert last[j - n_scratch] < first[j]


def test_plan_without_scratch_sends_every_miss_to_the_cpu() -> None:
    counts = np.array([50, 2, 30])
    table = np.array([0, -1, -1], dtype=np.int32)
    plan = plan_layer(counts, table, scratch_base=1, n_scratch=0, cpu_max=16, block_m=16, max_rows=1024)
    assert plan.resident == [0] and plan.cpu == [1, 2] and plan.staged == []


@pytest.mark.parametrize("stream_copy", [False, True])
def test_staging_ring_packs_in_order_and_recycles_buffers(tiny_model, stream_copy: bool) -> None:
    ck = Checkpoint.open(tiny_model)
    lay = ExpertLayout.for_config(ck.config)
    ring = StagingRing(ck, lay, depth=2, pinned=False, pack_threads=3, stream_copy=stream_copy)
    jobs = [(0, 3), (0, 1), (1, 7), (2, 0), (3, 5)]
    try:
        for layer in range(4):
            ring.submit(layer, [e for (lr, e) in jobs if lr == layer])
        seen = []
        for layer, e in jobs:
            got_layer, got_e, buf = ring.take(timeout=30)
            assert (got_layer, got_e) == (layer, e)
            assert np.array_equal(ring.buffers[buf].numpy(), lay.pack_expert(ck, layer, e))
            seen.append(buf)
            ring.give_back(buf, None)
        assert set(seen) == {0, 1} and ring.packed == len(jobs)
    finally:
        ring.close()


class _SlowEvent:
    """Stands in for a CUDA copy event: the producer must wait for it before refilling."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.waited = False

    def synchronize(self) -> None:
        self.waited = True
        assert self.done.wait(10)


def test_staging_ring_waits_for_the_copy_before_refilling(tiny_model) -> None:
    ck = Checkpoint.open(tiny_model)
    lay = ExpertLayout.for_config(ck.config)
    ring = StagingRing(ck, lay, depth=1, pinned=False, pack_threads=1)
    try:
        ring.submit(0, [1, 2])
        _, _, buf = ring.take(timeout=30)
        ev = _SlowEvent()
        ring.give_back(buf, ev)
        with pytest.raises(StagingError):  # the only buffer is still "being copied"
            ring.take(timeout=0.3)
        assert ev.waited
        ev.done.set()
        assert ring.take(timeout=30)[:2] == (0, 2)
    finally:
        ring.close()


def test_staging_ring_reports_a_failed_pack(tiny_model) -> None:
    ck = Checkpoint.open(tiny_model)
    ring = StagingRing(ck, ExpertLayout.for_config(ck.config), depth=2, pinned=False)
    try:
        ring.submit(99, [0])  # no such layer
        with pytest.raises(StagingError, match="layer 99"):
            ring.take(timeout=30)
        ring.submit(0, [4])  # and it keeps serving
        assert ring.take(timeout=30)[:2] == (0, 4)
    finally:
        ring.close()


def test_staging_ring_closes_while_the_producer_waits_for_a_buffer(tiny_model) -> None:
    """After a failed prompt the ring is closed with buffers still taken and jobs queued."""
    import time

    ck = Checkpoint.open(tiny_model)
    ring = StagingRing(ck, ExpertLayout.for_config(ck.config), depth=1, pinned=False)
    ring.submit(0, [1, 2, 3])
    ring.take(timeout=30)  # the only buffer is never given back
    t0 = time.perf_counter()
    ring.close()
    assert time.perf_counter() - t0 < 5 and not ring._thread.is_alive()
