"""The copy lane's split (engine/gpu/lane_split.py) on recorded rates: no GPU, no interpreter."""

from __future__ import annotations

import pytest

from engine.gpu.lane_split import PART_EXTRA, PROBE_FIRST, PROBE_LAST, WINDOW, SplitRates, best_split

# bench.gpu.lane_check on the 18-layer uniform checkpoint, H200 host, 8 threads (session 16, MEASURED): the CPU
# kernel 0.3543 ms an expert beside the copies, a copy 0.328 ms
CPU, LANE = 0.3543, 0.328


def test_recorded_rates_split_as_the_h200_lane_did() -> None:
    r = SplitRates(CPU, LANE + 0.03)  # a copy and the GPU's ~0.03 ms of kernels
    # 4 misses: 2 down the lane (max(0.05 + 2 * 0.354, 2 * 0.358) = 0.758 ms against 1.467 on the CPU alone)
    assert [r.choose(k, min(2, k)) for k in (4, 3, 2, 1)] == [2, 2, 1, 1]
    m, ms = best_split(4, 2, 0.05, CPU, LANE + 0.03)
    assert m == 2 and ms == pytest.approx(0.05 + 2 * CPU)  # the CPU's two are the longer lane
    assert r.report()["layers_sending_0_1_2"] == [0, 2, 2]


def test_one_stalled_copy_does_not_switch_the_lane_off() -> None:
    r = SplitRates(CPU, LANE)
    for _ in range(WINDOW):
        r.observe_lane(2, 2 * LANE)
    r.observe_lane(2, 200.0)  # the copies waited ~100 ms behind other traffic once
    # a running mean (weight 0.05) would now hold 5.3 ms an expert and never send another miss down the lane
    assert r.lane_ms == LANE
    assert r.choose(4, 2) == 2


def test_a_slow_lane_is_probed_less_and_less_and_comes_back_when_fast() -> None:
    r = SplitRates(CPU, LANE)
    for _ in range(WINDOW):
        r.observe_lane(1, 5.0)  # the lane became slow: every miss stays on the CPU
    picks, probed = [], []
    for _ in range(PROBE_FIRST * 7):
        picks.append(r.choose(4, 2))
        probed.append(r.probed)  # a probe's use is timed whatever the lane's sampling (copy_lane.TIME_EVERY)
    probes = [i for i, m in enumerate(picks) if m]
    assert probed == [bool(m) for m in picks]
    # a probe after 64 layers without the lane, then after 128, 256, ...
    assert probes == [PROBE_FIRST - 1, 3 * PROBE_FIRST - 1, 7 * PROBE_FIRST - 1]
    assert all(m in (0, 1) for m in picks) and r.probes == 3
    for _ in range(WINDOW // 2 + 1):  # the probes find it fast again: the median turns
        r.observe_lane(1, LANE)
    assert r.choose(4, 2) == 2
    assert r.every == PROBE_FIRST  # used again: the next stale spell is probed soon


def test_probes_stop_doubling_at_the_last_interval() -> None:
    r = SplitRates(CPU, 50.0)
    gaps, last = [], -1
    for i in range(PROBE_LAST * 6):
        if r.choose(3, 2):
            gaps.append(i - last)
            last = i
    assert gaps[:5] == [64, 128, 256, 512, 1024] and set(gaps[5:]) == {PROBE_LAST}


def test_fixed_rates_neither_learn_nor_probe() -> None:
    r = SplitRates()
    r.fix(0.3, 5.0)
    r.observe_lane(1, 0.01)
    r.observe_cpu(3, 0.5)
    assert (r.cpu_ms, r.lane_ms) == (0.3, 5.0)
    assert not any(r.choose(4, 2) for _ in range(4 * PROBE_LAST))


def test_the_cpu_rate_follows_every_layer_and_keeps_the_fixed_cost_apart() -> None:
    r = SplitRates(cpu_ms=0.3, lane_ms=0.3, cpu_fixed_ms=0.05)
    for _ in range(400):
        r.observe_cpu(2, (0.05 + 2 * 0.5) / 1e3)
    assert abs(r.cpu_ms - 0.5) < 1e-6
    r.observe_cpu(0, 1.0)  # every miss went down the lane: nothing to learn
    assert r.cpu_samples == 400


def test_best_units_balances_the_two_sides_with_part_of_one_expert() -> None:
    from engine.gpu.lane_split import best_units

    # 4 misses, CPU 0.30 ms an expert (+0.05 fixed, + PART_EXTRA of an expert for a split one's part), lane 0.35:
    # whole experts give 2 down the lane at 0.70 ms; the balance point is (0.05 + 4.12 * 0.3) / 0.65 = 1.978 experts,
    # i.e. 1 whole + 0.978 of 2,880 units on the 90-block grid
    m, units, t = best_units(4, 2, 4, 0.05, 0.30, 0.35, 2880)
    assert (m, units) in ((1, 2784), (1, 2816)) and units % 32 == 0
    assert t == pytest.approx(max(0.05 + (4 - 1 - units / 2880 + PART_EXTRA) * 0.30, (1 + units / 2880) * 0.35))
    assert t == pytest.approx(1.286 / 0.65 * 0.35, rel=0.02) and t < 0.70
    # at most width whole experts plus part of one more: a slow CPU sends 2 whole and nearly all of a third
    m, units, t = best_units(4, 2, 4, 0.0, 10.0, 0.1, 2880)
    assert (m, units) == (2, 2880 - 32)
    # captures the lane may not take: with one free miss, all of it beats any part (0.95 against 0.953 ms)
    assert best_units(4, 2, 1, 0.05, 0.30, 0.35, 2880)[:2] == (1, 0)
    m, units, _ = best_units(2, 2, 1, 0.05, 0.30, 0.50, 2880)  # a slower lane, 2 misses, one free: part of it
    assert m == 0 and 0 < units < 2880
    # no slivers: a share under 1/8 of an expert stays on the CPU
    assert best_units(4, 2, 4, 0.05, 0.30, 20.0, 2880)[:2] == (0, 0)
    # where a whole number balances, no split; no misses, nothing
    assert best_units(2, 2, 2, 0.0, 0.3, 0.3, 2880)[:2] == (1, 0)
    assert best_units(0, 2, 0, 0.05, 0.3, 0.3, 2880)[:2] == (0, 0)
    # an expert narrower than two blocks is never split
    assert best_units(4, 2, 4, 0.05, 0.30, 0.35, 32)[1] == 0


def test_choose_units_counts_splits_and_probes_as_choose_does() -> None:
    r = SplitRates(cpu_ms=0.30, lane_ms=0.35, cpu_fixed_ms=0.05)
    m, units = r.choose_units(4, 2, 4, 2880)
    assert m == 1 and units > 0 and r.split_layers == 1 and r.chosen == [0, 0, 1]
    r.reset(0.3, 50.0)  # a slow lane: nothing goes, until a probe sends one whole miss
    sent = [r.choose_units(4, 2, 4, 2880) for _ in range(PROBE_FIRST)]
    assert sent[:-1] == [(0, 0)] * (PROBE_FIRST - 1) and sent[-1] == (1, 0) and r.probed and r.probes == 1
    assert r.report()["layers_split"] == 1
