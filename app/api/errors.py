"""OpenAI-shaped errors: every failure the API reports is ``{"error": {message, type, param, code}}``.

Handlers raise :class:`ApiError`; the error middleware (``security.py``) turns it, and any
aiohttp HTTP exception or unexpected crash, into that JSON so clients such as the official
``openai`` package surface a readable message instead of an HTML page.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

# HTTP status -> OpenAI error ``type`` (the names the official API uses).
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(Exception):
    """An error answer: HTTP status plus the OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type_: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or _TYPE_BY_STATUS.get(status, "invalid_request_error" if status < 500 else "server_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=self.headers)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 for a request field that is missing, mistyped or out of range."""
    return ApiError(400, message, param=param, code=code)


def from_http_exception(exc: web.HTTPException) -> ApiError:
    """Map aiohttp's own HTTP errors (404 route, 405 method, 413 body) to actionable messages."""
    status = exc.status
    if status == 404:
        return ApiError(
            404,
            f"Unknown endpoint. This server offers GET /v1/models, POST /v1/chat/completions, "
            f"POST /v1/completions, POST /v1/responses and GET /health ({exc.reason}).",
            code="unknown_url",
        )
    if status == 405:
        return ApiError(405, f"Method not allowed on this endpoint ({exc.reason}); check GET vs POST.",
                        code="method_not_allowed")
    if status == 413:
        return ApiError(413, "Request body too large; send a smaller request or restart the server with a larger "
                        "--max-body-mb.", code="request_too_large")
    return ApiError(status, exc.text or exc.reason or "HTTP error", code=None)
