"""Fuzz: arbitrary bodies and headers on every generation endpoint -> never a 5xx, no orphan job.

Bodies are built from the endpoint's real field names with hostile values: lone UTF-16 surrogates,
huge and tiny numbers, deep nesting, wrong types, valid structure with garbage inside. Headers get
bytes that are not UTF-8 (Authorization, Content-Type, Content-Encoding). After every answer the
engine must be idle again: a request never leaves a generation running without its client.
The fast suite runs 60 bodies per endpoint; ``-m slow`` runs 1,000 per endpoint.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import LiveServer
from .rawhttp import RawClient
from .scripted_engine import ScriptedEngine

ENDPOINTS = {
    "/v1/chat/completions": ["model", "messages", "tools", "tool_choice", "response_format", "temperature", "top_p",
                             "top_k", "min_p", "logit_bias", "frequency_penalty", "presence_penalty",
                             "repetition_penalty", "seed", "stop", "stream", "stream_options", "n",
                             "reasoning_effort", "parallel_tool_calls", "max_completion_tokens", "unknown_x"],
    "/v1/completions": ["model", "prompt", "temperature", "top_p", "top_k", "logit_bias", "seed", "stop", "stream",
                        "echo", "suffix", "logprobs", "best_of", "presence_penalty", "unknown_x"],
    "/v1/responses": ["model", "input", "instructions", "tools", "tool_choice", "text", "reasoning", "temperature",
                      "top_p", "stream", "parallel_tool_calls", "previous_response_id", "include", "store",
                      "unknown_x"],
}
TOKENS_KEY = {"/v1/chat/completions": "max_tokens", "/v1/completions": "max_tokens",
              "/v1/responses": "max_output_tokens"}

surrogate = st.sampled_from(["\ud800", "a\udfffb", "\udbff\udbff", "x\ud83d"])
text = st.text(max_size=12) | surrogate
number = (st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.sampled_from([1e-307, 5e-324, 1e308, -0.0])
          | st.floats(min_value=-3, max_value=3))
leaf = st.none() | st.booleans() | number | text
json_values = st.recursive(leaf, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
                           max_leaves=8)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | text},
                                optional={"content": text | json_values, "tool_call_id": text, "name": text,
                                          "tool_calls": json_values})
function_tool = st.fixed_dictionaries({"type": st.sampled_from(["function", "web_search", "namespace", "x"]),
                                       "name": text, "function": json_values, "parameters": json_values,
                                       "tools": json_values})
structured = st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema", "x"])},
                                   optional={"json_schema": json_values, "schema": json_values, "name": text,
                                             "strict": json_values})
SPECIAL = {"messages": st.lists(message, max_size=3) | json_values,
           "input": st.lists(message | json_values, max_size=3) | text | json_values,
           "tools": st.lists(function_tool, max_size=2) | json_values,
           "response_format": structured | json_values,
           "text": st.fixed_dictionaries({}, optional={"format": structured}) | json_values,
           "prompt": text | json_values}


def bodies(path: str) -> st.SearchStrategy[dict[str, Any]]:
    keys = ENDPOINTS[path]
    return st.dictionaries(st.sampled_from(keys), json_values, max_size=6).flatmap(
        lambda d: st.fixed_dictionaries({k: SPECIAL.get(k, json_values) for k in d}))


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture(scope="module")
def fuzz_server(engine: ScriptedEngine) -> Iterator[LiveServer]:
    from app.api import ServerConfig

    srv = LiveServer(engine, ServerConfig(port=0, max_body_bytes=256 * 1024))
    yield srv
    srv.close()


def assert_idle(srv: LiveServer) -> None:
    bridge = srv.server.bridge
    deadline = time.monotonic() + 5.0
    while (bridge.busy or bridge.waiting) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not bridge.busy and bridge.waiting == 0, "a generation is still running without its client"


def post_and_check(srv: LiveServer, path: str, body: dict[str, Any] | bytes,
                   headers: dict[str, Any] | None = None) -> int:
    if isinstance(body, dict):
        body = {**body, TOKENS_KEY[path]: 2}  # keep every generation short (the limit itself is fuzzed elsewhere)
        raw = json.dumps(body).encode()
    else:
        raw = body
    r = RawClient(srv.server.port or 0).request("POST", path, content=raw,
                                                 headers={"Content-Type": "application/json", **(headers or {})})
    assert r.status_code < 500, (path, raw[:300], r.text[:500])
    if r.status_code >= 400:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert_idle(srv)
    return r.status_code


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CHAT, COMPLETIONS, RESPONSES = ENDPOINTS


@FAST
@given(body=bodies(CHAT))
def test_fuzz_chat(fuzz_server: LiveServer, scripted: ScriptedEngine, body: dict[str, Any]) -> None:
    post_and_check(fuzz_server, CHAT, body)


@FAST
@given(body=bodies(COMPLETIONS))
def test_fuzz_completions(fuzz_server: LiveServer, scripted: ScriptedEngine, body: dict[str, Any]) -> None:
    post_and_check(fuzz_server, COMPLETIONS, body)


@FAST
@given(body=bodies(RESPONSES))
def test_fuzz_responses(fuzz_server: LiveServer, scripted: ScriptedEngine, body: dict[str, Any]) -> None:
    post_and_check(fuzz_server, RESPONSES, body)


@pytest.mark.slow
@SLOW
@given(body=bodies(CHAT))
def test_fuzz_1000_chat(fuzz_server: LiveServer, scripted: ScriptedEngine, body: dict[str, Any]) -> None:
    post_and_check(fuzz_server, CHAT, body)


@pytest.mark.slow
@SLOW
@given(body=bodies(COMPLETIONS))
def test_fuzz_1000_completions(fuzz_server: LiveServer, scripted: ScriptedEngine, body: dict[str, Any]) -> None:
    post_and_check(fuzz_server, COMPLETIONS, body)


@pytest.mark.slow
@SLOW
@given(body=bodies(RESPONSES))
def test_fuzz_1000_responses(fuzz_server: LiveServer, scripted: ScriptedEngine, body: dict[str, Any]) -> None:
    post_and_check(fuzz_server, RESPONSES, body)


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_hostile_raw_bodies(fuzz_server: LiveServer, scripted: ScriptedEngine, path: str) -> None:
    key = "messages" if "chat" in path else ("prompt" if path.endswith("/completions") else "input")
    cases = [
        deep(5000).encode(),
        (f'{{"{key}": {deep(900)}}}').encode(),
        (f'{{"{key}": "x", "temperature": 1e999}}').encode(),
        ('{{"{}": "x", "seed": {}}}'.format(key, "9" * 5000)).encode(),
        (f'{{"{key}": "\\ud800"}}').encode(),
        (f'{{"\\udc00": 1, "{key}": "x"}}').encode(),
        b'{"model": "\xff\xfe"}',
        b'\xef\xbb\xbf{"model": "m"}',
    ]
    for body in cases:
        post_and_check(fuzz_server, path, body)


@pytest.mark.parametrize("header", ["Authorization", "Content-Type", "Content-Encoding", "X-Other"])
def test_header_bytes_that_are_not_utf8(fuzz_server: LiveServer, scripted: ScriptedEngine, header: str) -> None:
    port = fuzz_server.server.port or 0
    for value in (b"Bearer \xff\xfe\xfd", b"\xc3\x28", b"gzip", b"\x80abc"):
        body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\n" + (b"" if header == "Content-Type" else b"Content-Type: application/json\r\n")
                + header.encode() + b": " + value + b"\r\nConnection: close\r\n\r\n")
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(head + body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        status = int(data.split(b" ", 2)[1])
        assert status < 500, (header, value, data[:400])
        assert_idle(fuzz_server)
