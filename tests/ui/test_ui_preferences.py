"""Preferences: model folder validation, setting ranges, live estimate, presets."""

from __future__ import annotations

import pytest

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
    assert not d.valid and "model folder not found." in d.model_status.text()
    d.model_edit.setText(str(tmp_path))
    assert not d.valid and "config.json" in d.model_status.text()
    d.model_edit.setText(str(tiny_model))
    assert d.valid, d.errors
    assert d.model_status.text().startswith("✓") and "4 layers × 8 experts" in d.model_status.text()
    assert "expert slots" in d.estimate_label.text()
    (tmp_path / "config.json").write_text((tiny_model / "config.json").read_text())
    d.model_edit.setText(str(tmp_path))
    assert not d.valid and "tokenizer.json" in d.model_status.text()
    gguf = tmp_path / "gpt-oss-120b-mxfp4.gguf"
    gguf.write_bytes(b"GGUF")
    d.model_edit.setText(str(gguf))  # pasted from another runner's settings
    assert not d.valid and "is a GGUF file" in d.model_status.text() and d.model_status.text().endswith("published.")


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


def _shape_dir(tmp_path, preset: str):
    """A folder the dialog accepts as a model of the given shape (config only; nothing is loaded)."""
    import json

    from engine.synth import PRESETS

    d = tmp_path / preset
    d.mkdir()
    (d / "config.json").write_text(json.dumps(PRESETS[preset].config_dict()))
    (d / "tokenizer.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"")
    return d


def test_dialog_shows_the_engines_plan_for_several_shapes_and_settings(qtbot, tmp_path):
    from engine.config import ModelConfig
    from engine.plan import fmt, plan_vram
    from engine.synth import PRESETS

    cases = [EngineSettings(), OPTIMIZED, EngineSettings(context=8192, kv_ring=0, scratch_slots=10),
             EngineSettings(vram_budget_gib=8.0, static_slots=100), EngineSettings(pool_gib=3.0, prompt_block=1024)]
    for preset in ("tiny", "20b-shape", "120b-shape"):
        d = _dialog(qtbot, _values(str(_shape_dir(tmp_path, preset))))
        cfg = ModelConfig.from_dict(PRESETS[preset].config_dict())
        for s in cases:
            d._load_engine(s)
            d._revalidate()
            plan = plan_vram(cfg, s)  # what engine/gpu/backend.py allocates
            text = d.estimate_label.text()
            assert d.last_estimate.vram == plan, (preset, s)
            assert f"{plan.n_slots} expert slots ({plan.n_static} static" in text, (preset, text)
            assert f"VRAM {fmt(plan.total)} = core {fmt(plan.dense)} + K/V {fmt(plan.kv)}" in text
            assert f"pool {fmt(plan.pool)}" in text and f"prompt workspace {fmt(plan.workspace)}" in text
        if preset == "120b-shape":
            d.restore_defaults()
            default = plan_vram(cfg, EngineSettings())  # 548 slots, 520 where the lookahead's 28 are planned
            assert f"{default.n_slots} expert slots ({default.n_static} static" in d.estimate_label.text()


def test_refusals_explain_out_of_range_and_machine_limits(qtbot, tmp_path, tiny_model):
    from engine.plan import GIB, Machine

    m = Machine(logical_cores=2, ram_bytes=24 * GIB, vram_bytes=12 * GIB)
    d = PreferencesDialog(_values(str(tiny_model)), lambda cfg, s: estimate(cfg, s, True, m))
    qtbot.addWidget(d)
    assert d.valid, d.errors
    d.fields["cpu_threads"].setValue(64)
    assert not d.valid and "CPU threads: 64 is more than this machine's 2 cores." in d.error_label.text()
    d.fields["cpu_threads"].setValue(2)
    d.fields["ram_budget_gib"].setValue(500)
    assert not d.valid and "RAM budget: 500 GiB is more than this machine's 24.0 GiB" in d.error_label.text()
    d.fields["ram_budget_gib"].setValue(0)
    d.fields["vram_budget_gib"].lineEdit().setText("99999")  # typed: refused with the range, not clipped
    assert not d.valid and "VRAM budget (GiB): '99999' is outside 0.5 … 1024." in d.error_label.text()
    d.fields["vram_budget_gib"].setValue(16)
    assert not d.valid and "more than the card's 12.0 GiB" in d.error_label.text()
    d.fields["vram_budget_gib"].setValue(12)
    d.fields["context"].lineEdit().setText("1")
    assert not d.valid and "Context length (tokens): '1' is outside 16 … 131072." in d.error_label.text()
    d.fields["context"].setValue(4096)
    d.fields["cpu_threads"].setValue(2)
    d.restore_defaults()  # every engine field, not only the GPU ones
    assert d.engine_settings() == EngineSettings() and d.valid
    assert "--" not in d.preset.itemText(d.preset.findData("optimized"))  # no command-line flags in the GUI


@pytest.mark.parametrize("size", [(900, 600), (1100, 900)])
def test_wrapped_text_gets_the_height_it_needs(qtbot, tiny_model, size):
    """At the dialog's minimum size (and a screen that caps it there), every wrapped label of the engine tab gets the
    height its text needs; the page scrolls instead of squeezing the estimate to its middle lines. In a taller dialog
    no label gets more (rows added with "" as their label had heights for a narrower width: gaps around the text)."""
    from ui.qt import QApplication, QLabel

    why = ("No expert store yet: the CPU reads experts from the checkpoint (works, slower). Building one writes "
           "0.01 GiB into the app's data folder (/home/someone/.local/share/Neural/expert-stores), once.")
    d = PreferencesDialog(_values(str(tiny_model)), lambda cfg, s: estimate(cfg, s, True),
                          store_status=lambda _p: (False, why))
    qtbot.addWidget(d)
    d.resize(*size)
    d.show()
    qtbot.waitExposed(d)
    QApplication.processEvents()
    labels = [w for w in (d.estimate_label, d.model_status, d.store_label) if w.isVisible()]
    assert d.estimate_label in labels and d.model_status in labels and d.store_label in labels
    for w in labels:  # the height its text needs at its width: not less (clipped), not more (a gap around it)
        assert isinstance(w, QLabel) and w.wordWrap()
        assert w.height() == w.heightForWidth(w.width()), (w.text()[:40], w.height(), w.heightForWidth(w.width()))


def test_a_refusal_is_in_view_at_the_minimum_size(qtbot, tiny_model):
    """A refused field disables OK; the reason shows above the buttons, not at the foot of the scrolled engine page."""
    d = _dialog(qtbot, _values(str(tiny_model)))
    d.resize(900, 600)
    d.show()
    qtbot.waitExposed(d)
    assert not d.error_label.isVisible()
    d.fields["cpu_threads"].setValue(512)
    assert not d.valid and "CPU threads" in d.error_label.text()
    assert d.error_label.isVisible()
    top = d.error_label.mapTo(d, d.error_label.rect().topLeft()).y()
    assert top >= 0 and top + d.error_label.height() <= d.buttons.mapTo(d, d.buttons.rect().topLeft()).y()
