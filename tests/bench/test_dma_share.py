"""bench.kernel.dma_share's projection: the copy lane's split per layer (the measured part needs CUDA)."""

from __future__ import annotations

import pytest

from bench.kernel.dma_share import project


def test_without_a_usable_lane_the_phase_is_the_cpus():
    p = project(0.4, 18, 0.05, 0.27, copy_ms=1e9)
    assert p["phase_ms_with_lane"] == p["cpu_phase_ms_now"]
    assert p["misses_per_token"] == pytest.approx(18 * 4 * 0.6)


def test_the_cpu_phase_is_fixed_cost_plus_experts():
    # every expert a miss: 4 per layer, a + 4b each
    assert project(0.0, 10, 0.05, 0.25, copy_ms=1e9)["cpu_phase_ms_now"] == pytest.approx(10 * (0.05 + 4 * 0.25))


def test_an_equal_speed_lane_halves_an_all_miss_layer():
    # 4 misses: 2 on the CPU (0.05 + 0.5) beside 2 copies (2 x 0.27 + 2 x 0.03 = 0.6): 0.6 a layer
    p = project(0.0, 1, 0.05, 0.25, copy_ms=0.27, gpu_ms=0.03)
    assert p["phase_ms_with_lane"] == pytest.approx(0.6)
    assert p["phase_ms_with_lane"] < p["cpu_phase_ms_now"]
