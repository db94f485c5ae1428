"""Server-sent events writer for streaming answers (``data: {...}`` lines, ``data: [DONE]``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web


class ClientGone(Exception):
    """The client closed the connection while we were streaming."""


class SseWriter:
    """``stall_timeout``: a write that cannot complete for this long (the client stopped reading and
    the socket buffer is full) counts as a vanished client, so its generation is cancelled."""

    def __init__(self, request: web.Request, stall_timeout: float = 30.0) -> None:
        self.request = request
        self.stall_timeout = stall_timeout
        self.response = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        })
        self.started = False

    async def _write(self, data: bytes) -> None:
        if not self.started:
            await self.response.prepare(self.request)
            self.started = True
        transport = self.request.transport
        if transport is None or transport.is_closing():
            raise ClientGone
        try:
            await asyncio.wait_for(self.response.write(data), self.stall_timeout)
        except TimeoutError as exc:
            transport.abort()  # the stalled reader loses its connection, the engine is freed
            raise ClientGone from exc
        except ConnectionError as exc:
            raise ClientGone from exc

    async def send(self, obj: dict[str, Any], event: str | None = None) -> None:
        head = f"event: {event}\n" if event else ""
        # ensure_ascii: a lone surrogate in model output can never make the encode fail
        await self._write((head + "data: " + json.dumps(obj) + "\n\n").encode())

    async def comment(self, text: str) -> None:
        """An SSE comment: keeps proxies from timing out and detects a vanished client early."""
        await self._write(f": {text}\n\n".encode())

    async def done(self) -> None:
        await self._write(b"data: [DONE]\n\n")

    async def close(self) -> web.StreamResponse:
        if not self.started:
            await self.response.prepare(self.request)
            self.started = True
        with contextlib.suppress(ConnectionError):
            await self.response.write_eof()
        return self.response
