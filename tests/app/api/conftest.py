"""Fixtures: one scripted engine on the tiny synthetic model, live servers on free ports.

The server runs in-process on its own asyncio loop in a background thread, so the tests
can drive it with the (synchronous) official ``openai`` client and raw HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
import torch

from app.api import ApiServer, ServerConfig
from engine.settings import EngineSettings

from .scripted_engine import ScriptedEngine

CONTEXT = 2048


class LiveServer:
    def __init__(self, engine: Any, config: ServerConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-api-loop", daemon=True)
        self.thread.start()
        self.server = ApiServer(engine, config)
        self.call(self.server.start())

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def client(self, api_key: str = "unused", **kw: Any) -> openai.OpenAI:
        kw.setdefault("timeout", 30.0)
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, **kw)

    def close(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Two intra-op threads on a busy 2-core CI box spin against each other (~20x slower per
    token on the tiny model); restored afterwards so other test folders are unaffected."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def engine(tiny_model) -> Iterator[ScriptedEngine]:
    eng = ScriptedEngine.load(tiny_model, EngineSettings(backend="reference", context=CONTEXT, dtype="float32"))
    assert isinstance(eng, ScriptedEngine)
    yield eng
    eng.close()


@pytest.fixture()
def scripted(engine: ScriptedEngine) -> Iterator[ScriptedEngine]:
    engine.scripted.clear()
    yield engine
    engine.scripted.clear()


@pytest.fixture(scope="module")
def live(engine: ScriptedEngine) -> Iterator[LiveServer]:
    """A default-config server shared by a test module."""
    srv = LiveServer(engine, ServerConfig(port=0))
    yield srv
    srv.close()


@pytest.fixture()
def make_server(engine: ScriptedEngine) -> Iterator[Callable[..., LiveServer]]:
    """Factory for servers with a custom config, closed after the test."""
    made: list[LiveServer] = []

    def make(**config: Any) -> LiveServer:
        srv = LiveServer(engine, ServerConfig(port=0, **config))
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.close()


@pytest.fixture()
def client(live: LiveServer, scripted: ScriptedEngine) -> openai.OpenAI:
    return live.client()
