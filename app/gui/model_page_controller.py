"""Drives the "Get a model" page (ui/get_model_page.py): the hub check, the download, the expert
store, the model list. The blocking work runs on the app's one background helper
(app/gui/tasks.BackgroundTask), reporting by signal; the page only ever sees plain values.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.expert_store import build_expert_store, find_expert_store, store_size_bytes, store_status
from app.core.model_catalog import GPT_OSS, add_folder, download_dir, installed_models, remove_model
from app.core.model_download import check_disk_space, download, free_bytes, present_bytes
from app.core.model_fit import judge_fit
from app.core.model_hub import DownloadCancelled, DownloadError, list_repo
from app.core.model_progress import DownloadProgress, progress_text
from app.core.paths import AppPaths
from app.gui.tasks import BackgroundTask
from engine.config import ConfigError, ModelConfig
from engine.plan import fmt
from engine.settings import EngineSettings
from ui.get_model_page import Choice, GetModelPage, ModelRow
from ui.qt import QMessageBox, QObject, QWidget, Signal, is_alive

log = logging.getLogger(__name__)


class ModelPageController(QObject):
    modelChosen = Signal(str)  # "Use this model": the folder
    storeBuilt = Signal(str)  # a store was written for this folder

    def __init__(self, paths: AppPaths, settings: Callable[[], EngineSettings],
                 parent_widget: QWidget | None = None, endpoint: str | None = None,
                 machine: Callable[[], tuple[bool, Any, int | None]] | None = None,
                 confirm: Callable[[str], bool] | None = None) -> None:
        """``endpoint``: the hub (None = huggingface.co, or HF_ENDPOINT); ``machine()``: (GPU present,
        engine.plan.Machine, RAM available) as ``neural doctor`` probes them; ``confirm(question)``
        asks before deleting (a message box by default)."""
        super().__init__(None)
        self.data_dir = paths.data_dir  # downloads go to <data>/models
        self.stores_dir = paths.stores_dir  # the expert stores the app builds
        self.settings = settings
        self.endpoint = endpoint
        self._machine = machine or probe_machine
        self._confirm = confirm
        self.page = GetModelPage([Choice(c.repo_id, c.title, c.blurb, f"≈ {fmt(c.approx_bytes)}") for c in GPT_OSS],
                                 parent_widget)
        p = self.page
        p.checkRequested.connect(self.check)
        p.downloadRequested.connect(self.start_download)
        p.cancelRequested.connect(self.cancel)
        p.addFolderRequested.connect(self.add_folder)
        p.useRequested.connect(self.modelChosen.emit)
        p.buildStoreRequested.connect(self.build_store)
        p.removeRequested.connect(self.remove)
        # the download or store build in progress; None once its outcome has reached this thread (its worker may
        # still be finishing its bookkeeping, but the work has returned: the next click must not be ignored)
        self.task: BackgroundTask | None = None
        self._cancel = threading.Event()
        self._fraction = 0.0  # of the download in progress
        self.refresh()

    # ---- the model list ---------------------------------------------------------------------
    def refresh(self) -> None:
        rows = []
        stores = self.stores_dir
        for m in installed_models(self.data_dir, lambda p: store_status(p, stores)):
            detail = f"{fmt(m.size_bytes)} on disk · {m.store or 'ready'}"
            rows.append(ModelRow(m.name, str(m.path), detail, m.complete and bool(m.store) and
                                 not m.store.startswith("Not a usable"), m.store_present,
                                 "Delete…" if m.source == "download" else "Forget",
                                 (m.repo_id or "") if m.source == "download" and not m.complete else ""))
        self.page.set_models(rows)

    def add_folder(self, folder: str) -> None:
        try:
            path = add_folder(self.data_dir, folder)
        except ConfigError as exc:
            self.page.set_message(f"That folder cannot be used: {exc}", error=True)
            return
        self.refresh()
        self.page.select_model(str(path))
        self.page.set_message(f"Added {path}.")

    def remove(self, path: str) -> None:
        downloaded = Path(path).parent.resolve() == (self.data_dir / "models").resolve()
        if downloaded and not self._ask(f"Delete {path} and everything in it?"):
            return
        try:
            store = find_expert_store(path, self.stores_dir) if downloaded else None  # the app's store goes too
            self.page.set_message(remove_model(self.data_dir, path, store))
        except (OSError, ValueError) as exc:
            self.page.set_message(f"Could not remove it: {exc}", error=True)
        self.refresh()

    def _ask(self, question: str) -> bool:
        if self._confirm is not None:
            return self._confirm(question)
        answer = QMessageBox.question(self.page, "Remove model", question)
        return answer == QMessageBox.StandardButton.Yes

    # ---- the hub check ----------------------------------------------------------------------
    def check(self, repo_id: str) -> BackgroundTask:
        """Size and fit of ``repo_id``: the hub listing and its config.json (fetched to a temporary
        folder), judged against this machine."""
        endpoint, settings, data_dir = self.endpoint, self.settings(), self.data_dir

        def work(_report: Callable[[Any], None]) -> tuple[str, list[tuple[str, str, str]]]:
            listing = list_repo(repo_id, endpoint=endpoint)
            dest = download_dir(data_dir, repo_id)
            with tempfile.TemporaryDirectory() as tmp:
                download(listing, tmp, endpoint=endpoint, only=["config.json"])
                cfg = runnable_config(repo_id, tmp)
            gpu, machine, ram_available = self._machine()
            remaining = listing.total_bytes - present_bytes(listing, dest)
            store = store_size_bytes(cfg)
            lines = judge_fit(cfg, settings, gpu, machine, ram_available, remaining, store, free_bytes(dest))
            size = f"{fmt(listing.total_bytes)} to download ({len(listing.files)} files)"
            if remaining < listing.total_bytes:
                size += f", {fmt(listing.total_bytes - remaining)} already here"
            return size, [(ln.area, ln.status, ln.text) for ln in lines]

        task = BackgroundTask(work, f"check-{repo_id}")
        task.succeeded.connect(lambda r: self._checked(repo_id, r))
        task.failed.connect(lambda msg, _tb: self._check_failed(repo_id, msg))
        return task.start()

    def _checked(self, repo_id: str, result: tuple[str, list[tuple[str, str, str]]]) -> None:
        if self._page_alive():
            self.page.set_check(repo_id, result[0], result[1])

    def _check_failed(self, repo_id: str, message: str) -> None:
        if self._page_alive():
            self.page.set_check_error(repo_id, _plain(message))

    def _page_alive(self) -> bool:
        """Whether the page still exists: a background task's outcome can arrive after its window was closed and
        deleted, and then has nowhere to go (the controller's own state is still settled)."""
        return is_alive(self.page)

    # ---- download, then the store -----------------------------------------------------------
    def start_download(self, repo_id: str) -> BackgroundTask | None:
        if self.task is not None and self.task.running:
            return None
        self._cancel = threading.Event()
        self._fraction = 0.0
        cancel, endpoint, data_dir, stores = self._cancel, self.endpoint, self.data_dir, self.stores_dir

        def work(report: Callable[[Any], None]) -> str:
            listing = list_repo(repo_id, endpoint=endpoint)
            dest = download_dir(data_dir, repo_id)
            check_disk_space(listing, dest)  # before anything is written; the store is counted below
            download(listing, dest, endpoint=endpoint, cancel=cancel, only=["config.json"])
            store = store_size_bytes(runnable_config(repo_id, dest))
            download(listing, dest, endpoint=endpoint, cancel=cancel, progress=report, extra_bytes=store)
            if find_expert_store(dest, stores) is None:  # a repeated download of a complete model has one
                report(("store", 0, 1))
                build_expert_store(dest, lambda d, t: report(("store", d, t)), stores)
            return str(dest)

        self.page.set_busy(True)
        self.page.set_message(f"Downloading {repo_id}…")
        task = BackgroundTask(work, f"download-{repo_id}")
        task.progress.connect(self._progress)
        task.succeeded.connect(lambda path: self._finished(repo_id, path))
        task.failed.connect(lambda msg, _tb: self._failed(repo_id, msg))
        self.task = task
        return task.start()

    def cancel(self) -> None:
        self._cancel.set()
        self.page.set_progress("Cancelling…", None)

    def _progress(self, p: object) -> None:
        if not self._page_alive():
            return
        if isinstance(p, DownloadProgress):
            if p.phase == "download":  # the bar shows the whole model; a file's hash check only the text
                self._fraction = p.done / p.total if p.total else 0.0
            self.page.set_progress(progress_text(p), self._fraction)
        elif isinstance(p, tuple) and p[0] == "store":
            _, done, total = p
            self.page.set_cancellable(False)
            self.page.set_progress(f"Building the expert store: {done} of {total} experts", done / total if total
                                   else None)

    def _settle(self) -> bool:
        """The task's outcome has arrived: the next click starts another. False when the page is gone."""
        self.task = None
        if not self._page_alive():
            return False
        self.page.set_busy(False)
        return True

    def _finished(self, repo_id: str, path: str) -> None:
        if self._settle():
            self.page.set_progress("", 1.0)
            self.refresh()
            self.page.select_model(path)
            self.page.set_message(f"{repo_id} is downloaded, verified and its expert store built: {path}. "
                                  "Use it with “Use this model”.")
        self.storeBuilt.emit(path)

    def _failed(self, repo_id: str, message: str) -> None:
        if not self._settle():
            return
        self.refresh()
        cancelled = message.startswith(DownloadCancelled.__name__)
        self.page.set_progress("Cancelled: downloading again resumes where it stopped." if cancelled else "", 0.0)
        self.page.set_message(f"{repo_id}: {_plain(message)}", error=not cancelled)

    def build_store(self, path: str) -> BackgroundTask | None:
        if self.task is not None and self.task.running:
            return None
        self.page.set_busy(True)
        stores = self.stores_dir
        task = BackgroundTask(lambda report: str(build_expert_store(path, lambda d, t: report(("store", d, t)),
                                                                    stores)),
                              "build-store")
        task.progress.connect(self._progress)

        def done(store: object) -> None:
            if self._settle():
                self.refresh()
                self.page.set_message(f"Expert store written: {store}")
            self.storeBuilt.emit(path)

        def failed(msg: str, _tb: str) -> None:
            if self._settle():
                self.page.set_message(f"Building the store failed: {_plain(msg)}", error=True)

        task.succeeded.connect(done)
        task.failed.connect(failed)
        self.task = task
        return task.start()


def runnable_config(repo_id: str, folder: str | Path) -> ModelConfig:
    """The repo's config.json, refused unless the engine can run it (gpt-oss shapes, MXFP4 experts)."""
    try:
        cfg = ModelConfig.load(folder)
    except ConfigError as exc:
        raise DownloadError(f"{repo_id} is not a gpt-oss checkpoint this app can run: {exc}") from exc
    if cfg.quant_method != "mxfp4":
        raise DownloadError(f"{repo_id} stores its experts as {cfg.quant_method!r}; this app runs the MXFP4 "
                            f"gpt-oss checkpoints (e.g. openai/gpt-oss-20b)")
    return cfg


def _plain(message: str) -> str:
    """The task's "Type: message" without the type of our own errors (their text says it all)."""
    for name in ("DownloadError", "DownloadCancelled", "NotEnoughDiskSpace", "VerificationError"):
        if message.startswith(name + ": "):
            return message[len(name) + 2:]
    return message


def probe_machine() -> tuple[bool, Any, int | None]:
    """What ``neural doctor`` sees: a usable GPU, the machine's limits, the RAM available now."""
    from app.doctor.probes import probe_memory, this_machine

    gpu, machine = this_machine()
    mem = probe_memory()
    return gpu, machine, (mem.available_bytes or None)
