"""Access log and Prometheus metrics for the API.

Every request leaves one access-log line (``app.api.access`` logger): method, path, status,
prompt/cached/completion tokens, time to first token, decode rate and the client. The same
figures feed ``GET /metrics`` (Prometheus text format, prometheus-client) with a registry per
server, so several servers in one process (tests, the desktop app's restart) never collide.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from .reply import Reply
    from .server import ApiServer

access_log = logging.getLogger("app.api.access")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REPLY_KEY = web.RequestKey("neural_reply", object)  # the Reply a route ran (for the log line and metrics)
WARN_KEY = web.RequestKey("neural_warnings", list)  # warnings sent as the X-Neural-Warning header
T0_KEY = web.RequestKey("neural_t0", float)  # perf_counter() when the request arrived
_ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/health",
                        "/metrics"})


class Metrics:
    def __init__(self, server: ApiServer) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("neural_api_requests", "HTTP requests answered", ["endpoint", "status"], registry=r)
        self.tokens = Counter("neural_api_tokens", "Tokens processed", ["kind"], registry=r)
        self.ttft = Histogram("neural_api_time_to_first_token_seconds", "Request start to first generated token",
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=r)
        self.decode = Histogram("neural_api_decode_tokens_per_second", "Decode rate per generation",
                                buckets=(1, 2, 5, 10, 15, 20, 30, 50, 100, 200, 500), registry=r)
        self.rejected = Counter("neural_api_queue_rejections", "Requests refused with 429 (queue full)", registry=r)
        g = Gauge("neural_api_queue_waiting", "Generations waiting behind the running one", registry=r)
        g.set_function(lambda: server.bridge.waiting)
        g = Gauge("neural_api_engine_busy", "1 while a generation runs", registry=r)
        g.set_function(lambda: 1.0 if server.bridge.busy else 0.0)
        g = Gauge("neural_engine_vram_hit_rate", "Share of expert reads served from VRAM (GPU engine)", registry=r)
        g.set_function(lambda: _telemetry(server, "vram_hit_rate"))
        g = Gauge("neural_engine_decode_tokens_per_second", "The engine's latest decode rate", registry=r)
        g.set_function(lambda: _telemetry(server, "decode_tps"))

    def observe(self, endpoint: str, status: int, reply: Reply | None) -> None:
        self.requests.labels(endpoint if endpoint in _ENDPOINTS else "other", str(status)).inc()
        if reply is None:
            return
        u = reply.usage
        self.tokens.labels("prompt").inc(u.prompt_tokens)
        self.tokens.labels("cached").inc(u.cached_tokens)
        self.tokens.labels("completion").inc(u.completion_tokens)
        if reply.ttft is not None:
            self.ttft.observe(reply.ttft)
        if u.decode_tps > 0:
            self.decode.observe(u.decode_tps)

    def render(self) -> web.Response:
        resp = web.Response(body=generate_latest(self.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp


def _telemetry(server: ApiServer, name: str) -> float:
    eng = server.engine
    if eng is None:
        return 0.0
    try:
        return float(getattr(eng.telemetry(), name, 0.0))
    except Exception:  # a metric must never fail a scrape
        return 0.0


def client_name(request: web.Request) -> str:
    peer = request.remote or "-"
    agent = request.headers.get("User-Agent", "-")
    return f"{peer} {agent[:80]!r}"


def access_line(request: web.Request, status: int, seconds: float, reply: Reply | None) -> str:
    parts = [request.method, request.path, str(status), f"{seconds * 1000:.0f}ms"]
    if reply is not None:
        u = reply.usage
        ttft = f"{reply.ttft * 1000:.0f}ms" if reply.ttft is not None else "-"
        parts += [f"prompt={u.prompt_tokens}", f"cached={u.cached_tokens}", f"completion={u.completion_tokens}",
                  # prompt_s: the engine's prompt pass alone; ttft also waits for the first token with text
                  f"prompt_s={u.prompt_seconds:.2f}", f"ttft={ttft}", f"tok/s={u.decode_tps:.1f}",
                  f"finish={reply.finish_reason}"]
    parts.append(f"client={client_name(request)}")
    return " ".join(parts)


def make_access_middleware(server: ApiServer) -> Any:
    @web.middleware
    async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        t0 = time.perf_counter()
        request[T0_KEY] = t0
        status = 499  # the client went away before an answer (nginx's convention)
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        finally:
            reply = cast("Reply | None", request.get(REPLY_KEY))
            server.metrics.observe(request.path, status, reply)
            access_log.info("%s", access_line(request, status, time.perf_counter() - t0, reply))

    return access_middleware


async def add_warning_header(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare hook: warnings about ignored input travel as X-Neural-Warning."""
    warnings = request.get(WARN_KEY)
    if warnings:
        text = "; ".join(warnings)[:2000].encode("ascii", "replace").decode()
        response.headers["X-Neural-Warning"] = "".join(c if " " <= c <= "~" else "?" for c in text)


def warn(request: web.Request, text: str) -> None:
    request.setdefault(WARN_KEY, []).append(text)
    logging.getLogger("app.api").warning("%s %s: %s", request.method, request.path, text)
