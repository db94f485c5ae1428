"""JSON Schema → the TypeScript-like declarations harmony puts in the developer message.

Follows the harmony renderer's conventions (gpt-oss-facts §6) because that is the text
the model was trained on: optional properties get ``?``, string enums become
``"a" | "b"``, integer → number, arrays ``T[]``, descriptions/titles/examples as ``//``
lines above a property, defaults as a trailing ``// default: …`` (string defaults quoted
unless the property is an enum), ``nullable`` adds ``| null``, ``oneOf`` becomes a
multi-line union, nested objects are indented by four spaces.

Small extensions where harmony falls back to ``any``: ``anyOf`` (what pydantic emits for
``Optional[...]``) renders as a one-line union, ``{"type": "null"}`` as ``null`` and an
untyped ``enum`` as its JSON literals.
"""

from __future__ import annotations

import json
from typing import Any

Schema = dict[str, Any]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_enum(schema: Schema) -> bool:
    return isinstance(schema.get("enum"), list) and bool(schema["enum"])


def _default_text(schema: Schema) -> str:
    default = schema["default"]
    if isinstance(default, str):
        return f"default: {default}" if _is_enum(schema) else f'default: "{default}"'
    return f"default: {_json(default)}"


def _with_null(schema: Schema, type_text: str) -> str:
    if schema.get("nullable") is True and "null" not in type_text:
        return f"{type_text} | null"
    return type_text


def _variant_line(variant: Any, indent: str, *, skip_description: bool = False,
                  property_description: str | None = None) -> str:
    """One `` | T // comments`` alternative of a oneOf union (without the newline)."""
    variant = variant if isinstance(variant, dict) else {}
    text = f"{indent} | {_with_null(variant, schema_to_ts(variant, indent + '   '))}"
    comments: list[str] = []
    desc = variant.get("description")
    if not skip_description and isinstance(desc, str) and desc != property_description:
        comments.append(desc)
    if "default" in variant:
        comments.append(_default_text(variant))
    if comments:
        text += " // " + " ".join(comments)
    return text


def _one_of(variants: list[Any], indent: str) -> str:
    return "".join("\n" + _variant_line(v, indent) for v in variants)


def _property(key: str, prop: Any, required: bool, indent: str) -> str:
    prop = prop if isinstance(prop, dict) else {}
    mark = "" if required else "?"
    lines = ""
    title = prop.get("title")
    if isinstance(title, str):
        lines += f"{indent}// {title}\n{indent}//\n"
    desc = prop.get("description")
    one_of = prop.get("oneOf")
    if not isinstance(one_of, list) and isinstance(desc, str):
        lines += f"{indent}// {desc}\n"
    examples = prop.get("examples")
    if isinstance(examples, list) and examples:
        lines += f"{indent}// Examples:\n"
        lines += "".join(f'{indent}// - "{ex}"\n' for ex in examples if isinstance(ex, str))
    if isinstance(one_of, list):
        return lines + _one_of_property(key, mark, prop, one_of, indent)
    type_text = _with_null(prop, schema_to_ts(prop, indent + "    "))
    line = f"{indent}{key}{mark}: {type_text},"
    if "default" in prop:
        line += " // " + _default_text(prop)
    return lines + line + "\n"


def _one_of_property(key: str, mark: str, prop: Schema, variants: list[Any], indent: str) -> str:
    desc = prop.get("description")
    prop_desc = desc if isinstance(desc, str) else None
    first = variants[0] if variants and isinstance(variants[0], dict) else {}
    desc_above = prop_desc is not None and first.get("description") != prop_desc
    out = f"{indent}// {prop_desc}\n" if desc_above else ""
    if "default" in prop:
        out += f"{indent}// {_default_text(prop)}\n"
    out += f"{indent}{key}{mark}:\n"
    for i, variant in enumerate(variants):
        out += _variant_line(variant, indent, skip_description=(i == 0 and desc_above),
                             property_description=prop_desc) + "\n"
    return out + f"{indent},\n"


def _object(schema: Schema, indent: str) -> str:
    out = ""
    desc = schema.get("description")
    if isinstance(desc, str):
        out += f"{indent}// {desc}\n"
    out += "{\n"
    props = schema.get("properties")
    required = schema.get("required")
    required_set = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    if isinstance(props, dict):
        for key, prop in props.items():
            out += _property(str(key), prop, key in required_set, indent)
    return out + f"{indent}}}"


def _scalar(type_name: str) -> str:
    return {"integer": "number", "number": "number", "boolean": "boolean", "string": "string",
            "null": "null"}.get(type_name, "any")


def schema_to_ts(schema: Any, indent: str = "") -> str:
    """The TypeScript-like type text for one JSON Schema node."""
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("oneOf"), list):
        return _one_of(schema["oneOf"], indent)
    type_ = schema.get("type")
    if isinstance(type_, list):
        names = ["number" if t == "integer" else t for t in type_ if isinstance(t, str)]
        if names:
            return " | ".join(names)
    if isinstance(type_, str):
        if type_ == "object":
            return _object(schema, indent)
        if type_ == "string":
            values = [f'"{v}"' for v in schema.get("enum") or () if isinstance(v, str)]
            return " | ".join(values) if values else "string"
        if type_ == "array":
            items = schema.get("items")
            return f"{schema_to_ts(items, indent)}[]" if items is not None else "Array<any>"
        return _scalar(type_)
    if isinstance(schema.get("anyOf"), list):
        parts = [_with_null(v, schema_to_ts(v, indent)) for v in schema["anyOf"] if isinstance(v, dict)]
        return " | ".join(dict.fromkeys(parts)) if parts else "any"
    if _is_enum(schema):
        return " | ".join(_json(v) for v in schema["enum"])
    return "any"


def has_parameters(parameters: Any) -> bool:
    """Whether a tool's parameter schema declares anything (else it renders as ``() => any``)."""
    if not isinstance(parameters, dict) or not parameters:
        return False
    if parameters.get("type", "object") == "object" and "oneOf" not in parameters and "anyOf" not in parameters:
        return bool(parameters.get("properties"))
    return True


def _lines(text: str) -> list[str]:
    """Lines the way harmony (Rust ``str::lines``) splits them: no empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def render_functions_namespace(tools: list[tuple[str, str, Any]]) -> str:
    """``## functions`` … ``} // namespace functions`` for (name, description, parameters)."""
    parts = ["## functions\n", "namespace functions {\n"]
    for name, description, parameters in tools:
        parts.extend(f"// {line}" for line in _lines(description))
        if has_parameters(parameters):
            parts.append(f"type {name} = (_: {schema_to_ts(parameters)}) => any;\n")
        else:
            parts.append(f"type {name} = () => any;\n")
    parts.append("} // namespace functions")
    return "\n".join(parts)
