"""The API switch serves the engine that finished loading while the server was starting (at an
app start with the switch left on, the load and the server start race: the server kept answering
503 "No model is loaded yet" until the next reload)."""

from __future__ import annotations

import asyncio
import socket


def test_engine_loaded_during_the_server_start_is_served(qtbot, qloop, tiny_model, monkeypatch):
    from app.api.server import ApiServer
    from app.gui.api_switch import ApiSwitch
    from engine.session import Engine
    from engine.settings import EngineSettings

    engine = Engine.load(tiny_model, EngineSettings(backend="cpu", dtype="float32", cpu_threads=1, context=2048))
    switch = ApiSwitch()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    real_start = ApiServer.start

    async def start_while_the_load_ends(self: ApiServer) -> None:
        switch.set_engine(engine)  # the load ends while the server starts (it awaits its socket)
        await real_start(self)

    monkeypatch.setattr(ApiServer, "start", start_while_the_load_ends)
    try:
        started = asyncio.ensure_future(switch.start(port))
        qtbot.waitUntil(started.done, timeout=10000)
        assert started.result() is True
        assert switch.server is not None and switch.server.engine is engine
    finally:
        stopped = asyncio.ensure_future(switch.stop())
        qtbot.waitUntil(stopped.done, timeout=10000)
        engine.close()
