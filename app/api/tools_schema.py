"""Function tool definitions and ``tool_choice``, shared by chat completions and responses.

Tools are rendered into the harmony developer message as a TypeScript-like namespace, so
a definition must be a named function whose ``parameters`` is a JSON Schema *object*; a
schema that cannot describe call arguments is rejected with a message naming the tool.
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.types import Tool

from .errors import invalid
from .fields import describe, type_name

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
MAX_TOOLS = 128
MAX_SCHEMA_CHARS = 64_000


def parse_tool(name: Any, description: Any, parameters: Any, param: str) -> Tool:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise invalid(f"'{param}.name' must be 1-64 letters, digits, '_' or '-', got {describe(name)}.",
                      param=f"{param}.name", code="invalid_value")
    if description is not None and not isinstance(description, str):
        raise invalid(f"'{param}.description' must be a string, got {type_name(description)}.",
                      param=f"{param}.description", code="invalid_type")
    if parameters is not None:
        _check_parameters(parameters, f"{param}.parameters", name)
    return Tool(name=name, description=description or "", parameters=parameters or None)


def _check_parameters(schema: Any, param: str, name: str) -> None:
    if not isinstance(schema, dict):
        raise invalid(f"Tool '{name}': '{param}' must be a JSON Schema object such as "
                      f'{{"type": "object", "properties": {{...}}}}, got {type_name(schema)}.',
                      param=param, code="invalid_tool_schema")
    if schema.get("type", "object") != "object":
        raise invalid(f"Tool '{name}': '{param}.type' must be \"object\" (function arguments are a JSON object), "
                      f"got {describe(schema.get('type'))}.", param=f"{param}.type", code="invalid_tool_schema")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise invalid(f"Tool '{name}': '{param}.properties' must be an object mapping argument names to schemas, "
                      f"got {type_name(props)}.", param=f"{param}.properties", code="invalid_tool_schema")
    for key, sub in props.items():
        if not isinstance(sub, dict | bool):
            raise invalid(f"Tool '{name}': the schema of argument '{key}' must be an object, got {type_name(sub)}.",
                          param=f"{param}.properties.{key}", code="invalid_tool_schema")
        if isinstance(sub, dict):
            _check_type_field(sub.get("type"), f"{param}.properties.{key}.type", name)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise invalid(f"Tool '{name}': '{param}.required' must be an array of argument names, got "
                      f"{describe(required)}.", param=f"{param}.required", code="invalid_tool_schema")
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise invalid(f"Tool '{name}': parameters schema is larger than {MAX_SCHEMA_CHARS} characters.",
                      param=param, code="invalid_tool_schema")


def _check_type_field(t: Any, param: str, name: str) -> None:
    if t is None:
        return
    types = t if isinstance(t, list) else [t]
    if not types or not all(isinstance(x, str) and x in _JSON_TYPES for x in types):
        raise invalid(f"Tool '{name}': '{param}' must be a JSON Schema type ({', '.join(sorted(_JSON_TYPES))}), "
                      f"got {describe(t)}.", param=param, code="invalid_tool_schema")


def check_unique(tools: list[Tool], param: str) -> None:
    if len(tools) > MAX_TOOLS:
        raise invalid(f"'{param}' has {len(tools)} tools; at most {MAX_TOOLS} are supported.", param=param)
    seen: set[str] = set()
    for t in tools:
        if t.name in seen:
            raise invalid(f"Two tools are named '{t.name}'; tool names must be unique.", param=param,
                          code="invalid_value")
        seen.add(t.name)


BUILTIN_NOTE = "built-in tools (web search, file search, code interpreter, ...) do not run on this local server"


# OpenAI's hosted and client-run tool types (with dated variants such as web_search_2025_08_26)
_BUILTIN = re.compile(r"^(web_search|web_search_preview|file_search|code_interpreter|computer_use_preview|computer"
                      r"|computer_use|image_generation|mcp|local_shell|shell|custom|apply_patch|tool_search)"
                      r"(_[0-9_]+)?$")


def is_function_tool(t: dict[str, Any], param: str) -> bool:
    """True for a function tool; False for a built-in tool type (the caller drops it with a warning);
    any other type is a 400 naming the field."""
    kind = t.get("type")
    if kind == "function":
        return True
    if isinstance(kind, str) and _BUILTIN.match(kind):
        return False
    raise invalid(f"'{param}.type' must be \"function\" (built-in tool types are dropped with a warning), got "
                  f"{describe(kind)}.", param=f"{param}.type", code="invalid_value")


def apply_tool_choice(tools: list[Tool], choice: Any, *, param: str = "tool_choice", flat: bool = False) -> list[Tool]:
    """The tools to offer the model. ``"none"`` offers none; a named function offers only
    that one; with ``"required"`` or a name the engine forces the call (see structured.py)."""
    if choice == "required" and not tools:
        raise invalid(f"'{param}' is \"required\" but no function tools were given.", param=param,
                      code="invalid_value")
    if choice is None or choice in ("auto", "required"):
        return tools
    if choice == "none":
        return []
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice if flat else choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            where = f"{param}.name" if flat else f"{param}.function.name"
            raise invalid(f"'{where}' must name one of the tools.", param=where, code="invalid_value")
        chosen = [t for t in tools if t.name == name]
        if not chosen:
            raise invalid(f"'{param}' names function '{name}', which is not in 'tools'.", param=param,
                          code="invalid_value")
        return chosen
    raise invalid(f"'{param}' must be \"none\", \"auto\", \"required\" or "
                  f"{{\"type\": \"function\", ...}}, got {describe(choice)}.", param=param, code="invalid_value")
