"""The app as a real process: the API switch comes back after a restart (issue 21 point 1), and a
SIGKILL mid-answer keeps the streamed text (point 8)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.core.paths import AppPaths

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]


def _env() -> dict[str, str]:
    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_api_switch_left_on_serves_after_restart(tmp_path, tiny_model):
    port = _free_port()
    paths = AppPaths.under(tmp_path / "home").ensure()
    paths.settings_file.write_text(json.dumps({
        "model_dir": str(tiny_model), "first_run_done": True,
        "engine": {"backend": "cpu", "dtype": "float32", "cpu_threads": 1, "context": 2048},
        "api": {"enabled": True, "port": port}}))
    for _launch in range(2):  # the second launch is the "restart"
        p = subprocess.Popen([sys.executable, "-m", "app.gui_main", "--home", str(tmp_path / "home")], cwd=ROOT,
                             env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline, body = time.monotonic() + 60, None
            while time.monotonic() < deadline and p.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                        body = json.loads(r.read())
                        break
                except OSError:
                    time.sleep(0.3)
            assert body is not None and body.get("object") == "list", (p.poll(), p.stderr and p.stderr.read1())
        finally:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(15)


def test_sigkill_mid_answer_keeps_the_streamed_text(tmp_path, tiny_model):
    from app.core.conversation_store import ConversationStore

    home = tmp_path / "home"
    p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("kill_driver.py")), str(home),
                          str(tiny_model)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    seen_at, msg_id = 0, ""
    try:
        deadline = time.monotonic() + 120
        first = None
        assert p.stdout is not None
        for line in p.stdout:
            if not line.startswith("LEN ") or int(line.split()[2]) == 0:
                continue
            first = first or time.monotonic()
            if time.monotonic() - first > 1.5:
                # on screen now; saved within SAVE_EVERY_S (0.5 s) while it streams, whole if it ended
                msg_id, seen_at = line.split()[1], int(line.split()[2])
                time.sleep(1.0)
                break
            assert time.monotonic() < deadline
        assert seen_at > 0, "the answer never streamed"
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(30)
    store = ConversationStore(AppPaths.under(home).database)
    conv = store.list_conversations()[0]
    answer = store.tree(conv.id).by_id[msg_id]
    assert answer.role == "assistant"
    assert len(answer.content) + len(answer.reasoning or "") >= seen_at
