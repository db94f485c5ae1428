"""Calibrated routing (engine.synth.calibrated): its parameters, its text, and that a written
checkpoint's router reproduces the designed routing. The hit rates are tests/bench/test_calibrated_workload.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.synth import PRESETS, RoutingSpec, shape_with, write_synthetic_checkpoint
from engine.synth.calibrated import CalibratedParams, CalibratedTables, calibrated_text, designed_trace
from engine.synth.routing_stats import trace_routing


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
