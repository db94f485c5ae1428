"""``POST /v1/chat/completions``: streaming (SSE) and whole answers."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from engine.types import ToolCall

from .app_key import SERVER_KEY
from .chat_request import ChatRequest, parse_chat_request
from .fields import read_json_object
from .observe import T0_KEY
from .reply import Reply
from .sse import ClientGone, SseWriter
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
    server = request.app[SERVER_KEY]
    engine = server.require_engine()
    body = await read_json_object(request, server.config.body_timeout_s)
    req = parse_chat_request(body, context_limit=server.context_limit(engine),
                             vocab_size=int(engine.config.vocab_size))
    guide = await server.compile(engine, req.constraint, "response_format" if req.constraint and
                                 req.constraint.kind == "json" else "tool_choice", req.params.max_tokens)
    await server.check_conversation_fits(engine, req.conversation, "messages")
    job = server.submit(lambda cancel: engine.generate(req.conversation, req.params, cancel, guide=guide), request,
                        req.conversation)
    reply = Reply(job, request.get(T0_KEY))
    server.track(request, reply, req.warnings)
    meta = {"id": "chatcmpl-" + secrets.token_hex(12), "created": int(time.time()), "model": server.model_id,
            "system_fingerprint": "neural-" + engine.info.fingerprint[:12]}
    if req.stream:
        return await _stream(request, server, req, reply, meta)
    try:
        async with contextlib.aclosing(reply.pieces()) as pieces:
            async for _ in pieces:
                pass
    finally:
        if not job.finished:
            job.cancel()
    reply.raise_if_failed()
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
    sse = SseWriter(request, server.config.stall_timeout_s)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = {**meta, "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if req.include_usage:
            out["usage"] = None
        return out

    n_calls = 0
    try:
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
        if reply.finish_reason in ("error", "cancelled"):
            await sse.send({"error": {"message": f"Generation stopped: {reply.error or reply.finish_reason}.",
                                      "type": "server_error", "param": None, "code": "engine_error"}})
        else:
            await sse.send(chunk({}, reply.finish_reason))
        if req.include_usage:
            await sse.send({**meta, "object": "chat.completion.chunk", "choices": [],
                            "usage": chat_usage(reply.usage, reasoning_tokens(server, reply))})
        await sse.done()
    except ClientGone:
        reply.job.cancel()
    finally:  # any failure while streaming: no generation may run on without its client
        if not reply.job.finished:
            reply.job.cancel()
    return await sse.close()
