"""``neural serve`` end to end: a real process on a free port, a request, Ctrl+C or SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_neural_serve_answers_and_stops_cleanly(tiny_model: Path, sig: signal.Signals) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        # -X faulthandler: a server that hangs on its way out is sent SIGABRT below and prints every thread's stack
        [sys.executable, "-X", "faulthandler", "-m", "app.cli.main", "serve", str(tiny_model), "--port", "0",
         "--backend", "reference", "--context", "1024", "--queue", "2", "--max-body-mb", "1", "--model-id",
         "tiny-test"],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "server exited before listening"
            m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            url = m.group(1) if m else None
        assert url, "server did not report its address"
        # keep reading its stderr (the console access log): a full pipe would block the server
        drained: list[str] = []
        threading.Thread(target=lambda: drained.extend(proc.stderr or []), daemon=True).start()
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            assert json.load(r)["data"][0]["id"] == "tiny-test"
        body = json.dumps({"model": "tiny-test", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 3}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.load(r)
        assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] <= 3
        proc.send_signal(sig)
        # exit status is the contract; the time only bounds a hang (a loaded 2-core box took >15 s; session 18's CI
        # run once waited 120 s without an exit, not reproduced in 26 runs since: the stacks say where, next time)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            time.sleep(0.5)  # the drain thread reads the last of the stacks
            pytest.fail("neural serve did not exit within 120 s of the signal; its threads:\n"
                        + "".join(drained)[-8000:])
        assert rc == 0, "".join(drained)[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
