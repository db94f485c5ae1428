"""Crash handling: faulthandler for hard crashes, a log file and a dialog for Python exceptions.

Unhandled exceptions on the GUI thread (from slots) and on worker threads are written to the
log with their traceback; the GUI thread then shows a dialog with the message, the details
and where the log is. The app keeps running: most such errors affect one action only.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ui.qt import QObject, QTimer, Signal

log = logging.getLogger("neural.crash")

_fault_file: IO[str] | None = None


def setup_logging(log_file: Path, level: int = logging.INFO) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    if any(getattr(h, "_neural", False) for h in root.handlers):
        return
    handler = logging.handlers.RotatingFileHandler(log_file, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
    handler._neural = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(min(root.level or level, level))


def enable_faulthandler(fault_file: Path) -> None:
    """Segfaults and aborts (e.g. in a native kernel) dump every thread's stack to the file."""
    global _fault_file
    fault_file.parent.mkdir(parents=True, exist_ok=True)
    if _fault_file is None:
        _fault_file = open(fault_file, "a", encoding="utf-8")  # noqa: SIM115 - must stay open for the process
    faulthandler.enable(file=_fault_file, all_threads=True)


class _Relay(QObject):
    crashed = Signal(str, str)  # message, traceback text


class CrashHandler:
    """Installs sys.excepthook and threading.excepthook; ``show`` is called on the GUI thread."""

    def __init__(self, log_file: Path, show: Callable[[str, str, Path], None]) -> None:
        self.log_file = log_file
        self._show = show
        self._relay = _Relay()
        self._relay.crashed.connect(self._on_crash)
        self._previous_hook = sys.excepthook
        self._previous_thread_hook = threading.excepthook
        self.count = 0
        self._showing = False

    def install(self) -> CrashHandler:
        sys.excepthook = self._hook
        threading.excepthook = self._thread_hook
        return self

    def uninstall(self) -> None:
        sys.excepthook = self._previous_hook
        threading.excepthook = self._previous_thread_hook

    def _hook(self, etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if issubclass(etype, KeyboardInterrupt):
            self._previous_hook(etype, value, tb)
            return
        text = "".join(traceback.format_exception(etype, value, tb))
        log.critical("unhandled exception\n%s", text)
        self.count += 1
        # Emitting through a QObject queues the dialog onto the GUI thread from any thread.
        self._relay.crashed.emit(f"{etype.__name__}: {value}", text)

    def _thread_hook(self, args: Any) -> None:
        self._hook(args.exc_type, args.exc_value, args.exc_traceback)

    def _on_crash(self, message: str, details: str) -> None:
        if self._showing:  # one dialog at a time; later errors are in the log
            return
        self._showing = True

        def show() -> None:
            try:
                self._show(message, details, self.log_file)
            finally:
                self._showing = False

        QTimer.singleShot(0, self._relay, show)
