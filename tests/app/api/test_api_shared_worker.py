"""The API on the desktop app's engine worker: one line for both front ends, K/V states kept apart."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from app.api import ServerConfig
from app.core.engine_worker import EngineWorker, Job
from engine.types import CancelToken, Conversation, Done, Event, GenerationParams, Message, Usage

from .conftest import LiveServer
from .scripted_engine import ScriptedEngine


@pytest.fixture()
def shared(engine: ScriptedEngine, tmp_path: Path) -> Iterator[tuple[EngineWorker, LiveServer]]:
    engine.scripted.clear()
    engine.reset()
    worker = EngineWorker(engine, tmp_path / "states").start()
    srv = LiveServer.__new__(LiveServer)
    # LiveServer builds its own ApiServer; this one shares the worker as the desktop app does
    import asyncio

    from app.api import ApiServer

    srv.loop = asyncio.new_event_loop()
    srv.thread = threading.Thread(target=srv.loop.run_forever, daemon=True)
    srv.thread.start()
    srv.server = ApiServer(engine, ServerConfig(port=0, max_waiting=0), worker=worker)
    srv.call(srv.server.start())
    yield worker, srv
    srv.close()
    worker.stop()
    engine.scripted.clear()


def wait_for(cond: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition never held"
        time.sleep(0.01)


def test_the_api_sees_a_gui_generation_and_refuses_when_the_line_is_full(shared) -> None:
    worker, srv = shared
    gate = threading.Event()

    def gui_work(engine: Any, cancel: CancelToken) -> Iterator[Event]:
        gate.wait(10)
        yield Done("stop", Usage())

    job = worker.submit(Job(gui_work, lambda e: None, source="gui", conversation="gui-1"))
    wait_for(lambda: worker.busy)
    client = srv.client()
    with pytest.raises(openai.RateLimitError):  # queue 0: a GUI generation makes the API busy
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    with urllib.request.urlopen(srv.url + "/health", timeout=10) as r:
        assert json.loads(r.read())["busy"] is True
    gate.set()
    wait_for(lambda: job.done is not None)


def test_an_api_conversation_keeps_its_state_across_a_gui_turn(shared, engine: ScriptedEngine) -> None:
    worker, srv = shared
    client = srv.client()
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime number."}]
    engine.expect("<|channel|>final<|message|>Seven.<|return|>")
    a = client.chat.completions.create(model="m", messages=first, max_tokens=32, temperature=0)
    assert a.choices[0].message.content == "Seven."
    # a GUI conversation uses the engine in between (its own tokens replace the API's)
    gui = Conversation((Message("user", "Something unrelated, for the desktop window."),))
    engine.expect("<|channel|>final<|message|>Sure.<|return|>")
    done: list[Done] = []
    job = worker.submit(Job(lambda e, c: e.generate(gui, GenerationParams(max_tokens=32, temperature=0), c),
                            lambda ev: done.append(ev) if isinstance(ev, Done) else None,
                            source="gui", conversation="gui-1", persist=True))
    wait_for(lambda: job.done is not None, 60)
    assert done and done[-1].finish_reason == "stop"
    follow = [*first, {"role": "assistant", "content": "Seven."}, {"role": "user", "content": "Another one?"}]
    engine.expect("<|channel|>final<|message|>Eleven.<|return|>")
    b = client.chat.completions.create(model="m", messages=follow, max_tokens=32, temperature=0)
    assert b.choices[0].message.content == "Eleven."
    cached = b.usage.prompt_tokens_details.cached_tokens if b.usage and b.usage.prompt_tokens_details else 0
    assert cached >= a.usage.prompt_tokens - 1  # restored from its saved state, not reprocessed
