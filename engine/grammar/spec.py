"""What a generation must conform to, and the Lark grammar (llguidance dialect) that says it.

A :class:`Constraint` names the target of a harmony completion: a final answer that is JSON
(any object, or one JSON Schema) or a call of one of some function tools with arguments that
match the tool's schema. The analysis channel before it stays free text: the grammar only
ends the analysis header (``<|channel|>analysis<|message|>``), and the guide
(``guide.py``) lets the model write its reasoning unmasked until ``<|end|>``.

Completion grammar (generation starts after the prompt's ``<|start|>assistant``)::

    first:  <|channel|> "analysis" <|message|>   |   TARGET
    after analysis <|end|>:  <|start|> "assistant" TARGET
    TARGET: <|channel|> "final" <|message|> JSON <|return|>
          | <|channel|> "commentary to=functions.NAME " <|constrain|> "json" <|message|> ARGS <|call|>
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class GrammarError(ValueError):
    """The schema or tool set cannot be turned into a grammar (the message says why)."""


@dataclass(frozen=True)
class ToolTarget:
    name: str
    schema: dict[str, Any] | None = None  # None: any JSON object


@dataclass(frozen=True)
class Constraint:
    """``kind="json"``: the final answer is JSON matching ``schema`` (None = any object).
    ``kind="tool"``: the turn must be a call of one of ``tools``.
    ``strict`` False compiles leniently (keywords the compiler does not implement are ignored,
    not refused). ``analysis_budget`` caps the free reasoning (tokens) before the target is
    forced; None = no cap, 0 = no analysis at all."""

    kind: Literal["json", "tool"]
    schema: dict[str, Any] | None = None
    tools: tuple[ToolTarget, ...] = ()
    strict: bool = True
    analysis_budget: int | None = None
    schema_text: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.kind == "tool":
            if not self.tools:
                raise GrammarError("a forced tool call needs at least one tool")
            for t in self.tools:
                if not _TOOL_NAME.match(t.name):
                    raise GrammarError(f"tool name {t.name!r} must be 1-64 letters, digits, '_' or '-'")
        if self.analysis_budget is not None and self.analysis_budget < 0:
            raise GrammarError("analysis_budget must be >= 0")


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")  # allOf members stay open: closing them could conflict
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_ONE = ("items", "additionalItems", "not", "if", "then", "else", "contains")


def close_objects(schema: Any) -> Any:
    """A copy where every object schema with ``properties`` and no ``additionalProperties`` gets
    ``additionalProperties: false``: the model writes the keys it was asked for instead of inventing
    more until the token limit. Every output still validates against the original schema."""
    if isinstance(schema, list):
        return [close_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [close_objects(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: close_objects(v) for k, v in out[key].items()}
    for key in _SUBSCHEMA_ONE:
        if isinstance(out.get(key), dict | list):
            out[key] = close_objects(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = close_objects(out["additionalProperties"])
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out and \
            "patternProperties" not in out and "unevaluatedProperties" not in out and "allOf" not in out:
        out["additionalProperties"] = False
    return out


def _json_rule(schema: dict[str, Any] | None, strict: bool) -> str:
    doc: dict[str, Any] = close_objects(schema) if schema is not None else {"type": "object"}
    # compact output (no free whitespace): fewer tokens and no endless-whitespace loops
    opts = {"whitespace_flexible": False, "lenient": not strict}
    doc["x-guidance"] = {**opts, **(doc.get("x-guidance") or {})} if isinstance(doc.get("x-guidance"), dict) else opts
    return "%json " + json.dumps(doc, ensure_ascii=False)


def target_rules(c: Constraint) -> list[str]:
    """Lark rules defining ``target`` for a constraint."""
    if c.kind == "json":
        return ["target: <|channel|> \"final\" <|message|> body <|return|>",
                f"body: {_json_rule(c.schema, c.strict)}"]
    alts: list[str] = []
    rules: list[str] = []
    for i, t in enumerate(c.tools):
        alts.append(f"call{i}")
        rules.append(f"call{i}: <|channel|> \"commentary to=functions.{t.name} \" <|constrain|> \"json\" <|message|> "
                     f"args{i} <|call|>")
        rules.append(f"args{i}: {_json_rule(t.schema, c.strict)}")
    return ["target: " + " | ".join(alts), *rules]


def first_grammar(c: Constraint) -> str:
    """The grammar at the start of the completion: an analysis header, or the target directly."""
    start = "start: target" if c.analysis_budget == 0 else "start: analysis_header | target"
    return "\n".join([start, "analysis_header: <|channel|> \"analysis\" <|message|>", *target_rules(c)])


def after_analysis_grammar(c: Constraint) -> str:
    """The grammar after the analysis message's ``<|end|>``: a new assistant message, the target."""
    return "\n".join(["start: <|start|> \"assistant\" target", *target_rules(c)])
