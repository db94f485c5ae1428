"""The expert store behind the preferences' "Build expert store" button and the first-run flow.

Without a store the CPU kernel reads experts straight from the checkpoint's safetensors (it
works); the store repacks them into one aligned record per expert, which reads faster. The
build runs on a worker thread and reports progress; the engine picks the store up on its next
load.

The app writes its stores into its own data folder (``AppPaths.stores_dir``), one sub-folder per
checkpoint fingerprint, and only reads the model folder: a model installed where the user may not
write (a shared or read-only location) still gets a store, and a moved or copied model finds its
store again. A store next to the model (older builds of the app, ``neural build-store``) is
still found and used.
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


def app_store_path(stores_dir: str | Path, fingerprint: str, fmt: str = STORE_FORMAT) -> Path:
    """Where the app keeps the store of the checkpoint with ``fingerprint`` (Checkpoint.fingerprint)."""
    from engine.store.reader import STORE_NAMES

    if not fingerprint or not fingerprint.isalnum():
        raise ValueError(f"not a checkpoint fingerprint: {fingerprint!r}")
    return Path(stores_dir) / fingerprint / STORE_NAMES[fmt]


def _fingerprint(model_dir: str | Path) -> str | None:
    """The checkpoint's fingerprint (reads a few MB), or None when the folder holds no checkpoint."""
    from engine.checkpoint import Checkpoint, CheckpointError

    try:
        ck = Checkpoint.open(model_dir)
    except (CheckpointError, ConfigError, OSError):
        return None
    try:
        return ck.fingerprint()
    finally:
        ck.close()


def _stores(stores_dir: str | Path | None) -> Path:
    """The folder given, else the app's (AppPaths.default(): follows NEURAL_HOME / --home)."""
    if stores_dir is not None:
        return Path(stores_dir)
    from .paths import AppPaths

    return AppPaths.default().stores_dir


def find_expert_store(model_dir: str | Path, stores_dir: str | Path | None = None) -> Path | None:
    """The store the engine should read for ``model_dir``: the app's own first, then one next to
    the model; None when there is none (or no checkpoint: the load then says what is wrong)."""
    from engine.store.reader import find_store

    fp = _fingerprint(model_dir)
    if fp is None:
        return None
    for fmt in ("packed", "raw"):  # packed preferred: smaller, reads faster
        p = app_store_path(_stores(stores_dir), fp, fmt)
        if p.is_file():
            return p
    return find_store(model_dir)


def store_status(model_dir: str | Path, stores_dir: str | Path | None = None) -> tuple[bool, str]:
    """(store present, one line for the preferences dialog)."""
    try:
        cfg = ModelConfig.load(model_dir)
    except ConfigError:
        return False, ""
    found = find_expert_store(model_dir, stores_dir)
    if found is not None:
        return True, f"Expert store: {found} ({found.stat().st_size / 2**30:.2f} GiB), used by the CPU kernel."
    size = store_size_bytes(cfg)
    return False, (f"No expert store yet: the CPU reads experts from the checkpoint (works, slower). "
                   f"Building one writes {size / 2**30:.2f} GiB into the app's data folder ({_stores(stores_dir)}), "
                   "once.")


def build_expert_store(model_dir: str | Path, progress: Callable[[int, int], None] | None = None,
                       stores_dir: str | Path | None = None) -> Path:
    """Build the store of ``model_dir``'s checkpoint under ``stores_dir`` (the model folder is
    only read); the writer renames it into place when complete, so an interrupted build leaves
    no store that looks whole."""
    from engine.checkpoint import Checkpoint
    from engine.store.writer import build_store

    ck = Checkpoint.open(model_dir)
    try:
        out = app_store_path(_stores(stores_dir), ck.fingerprint())
        out.parent.mkdir(parents=True, exist_ok=True)
        summary = build_store(ck, out, STORE_FORMAT, progress=progress)
    finally:
        ck.close()
    return Path(summary.path)
