"""Builds a Responses API answer from reply pieces: output items plus the stream events.

One builder serves both modes: it always assembles the output items; in streaming mode the
route also sends each event it returns (``response.output_item.added``,
``response.output_text.delta``, ``response.function_call_arguments.delta``/``.done`` ...).
"""

from __future__ import annotations

import secrets
from typing import Any

from engine.types import ToolCall

from .reply import Piece


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class ResponseBuilder:
    def __init__(self) -> None:
        self.output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the reasoning or message item receiving text
        self._seq = 0

    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        ev = {"type": type_, "sequence_number": self._seq, **fields}
        self._seq += 1
        return ev

    def event(self, type_: str, **fields: Any) -> dict[str, Any]:
        return self._event(type_, **fields)

    def feed(self, piece: Piece) -> list[dict[str, Any]]:
        if piece.kind == "reasoning":
            return self._text("reasoning", piece.text)
        if piece.kind == "content":
            return self._text("message", piece.text)
        if piece.kind == "tool_call" and piece.call is not None:
            return [*self._close(), *self._call(piece.call)]
        return []

    def finish(self, incomplete: bool = False) -> list[dict[str, Any]]:
        """Close the open item; ``incomplete`` marks it cut off by the token limit."""
        return self._close("incomplete" if incomplete else "completed")

    # ---- items -----------------------------------------------------------------------------
    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close()
            events += self._open_item(kind)
        item = self._open
        assert item is not None
        index = len(self.output) - 1
        item["content"][0]["text"] += text
        delta_type = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
        events.append(self._event(delta_type, item_id=item["id"], output_index=index, content_index=0,
                                  delta=text, **extra))
        return events

    def _open_item(self, kind: str) -> list[dict[str, Any]]:
        if kind == "reasoning":
            item: dict[str, Any] = {"type": "reasoning", "id": _id("rs"), "summary": [], "status": "in_progress",
                                    "content": []}
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = {"type": "message", "id": _id("msg"), "role": "assistant", "status": "in_progress",
                    "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        self.output.append(item)
        self._open = item
        index = len(self.output) - 1
        added = self._event("response.output_item.added", output_index=index, item=_copy(item))
        item["content"].append(part)
        return [added, self._event("response.content_part.added", item_id=item["id"], output_index=index,
                                   content_index=0, part=dict(part))]

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self.output) - 1
        item["status"] = status
        part = item["content"][0]
        if item["type"] == "reasoning":
            done = self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                               content_index=0, text=part["text"])
        else:
            done = self._event("response.output_text.done", item_id=item["id"], output_index=index,
                               content_index=0, text=part["text"], logprobs=[])
        return [
            done,
            self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                        part=dict(part)),
            self._event("response.output_item.done", output_index=index, item=_copy(item)),
        ]

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        item = {"type": "function_call", "id": _id("fc"), "call_id": call.id, "name": call.name,
                "arguments": "", "status": "in_progress"}
        self.output.append(item)
        index = len(self.output) - 1
        events = [self._event("response.output_item.added", output_index=index, item=dict(item))]
        # The engine emits a call once complete, so the arguments arrive as a single delta.
        events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                  output_index=index, delta=call.arguments))
        item["arguments"] = call.arguments
        item["status"] = "completed"
        events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, name=call.name, arguments=call.arguments))
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "content": [dict(p) for p in item.get("content", [])]}
