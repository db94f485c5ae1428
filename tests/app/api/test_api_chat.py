"""Chat completions through the official openai client against the real engine (tiny model)."""

from __future__ import annotations

import json

import openai
import pytest

from .scripted_engine import ScriptedEngine

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
REASONED = ("<|channel|>analysis<|message|>The user greets me.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>")


def test_models_lists_the_loaded_model(client: openai.OpenAI, engine: ScriptedEngine) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [engine.info.name]
    assert client.models.retrieve(engine.info.name).id == engine.info.name
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_non_streaming_chat_returns_final_text_and_reasoning(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect(REASONED)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    choice = r.choices[0]
    assert choice.message.content == "Hello there!"
    assert choice.message.model_extra["reasoning_content"] == "The user greets me."
    assert choice.finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.completion_tokens_details.reasoning_tokens > 0


def test_streaming_chat_splits_reasoning_and_content(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect(REASONED)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                                            stream_options={"include_usage": True})
    content, reasoning, finish, usage, roles = "", "", None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            roles.append(c.delta.role)
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            finish = c.finish_reason or finish
    assert roles[0] == "assistant"
    assert (content, reasoning, finish) == ("Hello there!", "The user greets me.", "stop")
    assert usage is not None and usage.prompt_tokens > 100 and usage.completion_tokens > 5


def test_random_weights_generate_to_the_token_limit(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.ban_stops()
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=7,
                                       temperature=0.7, top_p=0.9, seed=3)
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 7


def test_seed_makes_sampling_reproducible(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.ban_stops()
    msgs = [{"role": "user", "content": "count"}]
    a = client.chat.completions.create(model="m", messages=msgs, max_completion_tokens=6, seed=11)
    b = client.chat.completions.create(model="m", messages=msgs, max_completion_tokens=6, seed=11)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_stop_sequence_cuts_final_text(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>one two three four<|return|>")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "count"}], stop=[" three"])
    assert r.choices[0].message.content == "one two"
    assert r.choices[0].finish_reason == "stop"


def test_every_role_and_content_parts_reach_the_prompt(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>ok<|return|>")
    r = client.chat.completions.create(model="m", reasoning_effort="high", messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in "}, {"type": "text", "text": "French."}]},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer", "reasoning_content": "old thoughts"},  # type: ignore[misc]
        {"role": "user", "content": [{"type": "text", "text": "second question"}]},
    ])
    assert r.choices[0].message.content == "ok"
    prompt = scripted.last_prompt_text()
    assert "Reasoning: high" in prompt
    assert "Be brief.\n\nAnswer in French." in prompt
    assert "<|start|>user<|message|>second question<|end|>" in prompt
    assert "<|start|>assistant<|channel|>final<|message|>first answer<|end|>" in prompt
    assert "old thoughts" not in prompt  # harmony drops earlier turns' analysis once a final exists


def test_tool_call_round_trip(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect('<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary '
                    'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.chat.completions.create(model="m", messages=messages, tools=[WEATHER_TOOL])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert "namespace functions" in scripted.last_prompt_text()

    # Second leg: send the call and its result back, with the reasoning that led to it.
    assistant = choice.message.model_dump(exclude_none=True)
    messages += [assistant, {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'}]
    scripted.expect("<|channel|>final<|message|>It is sunny in Paris.<|return|>")
    r2 = client.chat.completions.create(model="m", messages=messages, tools=[WEATHER_TOOL])
    assert r2.choices[0].message.content == "It is sunny in Paris."
    assert r2.choices[0].finish_reason == "stop"
    prompt = scripted.last_prompt_text()
    tool_msg = '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"sky": "sunny"}<|end|>'
    assert tool_msg in prompt
    assert "Need the weather." in prompt  # analysis before a pending tool call is kept
    # The tool-call turn was generated by this engine, so its whole prompt is reused.
    assert r2.usage is not None and r.usage is not None
    assert r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens


def test_streaming_tool_call(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                    '{"city": "Oslo"}<|call|>')
    calls, finish = [], None
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Oslo?"}],
                                                tools=[WEATHER_TOOL], stream=True):
        for c in chunk.choices:
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert [(c.index, c.function.name, c.function.arguments) for c in calls] == [(0, "get_weather", '{"city": "Oslo"}')]
    assert calls[0].id


def test_tool_choice_none_drops_the_tools(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>no tools<|return|>")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tools=[WEATHER_TOOL],
                                       tool_choice="none")
    assert r.choices[0].message.content == "no tools"
    assert "namespace functions" not in scripted.last_prompt_text()


def test_follow_up_reuses_the_cached_prefix(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.expect("<|channel|>final<|message|>Paris is the capital.<|return|>")
    msgs: list = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    r1 = client.chat.completions.create(model="m", messages=msgs)
    msgs += [{"role": "assistant", "content": r1.choices[0].message.content},
             {"role": "user", "content": "And of Italy?"}]
    scripted.expect("<|channel|>final<|message|>Rome.<|return|>")
    r2 = client.chat.completions.create(model="m", messages=msgs)
    assert r1.usage is not None and r2.usage is not None
    cached = r2.usage.prompt_tokens_details.cached_tokens
    # everything the first request processed (its prompt and its answer) is reused
    assert r1.usage.prompt_tokens + r1.usage.completion_tokens - 1 <= cached < r2.usage.prompt_tokens
    assert r2.choices[0].message.content == "Rome."


def test_engine_failure_is_a_500_then_service_continues(client: openai.OpenAI, scripted: ScriptedEngine) -> None:
    scripted.scripted.fail_after = 0  # the prompt pass itself fails
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "simulated device failure" in str(info.value.body)

    scripted.ban_stops()
    scripted.scripted.fail_after = 3  # fails mid-stream: the stream ends with an error event
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.APIError, match="simulated device failure"):
        for _ in stream:
            pass

    scripted.scripted.clear()
    scripted.expect("<|channel|>final<|message|>recovered<|return|>")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "recovered"
