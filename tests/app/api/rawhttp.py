"""A tiny stdlib HTTP client for tests that need full control (Host header, chunked bodies)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass
class RawResponse:
    status_code: int
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class RawClient:
    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port = port
        self.timeout = timeout

    def request(self, method: str, path: str, *, content: bytes | Iterable[bytes] | None = None,
                json_body: Any = None, headers: dict[str, str] | None = None) -> RawResponse:
        hdrs = dict(headers or {})
        body: Any = content
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        chunked = body is not None and not isinstance(body, bytes)
        if chunked:
            hdrs["Transfer-Encoding"] = "chunked"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs, encode_chunked=chunked)
            r = conn.getresponse()
            return RawResponse(r.status, {k: v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def get(self, path: str, **kw: Any) -> RawResponse:
        return self.request("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> RawResponse:
        return self.request("POST", path, json_body=json, **kw)

    def options(self, path: str, **kw: Any) -> RawResponse:
        return self.request("OPTIONS", path, **kw)


def sse_data(text: str) -> list[Any]:
    """The JSON payloads of an SSE body (``[DONE]`` kept as the string)."""
    out: list[Any] = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                payload = line[len("data: "):]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
