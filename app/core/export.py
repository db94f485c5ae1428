"""Export the visible branch of a conversation to Markdown."""

from __future__ import annotations

import datetime as dt
import json

from app.core.message_tree import StoredMessage

ROLE_HEADINGS = {"user": "You", "assistant": "Assistant", "tool": "Tool", "system": "System", "developer": "Developer"}


def conversation_markdown(title: str, thread: list[StoredMessage], model: str = "", engine: str = "",
                          other_branch_messages: int = 0) -> str:
    """``model``: the model's name; ``engine``: the backend that answered; ``other_branch_messages``:
    messages on branches not shown (the export covers the shown branch and says so)."""
    lines = [f"# {title}", ""]
    meta = [f"Exported {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}"]
    if model:
        meta.append(f"model: {model}")
    if engine:
        meta.append(f"engine: {engine}")
    if other_branch_messages:
        meta.append(f"the shown branch; {other_branch_messages} message(s) on other branches not included")
    lines += ["_" + " · ".join(meta) + "_", ""]
    for m in thread:
        lines += [f"## {ROLE_HEADINGS.get(m.role, m.role.title())}", ""]
        if m.reasoning:
            quoted = "\n".join("> " + ln if ln else ">" for ln in m.reasoning.splitlines())
            lines += ["<details><summary>Reasoning</summary>", "", quoted, "", "</details>", ""]
        if m.content:
            lines += [m.content.rstrip(), ""]
        for c in m.tool_calls:
            try:
                args = json.dumps(json.loads(c.arguments), indent=2, ensure_ascii=False)
            except (ValueError, TypeError):
                args = c.arguments
            lines += [f"**Tool call** `{c.name}`", "", "```json", args, "```", ""]
    return "\n".join(lines).rstrip() + "\n"
