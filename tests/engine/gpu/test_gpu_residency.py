"""Slot pool and admission policy on synthetic routing traces (no GPU, deterministic)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings, Residency, rank_fill, rank_hot_set
from engine.gpu.pool import SlotPool, SlotState


class FakeCopier:
    """Copies land only when the test says so (or after ``delay`` polls)."""

    def __init__(self, delay: int | None = 0) -> None:
        self.delay = delay
        self.started: list[tuple[int, int]] = []
        self.ages: dict[int, int] = {}
        self.released: set[int] = set()

    def start(self, slot: int, buffer: int) -> object:
        h = len(self.started)
        self.started.append((slot, buffer))
        self.ages[h] = 0
        return h

    def done(self, handle: object) -> bool:
        assert isinstance(handle, int)
        self.ages[handle] += 1
        if self.delay is None:
            return handle in self.released
        return self.ages[handle] > self.delay


def make(layers: int = 2, experts: int = 8, slots: int = 4, static: int = 2, **kw: float) -> tuple[
        SlotPool, AdmissionPolicy, Residency, FakeCopier]:
    table = np.full((layers, experts), -1, dtype=np.int32)
    pool = SlotPool(slots, static, table)
    s = AdmissionSettings(**{"refresh_every": 4, "refresh_m": 2, "prefill_weight": 16.0, "half_life": 64.0,
                             "capture_buffers": 2, **kw})  # type: ignore[arg-type]
    policy = AdmissionPolicy(layers, experts, s)
    cop = FakeCopier(0)
    return pool, policy, Residency(pool, policy, cop, s.capture_buffers), cop


def fill_static(pool: SlotPool, keys: list[tuple[int, int]]) -> None:
    for slot, key in zip(pool.free_slots(static=True), keys, strict=False):
        pool.begin_copy(slot, key)
        pool.finish_copy(slot)


def run_trace(pool: SlotPool, policy: AdmissionPolicy, res: Residency, trace: list[list[list[int]]]) -> list[int]:
    """trace[token][layer] = routed experts; returns admissions started per token."""
    per_token = []
    for routed in trace:
        res.poll()
        started = 0
        for layer, ids in enumerate(routed):
            misses = [e for e in ids if pool.slot_of((layer, e)) < 0]
            caps = res.captures_for(layer, misses)
            assert set(caps) <= set(misses)
            started += res.after_compute(layer, caps)
            policy.observe(layer, ids)
            pool.check()
        policy.token_done(pool)
        per_token.append(started)
    res.poll()
    return per_token


def test_hot_set_ranking_and_ties() -> None:
    counts = np.array([[5, 0, 7, 5], [5, 9, 0, 1]])
    assert rank_hot_set(counts, 4) == [(1, 1), (0, 2), (0, 0), (0, 3)]
    assert rank_hot_set(counts, 100)[-1] == (1, 3)  # zero counts are never ranked
    assert len(rank_hot_set(counts, 100)) == 6


def test_trace_brings_the_conversations_experts_into_adaptive_slots() -> None:
    pool, policy, res, _ = make()
    fill_static(pool, [(0, 0), (1, 0)])
    # every token routes experts 0 and 5 in layer 0, 0 and 6 in layer 1, plus noise
    rng = np.random.default_rng(0)
    trace = [[[0, 5, int(rng.integers(1, 5))], [0, 6, int(rng.integers(1, 5))]] for _ in range(40)]
    run_trace(pool, policy, res, trace)
    assert pool.slot_of((0, 5)) >= 2 and pool.slot_of((1, 6)) >= 2  # adaptive slots
    assert pool.slot_of((0, 0)) == 0 and pool.slot_of((1, 0)) == 1  # static slots never move
    occ = pool.occupancy()
    assert occ == [(1, 1, 6), (1, 1, 6)]


def test_admissions_per_refresh_never_exceed_m() -> None:
    pool, policy, res, _ = make(slots=10, static=0, refresh_every=5, refresh_m=2, capture_buffers=8)
    rng = np.random.default_rng(1)
    trace = [[list(rng.choice(8, 3, replace=False)) for _ in range(2)] for _ in range(60)]
    per_token = run_trace(pool, policy, res, trace)
    for start in range(0, len(per_token), 5):
        assert sum(per_token[start : start + 5]) <= 2
    assert sum(per_token) > 0


def test_frozen_residency_never_admits() -> None:
    pool, policy, res, cop = make(refresh_every=0)
    fill_static(pool, [(0, 1)])
    before = pool.table.copy()
    rng = np.random.default_rng(2)
    run_trace(pool, policy, res, [[list(rng.choice(8, 3, replace=False)) for _ in range(2)] for _ in range(50)])
    assert cop.started == [] and np.array_equal(pool.table, before)


def test_slot_with_copy_in_flight_is_never_read_or_evicted() -> None:
    pool, policy, res, cop = make(slots=3, static=0, refresh_every=1, refresh_m=3, capture_buffers=3)
    cop.delay = None  # copies land only when released
    policy.observe(0, [1, 2, 3], 10.0)
    policy.refresh(pool)
    caps = res.captures_for(0, [1, 2, 3])
    assert len(caps) == 3
    assert res.after_compute(0, caps) == 3
    copying = pool.copying()
    assert len(copying) == 3
    for e in (1, 2, 3):
        assert pool.slot_of((0, e)) == -1  # not readable while in flight
    # even with a candidate scoring far higher, no slot in flight is handed out as a victim
    policy.observe(1, [7], 1e9)
    assert pool.pick_victim(policy.scores, below=1e12) is None
    with pytest.raises(RuntimeError):
        pool.begin_copy(copying[0], (1, 7))
    assert res.poll() == 0 and pool.copying() == copying
    cop.released.add(0)
    assert res.poll() == 1
    landed_slot, _ = cop.started[0]
    assert pool.slots[landed_slot].state == SlotState.RESIDENT
    assert pool.slot_of(pool.slots[landed_slot].key) == landed_slot  # type: ignore[arg-type]
    pool.check()


def test_eviction_clears_the_table_before_the_copy() -> None:
    pool, policy, res, cop = make(slots=1, static=0, refresh_every=1, refresh_m=1, capture_buffers=1)
    cop.delay = None
    pool.begin_copy(0, (0, 4))
    pool.finish_copy(0)
    assert pool.slot_of((0, 4)) == 0
    policy.observe(1, [2], 5.0)  # (1,2) outscores the resident (0,4), which has score 0
    policy.refresh(pool)
    res.after_compute(1, res.captures_for(1, [2]))
    assert pool.slot_of((0, 4)) == -1 and pool.slot_of((1, 2)) == -1
    assert res.stats.evictions == 1
    cop.released.add(0)
    res.poll()
    assert pool.slot_of((1, 2)) == 0


class RamLog:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[int, int]]]] = []

    def experts_released(self, keys: list[tuple[int, int]]) -> None:
        self.calls.append(("released", list(keys)))

    def experts_needed(self, keys: list[tuple[int, int]]) -> None:
        self.calls.append(("needed", list(keys)))


def test_ram_residency_hears_of_landings_and_evictions() -> None:
    """An expert whose copy landed is no longer read by the CPU (released to the RAM policy);
    one evicted from VRAM is read again (needed); nothing is said while a copy is in flight."""
    pool, policy, res, cop = make(slots=1, static=0, refresh_every=1, refresh_m=1, capture_buffers=1)
    ram = RamLog()
    res.ram = ram
    cop.delay = None
    policy.observe(0, [4], 5.0)
    policy.refresh(pool)
    res.after_compute(0, res.captures_for(0, [4]))
    res.poll()
    assert ram.calls == []  # in flight
    cop.released.add(0)
    res.poll()
    assert ram.calls == [("released", [(0, 4)])]
    policy.observe(1, [2], 50.0)  # outscores (0, 4)
    policy.refresh(pool)
    res.after_compute(1, res.captures_for(1, [2]))
    assert ram.calls[-1] == ("needed", [(0, 4)])
    cop.released.add(1)
    res.poll()
    assert ram.calls[-1] == ("released", [(1, 2)])


def test_a_failing_ram_manager_is_dropped_not_fatal() -> None:
    pool, policy, res, _cop = make(slots=1, static=0, refresh_every=1, refresh_m=1, capture_buffers=1)

    class Broken:
        def experts_released(self, keys: object) -> None:
            raise OSError("madvise refused")

    res.ram = Broken()
    policy.observe(0, [4], 5.0)
    policy.refresh(pool)
    res.after_compute(0, res.captures_for(0, [4]))
    assert res.poll() == 1 and res.ram is None and pool.slot_of((0, 4)) == 0


def test_victim_must_score_below_the_candidate() -> None:
    pool, policy, res, _ = make(slots=1, static=0, refresh_every=1, refresh_m=1)
    pool.begin_copy(0, (0, 4))
    pool.finish_copy(0)
    policy.observe(0, [4], 10.0)
    policy.observe(1, [2], 5.0)
    policy.refresh(pool)
    res.after_compute(1, res.captures_for(1, [2]))
    assert pool.slot_of((0, 4)) == 0 and res.stats.rejected == 1 and res.stats.admissions == 0
    assert res.free_buffers == [1, 0] or sorted(res.free_buffers) == [0, 1]


def test_static_slots_are_never_victims() -> None:
    pool, policy, _, _ = make(slots=2, static=2)
    fill_static(pool, [(0, 0), (0, 1)])
    policy.observe(1, [3], 100.0)
    assert pool.pick_victim(policy.scores, below=1e9) is None


def test_capture_buffers_limit_concurrent_admissions() -> None:
    pool, policy, res, cop = make(slots=6, static=0, refresh_every=1, refresh_m=6, capture_buffers=2)
    cop.delay = None
    policy.observe(0, [1, 2, 3, 4], 1.0)
    policy.refresh(pool)
    caps = res.captures_for(0, [1, 2, 3, 4])
    assert len(caps) == 2
    res.after_compute(0, caps)
    assert res.captures_for(0, [3, 4]) == {}  # no buffer until a copy lands


def test_prompt_weight_caps_a_long_prompts_influence() -> None:
    _, policy, _, _ = make(prefill_weight=16.0)
    routing = np.zeros((1000, 2, 3), dtype=np.int64)
    routing[:, :, 0], routing[:, :, 1], routing[:, :, 2] = 1, 2, 3
    policy.observe_prompt(routing)
    assert policy.scores[0].sum() == pytest.approx(16.0 * 3)
    short = np.ones((4, 2, 3), dtype=np.int64)
    policy.observe_prompt(short)
    assert policy.scores[1, 1] == pytest.approx(16.0 + 12.0)


def test_fill_ranks_the_prompts_last_tokens_ties_by_lifetime_counts() -> None:
    counts = np.zeros((2, 8), dtype=np.int64)
    counts[0, 5], counts[1, 2] = 9, 3
    tail = np.array([[[1, 5], [2, 3]], [[1, 6], [4, 3]]])  # [tokens, layers, k]
    # (0,1) and (1,3) twice; the once-routed tie broken by lifetime counts: (0,5) 9, (1,2) 3 ... then index
    assert rank_fill(tail, counts, set(), 4) == [(0, 1), (1, 3), (0, 5), (1, 2)]
    assert rank_fill(tail, counts, {(0, 1)}, 10) == [(1, 3), (0, 5), (1, 2), (0, 6), (1, 4)]  # never-routed left out


def test_fill_takes_free_slots_then_stale_residents_never_a_target_one() -> None:
    pool, policy, res, cop = make(slots=4, static=1, refresh_every=1000, capture_buffers=4)
    fill_static(pool, [(0, 0)])
    for slot, key in ((1, (1, 5)), (2, (1, 7))):  # two adaptive residents; slot 3 is free
        pool.begin_copy(slot, key)
        pool.finish_copy(slot)
    # the prompt's last tokens: (0,3) and (1,5) three times, (0,4) and (1,1) twice, (1,6) and (0,2) once
    routing = np.array([[[3, 4], [5, 6]], [[3, 4], [5, 1]], [[3, 2], [5, 1]]])
    # target: the 3 adaptive slots' worth, ties by layer: (0,3), (1,5), (0,4); (1,7) is stale
    assert res.plan_fill(routing, 3) == 2
    assert policy.fill == {(0, 3), (0, 4)} and res.stale == {(1, 7)}
    assert res.captures_for(1, [1, 6]) == {}  # outside the target: no capture before a refresh
    caps = res.captures_for(0, [3, 4])
    assert set(caps) == {3, 4}
    assert res.after_compute(0, caps) == 2 and res.stats.evictions == 1
    res.poll()
    assert {pool.slot_of((0, 3)), pool.slot_of((0, 4))} == {2, 3} and pool.slot_of((1, 7)) == -1
    assert pool.slot_of((1, 5)) == 1 and pool.slot_of((0, 0)) == 0  # the prompt still routes to (1,5)
    assert policy.fill == set() and res.stale == set() and len(cop.started) == 2
    pool.check()


def test_fill_key_without_a_free_or_stale_slot_drops_the_set() -> None:
    pool, policy, res, _ = make(slots=2, static=0, refresh_every=1000, capture_buffers=2)
    assert res.plan_fill(np.array([[[1, 2], [3, 4]]]), 1) == 2  # target (0,1), (0,2)
    for e in (1, 2):
        res.after_compute(0, res.captures_for(0, [e]))
        res.poll()
    policy.fill.add((1, 5))  # a key with nowhere to go: both residents are in the target
    res.after_compute(1, res.captures_for(1, [5]))
    assert res.stats.admissions == 2 and res.stats.rejected == 1 and res.stats.evictions == 0
    assert policy.fill == set() and pool.slot_of((0, 1)) >= 0 and pool.slot_of((0, 2)) >= 0


def test_no_fill_when_frozen_or_off() -> None:
    _, policy, res, _ = make(refresh_every=0)
    assert res.plan_fill(np.array([[[1, 2], [3, 4]]]), 8) == 0 and policy.fill == set()
    _, policy, res, _ = make()
    assert res.plan_fill(np.array([[[1, 2], [3, 4]]]), 0) == 0 and policy.fill == set()


def test_victim_pick_equals_the_slot_by_slot_rule() -> None:
    """pick_victim (numpy mirrors) against the rule written as a loop: a free adaptive slot first,
    else the lowest-scoring resident adaptive slot below ``below``, the lowest index on ties."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        layers, experts, n = 3, 6, 8
        pool = SlotPool(n, int(rng.integers(0, 4)), np.full((layers, experts), -1, dtype=np.int32))
        keys = [(int(a), int(b)) for a, b in zip(*np.unravel_index(rng.permutation(layers * experts)[:n],
                                                                   (layers, experts)), strict=True)]
        for slot, key in enumerate(keys):
            r = rng.random()
            if r < 0.8:
                pool.begin_copy(slot, key)
                if r < 0.6:
                    pool.finish_copy(slot)
        scores = rng.integers(0, 4, size=(layers, experts)).astype(np.float64)  # many ties
        below = float(rng.integers(0, 5))
        among = [i for i in range(n) if rng.random() < 0.5]
        for allowed in (None, among):
            want = next((s.index for s in pool.slots if not s.static and s.state == SlotState.FREE), None)
            if want is None:
                best = below
                for s in pool.slots:
                    if (not s.static and s.state == SlotState.RESIDENT and s.key is not None and scores[s.key] < best
                            and (allowed is None or s.index in allowed)):
                        want, best = s.index, float(scores[s.key])
            assert pool.pick_victim(scores, below, allowed) == want, (trial, allowed)
        pool.check()


