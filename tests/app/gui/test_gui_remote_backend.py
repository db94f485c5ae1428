"""The remote backend turns an OpenAI-compatible SSE stream into engine events."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from app.gui.remote_backend import RemoteBackend, conversation_to_openai
from engine.types import CancelToken, Conversation, Done, GenerationParams, Message, TextDelta, ToolCall, ToolCallEvent


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


async def _models(_r: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "remote-m"}]})


async def _serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_get("/v1/models", _models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/v1"


def test_stream_maps_channels_tool_calls_and_usage():
    seen: dict = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen["body"] = await request.json()
        seen["auth"] = request.headers.get("Authorization")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk({"role": "assistant", "reasoning_content": "Think"}))
        await resp.write(_chunk({"reasoning": "ing."}))
        await resp.write(_chunk({"content": "Hello "}))
        await resp.write(_chunk({"content": "world"}))
        first_call = {"index": 0, "id": "call_9", "function": {"name": "get_", "arguments": '{"a"'}}
        await resp.write(_chunk({"tool_calls": [first_call]}))
        await resp.write(_chunk({"tool_calls": [{"index": 0, "function": {"name": "time", "arguments": ": 1}"}}]},
                                "tool_calls"))
        usage = {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 7,
                                          "prompt_tokens_details": {"cached_tokens": 20}}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp

    async def main() -> list:
        runner, url = await _serve(handler)
        try:
            conv = Conversation((Message("user", "hi"),), reasoning_effort="high")
            rb = RemoteBackend(url, api_key="k1")
            return [ev async for ev in rb.stream_chat(conv, GenerationParams(max_tokens=9, seed=3))]
        finally:
            await runner.cleanup()

    events = asyncio.run(main())
    text = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(e.text for e in text if e.channel == "analysis") == "Thinking."
    assert "".join(e.text for e in text if e.channel == "final") == "Hello world"
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert calls == [ToolCall("call_9", "get_time", '{"a": 1}')]
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == "tool_calls"
    assert (done.usage.prompt_tokens, done.usage.cached_tokens, done.usage.completion_tokens) == (30, 20, 7)
    body = seen["body"]
    assert body["model"] == "remote-m" and body["stream"] is True and body["reasoning_effort"] == "high"
    assert body["max_tokens"] == 9 and body["seed"] == 3 and body["messages"] == [{"role": "user", "content": "hi"}]
    assert seen["auth"] == "Bearer k1"


def test_http_error_becomes_error_done_and_cancel_stops():
    async def failing(_r: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "bad key"}}, status=401)

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(1000):
            await resp.write(_chunk({"content": "x"}))
            await asyncio.sleep(0.001)
        return resp

    async def main() -> tuple[list, list]:
        runner, url = await _serve(failing)
        try:
            err = [ev async for ev in RemoteBackend(url, model="m").stream_chat(
                Conversation((Message("user", "hi"),)), GenerationParams())]
        finally:
            await runner.cleanup()
        runner, url = await _serve(endless)
        cancel = CancelToken()
        got = []
        try:
            async for ev in RemoteBackend(url, model="m").stream_chat(
                    Conversation((Message("user", "hi"),)), GenerationParams(), cancel):
                got.append(ev)
                if len(got) == 5:
                    cancel.cancel()
        finally:
            await runner.cleanup()
        return err, got

    err, got = asyncio.run(main())
    assert isinstance(err[-1], Done) and err[-1].finish_reason == "error" and "401" in (err[-1].error or "")
    assert isinstance(got[-1], Done) and got[-1].finish_reason == "cancelled" and len(got) < 20


def test_conversation_to_openai_tool_roundtrip():
    call = ToolCall("c1", "f", "{}")
    conv = Conversation((Message("user", "u"), Message("assistant", "", tool_calls=(call,)),
                         Message("tool", "42", tool_call_id="c1", name="f")))
    out = conversation_to_openai(conv)
    assert out[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert out[2] == {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}
