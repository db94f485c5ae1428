"""Owns the local engine for the GUI: loading with progress, generations, conversation states.

Loading runs in a :class:`~app.gui.tasks.BackgroundTask`; generations go to the one engine
worker (app/core/engine_worker.py), which the local API shares, and come back by signal
(app/gui/worker_run.py). The worker keeps each conversation's K/V state on disk, so a
conversation resumes after a restart, or after an API client used the engine, without
reprocessing its history; the host shows when the engine answers an API request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.core.engine_worker import EngineWorker, state_file_name
from app.core.expert_store import find_expert_store
from app.gui.tasks import BackgroundTask, Report
from app.gui.worker_run import WorkerRun
from engine.config import ConfigError
from engine.session import Engine
from engine.settings import EngineSettings, SettingsError
from engine.tokenizer import TokenizerError
from engine.types import Conversation, Done, GenerationParams, Telemetry
from ui.qt import QObject, Signal

log = logging.getLogger(__name__)

# Engine host states, shown in the status bar.
NO_MODEL, LOADING, READY, GENERATING, ERROR = "no-model", "loading", "ready", "generating", "error"


@dataclass(frozen=True)
class StateNote:
    """Reported before generation starts: how the conversation's K/V state was obtained."""

    kind: str  # "kept" (engine already held it) | "restored" | "missing" | "stale" | "new"
    tokens: int = 0  # tokens restored

    def text(self) -> str:
        if self.kind == "restored":
            return f"Resumed from saved state: {self.tokens} tokens of history not reprocessed."
        if self.kind == "missing":
            return "No saved state for this conversation: its history is processed again."
        if self.kind == "stale":
            return "The saved state belongs to another model or settings: the history is processed again."
        return ""


def how_to_fix(exc_text: str, exc: BaseException | None = None) -> str:
    """A one-line remedy for a load or generation failure."""
    low = exc_text.lower()
    if isinstance(exc, ConfigError | FileNotFoundError) or "config.json" in low:
        return ("Open Preferences and choose a gpt-oss model folder (it holds config.json, tokenizer.json and "
                "the .safetensors files), or use the demo model.")
    if isinstance(exc, TokenizerError) or "tokenizer" in low:
        return "The folder's tokenizer.json is missing or not a gpt-oss tokenizer: download the model again."
    if isinstance(exc, SettingsError):
        return "Open Preferences and correct the setting named above."
    if "out of memory" in low or isinstance(exc, MemoryError):
        return "Lower the VRAM budget / pool size or the context length in Preferences, or close other programs."
    if "safetensors" in low or "checkpoint" in low or "tensor" in low:
        return "The checkpoint looks incomplete or damaged: check the download (all shards present) and retry."
    return "See the log file (Help ▸ Open log folder) for details; Preferences ▸ Apply retries the load."


