"""Calibrated routing (engine.synth.calibrated): the designed trace's hit rates, the drift of its
hot sets, and that a written checkpoint's router reproduces the designed routing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.gpu.admission import AdmissionSettings
from engine.synth import PRESETS, RoutingSpec, shape_with, write_synthetic_checkpoint
from engine.synth.calibrated import CalibratedParams, CalibratedTables, calibrated_text, designed_trace
from engine.synth.policy_replay import replay_policy
from engine.synth.replay_sim import cache_rates
from engine.synth.routing_stats import trace_routing

# the design doc's recorded coding trace at ~430 slots (SIMULATED there)
DOC_LRU, DOC_BELADY, TOL = 0.406, 0.632, 0.03


@pytest.fixture(scope="module")
def trace_120b() -> np.ndarray:
    tables = CalibratedTables(0, PRESETS["120b-shape"])
    return designed_trace(tables, calibrated_text(tables, 12_000))


def test_hit_rates_at_430_slots_match_the_design_doc(trace_120b):
    """One pool of 430 slots for all 36 layers (the engine's SlotPool), 12k tokens."""
    r = cache_rates(trace_120b, 128, 430)
    assert abs(r.lru - DOC_LRU) <= TOL, r
    assert abs(r.belady - DOC_BELADY) <= TOL, r


def test_uniform_routing_is_far_from_the_design_doc(trace_120b):
    """The tolerance has teeth: the same replay of uniform random routing misses it widely."""
    uniform = np.random.default_rng(0).integers(0, 128, (3000, 36, 4))
    r = cache_rates(uniform, 128, 430)
    assert r.lru < DOC_LRU - 0.2


def test_hot_set_follows_the_text(trace_120b):
    """Experts used within a 256-token window cover that window far better than an earlier
    window's hot set does: the hot set drifts with the topic segments."""
    def top(c: np.ndarray, layer: int) -> set[int]:
        counts = np.bincount(c[:, layer].ravel(), minlength=128)
        return set(np.argsort(-counts, kind="stable")[:16].tolist())

    own, other = [], []
    for w in range(4, 40, 4):
        now, before = trace_120b[w * 256 : (w + 1) * 256], trace_120b[(w - 4) * 256 : (w - 3) * 256]
        for layer in (0, 17, 35):
            own.append(np.isin(now[:, layer], sorted(top(now, layer))).mean())
            other.append(np.isin(now[:, layer], sorted(top(before, layer))).mean())
    assert np.mean(own) > np.mean(other) + 0.15


def test_text_is_deterministic_and_avoids_specials():
    tables = CalibratedTables(5, PRESETS["120b-shape"])
    a, b = calibrated_text(tables, 3000), calibrated_text(CalibratedTables(5, PRESETS["120b-shape"]), 3000)
    assert np.array_equal(a, b)
    assert a.max() < 199_998  # o200k's specials and reserved ids start there
    assert not np.array_equal(a, calibrated_text(CalibratedTables(6, PRESETS["120b-shape"]), 3000))


def test_spec_and_params_validation():
    assert RoutingSpec.resolve("calibrated", None) == RoutingSpec("calibrated", 0.0)
    with pytest.raises(ValueError, match="takes no skew"):
        RoutingSpec.resolve("calibrated", 1.0)
    for bad in ({"copy_share": 1.5}, {"common_share": 0.7, "copy_share": 0.5}, {"topics": 0}, {"zipf": float("nan")}):
        with pytest.raises(ValueError, match="calibrated routing"):
            CalibratedTables(0, PRESETS["tiny"], CalibratedParams(**bad))


def test_checkpoint_router_reproduces_the_designed_routing(tmp_path):
    """The reference engine (float32) on a written calibrated checkpoint routes the designed text
    as designed: whatever attention and the experts add to the residual stream moves few choices."""
    shape = shape_with("small", num_hidden_layers=2, num_local_experts=32, hidden_size=128, vocab_size=1024)
    d = write_synthetic_checkpoint(tmp_path / "cal", shape, seed=3, routing="calibrated")
    meta = json.loads((d / "SYNTHETIC.json").read_text())
    assert meta["routing"]["mode"] == "calibrated" and meta["routing"]["copy_share"] == CalibratedParams().copy_share
    tables = CalibratedTables(3, shape)
    ids = calibrated_text(tables, 96)
    want = designed_trace(tables, ids)
    got = np.sort(np.transpose(trace_routing(d, ids.tolist()).choices, (1, 0, 2)), axis=-1)
    same_sets = (got == want).all(-1).mean()
    assert same_sets >= 0.97, same_sets
    # a different seed's design does not match: the agreement is the router's doing
    other = designed_trace(CalibratedTables(4, shape), ids)
    assert (got == other).all(-1).mean() < 0.5


def test_policy_replay_frozen_is_the_static_set_and_adaptive_admits(trace_120b):
    short = trace_120b[:1500]
    frozen = replay_policy(short, 128, 548, prompt_tokens=1024, settings=AdmissionSettings(refresh_every=0))
    assert frozen.admissions_per_token == 0 and frozen.hit == frozen.static_hit > 0
    live = replay_policy(short, 128, 548, prompt_tokens=1024)
    assert live.admissions_per_token > 0 and live.hit > frozen.hit
    assert live.lru <= live.belady and live.hit <= live.belady
    with pytest.raises(ValueError, match="prompt_tokens"):
        replay_policy(short, 128, 548, prompt_tokens=1500)
