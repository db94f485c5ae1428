"""The demo model for first runs: the bundled one, or a copy written into the data dir.

A bundled install may be read-only, so when ``resources/demo-model`` is missing the same
synthetic checkpoint (preset and seed from app.core.models) is written under the user data dir.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.core import models


def bundled_demo_dir() -> Path | None:
    d = models.DEMO_DIR
    return d if (d / "config.json").is_file() else None


def ensure_demo_model(data_dir: Path, progress: Callable[[str, float], None] | None = None) -> Path:
    """A folder holding the demo checkpoint; may write ~15 MB (run it on a worker thread)."""
    bundled = bundled_demo_dir()
    if bundled is not None:
        return bundled
    out = data_dir / "demo-model"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    from engine.synth import PRESETS, write_synthetic_checkpoint

    def tick(done: int, total: int) -> None:
        if progress is not None and total:
            progress("Writing the demo model", done / total)

    write_synthetic_checkpoint(out, PRESETS[models.DEMO_PRESET], seed=models.DEMO_SEED, skew=1.0, progress=tick)
    return out


def is_demo(model_dir: str | Path) -> bool:
    p = Path(model_dir).resolve()
    bundled = bundled_demo_dir()
    return (bundled is not None and p == bundled.resolve()) or p.name == "demo-model"
