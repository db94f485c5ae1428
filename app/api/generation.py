"""A generation as the three generating routes run it (chat completions, responses, completions):
queued and tracked, then drained whole or streamed, and never left running without its client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web

from engine.grammar import Constraint
from engine.types import Conversation, GenerationParams

from .app_key import SERVER_KEY
from .engine_bridge import Work
from .fields import read_json_object
from .observe import T0_KEY
from .reply import Piece, Reply
from .sse import ClientGone, SseWriter

if TYPE_CHECKING:
    from engine.session import Engine

    from .server import ApiServer


class ConversationRequest(Protocol):
    """What a parsed chat or Responses request carries (chat_request / responses_request)."""

    @property
    def conversation(self) -> Conversation: ...
    @property
    def params(self) -> GenerationParams: ...
    @property
    def constraint(self) -> Constraint | None: ...
    @property
    def warnings(self) -> list[str]: ...


R = TypeVar("R", bound=ConversationRequest)


async def read_conversation_request(request: web.Request,
                                    parse: Callable[..., R]) -> tuple[ApiServer, Engine, R]:
    """The server, its engine (503 while none is loaded) and the body parsed by ``parse``
    (parse_chat_request / parse_responses_request) against that engine's context and vocabulary."""
    server = request.app[SERVER_KEY]
    engine = server.require_engine()
    body = await read_json_object(request, server.config.body_timeout_s)
    return server, engine, parse(body, context_limit=server.context_limit(engine),
                                 vocab_size=int(engine.config.vocab_size))


def start(request: web.Request, server: ApiServer, work: Work, warnings: list[str],
          conversation: Conversation | None = None) -> Reply:
    """Queue ``work`` (429 when the line is full) and register it for the access log and metrics."""
    reply = Reply(server.submit(work, request, conversation), request.get(T0_KEY))
    server.track(request, reply, warnings)
    return reply


async def start_conversation(request: web.Request, server: ApiServer, engine: Engine, req: ConversationRequest,
                             format_param: str, input_param: str) -> Reply:
    """A chat or Responses request: bind its constraint (a JSON format, named ``format_param`` in
    errors, or its tools), check that the conversation fits the context, queue the generation."""
    constraint = req.constraint
    guide = await server.compile(engine, constraint, format_param if constraint and constraint.kind == "json"
                                 else "tool_choice", req.params.max_tokens)
    await server.check_conversation_fits(engine, req.conversation, input_param)
    return start(request, server, lambda cancel: engine.generate(req.conversation, req.params, cancel, guide=guide),
                 req.warnings, req.conversation)


async def whole_answer(reply: Reply, on_piece: Callable[[Piece], object] | None = None) -> None:
    """Drain a non-streaming answer (each piece to ``on_piece``); an engine failure raises."""
    try:
        async with contextlib.aclosing(reply.pieces()) as pieces:
            async for piece in pieces:
                if on_piece is not None:
                    on_piece(piece)
    finally:
        if not reply.job.finished:
            reply.job.cancel()
    reply.raise_if_failed()


@contextlib.asynccontextmanager
async def event_stream(request: web.Request, server: ApiServer, reply: Reply) -> AsyncIterator[SseWriter]:
    """The SSE response of a streaming answer; a client that goes away cancels the generation,
    and so does any failure while streaming: no generation runs on without its client."""
    sse = SseWriter(request, server.config.stall_timeout_s)
    try:
        yield sse
    except ClientGone:
        reply.job.cancel()
    finally:
        if not reply.job.finished:
            reply.job.cancel()


async def end_stream(sse: SseWriter, reply: Reply, last: dict[str, Any], usage: dict[str, Any] | None) -> None:
    """Close a chat-style stream: ``last`` (the finish chunk) or an error event when the engine
    failed or was cancelled, then the ``usage`` chunk if asked for, then ``[DONE]``."""
    if reply.finish_reason in ("error", "cancelled"):
        await sse.send({"error": {"message": f"Generation stopped: {reply.error or reply.finish_reason}.",
                                  "type": "server_error", "param": None, "code": "engine_error"}})
    else:
        await sse.send(last)
    if usage is not None:
        await sse.send(usage)
    await sse.done()
