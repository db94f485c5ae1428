"""API switch, remote backend, preferences that restart the engine, first run and error states."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.error
import urllib.request

from app.core.settings import RemoteSettings, load_settings
from app.gui.engine_host import ERROR, LOADING, READY
from engine.types import Done
from ui.qt import QApplication, QDialogButtonBox, Qt


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, body: dict | None = None, key: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _in_thread(qtbot, fn, timeout: int = 60000):
    """Blocking HTTP from a thread: the server answers on this (GUI) thread's event loop."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn()), daemon=True)
    t.start()
    qtbot.waitUntil(lambda: "r" in out, timeout=timeout)
    return out["r"]


def test_api_switch_on_request_answered_off(qtbot, qloop, make_app):
    c = make_app(max_tokens=4)
    port = _free_port()
    panel = c.window.api_panel
    panel.port.setValue(port)
    panel.api_key.setText("sk-local-test")
    panel.switch.setChecked(True)
    qtbot.waitUntil(lambda: c.api.running, timeout=10000)
    base = f"http://127.0.0.1:{port}/v1"
    qtbot.waitUntil(lambda: base in panel.status.text(), timeout=5000)
    assert "API key required" in panel.status.text() and not panel.port.isEnabled()
    panel.copy_btn.click()
    assert QApplication.clipboard().text() == base
    assert load_settings(c.paths.settings_file).api.enabled is True  # remembered for the next start

    status, body = _in_thread(qtbot, lambda: _http(base + "/models"))
    assert status == 401  # the key is enforced
    status, body = _in_thread(qtbot, lambda: _http(base + "/chat/completions", {
        "model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}, key="sk-local-test"))
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] >= 1

    panel.switch.setChecked(False)
    qtbot.waitUntil(lambda: not c.api.running and panel.status.text() == "Off", timeout=10000)
    assert panel.port.isEnabled() and not panel.copy_btn.isVisibleTo(panel)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    # the GUI still chats on the same engine afterwards (its state is restored or reprocessed)
    with qtbot.waitSignal(c.chat.generationFinished, timeout=30000) as blocker:
        c.chat.send("after the API")
    assert blocker.args[0].finish_reason in ("length", "stop", "tool_calls")


def test_api_switch_reports_busy_port(qtbot, qloop, make_app):
    c = make_app()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        c.window.api_panel.port.setValue(port)
        c.window.api_panel.switch.setChecked(True)
        qtbot.waitUntil(lambda: "Could not start" in c.window.api_panel.status.text(), timeout=10000)
    assert not c.api.running and not c.window.api_panel.switch.isChecked()


def test_remote_backend_streams_from_openai_compatible_server(qtbot, qloop, make_app, tiny_model):
    from app.api import ApiServer, ServerConfig
    from engine.session import Engine
    from engine.settings import EngineSettings

    engine = Engine.load(tiny_model, EngineSettings(backend="cpu", dtype="float32", cpu_threads=1, context=2048))
    server = ApiServer(engine, ServerConfig(port=0, api_key="remote-key"))
    started = asyncio.ensure_future(server.start())
    qtbot.waitUntil(started.done, timeout=10000)
    started.result()
    try:
        c = make_app(model_dir="", remote=RemoteSettings(enabled=True, base_url=f"{server.url}/v1",
                                                         api_key="remote-key", model=""))
        assert c.host.engine is None and c.window.engine_status.state == "remote"
        assert c.window.chat.send_btn.isEnabled()
        with qtbot.waitSignal(c.chat.generationFinished, timeout=60000) as blocker:
            c.chat.send("hello remote")
        done = blocker.args[0]
        assert isinstance(done, Done) and done.finish_reason in ("length", "stop", "tool_calls"), done
        assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens >= 1
        answer = c.store.thread(c.chat.current_id)[-1]
        assert answer.meta["backend"].startswith("remote http://127.0.0.1")
        assert server.requests_served >= 1
    finally:
        stopped = asyncio.ensure_future(server.stop())
        qtbot.waitUntil(stopped.done, timeout=10000)
        engine.close()


def test_preferences_apply_restarts_engine_with_progress(qtbot, make_app):
    c = make_app()
    first = c.host.engine
    states: list[str] = []
    phases: list[float] = []
    c.host.stateChanged.connect(lambda s, _d: states.append(s))
    c.host.loadProgress.connect(lambda _p, f: phases.append(f))
    dlg = c.open_preferences(modal=False)
    qtbot.addWidget(dlg)
    assert dlg.valid and dlg.model_edit.text() == c.settings.model_dir
    dlg.fields["context"].setValue(1024)
    dlg.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: c.host.state == READY and c.host.engine is not first, timeout=30000)
    assert states[0] == LOADING and phases and phases[-1] == 1.0
    assert c.host.engine.settings.context == 1024
    assert load_settings(c.paths.settings_file).engine_settings().context == 1024
    # Same values again: no restart.
    engine = c.host.engine
    assert c.apply_preferences(c.preferences_values()) is False and c.host.engine is engine


def test_first_run_uses_demo_model_labelled(qtbot, make_app):
    c = make_app(model_dir="", wait=False)
    qtbot.waitUntil(lambda: c.host.state == READY, timeout=60000)
    note = c.host.engine.info.note  # the demo model says what it is (trained demo, or random weights)
    assert note and ("demo" in note or "random weights" in note)
    assert c.window.chat.backend_label.toolTip() == note and "demo" in c.window.chat.backend_label.text()
    assert note in c.window.engine_status.label.text()
    c._poll()
    assert note in c.window.residency.note_label.text()


def test_synthetic_model_is_labelled_random_weights(qtbot, make_app):
    c = make_app()  # the tiny synthetic checkpoint
    assert "random weights" in c.host.engine.info.note
    assert "random weights" in c.window.chat.backend_label.text()


def test_broken_model_folder_shows_error_and_fix(qtbot, make_app, tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    c = make_app(model_dir=str(empty), wait=False)
    qtbot.waitUntil(lambda: c.host.state == ERROR, timeout=30000)
    status = c.window.engine_status
    assert "Could not load the model" in status.label.text()
    assert "Preferences" in status.fix.text() and status.fix_btn.isVisibleTo(c.window)
    assert not c.window.chat.send_btn.isEnabled() and "Preferences" in c.window.chat.hint.text()
    c.window.chat.composer.setPlainText("hello")
    qtbot.keyClick(c.window.chat.composer, Qt.Key.Key_Return)
    assert c.store.list_conversations() == []  # nothing was sent


def test_preferences_build_expert_store_with_progress_then_reload(qtbot, make_app, tiny_model, tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    c = make_app(model_dir=str(model))
    first = c.host.engine
    dlg = c.open_preferences(modal=False)
    qtbot.addWidget(dlg)
    assert dlg.store_btn.isVisibleTo(dlg) and "No expert store yet" in dlg.store_label.text()
    fractions: list[float] = []
    c.host.loadProgress.connect(lambda _p, f: fractions.append(f))
    dlg.store_btn.click()
    built = c.paths.stores_dir / first.info.fingerprint / "experts-packed.nstore"  # the app's folder, not the model's
    qtbot.waitUntil(lambda: built.is_file() and c.host.state == READY and c.host.engine is not first, timeout=30000)
    qtbot.waitUntil(lambda: not dlg.store_progress.isVisibleTo(dlg), timeout=5000)
    assert dlg.store_label.text().startswith(f"Expert store: {built}")
    assert not (model / "experts-packed.nstore").exists()
    assert c.host.engine.backend.model.experts_fn.__self__.store.path == built  # the reloaded engine reads it
    assert not dlg.store_btn.isVisibleTo(dlg)
    dlg.close()


def test_first_run_dialog_choose_folder_builds_store_then_loads(qtbot, make_app, tiny_model, tmp_path):
    import shutil

    from ui.first_run_dialog import FOLDER, FirstRunDialog
    from ui.qt import QTimer

    model = tmp_path / "gpt-oss-like"
    shutil.copytree(tiny_model, model)
    seen: list[str] = []

    def answer() -> None:
        dlg = QApplication.activeModalWidget()
        if not isinstance(dlg, FirstRunDialog):
            QTimer.singleShot(50, answer)
            return
        seen.append("dialog")
        dlg.choice, dlg.folder = FOLDER, str(model)  # what "Choose model folder…" sets
        dlg.accept()

    QTimer.singleShot(50, answer)
    c = make_app(model_dir="", wait=False, first_run=True)
    qtbot.waitUntil(lambda: seen == ["dialog"], timeout=20000)
    qtbot.waitUntil(lambda: c.host.state == READY and c.host.engine is not None
                    and c.host.engine.info.model_dir == model, timeout=60000)
    built = c.paths.stores_dir / c.host.engine.info.fingerprint / "experts-packed.nstore"
    assert built.is_file()  # built before the first load, into the app's data folder
    assert load_settings(c.paths.settings_file).model_dir == str(model)
    assert load_settings(c.paths.settings_file).first_run_done
