"""Real clients (openai, litellm, langchain-openai) against a ``neural serve`` process on the demo model.

The demo model is a real trained gpt-oss-shaped model (4 layers), so these answers come from the real
engine path: harmony rendering, free analysis, then the final answer or the tool call decoded under
the grammar (engine/grammar). String fields carry a maxLength so a small model's answer ends within
the token budget; the shape is what is checked, not the content.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel, Field

from .rawhttp import RawClient, sse_data

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "resources" / "demo-model"
KEY = "test-key-7f3a9c"


class Person(BaseModel):
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=150)


class Served:
    def __init__(self, url: str, log: Path, proc: subprocess.Popen[str]) -> None:
        self.url, self.log, self.proc = url, log, proc
        self.port = int(url.rsplit(":", 1)[1])

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "key").write_text(KEY + "\n")
    log = tmp / "access.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "NEURAL_HOME": str(tmp / "home")}
    env.pop("NEURAL_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "serve", str(DEMO), "--port", "0", "--backend", "reference",
         "--context", "2048", "--api-key-file", str(tmp / "key"), "--log-file", str(log)],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + 120
        assert proc.stderr is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "server exited before listening"
            m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            url = m.group(1) if m else None
        assert url, "server did not report its address"
        yield Served(url, log, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


ASK = [{"role": "user", "content": "Invent a person."}]


def test_openai_parse_returns_a_pydantic_object(served: Served) -> None:
    r = served.client().chat.completions.parse(model="demo", messages=ASK, response_format=Person,  # type: ignore[arg-type]
                                               max_tokens=400, seed=1, reasoning_effort="low")
    person = r.choices[0].message.parsed
    assert isinstance(person, Person)
    assert r.choices[0].message.reasoning_content  # type: ignore[attr-defined]  # analysis stayed free


def test_litellm_structured_output_returns_a_valid_object(served: Served) -> None:
    """litellm with a pydantic response_format (json_schema). Its json_object mode is checked on the
    scripted engine (test_api_structured.py): free JSON from the 4-layer demo model tends to open a
    string that outlasts any token budget, which says nothing about the server."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network look-up at import
    import litellm

    r = litellm.completion(model="openai/demo", api_base=served.url + "/v1", api_key=KEY, messages=ASK,
                           response_format=Person, max_tokens=300, seed=3, reasoning_effort="low")
    assert Person.model_validate_json(r.choices[0].message.content)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(served: Served, method: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=served.url + "/v1", api_key=KEY, model="demo", max_tokens=300, seed=5,  # type: ignore[arg-type]
                     reasoning_effort="low", max_retries=0)
    out = llm.with_structured_output(Person, method=method).invoke("Invent a person.")  # type: ignore[arg-type]
    assert isinstance(out, Person)


def test_codex_shaped_responses_request_with_namespace_and_web_search(served: Served) -> None:
    """The shape `codex exec` sends: function tools, a namespace of sub-agent tools, a web_search tool."""
    shell = {"type": "function", "name": "shell", "description": "Run a command",
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                            "required": ["command"], "additionalProperties": False}, "strict": False}
    agents = {"type": "namespace", "name": "agents", "description": "Sub-agents",
              "tools": [{"type": "function", "name": "spawn_agent", "description": "Start a sub-agent",
                         "parameters": {"type": "object", "properties": {"task": {"type": "string"}},
                                        "required": ["task"]}}]}
    body = {"model": "demo", "instructions": "You are a coding agent.", "stream": True, "store": False,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}],
            "tools": [shell, agents, {"type": "web_search"}], "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "low", "summary": "auto"}, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "abc", "max_output_tokens": 48}
    r = RawClient(served.port, timeout=120).post("/v1/responses", json=body,
                                                 headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    assert "web_search" in r.headers.get("X-Neural-Warning", "")
    events = [e for e in sse_data(r.text) if isinstance(e, dict)]
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    final = events[-1]["response"]
    assert final["parallel_tool_calls"] is False
    assert [t.get("name") for t in final["tools"]][:2] == ["shell", "agents"]


def test_forced_named_tool_call_has_schema_valid_arguments(served: Served) -> None:
    tool = {"type": "function", "function": {"name": "set_age", "parameters": {
        "type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["age"], "additionalProperties": False}}}
    r = served.client().chat.completions.create(model="demo", messages=ASK, tools=[tool],  # type: ignore[list-item]
                                                tool_choice={"type": "function", "function": {"name": "set_age"}},
                                                max_tokens=200, seed=2, reasoning_effort="low")
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls and calls[0].function.name == "set_age"  # type: ignore[union-attr]
    assert 0 <= json.loads(calls[0].function.arguments)["age"] <= 120  # type: ignore[union-attr]


def test_key_from_file_is_required_and_never_logged(served: Served) -> None:
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=served.url + "/v1", api_key="wrong", max_retries=0).models.list()
    r = RawClient(served.port).get("/v1/models", headers={"Authorization": "Bearer \xff\xfe"})
    assert r.status_code == 401


def test_access_log_and_metrics(served: Served) -> None:
    served.client().chat.completions.create(model="demo", messages=ASK, max_tokens=4)  # type: ignore[arg-type]
    req = urllib.request.Request(served.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    done = [s for s in families["neural_api_requests"].samples
            if s.labels.get("endpoint") == "/v1/chat/completions" and s.labels.get("status") == "200"]
    assert done and done[0].value >= 1
    assert any(s.value > 0 for s in families["neural_api_tokens"].samples if s.labels.get("kind") == "completion")
    assert "neural_api_time_to_first_token_seconds" in families and "neural_api_queue_waiting" in families
    assert "neural_engine_vram_hit_rate" in families
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "completion=" not in served.log.read_text():
        time.sleep(0.1)
    lines = served.log.read_text().splitlines()
    line = next(x for x in lines if "POST /v1/chat/completions 200" in x)
    for field in ("prompt=", "cached=", "completion=", "prompt_s=", "ttft=", "tok/s=", "client=127.0.0.1"):
        assert field in line
    assert KEY not in served.log.read_text()
