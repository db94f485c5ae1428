"""Where models come from: a folder the user names, the configured one, or the bundled demo."""

from __future__ import annotations

from pathlib import Path

import resources

DEMO_DIR = Path(resources.__file__).resolve().parent / "demo-model"  # the package's folder, in a checkout or a bundle
DEMO_PRESET = "demo"
DEMO_SEED = 20261129


def demo_model_dir() -> Path:
    """The bundled demo model: a small gpt-oss trained by `neural train-demo` (docs/demo-model.md).
    Should the folder be missing (a stripped checkout), a random-weight synthetic checkpoint of the
    same kind is written instead and labelled as such."""
    if not (DEMO_DIR / "config.json").is_file():
        from engine.synth import PRESETS, write_synthetic_checkpoint

        write_synthetic_checkpoint(DEMO_DIR, PRESETS[DEMO_PRESET], seed=DEMO_SEED, skew=1.0)
    return DEMO_DIR


def resolve_model_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg).expanduser()
    configured = configured_model_dir()
    return configured if configured is not None else demo_model_dir()


def configured_model_dir() -> Path | None:
    """The model folder chosen in the desktop app's Preferences, if any (shared by the CLI)."""
    try:
        from app.core.paths import AppPaths
        from app.core.settings import load_settings

        chosen = load_settings(AppPaths.default().settings_file).model_dir
    except Exception:  # unreadable settings never stop a command: fall back to the demo
        return None
    return Path(chosen) if chosen else None
