"""Settings persist atomically and survive damaged files."""

from __future__ import annotations

import json

from app.core.settings import GuiSettings, load_settings, save_settings
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
    assert t.temperature == 1.0 and isinstance(t.temperature, float)
    assert t.max_tokens == GuiSettings().max_tokens  # a bool is not an int here
    assert t.engine_settings() == EngineSettings()  # context=8 is invalid -> defaults
    assert load_settings(tmp_path / "missing.json") == GuiSettings()