class LocalEngineHost(QObject):
    stateChanged = Signal(str, str)  # state, detail
    loadProgress = Signal(str, float)  # phase, fraction
    engineLoaded = Signal(object)  # Engine
    queueChanged = Signal(str, int)  # who runs on the engine ("" idle, "gui", "api"), how many wait

    def __init__(self, states_dir: Path, stores_dir: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.states_dir = states_dir
        self.stores_dir = stores_dir  # the app's expert stores (app/core/expert_store.py)
        # the one owner of the engine for this window and the local API it serves
        self.worker = EngineWorker(None, states_dir).start()
        self.worker.add_listener(self._worker_changed)
        self.queueChanged.connect(self._show_queue)
        self.engine: Engine | None = None
        self.state = NO_MODEL
        self.detail = "No model loaded"
        self.fix = ""
        self._load_task: BackgroundTask | None = None
        self._run: WorkerRun | None = None
        self._generating = False

    # ---- state ----------------------------------------------------------------------------
    def _set_state(self, state: str, detail: str, fix: str = "") -> None:
        self.state, self.detail, self.fix = state, detail, fix
        self.stateChanged.emit(state, detail)

    def telemetry(self) -> Telemetry | None:
        eng = self.engine
        return eng.telemetry() if eng is not None else None

    @property
    def busy(self) -> bool:
        """A generation of ours is in flight (cleared when its result reached the GUI thread)."""
        return self._generating

    @property
    def engine_busy(self) -> bool:
        """The engine runs anything: ours, or a request of the local API (the same worker)."""
        return self.worker.busy or self.worker.waiting > 0

    def _worker_changed(self) -> None:  # any thread: hand over to the GUI thread by signal
        running = self.worker.running
        self.queueChanged.emit(running.source if running is not None else "", self.worker.waiting)

    def _show_queue(self, source: str, waiting: int) -> None:
        if self.engine is None or self._generating or self.state in (LOADING, ERROR):
            return
        if source == "api":
            more = f"; {waiting} waiting" if waiting else ""
            self._set_state(GENERATING, f"Answering a request from the local API{more}")
        elif not source and self.state == GENERATING:
            self._set_state(READY, self.describe(self.engine))

    # ---- loading --------------------------------------------------------------------------
    def load(self, model_dir: str | Path, settings: EngineSettings | None = None) -> BackgroundTask:
        """Replace the engine (cancelling a running generation first); progress by signal."""
        previous_run = self._run
        if previous_run is not None:
            previous_run.cancel()
        old = self.engine
        self.engine = None
        self._set_state(LOADING, f"Loading {Path(model_dir).name}…")

        worker = self.worker
        worker.set_engine(None)  # the API answers 503 until the new engine is in

        def work(report: Report) -> Engine:
            if previous_run is not None:
                previous_run.wait(60)
            running = worker.running
            if running is not None:  # an API request on the old engine
                running.cancel()
            if old is not None:
                old.close()
            store = find_expert_store(model_dir, self.stores_dir) if self.stores_dir is not None else None
            return Engine.load(model_dir, settings, progress=lambda phase, frac: report((phase, frac)),
                               store_path=store)

        task = BackgroundTask(work, name="load-engine", parent=self)
        task.progress.connect(lambda pf: self.loadProgress.emit(str(pf[0]), float(pf[1])))
        task.succeeded.connect(self._loaded)
        task.failed.connect(self._load_failed)
        self._load_task = task
        return task.start()

    def _loaded(self, engine: Engine) -> None:
        self.engine = engine
        self.worker.set_engine(engine)
        self._set_state(READY, self.describe(engine))
        self.engineLoaded.emit(engine)

    @staticmethod
    def describe(engine: Engine) -> str:
        note = f" — {engine.info.note}" if engine.info.note else ""
        return f"{engine.info.name} on {engine.telemetry().backend}{note}"

    def _load_failed(self, message: str, tb: str) -> None:
        log.error("engine load failed: %s\n%s", message, tb)
        self._set_state(ERROR, f"Could not load the model: {message}", how_to_fix(message))

    def unload(self) -> None:
        if self._run is not None:
            self._run.cancel()
            self._run.wait(30)
        self.worker.set_engine(None)
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self._set_state(NO_MODEL, "No model loaded")

    # ---- generation -----------------------------------------------------------------------
    def state_path(self, conversation_id: str) -> Path:
        return self.states_dir / state_file_name(conversation_id)

    def forget_state(self, conversation_id: str) -> None:
        self.worker.forget(conversation_id)

    def generate(self, conversation_id: str, conv: Conversation, params: GenerationParams) -> WorkerRun:
        """Prepare a generation; it joins the engine worker's line once the caller has connected to
        it and called ``start()``. The worker restores this conversation's K/V state if another
        conversation (or an API client) used the engine since, and saves it after the turn."""
        eng = self.engine
        if eng is None:
            raise RuntimeError("no model is loaded")
        if self.busy:
            raise RuntimeError("a generation is already running")

        def note(kind: str, tokens: int) -> StateNote:
            if kind == "missing" and len(conv.messages) <= 1:
                kind = "new"
            return StateNote(kind, tokens)

        run = WorkerRun(self.worker, lambda engine, cancel: eng.generate(conv, params, cancel), conversation_id,
                        note, parent=self)
        run.succeeded.connect(lambda d: self._generation_ended(conversation_id, eng, d))
        run.failed.connect(lambda m, _tb: self._generation_failed(m))
        self._run = run
        self._generating = True
        self._set_state(GENERATING, f"{eng.info.name} on {eng.telemetry().backend}")
        return run  # the caller connects its slots, then calls start(): no early event is lost

    def _generation_failed(self, message: str) -> None:
        self._generating = False
        self._set_state(ERROR, f"Generation failed: {message}", how_to_fix(message))

    def _generation_ended(self, conversation_id: str, eng: Engine, done: Done) -> None:
        self._generating = False
        if done.finish_reason == "error" and done.error:
            self._set_state(ERROR, f"Generation failed: {done.error}", how_to_fix(done.error))
            return
        if self.engine is eng:
            self._set_state(READY, self.describe(eng))

    def stop(self) -> None:
        if self._run is not None:
            self._run.cancel()

    def shutdown(self, timeout: float = 10.0, release: bool = True) -> None:
        """Cancel what runs; the worker ends its job (within a token) and saves that conversation's
        state. ``release=False`` when the process ends next: waiting for a load and closing the
        engine (its threads, mappings, GPU memory) is work the process's end does at once."""
        self.stop()
        if self._run is not None:
            self._run.wait(timeout)
        if release and self._load_task is not None:
            self._load_task.wait(timeout)
        self.worker.stop(timeout)
        if release and self.engine is not None:
            self.engine.close()
            self.engine = None
