"""The in-process API server behind the GUI's switch, on the app's asyncio (qasync) loop."""

from __future__ import annotations

import errno
import logging
from typing import TYPE_CHECKING

from app.api import ApiServer, ServerConfig
from ui.qt import QObject, Signal

if TYPE_CHECKING:
    from app.core.engine_worker import EngineWorker
    from engine.session import Engine

log = logging.getLogger(__name__)


def gui_message(exc: BaseException, port: int) -> str:
    """The server's reason in the GUI's words (its messages give command-line advice)."""
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", -1)):
        return (f"Could not start: port {port} is in use by another program. Choose another port above "
                "and turn the switch on again.")
    text = str(exc).split(" Is another server using the port?")[0].replace(" Pick another with --port.", "")
    return f"Could not start: {text}"


class ApiSwitch(QObject):
    statusChanged = Signal(str, str, str)  # text, base URL ("" when off), style: muted | ok | error
    runningChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.server: ApiServer | None = None
        self.engine: Engine | None = None
        self.worker: EngineWorker | None = None  # the window's engine worker: one line for the GUI and the API
        self.busy = False  # a start or stop is in flight

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.running

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1" if self.server is not None and self.server.running else ""

    def set_engine(self, engine: Engine | None) -> None:
        """The engine was (re)loaded or unloaded; a running server follows (503 while None)."""
        self.engine = engine
        if self.server is not None:
            self.server.engine = engine

    async def start(self, port: int, api_key: str = "", cors_origins: tuple[str, ...] = (),
                    host: str = "127.0.0.1") -> bool:
        if self.running or self.busy:
            return self.running
        self.busy = True
        try:
            cfg = ServerConfig(host=host, port=port, api_key=api_key or None, cors_origins=cors_origins)
            server = ApiServer(self.engine, cfg, worker=self.worker)
            await server.start()
        except (OSError, ValueError) as exc:
            log.warning("API server did not start: %s", exc)
            self.statusChanged.emit(gui_message(exc, port), "", "error")
            self.runningChanged.emit(False)
            return False
        finally:
            self.busy = False
        self.server = server
        server.engine = self.engine  # an engine that finished loading while the server started
        auth = "API key required" if api_key else "no API key (local programs only)"
        self.statusChanged.emit(f"Serving at {self.base_url} — {auth}", self.base_url, "ok")
        self.runningChanged.emit(True)
        return True

    async def stop(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        self.busy = True
        try:
            await server.stop()
        finally:
            self.busy = False
        self.statusChanged.emit("Off", "", "muted")
        self.runningChanged.emit(False)
