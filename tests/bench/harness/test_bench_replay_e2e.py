"""``neural bench replay`` end to end against the project's own API server (in-process, tiny model).

Two endpoint names point at the same server, so the mirrored order, archive and arithmetic are
exercised over real HTTP streaming without a second engine. No timing assertions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from app.api import ApiServer, ServerConfig
from app.cli.main import main
from engine.session import Engine
from engine.settings import EngineSettings

MAX_TOKENS = 6


class BackgroundServer:
    def __init__(self, engine: Engine) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-api-loop", daemon=True)
        self.thread.start()
        self.server = ApiServer(engine, ServerConfig(port=0))
        self._call(self.server.start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def close(self) -> None:
        self._call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server(tiny_model) -> Iterator[BackgroundServer]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model, 2-core CI: one intra-op thread is fastest
    eng = Engine.load(tiny_model, EngineSettings(backend="reference", context=2048, dtype="float32"))
    srv = BackgroundServer(eng)
    yield srv
    srv.close()
    eng.close()
    torch.set_num_threads(old)


@pytest.fixture()
def requests_file(tmp_path: Path) -> Path:
    """A conversation and one follow-up, saved the way the shipped set is (temperature 0.8 on
    purpose: the replay must set its own)."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime number."}]
    follow = [*msgs, {"role": "assistant", "content": "7"}, {"role": "user", "content": "Another one?"}]
    bodies = [{"model": "tiny", "messages": m, "max_tokens": MAX_TOKENS, "temperature": 0.8,
               "reasoning_effort": "low", "stream": True} for m in (msgs, follow)]
    path = tmp_path / "reqs.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    return path


def test_replay_two_endpoints_mirrored(server: BackgroundServer, requests_file: Path, tmp_path: Path, capsys):
    out = tmp_path / "archive"
    rc = main(["bench", "replay", "--endpoint", f"A={server.url}", "--endpoint", f"B={server.url}/v1",
               "--requests", str(requests_file), "--out", str(out), "--rounds", "2", "--warmup-sessions", "1",
               "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    res = json.loads(captured.out)
    assert res == json.loads((out / "results.json").read_text())
    assert res["order"] == ["A", "B", "B", "A"]
    warm = [r for r in res["records"] if r["warmup"]]
    assert [(r["session"], r["endpoint"]) for r in warm] == [(-2, "A"), (-2, "A"), (-1, "B"), (-1, "B")]
    assert res["records"][: len(warm)] == warm  # warm-ups run first
    recs = [r for r in res["records"] if not r["warmup"]]
    assert [(r["session"], r["endpoint"], r["request_index"]) for r in recs] == [
        (s, name, i) for s, name in enumerate(["A", "B", "B", "A"]) for i in range(2)]
    for r in res["records"]:
        assert r["ok"] and r["http_status"] == 200 and r["error"] is None
        assert r["token_source"] == "usage"  # include_usage was switched on by the replay
        assert 1 <= r["completion_tokens"] <= MAX_TOKENS
        assert r["timed_tokens"] == r["completion_tokens"] - 1
        assert r["ttft_s"] > 0 and r["wall_s"] >= r["ttft_s"]
        sent = json.loads((out / r["request_file"]).read_bytes())
        assert sent["temperature"] == 1.0 and sent["seed"] == 0 and sent["stream"] is True  # as shipped
        assert sent["stream_options"] == {"include_usage": True}
        body = (out / r["response_file"]).read_bytes()
        assert body.rstrip().endswith(b"data: [DONE]")
        assert hashlib.sha256(body).hexdigest() == r["response_sha256"]
        assert hashlib.sha256((out / r["request_file"]).read_bytes()).hexdigest() == r["request_sha256"]
    # the follow-up reuses the conversation's K/V on the server
    assert any((r["cached_tokens"] or 0) > 0 for r in recs if r["request_index"] == 1)
    summ = res["summary"]
    assert set(summ["endpoints"]) == {"A", "B"} and summ["baseline"] == "A"
    for name, s in summ["endpoints"].items():
        assert s["sessions"] == 2 and s["requests"] == 4 and s["failed"] == 0
        timed = [r for r in recs if r["endpoint"] == name and r["timed_s"] > 0 and r["timed_tokens"] > 0]
        if timed:
            assert s["decode_tps"] == pytest.approx(sum(r["timed_tokens"] for r in timed)
                                                    / sum(r["timed_s"] for r in timed))
    assert set(summ["ratios_vs_baseline"]) == {"B"}
    # the manifest covers every archived file and verifies
    lines = (out / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 1 + 2 * len(res["records"])  # results.json + request and response per record
    for line in lines:
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest


def test_replay_reports_an_unreachable_endpoint(server: BackgroundServer, requests_file: Path, tmp_path: Path,
                                                capsys):
    out = tmp_path / "archive"
    rc = main(["bench", "replay", "--endpoint", f"up={server.url}", "--endpoint", "down=http://127.0.0.1:9",
               "--requests", str(requests_file), "--out", str(out), "--rounds", "1", "--limit", "1"])
    captured = capsys.readouterr()
    assert rc == 1
    res = json.loads((out / "results.json").read_text())
    up, down = res["records"]
    assert up["ok"] and not down["ok"] and down["http_status"] is None and down["error"]
    assert res["summary"]["endpoints"]["down"]["decode_tps"] is None
    assert "down / up" in captured.out


def test_replay_rejects_bad_endpoint(requests_file: Path, capsys):
    assert main(["bench", "replay", "--endpoint", "nourl", "--requests", str(requests_file)]) == 2
    assert "NAME=URL" in capsys.readouterr().err


def test_host_ttft_times_follow_ups_and_the_cached_repeat(server: BackgroundServer, requests_file: Path,
                                                          capsys) -> None:
    from bench.harness import host_ttft

    assert host_ttft.main([server.url, "--requests", str(requests_file), "--rounds", "2",
                           "--max-tokens", str(MAX_TOKENS), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["ttft_ms_MEASURED"]) == {"q1", "q0 cached"}
    assert all(len(v) == 2 and min(v) > 0 for v in r["ttft_ms_MEASURED"].values())
    assert r["q0_first_s"] > 0 and r["median_ms"]["q1"] > 0
    one = requests_file.with_name("one.jsonl")
    one.write_text(requests_file.read_text().splitlines()[0] + "\n")
    assert host_ttft.main([server.url, "--requests", str(one)]) == 2  # no follow-up to time
    assert "follow-up" in capsys.readouterr().err
