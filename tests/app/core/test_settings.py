"""Settings persist atomically and survive damaged files."""

from __future__ import annotations

import json

from app.core.settings import GenerationDefaults, GuiSettings, load_settings, save_settings
from engine.settings import OPTIMIZED, EngineSettings


def test_roundtrip_and_engine_settings(tmp_path):
    p = tmp_path / "settings.json"
    s = GuiSettings(model_dir="/m", theme="dark")
    s.api.port, s.api.cors_origins = 9000, "http://a, http://b ,"
    s.set_engine_settings(OPTIMIZED)
    save_settings(p, s)
    t = load_settings(p)
    assert t.model_dir == "/m" and t.theme == "dark" and t.api.port == 9000
    assert t.api.origins() == ("http://a", "http://b")
    assert t.engine_settings() == OPTIMIZED
    assert set(t.engine) <= set(EngineSettings().to_dict())  # only differences are stored
    assert not list(tmp_path.glob("*.tmp"))


def test_damaged_or_wrong_values_fall_back(tmp_path):
    p = tmp_path / "settings.json"
    p.write_text("{not json")
    assert load_settings(p) == GuiSettings()
    p.write_text(json.dumps({"api": {"port": "x", "enabled": True}, "temperature": 1, "max_tokens": True,
                             "unknown": 1, "engine": {"context": 8}}))
    t = load_settings(p)
    assert t.api.port == 8080 and t.api.enabled is True
    # a settings file from before GenerationDefaults: its top-level fields move into it
    assert t.generation.temperature == 1.0 and isinstance(t.generation.temperature, float)
    assert t.generation.max_tokens == GenerationDefaults().max_tokens  # a bool is not an int here
    assert t.engine_settings() == EngineSettings()  # context=8 is invalid -> defaults
    assert load_settings(tmp_path / "missing.json") == GuiSettings()


def test_generation_defaults_roundtrip_validate_and_build_the_request(tmp_path):
    p = tmp_path / "settings.json"
    s = GuiSettings()
    s.generation = GenerationDefaults("high", 512, 0.3, 0.9, 42, "Be brief.")
    save_settings(p, s)
    g = load_settings(p).generation
    assert g == s.generation
    params = g.params()
    assert (params.max_tokens, params.temperature, params.top_p, params.seed) == (512, 0.3, 0.9, 42)
    assert GenerationDefaults(seed=-1).params().seed is None
    assert any("Top-p" in e for e in GenerationDefaults(top_p=0.0).errors())
    assert any("Temperature" in e for e in GenerationDefaults(temperature=3.0).errors())
    p.write_text(json.dumps({"generation": {"temperature": 9.0, "top_p": 0.5}}))
    assert load_settings(p).generation == GenerationDefaults()  # out of range: all defaults, logged
    assert GenerationDefaults.from_dict({"top_p": 0.5}, GenerationDefaults(seed=3)) == GenerationDefaults(seed=3,
                                                                                                           top_p=0.5)
