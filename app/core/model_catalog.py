"""The models this app knows: the gpt-oss pair it offers, the ones downloaded, the folders added.

Downloads live in ``<data>/models/<owner>--<name>``, each with the manifest the downloader keeps
(app/core/model_download.py). Folders the user added elsewhere are remembered in
``<data>/models/folders.json`` and never deleted by "Remove": only forgotten.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.model_download import MANIFEST, PART_DIR, read_manifest
from app.core.model_hub import folder_name
from engine.config import ConfigError, ModelConfig

FOLDERS_FILE = "folders.json"


@dataclass(frozen=True)
class CatalogEntry:
    repo_id: str
    title: str
    blurb: str
    approx_bytes: int  # published size of the files the engine reads; the hub's listing is checked first


GPT_OSS = (
    CatalogEntry("openai/gpt-oss-20b", "gpt-oss-20b", "21B parameters, 3.6B active per token: the smaller one.",
                 13_800_000_000),
    CatalogEntry("openai/gpt-oss-120b", "gpt-oss-120b", "117B parameters, 5.1B active per token: the model this app is "
                 "built for (GPU + RAM).", 65_300_000_000),
)


@dataclass(frozen=True)
class InstalledModel:
    name: str
    path: Path
    source: str  # "download" (ours to delete) or "folder" (the user's, only forgotten)
    repo_id: str | None
    size_bytes: int  # bytes on disk (weights, configs, the store)
    complete: bool  # all files fetched and verified (always True for an added folder that parses)
    store: str  # the expert store's state in one line
    store_present: bool


def models_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "models"


def download_dir(data_dir: str | Path, repo_id: str) -> Path:
    return models_dir(data_dir) / folder_name(repo_id)


def _folders(root: Path) -> list[str]:
    try:
        data = json.loads((root / FOLDERS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(p) for p in data if isinstance(p, str)] if isinstance(data, list) else []


def _save_folders(root: Path, folders: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / FOLDERS_FILE).write_text(json.dumps(folders, indent=1), encoding="utf-8")


def add_folder(data_dir: str | Path, folder: str | Path) -> Path:
    """Remember a local model folder; refuses one that is not a gpt-oss checkpoint (ConfigError)."""
    path = Path(folder).expanduser().resolve()
    ModelConfig.load(path)  # names the file and the key when it is not a model folder
    root = models_dir(data_dir)
    folders = _folders(root)
    if str(path) not in folders and path.parent != root.resolve():
        _save_folders(root, [*folders, str(path)])
    return path


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and PART_DIR not in p.parts)


def installed_models(data_dir: str | Path,
                     store_status: Callable[[Path], tuple[bool, str]] | None = None) -> list[InstalledModel]:
    """Downloads (complete or not) and added folders. ``store_status``: the expert store's state
    (app.core.expert_store.store_status); omitted, the store column is left empty."""
    root = models_dir(data_dir)
    out: list[InstalledModel] = []
    found = sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else []
    for p in found:
        m = read_manifest(p)
        repo = m.get("repo_id")
        out.append(_describe(p, "download", repo if isinstance(repo, str) else None, bool(m.get("complete")),
                             store_status))
    for f in _folders(root):
        p = Path(f)
        out.append(_describe(p, "folder", None, p.is_dir(), store_status))
    return out


def _describe(path: Path, source: str, repo_id: str | None, complete: bool,
              store_status: Callable[[Path], tuple[bool, str]] | None) -> InstalledModel:
    exists = path.is_dir()
    present, store = False, ""
    if not exists:
        store = "The folder is gone."
    elif not complete:
        store = "Download not finished: Download again resumes it."
    elif store_status is not None:
        try:
            ModelConfig.load(path)
        except ConfigError as exc:
            store = f"Not a usable model folder: {exc}"
        else:
            present, store = store_status(path)
    name = repo_id or path.name
    return InstalledModel(name, path, source, repo_id, folder_bytes(path) if exists else 0, complete and exists,
                          store, present)


def remove_model(data_dir: str | Path, path: str | Path, store: Path | None = None) -> str:
    """Delete a download (its folder under the models folder, and ``store``, its expert store, when
    that lies in the app's data folder), or forget an added folder; returns what was done, for the
    status line."""
    root = models_dir(data_dir).resolve()
    target = Path(path).resolve()
    folders = _folders(root)
    if str(target) in folders:
        _save_folders(root, [f for f in folders if f != str(target)])
        return f"Forgot {target} (the folder itself is left as it was)."
    if target.parent != root or not (target / MANIFEST).is_file():
        raise ValueError(f"{target} is not a model this app downloaded into {root}; it is not deleted")
    shutil.rmtree(target)
    done = f"Deleted {target}"
    if store is not None and store.is_file() and Path(data_dir).resolve() in store.resolve().parents:
        store.unlink()
        with contextlib.suppress(OSError):
            store.parent.rmdir()  # the checkpoint's store folder, when nothing else is in it
        done += f" and its expert store {store}"
    return done + "."
