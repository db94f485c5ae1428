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


def test_a_port_held_by_another_program_is_refused_in_words_and_a_free_one_then_serves(qtbot, qloop):
    """Another local server (LM Studio, llama-server) already on the port: the switch says which port is taken and
    what to do, reports itself off, and serves once given a free port (no engine needed for either)."""
    from app.gui.api_switch import ApiSwitch

    switch = ApiSwitch()
    statuses: list[tuple[str, str, str]] = []
    running: list[bool] = []
    switch.statusChanged.connect(lambda *a: statuses.append(a))
    switch.runningChanged.connect(running.append)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        refused = asyncio.ensure_future(switch.start(port))
        qtbot.waitUntil(refused.done, timeout=10000)
    assert refused.result() is False and not switch.running and running == [False]
    text, url, kind = statuses[-1]
    assert kind == "error" and url == ""
    assert text == (f"Could not start: port {port} is in use by another program. Choose another port above and "
                    "turn the switch on again.")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = int(s.getsockname()[1])
    try:
        started = asyncio.ensure_future(switch.start(free))
        qtbot.waitUntil(started.done, timeout=10000)
        assert started.result() is True and running[-1] is True
        assert statuses[-1][1] == f"http://127.0.0.1:{free}/v1" and statuses[-1][2] == "ok"
    finally:
        stopped = asyncio.ensure_future(switch.stop())
        qtbot.waitUntil(stopped.done, timeout=10000)
