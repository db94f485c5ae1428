"""/v1/responses and /v1/completions through the official openai client."""

from __future__ import annotations

import json

import openai

from .scripted_engine import ScriptedEngine

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = ('<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>commentary '
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome"}<|call|>')


def test_responses_text(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>"
                    "Bonjour!<|return|>")
    r = client.responses.create(model="m", input="Say hello in French", instructions="You are terse.")
    assert r.status == "completed"
    assert r.output_text == "Bonjour!"
    assert [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "Simple."  # type: ignore[union-attr]
    assert r.usage is not None and r.usage.input_tokens > 100 and r.usage.output_tokens > 5
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert "# Instructions\n\nYou are terse." in scripted.last_prompt_text()


def test_responses_function_tool_round_trip(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect(CALL)
    r = client.responses.create(model="m", input=[{"role": "user", "content": "Weather in Rome?"}],
                                tools=[WEATHER])  # type: ignore[list-item]
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Rome"}

    # Feed the reasoning, the call and its output back as input items.
    items: list = [{"role": "user", "content": "Weather in Rome?"}]
    items += [item.model_dump(exclude_none=True) for item in r.output]
    items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "22 C and clear"})
    scripted.expect("<|channel|>final<|message|>It is 22 C and clear.<|return|>")
    r2 = client.responses.create(model="m", input=items, tools=[WEATHER])  # type: ignore[list-item]
    assert r2.output_text == "It is 22 C and clear."
    prompt = scripted.last_prompt_text()
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>22 C and clear<|end|>" in prompt
    assert "Look it up." in prompt
    assert r2.usage is not None and r.usage is not None
    assert r2.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens


def test_responses_streaming_events(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>"
                    "Streamed answer.<|return|>")
    events = list(client.responses.create(model="m", input="hi", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.reasoning_text.delta" in types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Streamed answer."
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == "Streamed answer."
    final = events[-1].response
    assert final.output_text == "Streamed answer." and final.usage is not None
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_streaming_function_call(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect(CALL)
    events = list(client.responses.create(model="m", input="Rome?", tools=[WEATHER], stream=True))  # type: ignore[list-item]
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Rome"}
    item_done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in item_done] == ["reasoning", "function_call"]
    assert events[-1].type == "response.completed"


def test_responses_length_limit_is_incomplete(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    # scripted, so the 5 tokens surely include message text (free-running noise could spend them on headers)
    scripted.expect("<|channel|>final<|message|>one two three four five six seven eight nine ten")
    scripted.ban_stops()
    r = client.responses.create(model="m", input="hi", max_output_tokens=5)
    assert r.status == "incomplete"
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage is not None and r.usage.output_tokens == 5
    assert r.output[-1].status == "incomplete"


def test_completions_raw_prompt(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect(" world, again")
    scripted.ban_stops()
    r = client.completions.create(model="m", prompt="Hello", max_tokens=20, echo=True)
    assert r.choices[0].text.startswith("Hello world")
    assert r.choices[0].finish_reason == "length"  # the script ends, then noise runs to the limit
    assert r.usage is not None and r.usage.completion_tokens == 20
    assert r.object == "text_completion"


def test_completions_streaming_with_stop(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("def main():\n    return 0\n")
    chunks = list(client.completions.create(model="m", prompt="# code\n", max_tokens=30, stop=["return"],
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == "def main():\n    "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
