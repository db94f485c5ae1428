"""The expert store behind the preferences' "Build expert store" button and the first-run flow.

Without a store the CPU kernel reads experts straight from the checkpoint's safetensors (it
works); the store repacks them into one aligned record per expert, which reads faster. The
build runs on a worker thread and reports progress; the engine picks the store up on its next
load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.config import ConfigError, ModelConfig

STORE_FORMAT = "packed"  # lossless and about 3 % smaller than raw


def store_size_bytes(cfg: ModelConfig, fmt: str = STORE_FORMAT) -> int:
    from engine.store.format import RecordLayout

    rec = RecordLayout.build(cfg.hidden_size, cfg.intermediate_size, fmt).fixed_bytes
    return rec * cfg.num_hidden_layers * cfg.num_local_experts


def store_status(model_dir: str | Path) -> tuple[bool, str]:
    """(store present, one line for the preferences dialog)."""
    from engine.store.reader import find_store

    try:
        cfg = ModelConfig.load(model_dir)
    except ConfigError:
        return False, ""
    found = find_store(model_dir)
    if found is not None:
        return True, f"Expert store: {found.name} ({found.stat().st_size / 2**30:.2f} GiB), used by the CPU kernel."
    size = store_size_bytes(cfg)
    return False, (f"No expert store yet: the CPU reads experts from the checkpoint (works, slower). "
                   f"Building one writes {size / 2**30:.2f} GiB next to the model, once.")


def build_expert_store(model_dir: str | Path, progress: Callable[[int, int], None] | None = None) -> Path:
    from engine.checkpoint import Checkpoint
    from engine.store.reader import default_store_path
    from engine.store.writer import build_store

    ck = Checkpoint.open(model_dir)
    try:
        summary = build_store(ck, default_store_path(ck.model_dir, STORE_FORMAT), STORE_FORMAT, progress=progress)
    finally:
        ck.close()
    return Path(summary.path)
