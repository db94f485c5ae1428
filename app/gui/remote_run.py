"""A remote generation on the asyncio (qasync) loop, with the same signals as a local run."""

from __future__ import annotations

import asyncio
import logging
import traceback

from app.gui.remote_backend import RemoteBackend
from engine.types import CancelToken, Conversation, Done, GenerationParams, Usage
from ui.qt import QObject, Signal

log = logging.getLogger(__name__)


class RemoteRun(QObject):
    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str, str)
    finished = Signal()

    def __init__(self, backend: RemoteBackend, conv: Conversation, params: GenerationParams,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.backend, self.conv, self.params = backend, conv, params
        self.cancel_token = CancelToken()
        self._task: asyncio.Future[None] | None = None
        self.running = False

    def start(self) -> RemoteRun:
        self.running = True
        self._task = asyncio.ensure_future(self._main())
        return self

    async def _main(self) -> None:
        done: Done | None = None
        try:
            async for ev in self.backend.stream_chat(self.conv, self.params, self.cancel_token):
                if isinstance(ev, Done):
                    done = ev
                else:
                    self.progress.emit(ev)
            self.succeeded.emit(done or Done("error", Usage(), error="the server closed the stream without a result"))
        except asyncio.CancelledError:
            self.succeeded.emit(Done("cancelled", Usage()))
        except Exception as exc:  # network errors end this answer, not the app
            log.warning("remote generation failed: %s", exc)
            self.failed.emit(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        finally:
            self.running = False
            self.finished.emit()

    def cancel(self) -> None:
        self.cancel_token.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
