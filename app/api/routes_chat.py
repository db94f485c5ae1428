"""``POST /v1/chat/completions``: streaming (SSE) and whole answers."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from engine.types import ToolCall

from .chat_request import ChatRequest, parse_chat_request
from .generation import end_stream, event_stream, read_conversation_request, start_conversation, whole_answer
from .reply import Reply
from .usage import chat_usage

if TYPE_CHECKING:
    from .server import ApiServer

routes = web.RouteTableDef()


def tool_call_json(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.arguments}}
    if index is not None:
        out = {"index": index, **out}
    return out


def reasoning_tokens(server: ApiServer, reply: Reply) -> int:
    eng = server.engine
    return eng.count_tokens(reply.reasoning) if reply.reasoning and eng is not None else 0


@routes.post("/v1/chat/completions")
async def chat_completions(request: web.Request) -> web.StreamResponse:
    server, engine, req = await read_conversation_request(request, parse_chat_request)
    reply = await start_conversation(request, server, engine, req, "response_format", "messages")
    meta = {"id": "chatcmpl-" + secrets.token_hex(12), "created": int(time.time()), "model": server.model_id,
            "system_fingerprint": "neural-" + engine.info.fingerprint[:12]}
    if req.stream:
        return await _stream(request, server, req, reply, meta)
    await whole_answer(reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if reply.tool_calls else ""),
                               "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [tool_call_json(c) for c in reply.tool_calls]
    return web.json_response({
        **meta, "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": chat_usage(reply.usage, reasoning_tokens(server, reply)),
    })


async def _stream(request: web.Request, server: ApiServer, req: ChatRequest, reply: Reply,
                  meta: dict[str, Any]) -> web.StreamResponse:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = {**meta, "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if req.include_usage:
            out["usage"] = None
        return out

    n_calls = 0
    async with event_stream(request, server, reply) as sse:
        await sse.send(chunk({"role": "assistant", "content": ""}))
        async with contextlib.aclosing(reply.pieces()) as pieces:
            async for piece in pieces:
                if piece.kind == "content":
                    await sse.send(chunk({"content": piece.text}))
                elif piece.kind == "reasoning":
                    await sse.send(chunk({"reasoning_content": piece.text}))
                elif piece.kind == "tool_call" and piece.call is not None:
                    await sse.send(chunk({"tool_calls": [tool_call_json(piece.call, n_calls)]}))
                    n_calls += 1
                elif piece.kind == "progress":
                    await sse.comment(f"prompt {piece.progress[0]}/{piece.progress[1]}")
        usage = ({**meta, "object": "chat.completion.chunk", "choices": [],
                  "usage": chat_usage(reply.usage, reasoning_tokens(server, reply))} if req.include_usage else None)
        await end_stream(sse, reply, chunk({}, reply.finish_reason), usage)
    return await sse.close()
