"""bench.routing.lane_keep_replay: the lane's share follows the split's rule; keeping lane experts admits them and
changes the hit rate; off is the engine's own replay."""

from __future__ import annotations

import numpy as np
import pytest

from bench.routing.lane_keep_replay import lane_take, replay_lane_keep
from bench.routing.policy_replay import replay_policy


def test_the_lanes_share_is_the_splits() -> None:
    # CPU 0.30 / lane 0.35 ms an expert, at most 2: 1 miss stays on the CPU, 2 go 1 + 1, 3 go 2 + 1, 4 go 2 + 2
    assert [lane_take(k) for k in range(5)] == [0, 0, 1, 1, 2]


def test_kept_lane_experts_are_admitted() -> None:
    rng = np.random.default_rng(0)
    hot = rng.integers(0, 16, (400, 4, 4))  # a few hot experts per layer, reused token after token
    trace = np.where(rng.random((400, 4, 4)) < 0.8, hot % 8, rng.integers(0, 32, (400, 4, 4)))
    off = replay_lane_keep(trace, 32, 24, 100, "off", static=8)
    always = replay_lane_keep(trace, 32, 24, 100, "always", static=8)
    assert off.kept_per_token == 0 and off.lane_per_token == 0
    assert always.kept_per_token > 0 and always.lane_per_token >= always.kept_per_token
    assert always.hit != off.hit
    assert off.hit == pytest.approx(replay_policy(trace, 32, 24, static=8, prompt_tokens=100).hit)


def test_bad_mode_is_named() -> None:
    with pytest.raises(ValueError, match="mode must be one of off, score, always"):
        replay_lane_keep(np.zeros((10, 2, 2), dtype=np.int64), 4, 4, 5, "lru")
