"""The models list: downloads with their size and store state, added folders, removal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.core import model_catalog as cat
from app.core.model_download import MANIFEST
from engine.config import ConfigError


def fake_store_status(path: Path) -> tuple[bool, str]:
    return (path / "store").exists(), "store here" if (path / "store").exists() else "no store yet"


def make_download(data: Path, tiny_model: Path, repo: str, complete: bool) -> Path:
    dest = cat.download_dir(data, repo)
    shutil.copytree(tiny_model, dest)
    (dest / MANIFEST).write_text(json.dumps({"repo_id": repo, "complete": complete}))
    return dest


def test_downloads_and_folders_are_listed_with_size_and_state(tmp_path: Path, tiny_model: Path) -> None:
    data = tmp_path / "data"
    done = make_download(data, tiny_model, "openai/gpt-oss-20b", True)
    half = make_download(data, tiny_model, "openai/gpt-oss-120b", False)
    (done / "store").write_bytes(b"s" * 100)
    added = cat.add_folder(data, tiny_model)
    models = {m.path: m for m in cat.installed_models(data, fake_store_status)}
    assert set(models) == {done, half, added}
    assert models[done].name == "openai/gpt-oss-20b" and models[done].complete and models[done].store_present
    assert models[done].size_bytes == sum(p.stat().st_size for p in done.rglob("*") if p.is_file())
    assert not models[half].complete and "Download not finished" in models[half].store
    assert models[added].source == "folder" and models[added].store == "no store yet"


def test_a_folder_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(ConfigError, match=r"config\.json"):
        cat.add_folder(tmp_path / "data", tmp_path / "x")
    assert cat.installed_models(tmp_path / "data") == []


def test_remove_deletes_downloads_and_only_forgets_folders(tmp_path: Path, tiny_model: Path) -> None:
    data = tmp_path / "data"
    done = make_download(data, tiny_model, "openai/gpt-oss-20b", True)
    added = cat.add_folder(data, tiny_model)
    assert "left as it was" in cat.remove_model(data, added)
    assert (added / "config.json").is_file()
    store = data / "expert-stores" / "abc123" / "experts-packed.nstore"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"s")
    elsewhere = tmp_path / "elsewhere.nstore"
    elsewhere.write_bytes(b"s")
    assert cat.remove_model(data, done, store) == f"Deleted {done.resolve()} and its expert store {store}."
    assert not done.exists() and not store.parent.exists() and cat.installed_models(data) == []
    again = make_download(data, tiny_model, "openai/gpt-oss-20b", True)
    assert cat.remove_model(data, again, elsewhere) == f"Deleted {again.resolve()}."  # not the app's: kept
    assert elsewhere.is_file()
    with pytest.raises(ValueError, match="not a model this app downloaded"):
        cat.remove_model(data, tiny_model)
    assert (tiny_model / "config.json").is_file()
