"""Server-sent events writer for streaming answers (``data: {...}`` lines, ``data: [DONE]``)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aiohttp import web


class ClientGone(Exception):
    """The client closed the connection while we were streaming."""


class SseWriter:
    def __init__(self, request: web.Request) -> None:
        self.request = request
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
            await self.response.write(data)
        except ConnectionError as exc:
            raise ClientGone from exc

    async def send(self, obj: dict[str, Any], event: str | None = None) -> None:
        head = f"event: {event}\n" if event else ""
        await self._write((head + "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n").encode())

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
