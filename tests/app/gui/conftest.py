"""Fixtures for the desktop app: a controller on a real engine with the tiny synthetic model."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def gui_thread_gc(qapp) -> Iterator[None]:
    """As the app does (app/gui/gc_guard.py): no automatic GC while engine threads run (a worker
    thread's collection can traverse Qt wrappers mid-destruction); collect here, on the GUI
    thread, after each test once its widgets are gone."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        for _ in range(3):
            qapp.processEvents()
        gc.collect()
        if was:
            gc.enable()


@pytest.fixture
def qloop(qapp) -> Iterator[asyncio.AbstractEventLoop]:
    """The app's qasync loop, marked running so qtbot's event processing also runs asyncio."""
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        # Let pending callbacks (server shutdown) finish, then detach the loop from this thread.
        for _ in range(20):
            qapp.processEvents()
        asyncio.events._set_running_loop(None)
        # loop.stop() would call QApplication.exit(), which breaks later event processing in
        # this process; mark it stopped directly (qasync keeps the flag in a private attribute).
        loop._QEventLoop__is_running = False  # type: ignore[attr-defined]
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def make_app(qtbot, tmp_path: Path, tiny_model: Path) -> Iterator[Callable[..., object]]:
    from app.core.paths import AppPaths
    from app.core.settings import load_settings
    from app.gui.app_controller import AppController
    from app.gui.engine_host import READY

    made: list[AppController] = []

    def make(home: Path | None = None, max_tokens: int = 6, show: bool = False, first_run: bool = False,
             **kw: object) -> AppController:
        paths = AppPaths.under(home or tmp_path / "home")
        settings = load_settings(paths.settings_file)
        settings.model_dir = str(kw.pop("model_dir", tiny_model) or "")
        settings.generation = replace(settings.generation, max_tokens=max_tokens, temperature=1.0)
        settings.set_engine_settings(settings.engine_settings().__class__(backend="cpu", dtype="float32",
                                                                          cpu_threads=1, context=2048))
        for k, v in kw.items():
            if k != "wait":
                setattr(settings, k, v)
        c = AppController(paths, settings)
        qtbot.addWidget(c.window)
        if show:
            c.window.show()
            qtbot.waitExposed(c.window)
        c.start(first_run_dialog=first_run)
        if settings.model_dir and kw.get("wait", True):
            qtbot.waitUntil(lambda: c.host.state == READY, timeout=30000)
        made.append(c)
        return c

    yield make
    for c in made:
        if c.api.running:  # the server lives on the qasync loop: stop it while that loop still runs
            fut = asyncio.ensure_future(c.api.stop())
            qtbot.waitUntil(fut.done, timeout=10000)
        c.shutdown()
