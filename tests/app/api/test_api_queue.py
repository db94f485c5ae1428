"""One engine, many clients: cancel on disconnect, FIFO waiting line, 429 when full."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import openai
import pytest

from app.api.engine_bridge import EngineBridge
from app.api.errors import ApiError
from engine.types import CancelToken, Done, Event, TextDelta, Usage

from .conftest import CONTEXT, LiveServer
from .rawhttp import RawClient
from .scripted_engine import ScriptedEngine

USER = [{"role": "user", "content": "write forever"}]
LONG = CONTEXT - 400  # far more tokens than the test will wait for


def start_long_stream(srv: LiveServer) -> openai.Stream:
    stream = srv.client().chat.completions.create(model="m", messages=USER, max_tokens=LONG, stream=True)  # type: ignore[arg-type]
    seen = 0
    for chunk in stream:  # wait until the engine is really producing tokens
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
            if seen >= 3:
                break
    assert srv.server.bridge.busy
    return stream


def wait_until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_disconnect_mid_stream_frees_the_engine_within_a_second(live: LiveServer, scripted: ScriptedEngine) -> None:
    scripted.ban_stops()
    stream = start_long_stream(live)
    stream.close()
    t0 = time.monotonic()
    scripted.expect("<|channel|>final<|message|>next one<|return|>")
    r = live.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "short"}])
    elapsed = time.monotonic() - t0
    assert r.choices[0].message.content == "next one"
    assert elapsed < 1.0, f"next request took {elapsed:.2f}s after the disconnect"


def test_disconnect_of_a_waiting_non_streaming_client_cancels_it(live: LiveServer, scripted: ScriptedEngine) -> None:
    scripted.ban_stops()
    with pytest.raises(openai.APITimeoutError):
        live.client(timeout=0.4).chat.completions.create(model="m", messages=USER, max_tokens=LONG)  # type: ignore[arg-type]
    t0 = time.monotonic()
    wait_until(lambda: not live.server.bridge.busy, timeout=1.0)
    assert time.monotonic() - t0 < 1.0


def test_full_queue_answers_429_and_fifo_continues(make_server, scripted: ScriptedEngine) -> None:
    srv = make_server(max_waiting=1)
    scripted.ban_stops()
    stream = start_long_stream(srv)
    scripted.expect("<|channel|>final<|message|>waited my turn<|return|>")
    result: dict[str, str | None] = {}

    def waiting_client() -> None:
        r = srv.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
        result["b"] = r.choices[0].message.content

    t = threading.Thread(target=waiting_client)
    t.start()
    wait_until(lambda: srv.server.bridge.waiting == 1)

    with pytest.raises(openai.RateLimitError) as info:
        srv.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    err = info.value.body
    assert isinstance(err, dict) and err["code"] == "queue_full" and "--queue" in err["message"]
    raw = RawClient(srv.server.port).post("/v1/responses", json={"input": "d"})
    # the estimated wait: the running generation's remaining time (10 s assumed before any was timed)
    assert raw.status_code == 429 and 1 <= int(raw.headers["Retry-After"]) <= 60
    assert raw.json()["error"]["type"] == "rate_limit_error"

    stream.close()  # the waiting request runs next
    t.join(10)
    assert result["b"] == "waited my turn"


def test_stop_while_streaming_ends_the_stream(make_server, scripted: ScriptedEngine) -> None:
    srv = make_server()
    scripted.ban_stops()
    stream = start_long_stream(srv)
    t0 = time.monotonic()
    srv.call(srv.server.stop())
    assert time.monotonic() - t0 < 3.0
    with pytest.raises((openai.APIError, openai.APIConnectionError)):
        for _ in stream:
            pass


# ---- the bridge on its own (plain generators stand in for generations) -------------------


def counting_work(log: list[str], name: str, gate: threading.Event | None = None, n: int = 3):
    def work(cancel: CancelToken) -> Iterator[Event]:
        log.append(name)
        for i in range(n):
            if gate is not None:
                gate.wait(5)
            if cancel.cancelled:
                yield Done("cancelled", Usage())
                return
            yield TextDelta("final", f"{name}{i}")
        yield Done("stop", Usage(completion_tokens=n))

    return work


def test_bridge_runs_jobs_in_fifo_order_and_cancels_waiting_ones() -> None:
    async def scenario() -> None:
        bridge = EngineBridge(max_waiting=3)
        bridge.start()
        log: list[str] = []
        gate = threading.Event()
        a = bridge.submit(counting_work(log, "a", gate))
        await a.started.wait()
        b = bridge.submit(counting_work(log, "b"))
        c = bridge.submit(counting_work(log, "c"))
        d = bridge.submit(counting_work(log, "d"))
        with pytest.raises(ApiError) as info:
            bridge.submit(counting_work(log, "e"))
        assert info.value.status == 429
        c.cancel()  # a waiting client went away: its slot frees at once
        assert bridge.waiting == 2
        bridge.submit(counting_work(log, "f"))
        gate.set()
        texts = {}
        for name, job in (("a", a), ("b", b), ("c", c), ("d", d)):
            events = [ev async for ev in job]
            texts[name] = [ev.text for ev in events if isinstance(ev, TextDelta)]
            assert isinstance(events[-1], Done)
        assert texts["a"] == ["a0", "a1", "a2"] and texts["c"] == []
        await bridge.stop()
        assert log[:3] == ["a", "b", "d"]

    asyncio.run(scenario())


def test_bridge_reports_a_crashing_generation_as_error() -> None:
    def broken(cancel: CancelToken) -> Iterator[Event]:
        yield TextDelta("final", "partial")
        raise RuntimeError("device lost")

    async def scenario() -> list[Event]:
        bridge = EngineBridge()
        bridge.start()
        events = [ev async for ev in bridge.submit(broken)]
        await bridge.stop()
        return events

    events = asyncio.run(scenario())
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "error"
    assert "device lost" in (events[-1].error or "")
