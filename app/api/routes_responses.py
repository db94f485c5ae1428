"""``POST /v1/responses``: the Responses API (text, function tools, streaming events)."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

from aiohttp import web

from .app_key import SERVER_KEY
from .fields import read_json_object
from .observe import T0_KEY
from .reply import Reply
from .responses_output import ResponseBuilder
from .responses_request import parse_responses_request
from .sse import ClientGone, SseWriter
from .usage import responses_usage

routes = web.RouteTableDef()


@routes.post("/v1/responses")
async def create_response(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER_KEY]
    engine = server.require_engine()
    body = await read_json_object(request, server.config.body_timeout_s)
    req = parse_responses_request(body, context_limit=server.context_limit(engine),
                                  vocab_size=int(engine.config.vocab_size))
    guide = await server.compile(engine, req.constraint, "text.format" if req.constraint and
                                 req.constraint.kind == "json" else "tool_choice", req.params.max_tokens)
    await server.check_conversation_fits(engine, req.conversation, "input")
    job = server.submit(lambda cancel: engine.generate(req.conversation, req.params, cancel, guide=guide), request,
                        req.conversation)
    reply = Reply(job, request.get(T0_KEY))
    server.track(request, reply, req.warnings)
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
        try:
            async with contextlib.aclosing(reply.pieces()) as pieces:
                async for piece in pieces:
                    builder.feed(piece)
        finally:
            if not job.finished:
                job.cancel()
        builder.finish(incomplete=reply.finish_reason == "length")
        reply.raise_if_failed()
        return web.json_response(finalize())

    sse = SseWriter(request, server.config.stall_timeout_s)

    async def send(ev: dict[str, Any]) -> None:
        await sse.send(ev, event=ev["type"])

    try:
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
    except ClientGone:
        reply.job.cancel()
    finally:  # any failure while streaming: no generation may run on without its client
        if not job.finished:
            job.cancel()
    return await sse.close()
