"""``POST /v1/responses``: the Responses API (text, function tools, streaming events)."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

from aiohttp import web

from .generation import event_stream, read_conversation_request, start_conversation, whole_answer
from .responses_output import ResponseBuilder
from .responses_request import parse_responses_request
from .usage import responses_usage

routes = web.RouteTableDef()


@routes.post("/v1/responses")
async def create_response(request: web.Request) -> web.StreamResponse:
    server, engine, req = await read_conversation_request(request, parse_responses_request)
    reply = await start_conversation(request, server, engine, req, "text.format", "input")
    builder = ResponseBuilder()
    created = time.time()
    resp: dict[str, Any] = {
        "id": "resp_" + secrets.token_hex(12), "object": "response", "created_at": int(created),
        "status": "in_progress", "model": server.model_id, "output": [], "error": None,
        "incomplete_details": None, "usage": None, **req.echo,
    }

    def finalize() -> dict[str, Any]:
        reasoning_tokens = engine.count_tokens(reply.reasoning) if reply.reasoning else 0
        status = {"error": "failed", "cancelled": "failed", "length": "incomplete"}.get(reply.finish_reason,
                                                                                        "completed")
        resp.update(status=status, output=builder.output, usage=responses_usage(reply.usage, reasoning_tokens),
                    completed_at=int(time.time()) if status == "completed" else None)
        if status == "incomplete":
            resp["incomplete_details"] = {"reason": "max_output_tokens"}
        if status == "failed":
            resp["error"] = {"code": "server_error", "message": f"Generation stopped: {reply.error or 'cancelled'}"}
        return resp

    if not req.stream:
        await whole_answer(reply, builder.feed)
        builder.finish(incomplete=reply.finish_reason == "length")
        return web.json_response(finalize())

    async with event_stream(request, server, reply) as sse:
        async def send(ev: dict[str, Any]) -> None:
            await sse.send(ev, event=ev["type"])

        await send(builder.event("response.created", response=dict(resp)))
        await send(builder.event("response.in_progress", response=dict(resp)))
        async with contextlib.aclosing(reply.pieces()) as pieces:
            async for piece in pieces:
                if piece.kind == "progress":
                    await sse.comment(f"prompt {piece.progress[0]}/{piece.progress[1]}")
                for ev in builder.feed(piece):
                    await send(ev)
        for ev in builder.finish(incomplete=reply.finish_reason == "length"):
            await send(ev)
        final = finalize()
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
            final["status"], "response.failed")
        await send(builder.event(kind, response=final))
    return await sse.close()
