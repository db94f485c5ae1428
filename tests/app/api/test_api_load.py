"""Load and timeouts: a 15 MiB body next to a live stream, 30 concurrent streaming SDK clients,
half-sent requests and a reader that stops reading."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from typing import Any

import openai
import pytest

from app.api.sse import ClientGone, SseWriter

from .conftest import LiveServer
from .rawhttp import RawClient
from .scripted_engine import ScriptedEngine

USER = [{"role": "user", "content": "write forever"}]


def test_15mib_body_does_not_stall_a_stream_or_health(make_server: Any, scripted: ScriptedEngine) -> None:
    srv: LiveServer = make_server(max_body_bytes=16 << 20)
    scripted.ban_stops()
    stream = srv.client().chat.completions.create(model="m", messages=USER, max_tokens=1500, stream=True)  # type: ignore[arg-type]
    arrivals: list[float] = []
    stop = threading.Event()

    def read() -> None:
        try:
            for _chunk in stream:
                arrivals.append(time.monotonic())
                if stop.is_set():
                    break
        except openai.APIConnectionError:  # the test closes the stream under the reader at the end
            if not stop.is_set():
                raise

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 60
    while len(arrivals) < 5 and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(arrivals) >= 5, "the stream did not start"
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "word " * (3 << 20)}]}).encode()
    assert len(big) >= 15 << 20
    result: dict[str, Any] = {}
    t_big = time.monotonic()

    def post_big() -> None:
        result["r"] = RawClient(srv.server.port or 0, timeout=60).post("/v1/chat/completions", content=big,
                                                                       headers={"Content-Type": "application/json"})
        result["t"] = time.monotonic() - t_big

    poster = threading.Thread(target=post_big)
    poster.start()
    health_times = []
    while poster.is_alive():
        t0 = time.monotonic()
        assert RawClient(srv.server.port or 0).get("/health").status_code == 200
        health_times.append(time.monotonic() - t0)
        time.sleep(0.05)
    poster.join()
    end = time.monotonic()
    time.sleep(0.5)
    stop.set()
    stream.close()
    reader.join(10)
    r = result["r"]
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]
    window = [t for t in arrivals if t_big - 0.2 <= t <= end + 0.5]
    gaps = [b - a for a, b in itertools.pairwise(window)]
    assert gaps and max(gaps) < 0.5, f"stream stalled {max(gaps):.2f}s while the big body was handled"
    assert max(health_times) < 0.2, f"/health took {max(health_times):.2f}s"


def test_30_concurrent_streaming_clients_with_default_retries_all_finish(live: LiveServer,
                                                                        scripted: ScriptedEngine) -> None:
    for _ in range(30):
        scripted.expect("<|channel|>final<|message|>done<|return|>")
    results: list[str] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            client = openai.OpenAI(base_url=live.url + "/v1", api_key="x", timeout=120)  # default max_retries=2
            text = ""
            for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}],
                                                        stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
            results.append(text)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert results == ["done"] * 30


def test_half_sent_request_head_is_closed(make_server: Any, scripted: ScriptedEngine) -> None:
    srv: LiveServer = make_server(header_timeout_s=1.0)
    with socket.create_connection(("127.0.0.1", srv.server.port or 0), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        t0 = time.monotonic()
        assert s.recv(100) == b""  # the server closed the connection
        assert time.monotonic() - t0 < 5.0


def test_half_sent_body_gets_408(make_server: Any, scripted: ScriptedEngine) -> None:
    srv: LiveServer = make_server(body_timeout_s=1.0)
    with socket.create_connection(("127.0.0.1", srv.server.port or 0), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"model\": ")
        t0 = time.monotonic()
        data = s.recv(4096)
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert b"body_timeout" in data and time.monotonic() - t0 < 5.0
    assert not srv.server.bridge.busy


def test_stalled_reader_is_dropped_and_its_generation_cancelled() -> None:
    """A write that cannot complete (the client stopped reading, buffers full) ends as ClientGone
    within the stall timeout; the route then cancels the job (as for a disconnect)."""

    class Transport:
        aborted = False

        def is_closing(self) -> bool:
            return False

        def abort(self) -> None:
            self.aborted = True

    class Request:
        transport = Transport()

    class Stuck:
        async def prepare(self, request: Any) -> None:
            return None

        async def write(self, data: bytes) -> None:
            await asyncio.sleep(3600)  # the peer never drains its socket

    async def run() -> float:
        w = SseWriter(Request(), stall_timeout=0.3)  # type: ignore[arg-type]
        w.response = Stuck()  # type: ignore[assignment]
        t0 = time.monotonic()
        with pytest.raises(ClientGone):
            await w.send({"x": 1})
        return time.monotonic() - t0

    took = asyncio.run(run())
    assert 0.25 < took < 2.0 and Request.transport.aborted
