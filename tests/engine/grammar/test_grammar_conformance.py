"""Grammar conformance: random JSON Schemas -> masked sampling -> every output validates.

The guide is driven exactly as ``Engine._run`` drives it (``apply`` before sampling, ``advance``
after) with random logits over the demo model's tokenizer, so hundreds of schemas run in seconds;
one test goes through ``Engine.generate`` end to end. The random logits are biased towards tokens
holding a quote, comma or closing bracket so strings and arrays end within the token budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from engine.grammar import Constraint, GrammarError, HarmonyGuide, ToolTarget, compile_constraint
from engine.harmony import HarmonyStreamParser
from engine.tokenizer import load_tokenizer
from engine.types import TextDelta, ToolCallEvent

from .schemas import json_schemas

DEMO = Path(__file__).resolve().parents[3] / "resources" / "demo-model"
TOK, SP = load_tokenizer(DEMO)
VOCAB = TOK.get_vocab_size()
_closing = [i for i in range(VOCAB) if any(ch in TOK.decode([i]) for ch in '"},]')]
BIAS = torch.zeros(VOCAB)
BIAS[_closing] = 3.0


def run_guided(constraint: Constraint, seed: int, max_steps: int = 3000) -> tuple[list[Any], list[int]]:
    """Sample under the guide; returns the parser's events and the token ids."""
    guide = HarmonyGuide(compile_constraint(constraint, TOK, SP, VOCAB))
    parser = HarmonyStreamParser(TOK, SP)
    gen = torch.Generator().manual_seed(seed)
    events: list[Any] = []
    ids: list[int] = []
    for _ in range(max_steps):
        logits = torch.randn(VOCAB, generator=gen) * 2 + BIAS
        tok = int(torch.multinomial(torch.softmax(guide.apply(logits), -1), 1, generator=gen))
        guide.advance(tok)
        ids.append(tok)
        events += parser.feed(tok)
        if parser.stop_reason is not None:
            return events + parser.finish(), ids
    raise AssertionError(f"no end within {max_steps} tokens: {TOK.decode(ids[-80:], skip_special_tokens=False)!r}")


def final_text(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and e.channel == "final")


def check_schema_output(schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    events, _ = run_guided(Constraint("json", schema, analysis_budget=0), seed=len(json.dumps(schema)))
    jsonschema.validate(json.loads(final_text(events)), schema)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=json_schemas())
def test_random_schemas_always_validate(schema: dict[str, Any]) -> None:
    check_schema_output(schema)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=json_schemas())
def test_100_random_schemas_always_validate(schema: dict[str, Any]) -> None:
    check_schema_output(schema)


def test_unconstrained_random_sampling_is_not_json() -> None:
    """The check above can fail: without the guide the same sampler yields no valid answer."""
    gen = torch.Generator().manual_seed(0)
    ids = [int(torch.multinomial(torch.softmax(torch.randn(VOCAB, generator=gen) * 2 + BIAS, -1), 1,
                                 generator=gen)) for _ in range(40)]
    with pytest.raises(ValueError):
        json.loads(TOK.decode(ids))


def test_json_mode_with_free_analysis_first() -> None:
    events, ids = run_guided(Constraint("json", None, analysis_budget=12), seed=3)
    analysis = "".join(e.text for e in events if isinstance(e, TextDelta) and e.channel == "analysis")
    assert analysis, "the analysis channel was skipped"
    assert isinstance(json.loads(final_text(events)), dict)
    assert ids.count(SP.end) == 1 and ids[-1] == SP.return_


def test_analysis_is_free_but_cannot_end_in_a_foreign_special() -> None:
    guide = HarmonyGuide(compile_constraint(Constraint("json", None), TOK, SP, VOCAB))
    for t in TOK.encode("<|channel|>analysis<|message|>", add_special_tokens=False).ids:
        guide.advance(t)
    assert guide.phase == "analysis"
    logits = torch.randn(VOCAB)
    out = guide.apply(logits)
    free = torch.isfinite(out)
    banned = len(guide.c.special_ids) - 1  # every harmony special the tokenizer has, except <|end|>
    assert banned >= 19 and int(free.sum()) == VOCAB - banned
    assert bool(free[SP.end]) and not bool(free[SP.return_]) and not bool(free[SP.call])
    assert torch.equal(out[free], logits[free])  # free text logits untouched


def test_forced_tool_call_names_one_of_the_tools() -> None:
    tools = (ToolTarget("get_weather", {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                                        "required": ["city"], "additionalProperties": False}),
             ToolTarget("add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                "required": ["a", "b"], "additionalProperties": False}))
    schemas = {t.name: t.schema for t in tools}
    names = set()
    for seed in range(6):
        events, ids = run_guided(Constraint("tool", tools=tools, analysis_budget=4), seed=seed)
        calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
        assert len(calls) == 1 and ids[-1] == SP.call
        jsonschema.validate(json.loads(calls[0].arguments), schemas[calls[0].name])
        names.add(calls[0].name)
    assert names == {"get_weather", "add"}


def test_bad_schema_is_a_grammar_error() -> None:
    with pytest.raises(GrammarError):
        compile_constraint(Constraint("json", {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}},
                                               "required": ["a"]}), TOK, SP, VOCAB)


def test_open_objects_get_only_their_own_keys() -> None:
    """A schema without additionalProperties: the guide closes it (outputs still validate the original)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["a"]}
    for seed in range(5):
        events, _ = run_guided(Constraint("json", schema, analysis_budget=0, strict=False), seed=seed)
        value = json.loads(final_text(events))
        jsonschema.validate(value, schema)
        assert set(value) == {"a"}
