"""One generation as the route handlers see it: engine events -> reply pieces.

Wraps a queued :class:`~app.api.engine_bridge.Job`: maps harmony channels to API fields
(``analysis`` -> reasoning, ``final`` and commentary preambles -> content) and remembers
the finish reason and usage for the closing chunk. Stop sequences are applied by the
engine itself (``GenerationParams.stop``, final channel only).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Literal

from engine.types import Done, Progress, TextDelta, ToolCall, ToolCallEvent, Usage

from .engine_bridge import Job
from .errors import ApiError


@dataclass(frozen=True)
class Piece:
    kind: Literal["content", "reasoning", "tool_call", "progress"]
    text: str = ""
    call: ToolCall | None = None
    progress: tuple[int, int] = (0, 0)


class Reply:
    """``t0``: when the request arrived (perf_counter), for the time to first token."""

    def __init__(self, job: Job, t0: float | None = None) -> None:
        self.job = job
        self.t0 = time.perf_counter() if t0 is None else t0
        self.ttft: float | None = None
        self.finish_reason = "stop"
        self.usage = Usage()
        self.error: str | None = None
        self.content = ""
        self.reasoning = ""
        self.tool_calls: list[ToolCall] = []

    async def pieces(self) -> AsyncGenerator[Piece, None]:
        """Yield pieces until the engine is done; cancels the job if the consumer goes away."""
        try:
            async for ev in self.job:
                if self.ttft is None and isinstance(ev, TextDelta | ToolCallEvent):
                    self.ttft = time.perf_counter() - self.t0
                if isinstance(ev, TextDelta):
                    if ev.channel == "analysis":
                        self.reasoning += ev.text
                        yield Piece("reasoning", ev.text)
                    else:  # final, or a commentary preamble the user should see
                        self.content += ev.text
                        yield Piece("content", ev.text)
                elif isinstance(ev, ToolCallEvent):
                    self.tool_calls.append(ev.call)
                    yield Piece("tool_call", call=ev.call)
                elif isinstance(ev, Progress):
                    yield Piece("progress", progress=(ev.done, ev.total))
                elif isinstance(ev, Done):
                    self.usage = ev.usage
                    self.error = ev.error
                    self.finish_reason = self._finish_reason(ev)
        finally:
            if not self.job.finished:
                self.job.cancel()

    def _finish_reason(self, done: Done) -> str:
        if done.finish_reason == "error":
            return "error"
        if done.finish_reason == "cancelled":
            return "cancelled"
        if self.tool_calls:
            return "tool_calls"
        if done.finish_reason == "tool_calls":  # <|call|> without a parsable call: plain text ended
            return "stop"
        return done.finish_reason

    def raise_if_failed(self) -> None:
        """Non-streaming answers turn an engine failure into a 500 (streams send an error event)."""
        if self.finish_reason == "error":
            raise ApiError(500, f"The engine failed while generating: {self.error or 'unknown error'}.",
                           code="engine_error")
        if self.finish_reason == "cancelled":
            raise ApiError(503, "The generation was cancelled (the server is stopping or the model was "
                           "unloaded); retry the request.", code="cancelled")
