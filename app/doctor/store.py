"""The doctor's expert-store check: is there a store (the app's, in its data folder, or one beside
the checkpoint), does it match, and if it has to be built, is there room on the disk for it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from engine.config import ModelConfig

if TYPE_CHECKING:
    from .check import Check

GIB = 1024**3


LABEL_FILES = ("SYNTHETIC.json", "DEMO.json")  # written by neural synth / the demo-model recipe


def model_label(model_dir: Path) -> str | None:
    """The note of a synthetic or demo checkpoint (e.g. "random weights ..."); None for a real model."""
    for name in LABEL_FILES:
        p = model_dir / name
        if p.is_file():
            try:
                return str(json.loads(p.read_text(encoding="utf-8"))["note"])
            except (OSError, ValueError, KeyError, TypeError):
                return "synthetic checkpoint" if name == "SYNTHETIC.json" else "demo model"
    return None


def store_file_bytes(model_dir: Path) -> int | None:
    try:
        from app.core.expert_store import find_expert_store
    except ImportError:
        return None
    path = find_expert_store(model_dir)
    return path.stat().st_size if path is not None else None


def store_bytes_estimate(cfg: ModelConfig) -> int:
    """Raw-format store size: every expert's record (the packed format is ~3% smaller)."""
    return cfg.num_hidden_layers * cfg.num_local_experts * cfg.expert_bytes()


def check_store(model_dir: Path, cfg: ModelConfig) -> list[Check]:
    from engine.checkpoint import Checkpoint

    from .check import Check

    try:
        from app.core.expert_store import find_expert_store
        from app.core.paths import AppPaths
        from engine.store.format import StoreError
        from engine.store.reader import ExpertStore
    except ImportError as exc:
        return [Check("Expert store", "info", f"this build has no expert store support ({exc}); experts are read "
                      "from the checkpoint")]
    small_demo = model_label(model_dir) is not None
    path = find_expert_store(model_dir)
    if path is None:
        need = store_bytes_estimate(cfg)
        where = AppPaths.default().stores_dir  # where the app builds it (the model folder is only read)
        try:
            free = shutil.disk_usage(next(p for p in (where, *where.parents) if p.exists())).free
        except OSError:
            free = -1
        room = "" if free < 0 else f"; {free / GIB:.1f} GiB free there"
        if small_demo:
            return [Check("Expert store", "info", "none beside this demo/synthetic model; its experts are read "
                          "from the checkpoint (fine at this size)")]
        if 0 <= free < need:
            return [Check("Expert store", "fail", f"not built; it needs ≈ {need / GIB:.1f} GiB in {where}{room}",
                          f"Free {((need - free) / GIB) + 1:.0f} GiB on that drive, then run "
                          f"`neural build-store \"{model_dir}\" --format packed` (or build it from Preferences).")]
        return [Check("Expert store", "warn", f"not built (≈ {need / GIB:.1f} GiB{room}): the CPU reads experts "
                      "from the checkpoint's scattered tensors, slower",
                      f"Run `neural build-store \"{model_dir}\" --format packed` (or build it from Preferences; "
                      "it takes a few minutes).")]
    try:
        store = ExpertStore.open(path)
    except StoreError as exc:
        return [Check("Expert store", "fail", str(exc), f"Delete {path.name} and rebuild it: "
                      f"`neural build-store \"{model_dir}\" --format packed`.")]
    try:
        ck = Checkpoint.open(model_dir)
        try:
            store.check_matches(ck)
        finally:
            ck.close()
    except StoreError as exc:
        return [Check("Expert store", "fail", str(exc), f"Rebuild it: `neural build-store \"{model_dir}\" "
                      "--format packed`.")]
    finally:
        size = path.stat().st_size
        fmt = store.fmt
        store.close()
    return [Check("Expert store", "ok", f"{path.name}: {fmt} format, {size / GIB:.2f} GiB, matches the checkpoint")]