def test_the_wanted_mask_holds_every_wanted_key() -> None:
    """AdmissionPolicy.wanted_mask (what the native decode layer yields on): one array, updated in place, holding
    every key wants() holds through refreshes, fills, admissions and a set grown in place."""
    rng = np.random.default_rng(3)
    pool, policy, res, _ = make(layers=3, experts=8, slots=6, static=2, refresh_every=1)
    mask = policy.wanted_mask()
    for step in range(400):  # a refresh every step: new sets of the same size, often at a freed set's address
        policy.observe(int(rng.integers(0, 3)), rng.integers(0, 8, 2))
        if step % 7 == 0:
            res.plan_fill(rng.integers(0, 8, (4, 3, 2)), 4)
        if step % 5 == 0 and policy.pending:
            policy.admitted(sorted(policy.pending)[0])
        if step == 20:
            policy.fill.add((2, 7))  # grown in place
        policy.token_done(pool)
        got = policy.wanted_mask()
        assert got is mask
        want = np.array([[policy.wants((layer, e)) for e in range(8)] for layer in range(3)])
        assert (mask[want] == 1).all(), step
        assert (mask == want).all(), step  # after any change it is rebuilt exactly


def test_the_wanted_mask_follows_a_set_replaced_twice() -> None:
    """Two replacements between looks: the second set may take the first one's freed address (CPython reuses it),
    so the mask cannot go by the sets' ids."""
    _, policy, _, _ = make(layers=2, experts=8)
    for e in range(1, 7):
        policy.pending = {(0, e)}
        policy.wanted_mask()
        policy.pending = {(1, e)}
        policy.pending = {(0, e + 1)}
        assert policy.wanted_mask()[0, e + 1] == 1 and policy.wanted_mask().sum() == 1
