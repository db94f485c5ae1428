"""Server settings shared by ``neural serve`` and the desktop app's API switch."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 32  # holds a parallel agent fan-out (sub-agents, batch tools) without 429s
DEFAULT_MAX_BODY_MB = 16.0
DEFAULT_HEADER_TIMEOUT_S = 30.0
DEFAULT_BODY_TIMEOUT_S = 60.0
DEFAULT_STALL_TIMEOUT_S = 30.0


@dataclass
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  # 0 picks a free port; ApiServer.port then reports it
    # when set, every /v1 request needs "Authorization: Bearer <key>"; kept out of repr so it is never printed
    api_key: str | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API; empty = CORS off
    allowed_hosts: tuple[str, ...] = ()  # extra Host header names besides loopback (for LAN use)
    max_waiting: int = DEFAULT_QUEUE  # requests that may wait behind the running one before 429
    max_body_bytes: int = int(DEFAULT_MAX_BODY_MB * 1024 * 1024)
    model_id: str | None = None  # the id /v1/models reports; None = the engine's model name
    # a connection that has not sent a complete request head within this closes (also the idle keep-alive)
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S  # the whole body must arrive within this (else 408)
    # a streaming client that reads nothing for this long is dropped and its generation cancelled
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if self.max_waiting < 0:
            raise ValueError("queue length must be >= 0")
        if self.max_body_bytes < 1024:
            raise ValueError("max body size must be at least 1 KiB")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api key must not be empty")
        if self.api_key is not None and not self.api_key.isascii():
            raise ValueError("api key must be ASCII (it travels in an HTTP header)")
        for name in ("header_timeout_s", "body_timeout_s", "stall_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
