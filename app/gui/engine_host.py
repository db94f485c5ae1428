"""Owns the local engine for the GUI: loading with progress, one generation at a time, states.

Everything slow (Engine.load, Engine.generate, save/restore of conversation state) runs in a
:class:`~app.gui.tasks.BackgroundTask`; results come back by signal. The host also keeps each
conversation's K/V state on disk so a conversation resumes after a restart without
reprocessing its history.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.gui.tasks import BackgroundTask, Report
from engine.config import ConfigError
from engine.session import Engine
from engine.settings import EngineSettings, SettingsError
from engine.tokenizer import TokenizerError
from engine.types import CancelToken, Conversation, Done, GenerationParams, Telemetry, Usage
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


class GenerationRun(BackgroundTask):
    """A local generation; progress() carries StateNote and engine events, succeeded() the Done."""

    def __init__(self, work: Any, cancel: CancelToken) -> None:
        super().__init__(work, name="generate")
        self.cancel_token = cancel

    def cancel(self) -> None:
        self.cancel_token.cancel()


class LocalEngineHost(QObject):
    stateChanged = Signal(str, str)  # state, detail
    loadProgress = Signal(str, float)  # phase, fraction
    engineLoaded = Signal(object)  # Engine

    def __init__(self, states_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.states_dir = states_dir
        self.engine: Engine | None = None
        self.state = NO_MODEL
        self.detail = "No model loaded"
        self.fix = ""
        self._load_task: BackgroundTask | None = None
        self._run: GenerationRun | None = None
        # which conversation's tokens the engine holds, and the ids it held after our last turn
        self._owner: str | None = None
        self._owner_ids: list[int] = []
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

    # ---- loading --------------------------------------------------------------------------
    def load(self, model_dir: str | Path, settings: EngineSettings | None = None) -> BackgroundTask:
        """Replace the engine (cancelling a running generation first); progress by signal."""
        previous_run = self._run
        if previous_run is not None:
            previous_run.cancel()
        old = self.engine
        self.engine = None
        self._owner, self._owner_ids = None, []
        self._set_state(LOADING, f"Loading {Path(model_dir).name}…")

        def work(report: Report) -> Engine:
            if previous_run is not None:
                previous_run.wait(60)
            if old is not None:
                old.close()
            return Engine.load(model_dir, settings, progress=lambda phase, frac: report((phase, frac)))

        task = BackgroundTask(work, name="load-engine", parent=self)
        task.progress.connect(lambda pf: self.loadProgress.emit(str(pf[0]), float(pf[1])))
        task.succeeded.connect(self._loaded)
        task.failed.connect(self._load_failed)
        self._load_task = task
        return task.start()

    def _loaded(self, engine: Engine) -> None:
        self.engine = engine
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
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self._set_state(NO_MODEL, "No model loaded")

    # ---- generation -----------------------------------------------------------------------
    def state_path(self, conversation_id: str) -> Path:
        return self.states_dir / f"{conversation_id}.kv"

    def forget_state(self, conversation_id: str) -> None:
        self.state_path(conversation_id).unlink(missing_ok=True)
        if self._owner == conversation_id:
            self._owner = None

    def generate(self, conversation_id: str, conv: Conversation, params: GenerationParams) -> GenerationRun:
        """Prepare a generation; it runs once the caller has connected to it and called ``start()``."""
        eng = self.engine
        if eng is None:
            raise RuntimeError("no model is loaded")
        if self.busy:
            raise RuntimeError("a generation is already running")
        cancel = CancelToken()
        path = self.state_path(conversation_id)
        kept = self._owner == conversation_id and eng.cached_ids == self._owner_ids

        def work(report: Report) -> Done:
            note = StateNote("kept")
            if not kept:
                if path.is_file():
                    ok = eng.restore_state(path)
                    note = StateNote("restored", len(eng.cached_ids)) if ok else StateNote("stale")
                elif len(conv.messages) > 1:
                    note = StateNote("missing")
                else:
                    note = StateNote("new")
            report(note)
            done: Done | None = None
            for ev in eng.generate(conv, params, cancel):
                if isinstance(ev, Done):
                    done = ev
                else:
                    report(ev)
            if done is None:  # the engine promises one Done; never leave the GUI waiting
                done = Done("error", Usage(), error="engine ended without a result")
            if done.finish_reason != "error":
                try:
                    eng.save_state(path)
                except Exception:  # the turn is still good; it only costs a reprocess next time
                    log.exception("saving conversation state failed")
            return done

        run = GenerationRun(work, cancel)
        run.succeeded.connect(lambda _d: self._generation_ended(conversation_id, eng))
        run.failed.connect(lambda m, _tb: self._generation_failed(m))
        self._run = run
        self._generating = True
        self._set_state(GENERATING, f"{eng.info.name} on {eng.telemetry().backend}")
        return run  # the caller connects its slots, then calls start(): no early event is lost

    def _generation_failed(self, message: str) -> None:
        self._generating = False
        self._owner = None  # unknown what the engine holds now
        self._set_state(ERROR, f"Generation failed: {message}", how_to_fix(message))

    def _generation_ended(self, conversation_id: str, eng: Engine) -> None:
        self._generating = False
        self._owner, self._owner_ids = conversation_id, eng.cached_ids
        if self.engine is eng:
            self._set_state(READY, self.describe(eng))

    def stop(self) -> None:
        if self._run is not None:
            self._run.cancel()

    def shutdown(self, timeout: float = 10.0) -> None:
        self.stop()
        if self._run is not None:
            self._run.wait(timeout)
        if self._load_task is not None:
            self._load_task.wait(timeout)
        if self.engine is not None:
            self.engine.close()
            self.engine = None
