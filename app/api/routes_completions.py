"""``POST /v1/completions``: raw text continuation (no harmony rendering)."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

from aiohttp import web

from .app_key import SERVER_KEY
from .chat_request import max_tokens_param
from .errors import invalid
from .fields import describe, get_bool, get_dict, get_int, read_json_object, type_name
from .generation import end_stream, event_stream, start, whole_answer
from .params import COMPLETION_KEYS, sampling_params, unknown_fields
from .usage import chat_usage

routes = web.RouteTableDef()
DEFAULT_MAX_TOKENS = 16  # the OpenAI default for this endpoint


def parse_prompt(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and all(isinstance(x, str) for x in prompt):
        raise invalid(f"'prompt' holds {len(prompt)} prompts; this server completes one prompt per request.",
                      param="prompt", code="unsupported_value")
    if not isinstance(prompt, str):
        raise invalid(f"'prompt' must be a string, got {type_name(prompt) if prompt is not None else 'nothing'}"
                      f"{'' if prompt is None else ' ' + describe(prompt)}.", param="prompt",
                      code="invalid_type" if prompt is not None else "missing_required_parameter")
    if not prompt:
        raise invalid("'prompt' must not be empty.", param="prompt", code="invalid_value")
    return prompt


@routes.post("/v1/completions")
async def completions(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER_KEY]
    engine = server.require_engine()
    body = await read_json_object(request, server.config.body_timeout_s)
    warnings = [f"unknown field '{k}' ignored" for k in unknown_fields(body, COMPLETION_KEYS)]
    prompt = parse_prompt(body)
    limit = server.context_limit(engine)
    params = sampling_params(body, max_tokens_param(body, ("max_tokens",), limit, DEFAULT_MAX_TOKENS),
                             int(engine.config.vocab_size))
    stream = get_bool(body, "stream", "stream")
    include_usage = get_bool(get_dict(body, "stream_options", "stream_options") or {}, "include_usage",
                             "stream_options.include_usage")
    echo = get_bool(body, "echo", "echo")
    if body.get("suffix") not in (None, ""):
        raise invalid("'suffix' (fill-in-the-middle) is not supported by gpt-oss.", param="suffix",
                      code="unsupported_parameter")
    if get_int(body, "logprobs", "logprobs", lo=0, hi=20):
        raise invalid("'logprobs' is not supported by this server.", param="logprobs", code="unsupported_parameter")
    if get_int(body, "best_of", "best_of", lo=1, hi=20, default=1) != 1:
        raise invalid("'best_of' must be 1 on this server.", param="best_of", code="unsupported_value")
    await server.check_text_fits(engine, prompt, "prompt")
    reply = start(request, server, lambda cancel: engine.complete(prompt, params, cancel), warnings)
    meta = {"id": "cmpl-" + secrets.token_hex(12), "object": "text_completion", "created": int(time.time()),
            "model": server.model_id, "system_fingerprint": "neural-" + engine.info.fingerprint[:12]}

    def choice(text: str, finish: str | None) -> dict[str, Any]:
        return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}

    if not stream:
        await whole_answer(reply)
        text = (prompt if echo else "") + reply.content
        return web.json_response({**meta, "choices": [choice(text, reply.finish_reason)],
                                  "usage": chat_usage(reply.usage)})

    async with event_stream(request, server, reply) as sse:
        if echo:
            await sse.send({**meta, "choices": [choice(prompt, None)]})
        async with contextlib.aclosing(reply.pieces()) as pieces:
            async for piece in pieces:
                if piece.kind == "content":
                    await sse.send({**meta, "choices": [choice(piece.text, None)]})
        await end_stream(sse, reply, {**meta, "choices": [choice("", reply.finish_reason)]},
                         {**meta, "choices": [], "usage": chat_usage(reply.usage)} if include_usage else None)
    return await sse.close()
