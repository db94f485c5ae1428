"""The CLI and API use the model chosen in the desktop app, else the bundled demo."""

from __future__ import annotations

from app.core.models import DEMO_DIR, resolve_model_dir
from app.core.paths import AppPaths
from app.core.settings import GuiSettings, save_settings


def test_explicit_folder_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))
    assert resolve_model_dir(str(tmp_path / "m")) == tmp_path / "m"


def test_configured_model_then_demo(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))
    assert resolve_model_dir(None) == DEMO_DIR
    paths = AppPaths.default().ensure()
    save_settings(paths.settings_file, GuiSettings(model_dir=str(tmp_path / "gpt-oss-120b")))
    assert resolve_model_dir(None) == tmp_path / "gpt-oss-120b"


def test_the_demo_is_the_shipped_trained_model_not_a_fallback() -> None:
    # the trained demo carries DEMO.json; a random fallback would carry SYNTHETIC.json
    from app.core.models import DEMO_DIR

    assert (DEMO_DIR / "DEMO.json").is_file() and DEMO_DIR.parent.name == "resources", DEMO_DIR
