"""The CPU / staging split of non-resident prompt experts, on recorded rates (no GPU)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.gpu.prefill.split import CPU_MAX_PAIRS, SplitModel, SplitRates, choose_cpu

B = 13_226_496  # one gpt-oss-120b expert's payload bytes
# H200 host, 8 threads (session 3): one-token kernel ~60 GB/s, packing 9.7 GB/s (MEASURED)
H200 = SplitRates(cpu_pass=1 / 60e9, cpu_token=1 / 180e9, stage=1 / 9.7e9)


def layer_time(pairs: dict[int, int], cpu: set[int], r: SplitRates) -> float:
    cpu_s = sum(float(r.cpu_seconds(n, B)) for e, n in pairs.items() if e in cpu)
    stage_s = sum(r.stage_seconds(B) for e in pairs if e not in cpu)
    return max(cpu_s, stage_s)


def test_the_split_is_optimal_among_all_splits_on_small_layers() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        pairs = {int(e): int(n) for e, n in enumerate(rng.integers(1, 40, size=8))}
        cpu, cpu_s, stage_s = choose_cpu(pairs, B, H200)
        best = min(layer_time(pairs, set(c), H200) for k in range(len(pairs) + 1)
                   for c in itertools.combinations(pairs, k))
        assert layer_time(pairs, cpu, H200) <= best * (1 + 1e-9) + max(float(H200.cpu_seconds(40, B)), 0)
        assert max(cpu_s, stage_s) == pytest.approx(layer_time(pairs, cpu, H200))


def test_cheapest_experts_go_to_the_cpu_and_never_slower_than_staging_everything() -> None:
    rng = np.random.default_rng(1)
    for tokens in (16, 150, 600, 3000, 13000):
        # one layer of a uniform-routing prompt: 4 pairs per token over 128 experts, 113 not resident
        counts = np.bincount(rng.integers(0, 128, size=4 * tokens), minlength=128)
        pairs = {e: int(counts[e]) for e in range(113) if counts[e]}
        cpu, cpu_s, stage_s = choose_cpu(pairs, B, H200)
        assert max(cpu_s, stage_s) <= len(pairs) * H200.stage_seconds(B) + 1e-12
        if cpu:
            assert max(pairs[e] for e in cpu) <= min((pairs[e] for e in pairs if e not in cpu), default=1 << 30)
    # a follow-up's few tokens go (almost) all to the CPU, a long prompt's experts all to the GPU
    assert len(choose_cpu({e: 1 for e in range(100)}, B, H200)[0]) >= 80  # 82: 4.7x cheaper on the CPU
    assert choose_cpu({e: 400 for e in range(100)}, B, H200)[0] == set()


def test_groups_larger_than_the_cap_never_go_to_the_cpu_and_without_scratch_all_do() -> None:
    fast_cpu = SplitRates(cpu_pass=1e-15, cpu_token=1e-15, stage=1.0)
    pairs = {0: CPU_MAX_PAIRS + 1, 1: 3}
    assert choose_cpu(pairs, B, fast_cpu)[0] == {1}
    assert choose_cpu(pairs, B, H200, can_stage=False)[0] == {0, 1}
    assert choose_cpu({}, B, H200) == (set(), 0.0, 0.0)


def test_calibration_fit_and_the_recorded_lanes() -> None:
    # 1 token 0.22 ms, 16 tokens 1.32 ms, packing 1.36 ms per expert (the H200 figures above)
    one = B * (H200.cpu_pass + H200.cpu_token)
    many = B * (H200.cpu_pass + 16 * H200.cpu_token)
    r = SplitModel.fitted(one, many, 16, B * H200.stage, B)
    assert r.cpu_pass == pytest.approx(H200.cpu_pass, rel=1e-6)
    assert r.cpu_token == pytest.approx(H200.cpu_token, rel=1e-6)
    assert r.stage == pytest.approx(H200.stage, rel=1e-6)
    m = SplitModel(r)
    m.observe_cpu(2 * float(r.cpu_seconds(np.array([4, 4]), B).sum()), np.array([4, 4]), B)
    m.observe_stage(3 * r.stage_seconds(B), 3, B)
    seen = m.end_prompt()
    assert seen["cpu_observed_s"] == pytest.approx(2 * seen["cpu_predicted_s"])
    assert seen["stage_observed_s"] == pytest.approx(seen["stage_predicted_s"])
    assert m.rates == r  # not adaptive: a process's splits stay the same
    m.adaptive = True
    work = np.full(10, 4)  # enough predicted time (> 1 ms) to learn from
    m.observe_cpu(2 * float(r.cpu_seconds(work, B).sum()), work, B)
    m.end_prompt()
    assert m.rates.cpu_pass == pytest.approx(r.cpu_pass * 1.5)


def test_a_cpu_share_below_one_ends_the_cpu_lane_before_the_staging_lane() -> None:
    """600-token-like layer: every expert used 5-35 times. With a share of 0.9 the planned CPU lane
    is at most 0.9 of the staging lane it runs beside, and the CPU takes a subset of what it takes
    at 1.0 (its cheapest experts first either way)."""
    rng = np.random.default_rng(7)
    pairs = {e: int(n) for e, n in enumerate(rng.integers(5, 36, 120))}
    full, cpu_1, _ = choose_cpu(pairs, B, H200, direct=True, max_pairs=64)
    part, cpu_9, stage_9 = choose_cpu(pairs, B, H200, direct=True, max_pairs=64, cpu_share=0.9)
    assert part < full and part  # fewer experts, still some
    assert cpu_9 <= 0.9 * stage_9 + 1e-12 and cpu_9 < cpu_1
    assert SplitModel(cpu_share=0.9).choose(pairs, B, direct=True) <= full
