"""Malformed requests get 4xx OpenAI-shaped errors, and the server keeps serving afterwards.

A table of hand-picked bad requests, then hypothesis-generated ones built so that every
example is certainly invalid (a field replaced by a value of the wrong type or range, a body
without its required field, bytes that are not a JSON object).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import CONTEXT, LiveServer
from .rawhttp import RawClient, RawResponse
from .scripted_engine import ScriptedEngine

MAX_BODY = 64 * 1024
CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(scope="module")
def small_server(engine: ScriptedEngine) -> Iterator[LiveServer]:
    from app.api import ServerConfig

    srv = LiveServer(engine, ServerConfig(port=0, max_body_bytes=MAX_BODY))
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def http(small_server: LiveServer) -> RawClient:
    return RawClient(small_server.server.port or 0)


def chat(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": USER, "max_tokens": 1}
    for k, v in overrides.items():
        if v is ...:
            body.pop(k, None)
        else:
            body[k] = v
    return body


def tool_with(**fn: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", **fn}}]


# (id, path, body (object, or bytes sent as is), expected status, expected param or None)
CASES: list[tuple[str, str, Any, int, str | None]] = [
    ("invalid-json", CHAT, b'{"model": "m", "messages": [', 400, None),
    ("json-array", CHAT, b"[1, 2]", 400, None),
    ("empty-body", CHAT, b"", 400, None),
    ("nan", CHAT, b'{"messages": NaN}', 400, None),
    ("not-utf8", CHAT, b'{"messages": "\xff\xfe"}', 400, None),
    ("messages-missing", CHAT, chat(messages=...), 400, "messages"),
    ("messages-string", CHAT, chat(messages="hi"), 400, "messages"),
    ("messages-empty", CHAT, chat(messages=[]), 400, "messages"),
    ("message-not-object", CHAT, chat(messages=["hi"]), 400, "messages[0]"),
    ("unknown-role", CHAT, chat(messages=[{"role": "wizard", "content": "x"}]), 400, "messages[0].role"),
    ("role-missing", CHAT, chat(messages=[{"content": "x"}]), 400, "messages[0].role"),
    ("legacy-function-role", CHAT, chat(messages=[{"role": "function", "content": "x"}]), 400, "messages[0].role"),
    ("content-number", CHAT, chat(messages=[{"role": "user", "content": 42}]), 400, "messages[0].content"),
    ("content-missing", CHAT, chat(messages=[{"role": "user"}]), 400, "messages[0].content"),
    ("content-image", CHAT, chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]), 400, "messages[0].content[0]"),
    ("content-part-no-text", CHAT, chat(messages=[{"role": "user", "content": [{"type": "text"}]}]), 400,
     "messages[0].content[0].text"),
    ("tool-unknown-call-id", CHAT, chat(messages=[*USER, {"role": "tool", "tool_call_id": "nope", "content": "1"}]),
     400, "messages[1].tool_call_id"),
    ("tool-call-args-number", CHAT, chat(messages=[*USER, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": 5}}]}]), 400,
     "messages[1].tool_calls[0].function.arguments"),
    ("max-tokens-zero", CHAT, chat(max_tokens=0), 400, "max_tokens"),
    ("max-tokens-negative", CHAT, chat(max_tokens=-5), 400, "max_tokens"),
    ("max-tokens-absurd", CHAT, chat(max_tokens=10**12), 400, "max_tokens"),
    ("max-tokens-over-context", CHAT, chat(max_tokens=CONTEXT + 1), 400, "max_tokens"),
    ("max-tokens-string", CHAT, chat(max_tokens="ten"), 400, "max_tokens"),
    ("max-tokens-bool", CHAT, chat(max_tokens=True), 400, "max_tokens"),
    ("max-tokens-fraction", CHAT, chat(max_tokens=1.5), 400, "max_tokens"),
    ("max-completion-tokens-absurd", CHAT, chat(max_completion_tokens=2**62), 400, "max_completion_tokens"),
    ("temperature-negative", CHAT, chat(temperature=-1), 400, "temperature"),
    ("temperature-huge", CHAT, chat(temperature=1e9), 400, "temperature"),
    ("temperature-string", CHAT, chat(temperature="hot"), 400, "temperature"),
    ("top-p-zero", CHAT, chat(top_p=0), 400, "top_p"),
    ("top-p-above-one", CHAT, chat(top_p=1.5), 400, "top_p"),
    ("seed-string", CHAT, chat(seed="x"), 400, "seed"),
    ("seed-too-big", CHAT, chat(seed=2**70), 400, "seed"),
    ("stop-number", CHAT, chat(stop=5), 400, "stop"),
    ("stop-empty-string", CHAT, chat(stop=[""]), 400, "stop"),
    ("stop-too-many", CHAT, chat(stop=[str(i) for i in range(20)]), 400, "stop"),
    ("n-two", CHAT, chat(n=2), 400, "n"),
    ("stream-string", CHAT, chat(stream="yes"), 400, "stream"),
    ("stream-options-list", CHAT, chat(stream=True, stream_options=[1]), 400, "stream_options"),
    ("effort-unknown", CHAT, chat(reasoning_effort="extreme"), 400, "reasoning_effort"),
    ("model-number", CHAT, chat(model=7), 400, "model"),
    ("logprobs", CHAT, chat(logprobs=True), 400, "logprobs"),
    ("response-format-no-schema", CHAT, chat(response_format={"type": "json_schema"}), 400,
     "response_format.json_schema"),
    ("response-format-type", CHAT, chat(response_format={"type": "yaml"}), 400, "response_format.type"),
    ("response-format-bad-ref", CHAT, chat(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}}), 400,
     "response_format.json_schema.schema"),
    ("logit-bias-not-token", CHAT, chat(logit_bias={"abc": 1}), 400, "logit_bias.abc"),
    ("logit-bias-range", CHAT, chat(logit_bias={"5": 101}), 400, "logit_bias.5"),
    ("tool-choice-required-no-tools", CHAT, chat(tool_choice="required"), 400, "tool_choice"),
    ("lone-surrogate", CHAT, chat(messages=[{"role": "user", "content": "\ud800"}]), 400, "messages[0].content"),
    ("functions-legacy", CHAT, chat(functions=[{"name": "f"}]), 400, "functions"),
    ("tools-object", CHAT, chat(tools={"type": "function"}), 400, "tools"),
    ("tool-type-number", CHAT, chat(tools=[{"type": 5}]), 400, "tools[0].type"),
    ("tool-no-function", CHAT, chat(tools=[{"type": "function"}]), 400, "tools[0].function"),
    ("tool-no-name", CHAT, chat(tools=[{"type": "function", "function": {"description": "x"}}]), 400,
     "tools[0].function.name"),
    ("tool-name-spaces", CHAT, chat(tools=[{"type": "function", "function": {"name": "get weather"}}]), 400,
     "tools[0].function.name"),
    ("tool-params-string", CHAT, chat(tools=tool_with(parameters="{}")), 400, "tools[0].function.parameters"),
    ("tool-params-array-type", CHAT, chat(tools=tool_with(parameters={"type": "array"})), 400,
     "tools[0].function.parameters.type"),
    ("tool-properties-list", CHAT, chat(tools=tool_with(parameters={"type": "object", "properties": ["a"]})), 400,
     "tools[0].function.parameters.properties"),
    ("tool-property-bad-type", CHAT, chat(tools=tool_with(parameters={"type": "object", "properties": {
        "a": {"type": "banana"}}})), 400, "tools[0].function.parameters.properties.a.type"),
    ("tool-required-string", CHAT, chat(tools=tool_with(parameters={"type": "object", "required": "a"})), 400,
     "tools[0].function.parameters.required"),
    ("tool-description-number", CHAT, chat(tools=tool_with(description=3)), 400, "tools[0].function.description"),
    ("tools-duplicate", CHAT, chat(tools=[TOOL, TOOL]), 400, "tools"),
    ("tool-choice-unknown-fn", CHAT, chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "g"}}),
     400, "tool_choice"),
    ("tool-choice-number", CHAT, chat(tools=[TOOL], tool_choice=5), 400, "tool_choice"),
    ("prompt-over-context", CHAT, chat(messages=[{"role": "user", "content": "word " * (CONTEXT * 2)}]), 400,
     "messages"),
    ("completions-no-prompt", "/v1/completions", {"model": "m"}, 400, "prompt"),
    ("completions-prompt-number", "/v1/completions", {"prompt": 3}, 400, "prompt"),
    ("completions-many-prompts", "/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
    ("completions-suffix", "/v1/completions", {"prompt": "a", "suffix": "b"}, 400, "suffix"),
    ("completions-max-tokens", "/v1/completions", {"prompt": "a", "max_tokens": -1}, 400, "max_tokens"),
    ("responses-no-input", "/v1/responses", {"model": "m"}, 400, "input"),
    ("responses-input-number", "/v1/responses", {"input": 1}, 400, "input"),
    ("responses-item-type", "/v1/responses", {"input": [{"type": "telepathy"}]}, 400, "input[0].type"),
    ("responses-item-role", "/v1/responses", {"input": [{"role": "tool", "content": "x"}]}, 400, "input[0].role"),
    ("responses-item-reference", "/v1/responses", {"input": [{"type": "item_reference", "id": "x"}]}, 400,
     "input[0]"),
    ("responses-orphan-output", "/v1/responses", {"input": [{"type": "function_call_output", "call_id": "c",
                                                             "output": "1"}]}, 400, "input[0].call_id"),
    ("responses-previous-id", "/v1/responses", {"input": "hi", "previous_response_id": "resp_1"}, 400,
     "previous_response_id"),
    ("responses-tool-type-missing", "/v1/responses", {"input": "hi", "tools": [{"name": "f"}]}, 400,
     "tools[0].type"),
    ("responses-json-format", "/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema"}}}, 400,
     "text.format.schema"),
    ("responses-surrogate", "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a\udfff"}]}]}, 400, "input[0].content[0].text"),
    ("completions-surrogate", "/v1/completions", {"prompt": "\ud800x"}, 400, "prompt"),
    ("responses-effort", "/v1/responses", {"input": "hi", "reasoning": {"effort": 9}}, 400, "reasoning.effort"),
    ("responses-max-output", "/v1/responses", {"input": "hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ("unknown-endpoint", "/v1/embeddings", {"input": "x"}, 404, None),
]


def assert_openai_error(r: RawResponse, status: int, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and len(err["message"]) > 10
    assert isinstance(err["type"], str)
    if param is not None:
        assert err["param"] == param, err
    return err  # type: ignore[no-any-return]


@pytest.mark.parametrize(("path", "body", "status", "param"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_request_table(http: RawClient, scripted: ScriptedEngine, path: str, body: Any, status: int,
                           param: str | None) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = http.post(path, content=content, headers={"Content-Type": "application/json"})
    assert_openai_error(r, status, param)


def test_wrong_method_and_content_type(http: RawClient) -> None:
    err = assert_openai_error(http.get(CHAT), 405)
    assert "GET vs POST" in err["message"]
    err = assert_openai_error(http.post(CHAT, content=b"a=b"), 415)
    assert "Content-Type: application/json" in err["message"]


def test_oversized_body_is_413(http: RawClient) -> None:
    big = json.dumps(chat(messages=[{"role": "user", "content": "x" * (MAX_BODY + 10)}])).encode()
    err = assert_openai_error(http.post(CHAT, content=big, headers={"Content-Type": "application/json"}), 413)
    assert "--max-body-mb" in err["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
        yield big[: MAX_BODY // 2]
        yield big[MAX_BODY // 2:]

    r = http.post(CHAT, content=chunks(), headers={"Content-Type": "application/json"})
    assert_openai_error(r, 413)


def test_server_still_answers_after_bad_requests(small_server: LiveServer, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>still fine<|return|>")
    r = small_server.client().chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert r.choices[0].message.content == "still fine"


# ---- hypothesis ---------------------------------------------------------------------------

leaf = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
not_int = st.text(max_size=5) | st.booleans() | st.lists(leaf, max_size=2) | st.floats(0.1, 0.9)
not_number = st.text(max_size=5) | st.booleans() | st.lists(leaf, max_size=2) | st.dictionaries(st.text(), leaf)
not_bool = st.integers() | st.text(max_size=5) | st.lists(leaf, max_size=2)
bad_field = st.one_of(
    st.tuples(st.just("max_tokens"), not_int | st.integers(max_value=0) | st.integers(min_value=CONTEXT + 1)),
    st.tuples(st.just("max_completion_tokens"), not_int | st.integers(max_value=0)),
    st.tuples(st.just("temperature"), not_number | st.floats(min_value=2.001, allow_infinity=False)
              | st.floats(max_value=-0.001, allow_infinity=False)),
    st.tuples(st.just("top_p"), not_number | st.floats(min_value=1.001, allow_infinity=False)
              | st.floats(max_value=0.0, allow_infinity=False)),
    st.tuples(st.just("stream"), not_bool),
    st.tuples(st.just("seed"), st.text(min_size=1, max_size=5) | st.lists(leaf, max_size=2) | st.floats(0.1, 0.9)),
    st.tuples(st.just("stop"), st.integers() | st.lists(st.integers() | st.just(""), min_size=1, max_size=3)),
    st.tuples(st.just("messages"), st.text(max_size=5) | st.integers() | st.just([])
              | st.lists(st.integers() | st.text(max_size=3), min_size=1, max_size=3)),
    st.tuples(st.just("messages"), st.builds(lambda r: [{"role": r, "content": "x"}],
                                             st.text(max_size=10).filter(lambda r: r not in (
                                                 "system", "developer", "user", "assistant", "tool")))),
    st.tuples(st.just("messages"), st.builds(lambda c: [{"role": "user", "content": c}],
                                             st.integers() | st.booleans() | st.dictionaries(st.text(), leaf))),
    st.tuples(st.just("tools"), st.text(max_size=5) | st.integers() | st.dictionaries(st.text(max_size=4), leaf)
              | st.lists(st.dictionaries(st.sampled_from(["type", "name"]), st.text(max_size=4) | st.integers()),
                         min_size=1, max_size=2)),
    st.tuples(st.just("tools"), st.builds(lambda p: tool_with(parameters=p), st.text() | st.integers()
                                          | st.lists(leaf, max_size=2) | st.builds(lambda t: {"type": t},
                                                                                   st.text(max_size=6)))),
    st.tuples(st.just("reasoning_effort"), st.text(max_size=8).filter(
        lambda e: e not in ("low", "medium", "high", "minimal")) | st.integers()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=bad_field)
def test_hypothesis_wrong_field_is_4xx(http: RawClient, field: tuple[str, Any]) -> None:
    key, value = field
    r = http.post(CHAT, json=chat(**{key: value}))
    assert 400 <= r.status_code < 500, (key, value, r.text)
    assert r.json()["error"]["message"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from([CHAT, "/v1/completions", "/v1/responses"]),
       body=st.dictionaries(st.text(max_size=10).filter(lambda k: k not in ("messages", "prompt", "input")),
                            json_values, max_size=5))
def test_hypothesis_body_without_required_field_is_4xx(http: RawClient, path: str, body: dict[str, Any]) -> None:
    r = http.post(path, json=body)
    assert 400 <= r.status_code < 500, (path, body, r.text)
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def _not_a_json_object(raw: bytes) -> bool:
    try:
        return not isinstance(json.loads(raw), dict)
    except (ValueError, UnicodeDecodeError):
        return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64).filter(_not_a_json_object))
def test_hypothesis_garbage_body_is_400(http: RawClient, raw: bytes) -> None:
    r = http.post(CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (raw, r.text)
    assert r.json()["error"]["code"] == "invalid_json"


def test_server_still_answers_after_fuzzing(small_server: LiveServer, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>after fuzz<|return|>")
    r = small_server.client().chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert r.choices[0].message.content == "after fuzz"
    bridge = small_server.server.bridge
    deadline = time.monotonic() + 2.0  # the worker thread finishes just after the answer is sent
    while (bridge.busy or bridge.waiting) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bridge.waiting == 0 and not bridge.busy


CHAT_KEYS = ["model", "messages", "tools", "tool_choice", "temperature", "top_p", "seed", "stop", "stream",
             "stream_options", "reasoning_effort", "n", "logprobs", "response_format", "max_completion_tokens"]
message_like = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "x"]),
    "content": json_values, "tool_calls": json_values, "tool_call_id": json_values, "name": json_values,
    "reasoning_content": json_values})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.dictionaries(st.sampled_from(CHAT_KEYS), json_values | st.lists(message_like, max_size=3),
                              max_size=4))
def test_hypothesis_any_chat_body_is_answered_or_4xx(http: RawClient, scripted: ScriptedEngine,
                                                     values: dict[str, Any]) -> None:
    """Arbitrary values in any field: a valid answer or a 4xx, never a server error."""
    scripted.ban_stops()
    body = {**chat(), **values, "max_tokens": 1}
    r = http.post(CHAT, json=body)
    assert r.status_code == 200 or 400 <= r.status_code < 500, (body, r.text)
    if r.status_code != 200:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
