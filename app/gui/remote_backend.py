"""Chat with any OpenAI-compatible server (vLLM, llama-server, another Neural) over aiohttp.

The stream is turned into the engine's own events (TextDelta per channel, ToolCallEvent, one
Done) so the chat view cannot tell a remote answer from a local one. Reasoning arrives as
``reasoning_content`` (vLLM, llama-server) or ``reasoning`` (some proxies): both map to the
analysis channel.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from engine.types import (
    CancelToken,
    Conversation,
    Done,
    Event,
    GenerationParams,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)


class RemoteError(RuntimeError):
    pass


def conversation_to_openai(conv: Conversation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in conv.messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "assistant" and m.tool_calls:
            d["tool_calls"] = [{"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        if m.role == "tool":
            d["tool_call_id"] = m.tool_call_id
            if m.name:
                d["name"] = m.name
        out.append(d)
    return out


@dataclass
class RemoteBackend:
    base_url: str  # e.g. http://host:8000/v1
    api_key: str = ""
    model: str = ""
    timeout_s: float = 600.0

    def _url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    async def list_models(self) -> list[str]:
        timeout = aiohttp.ClientTimeout(total=15)
        async with aiohttp.ClientSession(timeout=timeout) as s, s.get(self._url("/models"),
                                                                       headers=self._headers()) as r:
            if r.status != 200:
                raise RemoteError(f"{self._url('/models')}: HTTP {r.status} {await r.text()}"[:300])
            data = await r.json()
        return [str(m.get("id")) for m in data.get("data", [])]

    async def stream_chat(self, conv: Conversation, params: GenerationParams,
                          cancel: CancelToken | None = None) -> AsyncIterator[Event]:
        model = self.model or (await self.list_models() or [""])[0]
        body: dict[str, Any] = {
            "model": model, "messages": conversation_to_openai(conv), "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "reasoning_effort": conv.reasoning_effort,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        t0 = time.perf_counter()
        t_first: float | None = None
        finish = "stop"
        usage: dict[str, Any] = {}
        calls: dict[int, dict[str, str]] = {}
        n_chunks = 0
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_read=120)
        async with aiohttp.ClientSession(timeout=timeout) as s, s.post(
                self._url("/chat/completions"), json=body, headers=self._headers()) as r:
            if r.status != 200:
                text = await r.text()
                yield Done("error", Usage(), error=f"HTTP {r.status}: {text[:300]}")
                return
            async for raw in r.content:
                if cancel is not None and cancel.cancelled:
                    finish = "cancelled"
                    break
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                    if reasoning:
                        t_first = t_first or time.perf_counter()
                        n_chunks += 1
                        yield TextDelta("analysis", reasoning)
                    if delta.get("content"):
                        t_first = t_first or time.perf_counter()
                        n_chunks += 1
                        yield TextDelta("final", delta["content"])
                    for tc in delta.get("tool_calls") or []:
                        slot = calls.setdefault(int(tc.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                        fn = tc.get("function") or {}
                        slot["id"] = tc.get("id") or slot["id"]
                        slot["name"] += fn.get("name") or ""
                        slot["arguments"] += fn.get("arguments") or ""
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        for i in sorted(calls):
            c = calls[i]
            yield ToolCallEvent(ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"]))
        t_end = time.perf_counter()
        first = t_first or t_end
        details = usage.get("prompt_tokens_details") or {}
        u = Usage(prompt_tokens=int(usage.get("prompt_tokens", 0)),
                  cached_tokens=int(details.get("cached_tokens", 0) or 0),
                  completion_tokens=int(usage.get("completion_tokens", n_chunks)),
                  prompt_seconds=first - t0, decode_seconds=t_end - first)
        if finish not in ("stop", "length", "tool_calls", "cancelled"):
            finish = "stop"
        yield Done(finish, u)  # type: ignore[arg-type]
