"""The app's expert stores live in its data folder, keyed by the checkpoint: a read-only model
folder still gets one (issue 21 point 10), and a store next to the model is still used."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.expert_store import app_store_path, build_expert_store, find_expert_store, store_status
from app.core.paths import AppPaths
from engine.checkpoint import Checkpoint

_READ_ONLY: list[Path] = []  # folders the audit hook below refuses writes into


def _refuse_writes(event: str, args: tuple) -> None:
    if not _READ_ONLY:
        return
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        targets = [path] if writes else []
    elif event in ("os.rename", "os.replace", "os.mkdir", "os.remove", "os.symlink"):
        targets = [a for a in args[:2] if isinstance(a, str | bytes | os.PathLike)]
    else:
        return
    for t in targets:
        p = Path(os.fsdecode(t)).resolve()
        if any(p == d or d in p.parents for d in _READ_ONLY):
            raise PermissionError(13, "Permission denied (read-only model folder)", str(p))


_hook_added: list[bool] = []


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` made read-only: chmod (what a non-root user meets), and, since root writes through
    any mode bits, an audit hook that refuses writes there to this process too."""
    if not _hook_added:
        sys.addaudithook(_refuse_writes)  # audit hooks cannot be removed: it idles while the list is empty
        _hook_added.append(True)
    modes = {p: p.stat().st_mode for p in [folder, *folder.iterdir()]}
    for p in modes:
        p.chmod(0o555 if p.is_dir() else 0o444)
    _READ_ONLY.append(folder.resolve())
    try:
        yield
    finally:
        _READ_ONLY.remove(folder.resolve())
        for p, m in modes.items():
            p.chmod(stat.S_IMODE(m))


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_the_read_only_guard_refuses_writes(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only(folder), pytest.raises(PermissionError):
        (folder / "x").write_bytes(b"1")
    (folder / "x").write_bytes(b"1")  # writable again afterwards


def test_build_into_the_data_folder_with_a_read_only_model(tmp_path, tiny_model):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    paths = AppPaths.under(tmp_path / "home")
    before = _listing(model)
    with read_only(model):
        assert store_status(model, paths.stores_dir)[0] is False
        seen: list[tuple[int, int]] = []
        built = build_expert_store(model, lambda d, t: seen.append((d, t)), stores_dir=paths.stores_dir)
        assert _listing(model) == before  # the model folder was only read
        ck = Checkpoint.open(model)
        try:
            assert built == app_store_path(paths.stores_dir, ck.fingerprint())
        finally:
            ck.close()
        assert built.is_file() and seen[-1][0] == seen[-1][1] > 0
        assert find_expert_store(model, paths.stores_dir) == built
        present, text = store_status(model, paths.stores_dir)
        assert present and str(built) in text

        from engine.session import Engine
        from engine.settings import EngineSettings

        engine = Engine.load(model, EngineSettings(backend="cpu", dtype="float32", cpu_threads=1, context=256),
                             store_path=find_expert_store(model, paths.stores_dir))
        try:
            if engine.telemetry().backend != "cpu-native":
                pytest.skip(f"the native CPU kernel is not available here: {engine.info.backend_note}")
            store = engine.backend.model.experts_fn.__self__.store  # type: ignore[attr-defined]
            assert store is not None and Path(store.path) == built  # the engine reads the app's store
        finally:
            engine.close()


def test_a_store_next_to_the_model_is_still_used(tmp_path, tiny_model):
    from engine.store.reader import default_store_path
    from engine.store.writer import build_store

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    stores = tmp_path / "home" / "stores"
    ck = Checkpoint.open(model)
    try:
        beside = build_store(ck, default_store_path(model, "packed"), "packed").path
    finally:
        ck.close()
    assert find_expert_store(model, stores) == beside and store_status(model, stores)[0]
    ours = build_expert_store(model, stores_dir=stores)
    assert ours != beside and find_expert_store(model, stores) == ours  # the app's own comes first


def test_the_stores_are_keyed_by_the_checkpoint(tmp_path, synth_dir):
    a, b = synth_dir("tiny", 0), synth_dir("tiny", 1)
    stores = tmp_path / "stores"
    built = build_expert_store(a, stores_dir=stores)
    assert find_expert_store(a, stores) == built
    assert find_expert_store(b, stores) is None  # same shapes, other weights: not this store
    assert find_expert_store(tmp_path / "not-a-model", stores) is None
    assert store_status(tmp_path / "not-a-model", stores) == (False, "")
    with pytest.raises(ValueError, match="fingerprint"):
        app_store_path(stores, "../escape")


def test_doctor_sees_the_store_in_the_app_folder(tmp_path, tiny_model, monkeypatch):
    from app.doctor.store import check_store, store_file_bytes
    from engine.config import ModelConfig

    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))  # AppPaths.default(): the app's folder here
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    built = build_expert_store(model)  # the default folder: the app's
    assert built.is_relative_to(AppPaths.default().stores_dir)
    [check] = check_store(model, ModelConfig.load(model))
    assert check.status == "ok" and "matches the checkpoint" in check.summary
    assert store_file_bytes(model) == built.stat().st_size
