"""The desktop app's busy indicator sees a generation the local API started on the same worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.core.engine_worker import Job
from app.gui.engine_host import GENERATING, READY, LocalEngineHost
from engine.types import CancelToken, Done, Event, Usage


def test_an_api_request_shows_as_busy_in_the_window(qtbot, tmp_path: Path, tiny_model: Path) -> None:
    host = LocalEngineHost(tmp_path / "states")
    with qtbot.waitSignal(host.engineLoaded, timeout=120_000):
        host.load(tiny_model)
    gate = threading.Event()

    def api_work(engine: Any, cancel: CancelToken) -> Iterator[Event]:
        gate.wait(10)
        yield Done("stop", Usage())

    with qtbot.waitSignal(host.queueChanged, timeout=10_000, check_params_cb=lambda src, n: src == "api"):
        job = host.worker.submit(Job(api_work, lambda e: None, source="api"))
    assert host.engine_busy and not host.busy
    assert host.state == GENERATING and "local API" in host.detail
    with qtbot.waitSignal(host.queueChanged, timeout=10_000, check_params_cb=lambda src, n: src == ""):
        gate.set()
    assert job.done is not None and host.state == READY
    host.shutdown()
