"""Conversations as message trees: regenerate and edit-and-resend add siblings, never overwrite.

A conversation remembers one leaf; the visible thread is the path from a root to that leaf.
Switching a branch picks a sibling and follows its newest descendants to a new leaf.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.types import Message, ToolCall


@dataclass(frozen=True)
class StoredMessage:
    id: str
    conversation_id: str
    parent_id: str | None
    role: str
    content: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    created: float = 0.0
    seq: int = 0  # insertion order (siblings are ordered by it)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_engine(self) -> Message:
        return Message(
            role=self.role,  # type: ignore[arg-type]
            content=self.content,
            reasoning=self.reasoning or None,
            tool_calls=self.tool_calls,
            tool_call_id=self.tool_call_id,
            name=self.name,
        )


def tool_calls_to_json(calls: tuple[ToolCall, ...]) -> str:
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls])


def tool_calls_from_json(text: str | None) -> tuple[ToolCall, ...]:
    if not text:
        return ()
    return tuple(ToolCall(id=d["id"], name=d["name"], arguments=d["arguments"]) for d in json.loads(text))


@dataclass(frozen=True)
class BranchInfo:
    index: int  # 0-based position among siblings (oldest first)
    count: int


class MessageTree:
    def __init__(self, messages: list[StoredMessage]) -> None:
        self.by_id = {m.id: m for m in messages}
        self._children: dict[str | None, list[StoredMessage]] = {}
        for m in sorted(messages, key=lambda m: m.seq):  # insertion order, immune to clock steps
            self._children.setdefault(m.parent_id, []).append(m)

    def __len__(self) -> int:
        return len(self.by_id)

    def children(self, msg_id: str | None) -> list[StoredMessage]:
        return list(self._children.get(msg_id, []))

    def siblings(self, msg_id: str) -> list[StoredMessage]:
        return self.children(self.by_id[msg_id].parent_id)

    def branch_info(self, msg_id: str) -> BranchInfo:
        sibs = self.siblings(msg_id)
        return BranchInfo(index=[s.id for s in sibs].index(msg_id), count=len(sibs))

    def newest_leaf_under(self, msg_id: str) -> str:
        """Follow the newest child down to a leaf (what "switch to this branch" shows)."""
        cur = msg_id
        while kids := self._children.get(cur):
            cur = kids[-1].id
        return cur

    def path_to(self, leaf_id: str | None) -> list[StoredMessage]:
        """Root-first path ending at ``leaf_id``; an unknown leaf falls back to the newest thread."""
        if leaf_id is None or leaf_id not in self.by_id:
            roots = self._children.get(None)
            if not roots:
                return []
            leaf_id = self.newest_leaf_under(roots[-1].id)
        path: list[StoredMessage] = []
        cur: str | None = leaf_id
        seen: set[str] = set()
        while cur is not None and cur not in seen:
            seen.add(cur)
            m = self.by_id[cur]
            path.append(m)
            cur = m.parent_id
        path.reverse()
        return path

    def switched_leaf(self, msg_id: str, delta: int) -> str:
        """The leaf shown after moving ``delta`` siblings away from ``msg_id`` (clamped)."""
        sibs = self.siblings(msg_id)
        i = [s.id for s in sibs].index(msg_id)
        j = min(max(i + delta, 0), len(sibs) - 1)
        return self.newest_leaf_under(sibs[j].id)

    def descendants(self, msg_id: str) -> list[str]:
        out: list[str] = []
        stack = [msg_id]
        while stack:
            cur = stack.pop()
            out.append(cur)
            stack.extend(c.id for c in self._children.get(cur, []))
        return out
