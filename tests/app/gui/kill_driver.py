"""A real app process for the SIGKILL test: the controller on the demo-size model, one message
sent (again whenever an answer ends); prints the streamed length ("LEN message-id n") every
100 ms until killed."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path


def main(home: str, model: str) -> None:
    import qasync

    from app.core.paths import AppPaths
    from app.core.settings import load_settings
    from app.gui.app_controller import AppController
    from app.gui.engine_host import READY
    from engine.settings import EngineSettings
    from ui.qt import QApplication, QTimer

    app = QApplication(sys.argv[:1])
    paths = AppPaths.under(home)
    s = load_settings(paths.settings_file)
    s.model_dir = model
    s.set_engine_settings(EngineSettings(backend="cpu", dtype="float32", cpu_threads=1, context=4096))
    s.generation = replace(s.generation, max_tokens=3500, seed=7)
    c = AppController(paths, s)
    c.start(first_run_dialog=False)
    sent = []

    def tick() -> None:
        if c.chat.stream is None and c.host.state == READY:  # a random-weight model may stop early: again
            c.chat.set_generation(replace(c.chat.gen, seed=len(sent)))
            sent.append(c.chat.send(f"Write a long story ({len(sent)})."))
        st = c.chat.stream
        if st is not None:
            print(f"LEN {st.message_id} {len(st.content) + len(st.reasoning)}", flush=True)

    t = QTimer()
    t.timeout.connect(tick)
    t.start(100)
    loop = qasync.QEventLoop(app)
    with loop:
        loop.run_forever()


if __name__ == "__main__":
    main(sys.argv[1], str(Path(sys.argv[2])))
