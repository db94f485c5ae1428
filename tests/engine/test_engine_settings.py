"""EngineSettings' validation: a bad value names its field (the preferences dialog and settings.json show it)."""

from __future__ import annotations

import dataclasses

import pytest

from engine.settings import EngineSettings, SettingsError

FLAGS = [f.name for f in dataclasses.fields(EngineSettings) if f.type in ("bool", bool)]


def test_the_decode_layers_native_call_is_on_beside_the_lane_only() -> None:
    s = EngineSettings()
    assert s.decode_native_layer and not s.decode_native_early and not s.decode_lane_batch


@pytest.mark.parametrize("flag", FLAGS)
def test_a_switch_that_is_not_true_or_false_is_refused_by_name(flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        EngineSettings(**{flag: "yes"})  # type: ignore[arg-type]


def test_the_switches_are_found() -> None:
    assert {"decode_native_layer", "decode_native_early", "decode_front_end_wait", "early_launch"} <= set(FLAGS)
