"""A GUI generation on the one engine worker (app/core/engine_worker.py), reported by Qt signal.

It has the signals and methods of a :class:`~app.gui.tasks.BackgroundTask`, so the chat
controller connects to it the same way: ``progress`` carries the conversation's StateNote and the
engine's events, ``succeeded`` the Done. Emitted on the worker thread, the signals reach the GUI
thread as queued calls. The job waits its turn behind any API request already in the line.
"""

from __future__ import annotations

import threading
from typing import Any

from app.core.engine_worker import EngineWorker, Job, QueueFull, WorkerStopped
from engine.types import CancelToken, Done, Event
from ui.qt import QObject, Signal


class WorkerRun(QObject):
    progress = Signal(object)  # StateNote, then TextDelta / ToolCallEvent / Progress
    succeeded = Signal(object)  # the Done
    failed = Signal(str, str)  # only when the worker refuses the job
    finished = Signal()

    def __init__(self, worker: EngineWorker, work: Any, conversation: str, note: Any, parent: QObject | None = None):
        """``work(engine, cancel)`` yields the engine's events; ``note(kind, tokens)`` makes the StateNote."""
        super().__init__(parent)
        self.worker = worker
        self._done = threading.Event()
        self.job = Job(work, self._sink, source="gui", conversation=conversation, persist=True,
                       on_state=lambda kind, n: self.progress.emit(note(kind, n)))

    @property
    def cancel_token(self) -> CancelToken:
        return self.job.cancel_token

    def _sink(self, ev: Event) -> None:
        if isinstance(ev, Done):
            self.succeeded.emit(ev)
            self.finished.emit()
            self._done.set()
        else:
            self.progress.emit(ev)

    def start(self) -> WorkerRun:
        try:
            self.worker.submit(self.job)
        except (QueueFull, WorkerStopped) as exc:
            self._done.set()
            self.failed.emit(f"{type(exc).__name__}: {exc}", "")
            self.finished.emit()
        return self

    def cancel(self) -> None:
        self.job.cancel()
        self.worker.discard(self.job)

    def running(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)
