"""Ctrl+Q ends the app's process promptly, with everything saved (issue 21 point 10: the process
lingered 3-12 s). A real process (quit_driver.py runs app.gui_main.run_app as ``neural`` does):
idle, mid-answer in the window, and mid-answer for an API client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.paths import AppPaths

ROOT = Path(__file__).resolve().parents[3]
QUIT_LIMIT_S = 2.0  # the target is < 1 s; measured 0.05-0.2 s here (the old path: 1.3-2.2 s on this tiny model)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX process timing")]


def _quit(tmp_path: Path, model: Path, mode: str) -> tuple[float, list[str], AppPaths]:
    """(seconds from the Ctrl+Q press to the process's end, its stdout lines, its paths)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    paths = AppPaths.under(tmp_path / "home").ensure()
    paths.settings_file.write_text(json.dumps({
        "model_dir": str(model), "first_run_done": True,
        "engine": {"backend": "cpu", "dtype": "float32", "cpu_threads": 1, "context": 2048},
        "api": {"enabled": True, "port": port}}))
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("quit_driver.py")), str(paths.data_dir.parent),
                          mode], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the app did not quit within 120 s: {out[-2000:]} {err[-2000:]}")
    ended = time.time()
    lines = out.splitlines()
    pressed = [float(line.split()[1]) for line in lines if line.startswith("QUIT ")]
    assert p.returncode == 0 and pressed, (p.returncode, out[-2000:], err[-3000:])
    assert "NO-SHORTCUT" not in lines, "Ctrl+Q did not close the window"
    assert not [line for line in lines if line.startswith("API-ERROR")], lines
    return ended - pressed[0], lines, paths


def test_quit_when_idle_is_prompt(tmp_path, tiny_model):
    took, _, paths = _quit(tmp_path, tiny_model, "idle")
    assert took < QUIT_LIMIT_S, f"the process lived {took:.2f} s after Ctrl+Q"
    assert len(list(paths.states_dir.glob("*.kv"))) == 1  # the answered conversation's K/V state
    assert not (paths.data_dir / "neural.lock").exists()  # released: the next start sees no other instance
    assert "exit 0" in paths.log_file.read_text()  # the log was flushed before the end


def test_quit_mid_answer_is_prompt_and_keeps_the_answer_and_state(tmp_path, tiny_model):
    from app.core.conversation_store import ConversationStore

    took, lines, paths = _quit(tmp_path, tiny_model, "busy")
    pressed = float(next(line for line in lines if line.startswith("QUIT ")).split()[1])
    assert took < QUIT_LIMIT_S, f"the process lived {took:.2f} s after Ctrl+Q"
    store = ConversationStore(paths.database)
    try:
        conv = store.list_conversations()[0]
        last = [m for m in store.tree(conv.id).by_id.values() if m.role == "assistant"]
        interrupted = [m for m in last if "Interrupted" in str(m.meta.get("note", ""))]
        assert interrupted and interrupted[0].content + (interrupted[0].reasoning or "")
    finally:
        store.close()
    (state,) = paths.states_dir.glob("*.kv")
    assert state.stat().st_mtime >= pressed - 0.05  # saved after the cancelled turn, before the end


def test_quit_while_an_api_client_streams_is_prompt(tmp_path, tiny_model):
    took, _, _ = _quit(tmp_path, tiny_model, "api")
    assert took < QUIT_LIMIT_S, f"the process lived {took:.2f} s after Ctrl+Q"
