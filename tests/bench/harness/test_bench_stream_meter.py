"""Metering a streamed chat completion: TTFT, timed tokens and seconds, usage vs delta counts."""

from __future__ import annotations

import json

import pytest

from bench.harness.stream_meter import StreamMeter


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {"object": "chat.completion.chunk",
                 "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return f"data: {json.dumps(obj)}\n\n".encode()


def test_usage_tokens_minus_one_over_first_to_last_delta():
    m = StreamMeter(started=100.0)
    m.feed(chunk({"role": "assistant", "content": ""}), 100.5)  # no output yet
    m.feed(b": prompt 10/20\n\n", 100.7)  # progress comment
    m.feed(chunk({"reasoning_content": "think"}), 102.0)  # first output: TTFT 2 s
    m.feed(chunk({"content": "a"}), 103.0)
    m.feed(chunk({"content": "b"}), 106.0)  # last output
    m.feed(chunk({}, "stop"), 106.1)
    m.feed(chunk(usage={"prompt_tokens": 20, "completion_tokens": 13,
                        "prompt_tokens_details": {"cached_tokens": 4}}), 106.2)
    m.feed(b"data: [DONE]\n\n", 106.3)
    m.close(106.4)
    assert m.ttft == pytest.approx(2.0)
    assert m.deltas == 3
    assert m.completion_tokens == 13 and m.token_source == "usage"
    assert m.timed_tokens == 12  # the first token arrived with the first delta
    assert m.timed_seconds == pytest.approx(4.0)
    assert m.decode_tps == pytest.approx(3.0)
    assert m.wall == pytest.approx(6.4)
    assert m.finish_reason == "stop" and m.done and m.error is None
    assert m.usage_field("prompt_tokens_details", "cached_tokens") == 4
    assert "".join(m.content) == "ab" and "".join(m.reasoning) == "think"


def test_counts_deltas_without_usage_and_handles_split_lines():
    m = StreamMeter(started=0.0)
    data = chunk({"content": "x"}) + chunk({"reasoning": "y"}) + chunk({"content": "z"})
    # split mid-line: the second piece completes the first line
    m.feed(data[:10], 1.0)
    m.feed(data[10:], 2.0)
    m.feed(chunk({"content": "w"}), 4.0)
    m.close(4.5)
    assert m.token_source == "deltas"
    assert m.deltas == 4 and m.timed_tokens == 3
    assert m.ttft == pytest.approx(2.0)
    assert m.decode_tps == pytest.approx(3 / 2.0)


def test_tool_call_deltas_count_as_output():
    m = StreamMeter(started=0.0)
    m.feed(chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}, "tool_calls"), 1.0)
    m.close(1.5)
    assert m.deltas == 1 and m.ttft == 1.0
    assert m.decode_tps is None  # one delta: nothing timed


def test_error_chunk_and_bad_json_are_recorded():
    m = StreamMeter(started=0.0)
    m.feed(b'data: {"error": {"message": "Generation stopped: boom."}}\n\n', 1.0)
    assert m.error == "Generation stopped: boom."
    m2 = StreamMeter(started=0.0)
    m2.feed(b"data: {not json\n\n", 1.0)
    assert m2.error is not None and "unparsable" in m2.error


def test_answer_hash_depends_on_visible_text_only():
    a, b = StreamMeter(started=0.0), StreamMeter(started=5.0)
    a.feed(chunk({"content": "hello"}), 1.0)
    b.feed(chunk({"content": "hel"}) + chunk({"content": "lo"}), 9.0)
    assert a.answer_sha256() == b.answer_sha256()
    c = StreamMeter(started=0.0)
    c.feed(chunk({"content": "hello!"}), 1.0)
    assert c.answer_sha256() != a.answer_sha256()
