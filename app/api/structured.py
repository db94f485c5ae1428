"""Structured output and forced tool calls -> an engine :class:`~engine.grammar.Constraint`.

``response_format`` (chat) and ``text.format`` (responses): ``text`` (free), ``json_object``
(any JSON object) or ``json_schema`` (``strict`` true: the schema exactly, a keyword the
compiler does not implement is a 400; false: such keywords are ignored). The final answer is
then decoded under a grammar; the schema is also shown to the model in the developer message
(harmony's "# Response Formats" section) so it knows what it is writing.
``tool_choice`` ``"required"`` or a named function forces a call: header and arguments
are decoded under the grammar of the offered tools' schemas.
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.grammar import Constraint, ToolTarget
from engine.types import Message, Tool

from .errors import invalid
from .fields import describe, get_bool, get_str, type_name

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_SCHEMA_CHARS = 64_000


def parse_format(fmt: Any, param: str, *, nested: bool) -> tuple[Constraint | None, Message | None]:
    """``nested``: chat's ``{"type": "json_schema", "json_schema": {...}}``; else the flat Responses shape."""
    if fmt is None:
        return None, None
    if not isinstance(fmt, dict):
        raise invalid(f"'{param}' must be an object, got {type_name(fmt)}.", param=param, code="invalid_type")
    kind = fmt.get("type", "text")
    if kind == "text":
        return None, None
    if kind == "json_object":
        note = Message("developer", "# Response Formats\n\nAnswer with one JSON object and nothing else.")
        return Constraint("json", None), note
    if kind != "json_schema":
        raise invalid(f"'{param}.type' must be \"text\", \"json_object\" or \"json_schema\", got {describe(kind)}.",
                      param=f"{param}.type", code="invalid_value")
    spec = fmt.get("json_schema") if nested else fmt
    sp = f"{param}.json_schema" if nested else param
    if not isinstance(spec, dict):
        raise invalid(f"Missing required parameter '{sp}'.", param=sp, code="missing_required_parameter")
    name = get_str(spec, "name", f"{sp}.name", default="response")
    if not _NAME.match(name):
        raise invalid(f"'{sp}.name' must be 1-64 letters, digits, '_' or '-', got {describe(name)}.",
                      param=f"{sp}.name", code="invalid_value")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise invalid(f"'{sp}.schema' must be a JSON Schema object, got "
                      f"{type_name(schema) if schema is not None else 'nothing'}.", param=f"{sp}.schema",
                      code="invalid_type" if schema is not None else "missing_required_parameter")
    text = json.dumps(schema, ensure_ascii=False)
    if len(text) > MAX_SCHEMA_CHARS:
        raise invalid(f"'{sp}.schema' is larger than {MAX_SCHEMA_CHARS} characters.", param=f"{sp}.schema")
    strict = get_bool(spec, "strict", f"{sp}.strict")
    desc = get_str(spec, "description", f"{sp}.description", default="")
    note = Message("developer", f"# Response Formats\n\n## {name}\n\n" + (f"// {desc}\n" if desc else "") + text)
    return Constraint("json", schema, strict=strict, schema_text=f"{sp}.schema"), note


def tool_constraint(tools: list[Tool], choice: Any, strict_names: set[str]) -> Constraint | None:
    """A forced call for ``tool_choice`` "required" or a named function (``tools`` already narrowed)."""
    forced = choice == "required" or (isinstance(choice, dict) and choice.get("type") == "function")
    if not forced or not tools:
        return None
    targets = tuple(ToolTarget(t.name, t.parameters) for t in tools)
    return Constraint("tool", tools=targets, strict=all(t.name in strict_names for t in tools))


def add_format_note(messages: tuple[Message, ...], note: Message | None) -> tuple[Message, ...]:
    """Put the response-format note after the leading system/developer messages (harmony's
    developer message then carries it after the instructions)."""
    if note is None:
        return messages
    lead = 0
    while lead < len(messages) and messages[lead].role in ("system", "developer"):
        lead += 1
    return (*messages[:lead], note, *messages[lead:])
