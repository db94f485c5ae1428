"""Request guards, outermost first: error shaping, Host check, CORS, auth and body size.

The server listens on loopback, but a web page can still reach it: through DNS rebinding
(an attacker's name resolving to 127.0.0.1, so the browser sends ``Host: evil.example``)
or by a cross-origin POST from any page. So the Host header must be a loopback name, and a
request that carries an ``Origin`` header is refused unless that origin was configured.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from .config import ServerConfig
from .errors import ApiError, error_body, from_http_exception

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CONFIG_KEY: web.AppKey[ServerConfig] = web.AppKey("neural_api_config", ServerConfig)

PUBLIC_PATHS = frozenset({"/health"})  # answer without the API key (liveness probes); /metrics needs the key


def host_name(host_header: str) -> str:
    """``[::1]:8080`` -> ``::1``; ``localhost:80`` -> ``localhost``; lower-cased."""
    h = host_header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        rest = h[end + 1:] if end > 0 else ""
        if end > 0 and (rest == "" or (rest[0] == ":" and rest[1:].isdigit())):
            return h[1:end]
        return h  # malformed: kept whole, so it matches no allowed name
    name, colon, port = h.partition(":")
    if colon and not port.isdigit():
        return h
    return name.rstrip(".")


def is_loopback_name(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def origin_allowed(cfg: ServerConfig, origin: str) -> bool:
    return "*" in cfg.cors_origins or origin.rstrip("/") in {o.rstrip("/") for o in cfg.cors_origins}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return from_http_exception(exc).response()
    except (ConnectionResetError, TimeoutError):
        raise
    except Exception as exc:
        log.exception("unhandled error in %s %s", request.method, request.path)
        body = error_body(f"Internal server error ({type(exc).__name__}: {exc}). See the server log.", "server_error")
        return web.json_response(body, status=500)


@web.middleware
async def host_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    cfg = request.app[CONFIG_KEY]
    raw = request.headers.get("Host")
    if not raw:
        raise ApiError(403, "Missing Host header; this server only answers requests addressed to localhost.",
                       code="forbidden_host")
    name = host_name(raw)
    allowed = {host_name(h) for h in cfg.allowed_hosts}
    if cfg.host not in ("0.0.0.0", "::", ""):  # bound to one address: that address names us too
        allowed.add(host_name(cfg.host if ":" not in cfg.host else f"[{cfg.host}]"))
    if not (is_loopback_name(name) or name in allowed):
        raise ApiError(
            403,
            f"Host {raw!r} is not allowed: this local server only answers requests addressed to localhost, "
            f"127.0.0.1 or [::1] (protection against DNS rebinding). Use http://127.0.0.1:<port>/, or start the "
            f"server with --allow-host {name}.",
            code="forbidden_host",
        )
    return await handler(request)


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    cfg = request.app[CONFIG_KEY]
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    if not origin_allowed(cfg, origin):
        hint = ("CORS is off; start the server with --cors-origin " + origin) if not cfg.cors_origins else (
            "allowed origins: " + ", ".join(cfg.cors_origins))
        raise ApiError(403, f"Origin {origin!r} may not call this server ({hint}).", code="forbidden_origin")
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        requested = request.headers.get("Access-Control-Request-Headers", "authorization, content-type")
        return web.Response(status=204, headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": requested,
            "Access-Control-Max-Age": "600",
            "Vary": "Origin",
        })
    return await handler(request)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare hook: CORS headers on every answer (errors and streams too)."""
    cfg = request.app[CONFIG_KEY]
    origin = request.headers.get("Origin")
    if origin and cfg.cors_origins and origin_allowed(cfg, origin):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    cfg = request.app[CONFIG_KEY]
    if cfg.api_key is not None and request.path not in PUBLIC_PATHS:
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if not auth:
            raise ApiError(401, "Missing API key: this server requires one (NEURAL_API_KEY or --api-key-file), so "
                           "send the header 'Authorization: Bearer <key>'.", code="missing_api_key")
        # headers arrive as str with undecodable bytes escaped; surrogateescape round-trips them
        given = token.strip().encode("utf-8", "surrogateescape")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, cfg.api_key.encode()):
            raise ApiError(401, "Incorrect API key provided; use the key the server was started with.",
                           code="invalid_api_key")
    return await handler(request)


@web.middleware
async def body_size_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Refuse early from Content-Length; chunked bodies are capped by client_max_size on read.
    cfg = request.app[CONFIG_KEY]
    length = request.content_length
    if length is not None and length > cfg.max_body_bytes:
        raise ApiError(413, f"Request body is {length} bytes, over this server's limit of {cfg.max_body_bytes} "
                       f"bytes; send less or restart with a larger --max-body-mb.", code="request_too_large")
    return await handler(request)


MIDDLEWARES = [error_middleware, host_middleware, cors_middleware, auth_middleware, body_size_middleware]
