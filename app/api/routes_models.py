"""``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health`` and ``GET /metrics``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .app_key import SERVER_KEY
from .errors import ApiError

routes = web.RouteTableDef()


def _model_card(server: Any) -> dict[str, Any]:
    eng = server.engine
    card: dict[str, Any] = {"id": server.model_id, "object": "model", "created": int(server.started_at),
                            "owned_by": "neural"}
    if eng is not None:
        card["context_length"] = server.context_limit(eng)
        if eng.info.note:
            card["note"] = eng.info.note
    return card


@routes.get("/v1/models")
async def list_models(request: web.Request) -> web.Response:
    server = request.app[SERVER_KEY]
    data = [_model_card(server)] if server.engine is not None else []
    return web.json_response({"object": "list", "data": data})


@routes.get("/v1/models/{model_id:.+}")
async def get_model(request: web.Request) -> web.Response:
    server = request.app[SERVER_KEY]
    model_id = request.match_info["model_id"]
    if server.engine is None or model_id != server.model_id:
        raise ApiError(404, f"The model {model_id!r} does not exist here; GET /v1/models lists the loaded model "
                       f"({server.model_id!r}).", param="model", code="model_not_found")
    return web.json_response(_model_card(server))


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVER_KEY].health())


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format: requests, tokens, time to first token, decode rate, queue, VRAM hit rate."""
    return request.app[SERVER_KEY].metrics.render()
