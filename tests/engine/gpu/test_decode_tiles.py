"""Decode tile choice from the device's limits: consumer cards never get the lm_head reduction step
that spills there (bench/gpu/aot_check.py compiles both; docs/perf-gpu.md has the numbers)."""

from __future__ import annotations

from engine.config import ModelConfig
from engine.gpu.launch import Tiles
from engine.gpu.prefill.tiles import SM86, SM89, SM90, SM120, DeviceLimits
from engine.synth import PRESETS

CFG = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())


def test_sm86_limits_give_the_spill_free_lm_head_step() -> None:
    for lim in (SM86, SM89, SM120, DeviceLimits(80, 166912)):
        assert Tiles.for_config(CFG, limits=lim).lm_k_block == 64, lim


def test_sm90_keeps_the_h200_timed_tiles() -> None:
    assert Tiles.for_config(CFG, limits=SM90) == Tiles()
    assert Tiles.for_config(CFG, limits=DeviceLimits(100, 232448)) == Tiles()


def test_interpreter_tiles_ignore_the_device() -> None:
    assert Tiles.for_config(CFG, interpret=True, limits=SM86) == Tiles.for_config(CFG, interpret=True)
