"""The one way the GUI runs blocking work (engine load, generation, state save) off its thread.

``BackgroundTask(fn)`` runs ``fn(report)`` on a daemon thread. ``report(x)`` and the outcome
travel back as Qt signals, which Qt queues onto the GUI thread because the task object lives
there; worker code never touches a widget. A task has no Qt parent: a parent's deletion would
destroy it under a thread that still emits. Instead running tasks are kept referenced until
their last signal has been delivered.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ui.qt import QObject, Signal

log = logging.getLogger(__name__)

Report = Callable[[Any], None]

_running: set[BackgroundTask] = set()
_running_lock = threading.Lock()


class BackgroundTask(QObject):
    progress = Signal(object)  # whatever the work passed to report()
    succeeded = Signal(object)  # the work's return value
    failed = Signal(str, str)  # "Type: message", formatted traceback
    finished = Signal()  # after succeeded or failed

    def __init__(self, work: Callable[[Report], Any], name: str = "task", parent: QObject | None = None) -> None:
        # ``parent`` is accepted for call-site symmetry with Qt but deliberately not used (see above).
        super().__init__(None)
        self._work = work
        self.name = name
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self.finished.connect(self._forget)

    def start(self) -> BackgroundTask:
        if self._thread is not None:
            raise RuntimeError(f"task {self.name} already started")
        with _running_lock:
            _running.add(self)
        self._thread = threading.Thread(target=self._run, name=f"neural-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            result = self._work(self.progress.emit)
        except BaseException as exc:  # reported to the GUI, never raised on a thread nobody watches
            log.exception("background task %s failed", self.name)
            self.failed.emit(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        else:
            self.succeeded.emit(result)
        finally:
            # Last Qt call from this thread; only then may wait() return and the owner let go.
            self.finished.emit()
            self._done.set()

    def _forget(self) -> None:
        with _running_lock:
            _running.discard(self)

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the work returned (for shutdown and tests); True if it did."""
        return self._done.wait(timeout)


def running_tasks() -> list[BackgroundTask]:
    with _running_lock:
        return list(_running)
