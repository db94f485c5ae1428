"""Preferences: model folder validation, setting ranges, live estimate, presets."""

from __future__ import annotations

from app.core.settings import GenerationDefaults
from engine.plan import estimate
from engine.settings import OPTIMIZED, EngineSettings
from ui.preferences_dialog import PreferencesDialog, PreferencesValues


def _values(model_dir: str, engine: EngineSettings | None = None) -> PreferencesValues:
    return PreferencesValues(model_dir=model_dir, engine=engine or EngineSettings(), preset="default", theme="system",
                             generation=GenerationDefaults(max_tokens=256), remote_enabled=False, remote_url="http://h:1/v1",
                             remote_key="", remote_model="")


def _dialog(qtbot, values: PreferencesValues) -> PreferencesDialog:
    d = PreferencesDialog(values, lambda cfg, s: estimate(cfg, s, True))
    qtbot.addWidget(d)
    return d


def test_model_folder_validation(qtbot, tmp_path, tiny_model):
    d = _dialog(qtbot, _values(str(tmp_path / "nope")))
    assert not d.valid and "not a folder" in d.model_status.text()
    d.model_edit.setText(str(tmp_path))
    assert not d.valid and "config.json" in d.model_status.text()
    d.model_edit.setText(str(tiny_model))
    assert d.valid, d.errors
    assert d.model_status.text().startswith("✓") and "4 layers × 8 experts" in d.model_status.text()
    assert "expert slots" in d.estimate_label.text()
    (tmp_path / "config.json").write_text((tiny_model / "config.json").read_text())
    d.model_edit.setText(str(tmp_path))
    assert not d.valid and "tokenizer.json" in d.model_status.text()


def test_settings_validation_and_live_estimate(qtbot, tiny_model):
    d = _dialog(qtbot, _values(str(tiny_model)))
    slots_before = d.estimate_label.text()
    d.fields["pool_gib"].setValue(0.01)  # a tiny pool: fewer slots than the default budget gives
    assert d.estimate_label.text() != slots_before
    d.fields["static_slots"].setValue(5000)
    assert not d.valid and any("Static slots" in e for e in d.errors)
    assert "Static slots" in d.error_label.text()
    d.fields["static_slots"].setValue(-1)
    assert d.valid
    d.fields["vram_budget_gib"].setValue(0.5)
    d.fields["pool_gib"].setValue(0.75)  # pool above the budget: EngineSettings refuses it
    assert not d.valid and any("pool_gib" in e for e in d.errors)
    d.fields["pool_gib"].setValue(0.0)
    d.fields["kv_ring"].setValue(4)  # shorter than the tiny model's sliding window (8)
    assert not d.valid and any("sliding window" in e for e in d.errors)
    d.fields["kv_ring"].setValue(256)
    d.fields["vram_budget_gib"].setValue(12)
    assert d.valid
    applied: list[PreferencesValues] = []
    d.applied.connect(applied.append)
    d.fields["context"].setValue(4096)
    d._apply()
    assert applied and applied[0].engine.context == 4096 and applied[0].model_dir == str(tiny_model)


def test_presets(qtbot, tiny_model):
    d = _dialog(qtbot, _values(str(tiny_model)))
    assert d.preset.currentData() == "default"
    d.preset.setCurrentIndex(d.preset.findData("optimized"))
    s = d.engine_settings()
    assert (s.kv_ring, s.scratch_slots, s.pool_gib) == (OPTIMIZED.kv_ring, OPTIMIZED.scratch_slots, 6.05)
    d.fields["scratch_slots"].setValue(9)
    assert d.preset.currentData() == "custom"
    d.fields["scratch_slots"].setValue(OPTIMIZED.scratch_slots)
    assert d.preset.currentData() == "optimized"
    assert d.fields["pool_gib"].specialValueText() == "auto"


def test_unshown_and_user_fields_survive_presets(qtbot, tiny_model):
    start = EngineSettings(dtype="float32", prompt_block=512, cpu_threads=3, context=4096, ram_budget_gib=20.0,
                           mlock_gib=2.0, warmup=False)
    d = _dialog(qtbot, _values(str(tiny_model), start))
    assert d.engine_settings() == start
    d.preset.setCurrentIndex(d.preset.findData("optimized"))
    s = d.engine_settings()
    assert (s.dtype, s.prompt_block, s.cpu_threads, s.context, s.ram_budget_gib, s.mlock_gib, s.warmup) == (
        "float32", 512, 3, 4096, 20.0, 2.0, False)
    assert (s.pool_gib, s.kv_ring, s.scratch_slots) == (6.05, 256, 6)
    d.warmup.setChecked(True)
    assert d.engine_settings().warmup is True and d.preset.currentData() == "optimized"
