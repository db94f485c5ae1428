"""The slot replay drives the GPU backend's real residency code on a routing trace."""

from __future__ import annotations

from bench.demo_training.slot_replay import replay


def test_hot_experts_hit_and_a_drifting_set_gets_admitted():
    layers, experts = 2, 16
    calib = [[[0 * experts + 1, 1 * experts + 2]] * 8]  # layer 0 expert 1, layer 1 expert 2
    steady = replay(calib, [[[1, experts + 2]] * 50], layers, experts, slot_fraction=0.25)
    assert steady.hit_rate == 1.0 and steady.admissions == 0
    # a new pair of experts takes over: admitted to adaptive slots after a refresh
    drift = replay(calib, [[[5, experts + 9]] * 200], layers, experts, slot_fraction=0.25)
    assert drift.admissions == 2 and 0.9 < drift.adaptive_hit_rate < 1.0 and drift.static_hit_rate == 0.0


def test_uniform_trace_hits_about_the_pool_share():
    import random

    layers, experts = 2, 16
    rng = random.Random(0)
    trace = [[[layer * experts + e for layer in range(layers) for e in rng.sample(range(experts), 4)]
              for _ in range(400)]]
    r = replay(trace, trace, layers, experts, slot_fraction=0.25)
    assert 0.15 < r.hit_rate < 0.45


def test_static_slots_zero_makes_the_whole_pool_adaptive():
    layers, experts = 2, 16
    calib = [[[1, experts + 2]] * 8]
    r = replay(calib, [[[1, experts + 2]] * 50], layers, experts, slot_fraction=0.25, static_slots=0)
    # nothing resident at first: misses until the first refresh admits both, then hits
    assert r.static_hit_rate == 0.0 and r.admissions == 2 and 0.8 < r.adaptive_hit_rate < 1.0
