"""A real app process for the quit test: ``app.gui_main.run_app`` as ``neural`` runs it (the
settings the test wrote: a model, the API switch on), one message answered, then Ctrl+Q pressed
on the main window. Prints ``QUIT <time.time()>`` just before the key press, so the test can
time how long the process lives after it.

Modes: ``idle`` quits once the answer is done; ``busy`` while a second answer streams in the
window; ``api`` while an API client's streamed answer runs. A third argument ``return`` runs
the app without ending the process at once (the old path, for a before/after measurement).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request


def _stream_from_api(url: str, started: threading.Event) -> None:
    body = json.dumps({"model": "x", "stream": True, "max_tokens": 1500,
                       "messages": [{"role": "user", "content": "Write a long story."}]}).encode()
    req = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            for line in r:
                if b'"content"' in line and b'"content": ""' not in line:  # text is coming
                    started.set()
    except OSError as exc:  # the app going away mid-stream is expected; failing before it is not
        if not started.is_set():
            detail = exc.read().decode(errors="replace") if isinstance(exc, urllib.error.HTTPError) else ""
            print(f"API-ERROR {exc} {detail}", flush=True)
            started.set()


def run(home: str, mode: str, end_process: bool = True) -> int:
    from app import gui_main
    from app.gui.app_controller import AppController
    from app.gui.engine_host import READY
    from ui.qt import QApplication, QTimer

    captured: list[AppController] = []
    real_start = AppController.start

    def start(self: AppController, *a: object, **kw: object) -> None:  # only records the instance
        captured.append(self)
        real_start(self, *a, **kw)  # type: ignore[arg-type]

    AppController.start = start  # type: ignore[method-assign]
    sent: list[bool] = []
    api_started = threading.Event()
    api_thread: list[threading.Thread] = []

    def quit_now() -> None:
        from PySide6.QtCore import Qt
        from PySide6.QtTest import QTest

        timer.stop()
        c = captured[0]
        c.window.activateWindow()
        print(f"QUIT {time.time():.3f}", flush=True)
        QTest.keyClick(c.window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
        if c.window.isVisible():  # the shortcut did not reach the window: the test fails on this
            print("NO-SHORTCUT", flush=True)
            c.window.close()

    def tick() -> None:
        if not captured:
            return
        c = captured[0]
        stream = c.chat.stream
        if stream is not None:  # an answer streams in the window
            if mode == "busy" and len(sent) >= 2 and stream.content + stream.reasoning:
                quit_now()
            return
        if mode == "api" and api_started.is_set():  # the engine answers the API client now
            quit_now()
            return
        if c.host.state != READY or not c.api.running:
            return
        if not sent or mode == "busy":  # the first answer (a state to keep), then one to quit in
            if c.chat.send("Hello there." if not sent else f"And again ({len(sent)})."):
                sent.append(True)
        elif mode == "idle":
            quit_now()
        elif mode == "api" and not api_thread:  # then an API client streams, and the app quits
            api_thread.append(threading.Thread(target=_stream_from_api, args=(c.api.base_url, api_started),
                                               daemon=True))
            api_thread[0].start()

    app = QApplication.instance() or QApplication(sys.argv[:1])
    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(50)
    del app
    return gui_main.run_app(home=home, end_process=end_process)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3:] != ["return"]))
