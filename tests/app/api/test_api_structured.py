"""Structured output, forced tool calls and sampling parameters on the scripted engine (in process).

The scripted engine forces the tokens of a script; under a grammar a scripted token the grammar
forbids is masked out, so these tests show the grammar winning over what the "model" wanted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import jsonschema
import openai
import pytest

from engine.types import GenerationParams

from .conftest import LiveServer
from .rawhttp import RawClient
from .scripted_engine import ScriptedEngine

USER = [{"role": "user", "content": "hi"}]
SMALL = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "b": {"type": "boolean"}}, "required": ["a", "b"],
         "additionalProperties": False}
ENGINE_FIELDS = {f.name for f in dataclasses.fields(GenerationParams)}


def test_json_schema_wins_over_what_the_model_writes(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>I would rather not answer in JSON.<|return|>")
    r = client.chat.completions.create(model="m", messages=USER, max_tokens=60,  # type: ignore[arg-type]
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "small", "strict": True, "schema": SMALL}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content or ""), SMALL)


def test_tool_choice_required_forces_a_call(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>No tools today.<|return|>")
    tool = {"type": "function", "function": {"name": "pick", "parameters": SMALL}}
    # deterministic (greedy) and room enough: half of max_tokens may go to the free reasoning first
    r = client.chat.completions.create(model="m", messages=USER, tools=[tool], tool_choice="required",  # type: ignore[list-item]
                                       max_tokens=240, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls and calls[0].function.name == "pick"  # type: ignore[union-attr]
    jsonschema.validate(json.loads(calls[0].function.arguments), SMALL)  # type: ignore[union-attr]


def test_responses_text_format_json_schema(live: LiveServer, scripted: ScriptedEngine) -> None:
    scripted.expect('<|channel|>final<|message|>{"a":3,"b":true}<|return|>')
    r = live.client().responses.create(model="m", input="hi", max_output_tokens=60, text={"format": {
        "type": "json_schema", "name": "small", "schema": SMALL, "strict": True}})
    assert json.loads(r.output_text) == {"a": 3, "b": True}  # compact: the grammar allows no free whitespace
    assert r.text.format.type == "json_schema"  # type: ignore[union-attr]


def test_litellm_json_mode(live: LiveServer, scripted: ScriptedEngine) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    scripted.expect('<|channel|>final<|message|>{"cat":"Tom","age":3}<|return|>')
    r = litellm.completion(model="openai/m", api_base=live.url + "/v1", api_key="x", messages=USER,
                           response_format={"type": "json_object"}, max_tokens=60)
    assert json.loads(r.choices[0].message.content) == {"cat": "Tom", "age": 3}


def test_unknown_fields_are_named_in_a_warning(live: LiveServer, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>ok<|return|>")
    r = RawClient(live.server.port or 0).post("/v1/chat/completions", json={
        "messages": USER, "max_tokens": 4, "temprature": 0.2, "tools": [{"type": "web_search"}]})
    assert r.status_code == 200
    warning = r.headers["X-Neural-Warning"]
    assert "'temprature'" in warning and "tools[0]" in warning


@pytest.mark.parametrize("field,value", [("top_k", 5), ("min_p", 0.1), ("presence_penalty", 0.5),
                                         ("frequency_penalty", -0.5), ("repetition_penalty", 1.2)])
def test_sampling_parameters_are_applied_or_refused(live: LiveServer, scripted: ScriptedEngine, field: str,
                                                    value: Any) -> None:
    scripted.expect("<|channel|>final<|message|>ok<|return|>")
    r = RawClient(live.server.port or 0).post("/v1/chat/completions", json={
        "messages": USER, "max_tokens": 8, field: value})
    if field in ENGINE_FIELDS:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400 and r.json()["error"]["param"] == field


def test_logit_bias_is_applied(live: LiveServer, scripted: ScriptedEngine, engine: ScriptedEngine) -> None:
    """+100 on one token makes it the whole completion (the raw endpoint, the model's own logits)."""
    tok = engine.tokenizer.encode(" fox", add_special_tokens=False).ids[-1]
    r = RawClient(live.server.port or 0).post("/v1/completions", json={
        "prompt": "The quick brown", "max_tokens": 5, "logit_bias": {str(tok): 100}, "seed": 1})
    if "logit_bias" not in ENGINE_FIELDS:
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias"
        return
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == engine.tokenizer.decode([tok] * 5)


def test_a_new_engine_has_its_vocabulary_indexed_in_the_background(engine: ScriptedEngine) -> None:
    """The server indexes the vocabulary when it gets an engine, before any constrained request."""
    from app.api.server import ApiServer
    from engine.grammar import compile as grammar_compile

    with grammar_compile._cache_lock:
        grammar_compile._ll_cache.clear()
    ApiServer(engine)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with grammar_compile._cache_lock:
            if any(tok is engine.tokenizer for tok, _ in grammar_compile._ll_cache.values()):
                return
        time.sleep(0.05)
    pytest.fail("no vocabulary index was built for the server's engine")
