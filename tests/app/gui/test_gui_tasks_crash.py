"""The background-task helper reports on the GUI thread; the crash handler logs and shows a dialog."""

from __future__ import annotations

import logging
import sys
import threading

from app.gui.crash import CrashHandler, setup_logging
from app.gui.tasks import BackgroundTask, running_tasks


def test_task_reports_progress_and_result_on_gui_thread(qtbot):
    gui = threading.get_ident()
    seen: list[tuple[object, int]] = []
    worker: list[int] = []

    def work(report):
        worker.append(threading.get_ident())
        for i in range(3):
            report(i)
        return "done"

    task = BackgroundTask(work, "t")
    task.progress.connect(lambda x: seen.append((x, threading.get_ident())))
    with qtbot.waitSignal(task.succeeded, timeout=5000) as blocker:
        task.start()
    assert blocker.args == ["done"]
    qtbot.waitUntil(lambda: len(seen) == 3)
    assert [x for x, _ in seen] == [0, 1, 2]
    assert all(t == gui for _, t in seen) and worker[0] != gui
    qtbot.waitUntil(lambda: task not in running_tasks())


def test_task_failure_is_a_signal_not_a_crash(qtbot):
    task = BackgroundTask(lambda _r: 1 / 0, "boom")
    with qtbot.waitSignal(task.failed, timeout=5000) as blocker:
        task.start()
    assert blocker.args[0].startswith("ZeroDivisionError") and "Traceback" in blocker.args[1]
    assert task.wait(1) and not task.running


def test_crash_handler_logs_and_shows_on_gui_thread(qtbot, tmp_path):
    log_file = tmp_path / "logs" / "neural.log"
    setup_logging(log_file)
    shown: list[tuple[str, int]] = []
    handler = CrashHandler(log_file, lambda msg, details, path: shown.append((msg, threading.get_ident())))
    handler.install()
    try:
        def boom() -> None:
            raise RuntimeError("worker exploded")

        t = threading.Thread(target=boom)
        t.start()
        t.join()
        qtbot.waitUntil(lambda: len(shown) == 1, timeout=3000)
        assert shown[0] == ("RuntimeError: worker exploded", threading.get_ident())
        try:
            raise ValueError("on the gui thread")
        except ValueError:
            sys.excepthook(*sys.exc_info())  # what Qt does for an exception escaping a slot
        qtbot.waitUntil(lambda: len(shown) == 2, timeout=3000)
    finally:
        handler.uninstall()
        for h in list(logging.getLogger().handlers):
            if getattr(h, "_neural", False):
                h.close()
                logging.getLogger().removeHandler(h)
    text = log_file.read_text()
    assert "worker exploded" in text and "on the gui thread" in text and "Traceback" in text
    assert sys.excepthook is not handler._hook
