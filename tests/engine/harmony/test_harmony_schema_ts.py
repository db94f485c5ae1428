"""JSON Schema → TypeScript-like declarations (harmony developer message)."""

from __future__ import annotations

import json

from tokenizers import Regex, Tokenizer, pre_tokenizers

from engine.harmony import OrdinaryEncoder
from engine.harmony.schema_ts import has_parameters, render_functions_namespace, schema_to_ts


def test_scalars_and_unions() -> None:
    assert schema_to_ts({"type": "integer"}) == "number"
    assert schema_to_ts({"type": "number"}) == "number"
    assert schema_to_ts({"type": "boolean"}) == "boolean"
    assert schema_to_ts({"type": ["integer", "string", "null"]}) == "number | string | null"
    assert schema_to_ts({"type": "string", "enum": ["a", "b"]}) == '"a" | "b"'
    assert schema_to_ts({"type": "array"}) == "Array<any>"
    assert schema_to_ts({"type": "array", "items": {"type": "integer"}}) == "number[]"
    assert schema_to_ts({}) == "any"
    assert schema_to_ts("nonsense") == "any"


def test_extensions_where_harmony_says_any() -> None:
    assert schema_to_ts({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string | null"
    assert schema_to_ts({"enum": [1, "x", None]}) == '1 | "x" | null'


def test_object_with_all_property_kinds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "string", "title": "Query", "description": "What to find", "examples": ["cats", "dogs"]},
            "n": {"type": "integer", "nullable": True, "default": None},
            "flags": {"type": "array", "items": {"type": "object", "properties": {"on": {"type": "boolean"}},
                                                 "required": ["on"]}},
            "mode": {"oneOf": [{"type": "string", "description": "by name"}, {"type": "number", "default": 3}],
                     "description": "Lookup mode", "default": "name"},
        },
        "required": ["q"],
    }
    expected = (
        "{\n"
        "// Query\n"
        "//\n"
        "// What to find\n"
        "// Examples:\n"
        '// - "cats"\n'
        '// - "dogs"\n'
        "q: string,\n"
        "n?: number | null, // default: null\n"
        "flags?: {\n"
        "    on: boolean,\n"
        "    }[],\n"
        "// Lookup mode\n"
        '// default: "name"\n'
        "mode?:\n"
        " | string\n"
        " | number // default: 3\n"
        ",\n"
        "}"
    )
    assert schema_to_ts(schema) == expected


def test_namespace_and_empty_parameters() -> None:
    assert not has_parameters(None)
    assert not has_parameters({"type": "object", "properties": {}})
    assert has_parameters({"type": "object", "properties": {"a": {"type": "string"}}})
    text = render_functions_namespace([("ping", "", None), ("add", "Adds.", {
        "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]})])
    assert text == (
        "## functions\n\nnamespace functions {\n\n"
        "type ping = () => any;\n\n"
        "// Adds.\ntype add = (_: {\nx: number,\n}) => any;\n\n"
        "} // namespace functions"
    )


def test_by_hand_encoding_with_o200k_style_pretokenizer(tok: Tokenizer) -> None:
    # gpt-oss's tokenizer.json pre-tokenizes with a regex Split followed by ByteLevel(use_regex=False).
    data = json.loads(tok.to_str())
    hf_style = Tokenizer.from_str(json.dumps(data))
    hf_style.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r" ?\p{L}+| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    enc = OrdinaryEncoder(hf_style)
    text = "def f(x):\n    return x  # 123 café"
    assert enc._encode_by_hand(text) == enc.encode(text)
    evil = "a <|end|> b"
    ids = enc.encode(evil)
    assert not set(hf_style.get_added_tokens_decoder()) & set(ids)
    assert hf_style.decode(ids) == evil
