"""The prompt lookahead's choices (engine/gpu/prefill/lookahead.py) and how the plan reserves its slots.
The copies themselves run on CUDA only; bench.gpu.direct_check compares the logits bit for bit there."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.config import ModelConfig
from engine.gpu.prefill.grouping import plan_layer
from engine.gpu.prefill.lookahead import Lookahead, choose_ahead, with_ahead, worth_it
from engine.gpu.prefill.split import SplitModel
from engine.plan import direct_copies_possible, plan_vram
from engine.settings import EngineSettings
from engine.synth import shape_with


def test_choose_ahead_takes_non_resident_experts_into_slots_in_id_order() -> None:
    row = np.array([-1, 7, -1, -1, 3, -1, -1, -1])
    got = choose_ahead(row, [100, 101, 102])
    assert got == {0: 100, 2: 101, 3: 102}  # the lowest ids without history, consecutive slots
    assert choose_ahead(row, []) == {}
    assert choose_ahead(np.array([1, 2, 3]), [100]) == {}  # all resident: nothing to stage


def test_choose_ahead_prefers_what_the_previous_prompt_used_most() -> None:
    row = np.array([-1, 7, -1, -1, 3, -1, -1, -1])
    history = np.array([0, 50, 9, 1, 40, 9, 30, 2])  # resident 1 and 4 are never candidates
    got = choose_ahead(row, [10, 11, 12], history)
    assert got == {2: 10, 5: 11, 6: 12}  # 6 (30 pairs), then 2 and 5 (9, ties by id); slots by id
    assert set(choose_ahead(row, [10, 11, 12], history[:3])) == {0, 2, 3}  # a history of another shape is ignored


def test_with_ahead_makes_staged_experts_readable_without_touching_the_table() -> None:
    row = np.array([-1, 7, -1, -1])
    got = with_ahead(row, {0: 20, 3: 21})
    assert got.tolist() == [20, 7, -1, 21]
    assert row.tolist() == [-1, 7, -1, -1]
    assert with_ahead(row, {}) is row


def test_only_prompts_long_enough_to_use_most_experts_stage_ahead() -> None:
    assert not worth_it(127, 4, 128)  # < 4 pairs per expert on average
    assert worth_it(128, 4, 128)
    la = Lookahead([5, 6])
    la.begin(600, 4, 128, None)
    assert la.active
    la.begin(100, 4, 128, None)
    assert not la.active
    off = Lookahead([])
    off.begin(600, 4, 128, None)
    assert not off.active


def test_take_returns_a_layers_experts_once() -> None:
    la = Lookahead([5, 6])
    la.layer, la.experts = 3, {1: 5, 2: 6}
    assert la.take(2) == {}  # another layer's: not these
    la.layer, la.experts = 3, {1: 5, 2: 6}
    assert la.take(3) == {1: 5, 2: 6}
    assert la.take(3) == {}


def test_staged_ahead_experts_join_the_slot_waves_and_leave_the_split() -> None:
    """Layer plan with two experts staged ahead: they are computed from their lookahead slots in the
    first (slot) waves, never by the CPU or through the wave scratch; the split sees only the rest."""
    counts = np.array([3, 40, 0, 25, 1, 30])
    table = np.array([-1, -1, -1, 9, -1, -1])  # expert 3 resident in slot 9
    ahead = {0: 20, 1: 21, 2: 22}  # expert 2 got no pairs: its copy is simply unused
    row = with_ahead(table, ahead)
    nonres = {int(e): int(counts[e]) for e in np.flatnonzero(counts) if row[e] < 0}
    assert nonres == {4: 1, 5: 30}
    cpu = SplitModel().choose(nonres, 13_000_000, direct=True)
    plan = plan_layer(counts, row, 10, 6, 16, 16, 8192, 3, cpu)
    assert sorted(plan.resident) == [0, 1, 3]
    assert 0 not in plan.cpu and 1 not in plan.cpu and 2 not in plan.cpu + plan.staged
    slot_waves = [w for w in plan.waves if w.needs < 0]
    slots_read = {int(plan.tiles[t, 0]) for w in slot_waves for t in range(w.tile0, w.tile0 + w.n_tiles)}
    assert slots_read == {20, 21, 9}
    assert plan.waves[: len(slot_waves)] == slot_waves  # slot waves first: the lookahead's read event follows them
    assert all(10 <= s < 16 for s in plan.staged_slots)


def _cfg() -> ModelConfig:
    return ModelConfig.from_dict(shape_with("120b-shape").config_dict())


@pytest.mark.parametrize("mode", ["on", "off"])
def test_the_plan_reserves_lookahead_slots_only_where_direct_copies_run(mode: str) -> None:
    s = EngineSettings(vram_budget_gib=12.0, stage_direct=mode)
    plan = plan_vram(_cfg(), s)
    base = plan_vram(_cfg(), replace(s, lookahead_slots=0))
    if mode == "on":
        assert plan.n_ahead == s.lookahead_slots and plan.n_scratch == s.scratch_slots + s.lookahead_slots
        assert plan.n_slots == base.n_slots - s.lookahead_slots  # the same budget: the slots come from the pool
        assert "lookahead" in plan.describe()
    else:
        assert plan.n_ahead == 0 and plan.n_scratch == s.scratch_slots and plan.n_slots == base.n_slots
    assert plan.total <= s.vram_budget_gib * 2**30


def test_direct_copies_possible_follows_stage_direct() -> None:
    assert direct_copies_possible("on")
    assert not direct_copies_possible("off")
    import sys
    assert direct_copies_possible("auto") == sys.platform.startswith("linux")


def test_lookahead_slots_are_validated() -> None:
    with pytest.raises(ValueError, match="lookahead_slots"):
        EngineSettings(lookahead_slots=65)
