"""Timing of one streamed chat completion, fed the SSE bytes as they arrive.

Decode speed is measured the way the design doc's replay studies did: timed tokens over
timed seconds, from the first to the last delta that carries output (content, reasoning or a
tool call). The first token arrives at the first delta, so the tokens decoded inside that
interval are the answer's tokens minus one. The answer's token count comes from the final
usage chunk (``stream_options.include_usage``) when the server sends one, else from the
number of output deltas (one token per delta, which holds for llama.cpp and this project's
server but not for servers that batch tokens into deltas).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

REASONING_KEYS = ("reasoning_content", "reasoning")  # llama.cpp/this project, vLLM/Ollama


@dataclass
class StreamMeter:
    started: float  # perf_counter() just before the request was sent
    first: float | None = None
    last: float | None = None
    ended: float | None = None
    deltas: int = 0
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[Any] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False  # saw data: [DONE]
    _pending: bytes = b""

    def feed(self, data: bytes, now: float) -> None:
        """Bytes of the response body that arrived at ``now``; complete lines are parsed."""
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self._line(line.rstrip(b"\r").decode("utf-8", errors="replace"), now)

    def close(self, now: float) -> None:
        if self._pending:
            self._line(self._pending.decode("utf-8", errors="replace"), now)
            self._pending = b""
        self.ended = now

    def _line(self, line: str, now: float) -> None:
        if not line.startswith("data:"):
            return  # blank separators, ": comments" (progress), "event:" lines
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = self.error or f"unparsable stream line: {payload[:200]}"
            return
        if not isinstance(obj, dict):
            return
        if obj.get("error"):
            err = obj["error"]
            self.error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
            return
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            out = False
            if delta.get("content"):
                self.content.append(delta["content"])
                out = True
            for key in REASONING_KEYS:
                if delta.get(key):
                    self.reasoning.append(delta[key])
                    out = True
            if delta.get("tool_calls"):
                self.tool_calls.extend(delta["tool_calls"])
                out = True
            if out:
                self.deltas += 1
                if self.first is None:
                    self.first = now
                self.last = now
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    # ---- results -----------------------------------------------------------------------------
    @property
    def completion_tokens(self) -> int | None:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return None

    @property
    def token_source(self) -> str:
        return "usage" if self.completion_tokens is not None else "deltas"

    @property
    def timed_tokens(self) -> int:
        n = self.completion_tokens if self.completion_tokens is not None else self.deltas
        return max(n - 1, 0)

    @property
    def timed_seconds(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first

    @property
    def decode_tps(self) -> float | None:
        s = self.timed_seconds
        return self.timed_tokens / s if s > 0 and self.timed_tokens > 0 else None

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.started

    @property
    def wall(self) -> float | None:
        return None if self.ended is None else self.ended - self.started

    def answer_sha256(self) -> str:
        """Hash of the visible answer: reasoning, content and tool calls (control tokens are not
        visible to a client, so two answers with equal hashes can still differ in those)."""
        blob = json.dumps({"reasoning": "".join(self.reasoning), "content": "".join(self.content),
                           "tool_calls": self.tool_calls}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def usage_field(self, *path: str) -> int | None:
        cur: Any = self.usage
        for key in path:
            if not isinstance(cur, dict):
                return None
            cur = cur.get(key)
        return cur if isinstance(cur, int) else None
