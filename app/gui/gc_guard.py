"""Python's cyclic garbage collector runs on the GUI thread only.

Automatic collection runs in whichever thread happens to allocate: with the engine on worker
threads that is often a worker, which then traverses and may free Qt wrapper objects (and so
delete QObjects) off the GUI thread while the GUI thread is inside Qt. A crash in shiboken's
traverse during such a collection was seen here (together with the None refcount bug that
ui/qt.py works around). So automatic GC is switched off and a GUI-thread timer collects with
the same generation thresholds.
"""

from __future__ import annotations

import gc

from ui.qt import QObject, QTimer


class GuiThreadGarbageCollector(QObject):
    def __init__(self, interval_ms: int = 500, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._was_enabled = gc.isenabled()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.check)
        self.timer.start(interval_ms)
        self.collections = 0

    def check(self) -> None:
        t0, t1, t2 = gc.get_threshold()
        c0, c1, c2 = gc.get_count()
        if c0 > t0:
            generation = 2 if c2 > t2 else 1 if c1 > t1 else 0
            gc.collect(generation)
            self.collections += 1

    def stop(self) -> None:
        self.timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()
