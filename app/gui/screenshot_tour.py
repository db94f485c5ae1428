"""A scripted tour of the running app that saves screenshots (``neural gui --screenshot-dir``).

It drives the real window through the same controller methods the widgets call: a chat with
code streamed from the loaded model, the residency panel mid-generation, the preferences
dialog, the API switch serving and refused (its port taken by another program), a long title in a narrow
window, and the main window in the dark theme.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.gui.engine_host import ERROR, READY
from ui.qt import QApplication, QTabWidget, QWidget

if TYPE_CHECKING:
    from app.gui.app_controller import AppController

log = logging.getLogger(__name__)

SAMPLE = "Write a Python function that returns the median of a list of numbers."


async def wait_until(cond: Callable[[], object], timeout: float, what: str) -> bool:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            log.warning("screenshot tour: gave up waiting for %s", what)
            return False
        await asyncio.sleep(0.05)
    return True


def save(widget: QWidget, path: Path) -> Path:
    QApplication.processEvents()
    pix = widget.grab()
    if not pix.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    log.info("screenshot %s (%dx%d)", path, pix.width(), pix.height())
    print(f"screenshot: {path} ({pix.width()}x{pix.height()})", flush=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def api_shots(c: AppController, out: Path) -> list[Path]:
    """The API panel serving, then refused because another program holds the port (as LM Studio or llama-server
    on 8080 would)."""
    shots: list[Path] = []
    panel = c.window.api_panel
    panel.port.setValue(free_port())
    panel.switch.setChecked(True)
    if await wait_until(lambda: c.api.running, 30, "the API server to start"):
        await asyncio.sleep(0.2)
        shots.append(save(c.window.right_scroll, out / "api-serving.png"))
    panel.switch.setChecked(False)
    await wait_until(lambda: not c.api.running and not c.api.busy, 30, "the API server to stop")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        panel.port.setValue(int(taken.getsockname()[1]))
        panel.switch.setChecked(True)
        await wait_until(lambda: not c.api.busy and not panel.switch.isChecked(), 30, "the refusal")
        await asyncio.sleep(0.2)
        shots.append(save(c.window.right_scroll, out / "api-port-taken.png"))
    return shots


async def run_tour(c: AppController, out: Path, answer_tokens: int = 200) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    w = c.window
    w.resize(1440, 900)
    await wait_until(lambda: c.host.state in (READY, ERROR), 300, "the model to load")
    # a short answer keeps the tour quick (not saved)
    c.settings.generation = replace(c.settings.generation, max_tokens=answer_tokens)
    c.chat.new_conversation()
    c.chat.send(SAMPLE)
    await wait_until(lambda: c.chat.stream is not None and len(c.chat.stream.content) > 40, 120,
                     "the answer to start streaming")
    await asyncio.sleep(0.6)  # a few telemetry polls into the decode
    shots.append(save(w.right_scroll, out / "residency-generating.png"))
    shots.append(save(w, out / "main-window-streaming.png"))
    await wait_until(lambda: not c.chat.generating, 600, "the answer to finish")
    await asyncio.sleep(0.4)
    shots.append(save(w, out / "main-window.png"))
    w.chat.controls_btn.setChecked(True)  # the chat controls of this conversation
    await asyncio.sleep(0.3)
    shots.append(save(w, out / "chat-controls.png"))
    w.chat.controls_btn.setChecked(False)
    w.resize(900, 600)  # the narrow window of issue 21 point 4
    await asyncio.sleep(0.5)
    shots.append(save(w, out / "narrow-900x600.png"))
    w.resize(1440, 900)
    await asyncio.sleep(0.3)
    shots += await api_shots(c, out)

    dlg = c.open_preferences(modal=False)
    dlg.adjustSize()
    await asyncio.sleep(0.4)
    shots.append(save(dlg, out / "preferences.png"))
    optimized = dlg.preset.findData("optimized")
    dlg.preset.setCurrentIndex(optimized)
    await asyncio.sleep(0.2)
    shots.append(save(dlg, out / "preferences-optimized.png"))
    dlg.fields["cpu_threads"].setValue(512)  # a refusal, explained in the dialog
    await asyncio.sleep(0.2)
    shots.append(save(dlg, out / "preferences-refusal.png"))
    tabs = dlg.findChild(QTabWidget)
    if tabs is not None:
        tabs.setCurrentIndex(1)
    await asyncio.sleep(0.2)
    shots.append(save(dlg, out / "preferences-generation.png"))
    dlg.close()

    models = c.open_get_model()  # File ▸ Get a model… (the hub is only asked once a model is chosen)
    await asyncio.sleep(0.4)
    shots.append(save(models.page, out / "get-model.png"))
    models.page.close()

    previous = c.settings.theme
    c.settings.theme = "dark"
    c.apply_theme()
    await asyncio.sleep(0.4)
    shots.append(save(w, out / "main-window-dark.png"))
    c.settings.theme = previous
    c.apply_theme()
    return shots
