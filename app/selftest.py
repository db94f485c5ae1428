"""End-to-end self-test of an installation: ``neural selftest`` (``neural --self-test`` in the bundle).

It proves that a fresh machine (or a freshly built bundle) runs the whole product path without
a window: load the bundled demo model, generate 16 tokens through the engine, start the
OpenAI-compatible API server in-process on a free loopback port and answer one
``/v1/chat/completions`` request over real HTTP. Each step is timed; the first failure stops
the run with a message that says which step failed and why, and the exit status is non-zero.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from engine.session import Engine
    from engine.settings import EngineSettings

TOKENS = 16
HTTP_TIMEOUT_S = 300.0  # a cold CPU-only machine runs the demo model slowly, never this slowly


class SelfTestFailure(RuntimeError):
    """A step failed; the message is meant for the user."""


@dataclass
class StepResult:
    name: str
    ok: bool
    seconds: float
    detail: str


@dataclass
class SelfTestReport:
    steps: list[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "steps": [s.__dict__ for s in self.steps]}


class _Steps:
    """Runs named steps, recording time and outcome; printing as it goes so a hang is visible."""

    def __init__(self, report: SelfTestReport, out: TextIO) -> None:
        self.report, self.out = report, out

    @contextmanager
    def step(self, name: str) -> Iterator[list[str]]:
        print(f"[self-test] {name} ...", file=self.out, flush=True)
        detail: list[str] = []
        t0 = time.perf_counter()
        try:
            yield detail
        except Exception as exc:
            msg = str(exc) if isinstance(exc, SelfTestFailure) else f"{type(exc).__name__}: {exc}"
            self.report.steps.append(StepResult(name, False, time.perf_counter() - t0, msg))
            print(f"[self-test] FAILED: {name}: {msg}", file=self.out, flush=True)
            if not isinstance(exc, SelfTestFailure):
                traceback.print_exc(file=self.out)
            raise SelfTestFailure(f"{name}: {msg}") from exc
        took = time.perf_counter() - t0
        text = "; ".join(detail)
        self.report.steps.append(StepResult(name, True, took, text))
        print(f"[self-test] ok ({took:.1f} s): {text}", file=self.out, flush=True)


def generate_tokens(engine: Engine, n: int) -> tuple[int, str, str]:
    """Generate exactly ``n`` tokens as a raw completion; returns (tokens, finish reason, text).

    A raw completion may stop early on an end token; random weights make that rare but
    possible, so an early stop continues from a longer prompt until ``n`` tokens exist.
    """
    from engine.types import Done, GenerationParams, TextDelta

    prompt = "The quick brown fox"
    produced: list[int] = []
    text: list[str] = []
    finish = ""
    for _attempt in range(4):
        params = GenerationParams(max_tokens=n - len(produced), temperature=0.0, seed=0)
        for ev in engine.complete(prompt, params):
            if isinstance(ev, TextDelta):
                text.append(ev.text)
            elif isinstance(ev, Done):
                if ev.error:
                    raise SelfTestFailure(f"generation failed: {ev.error}")
                produced.extend(ev.token_ids)
                finish = ev.finish_reason
        if len(produced) >= n:
            break
        prompt += " and then"
    if len(produced) < n:
        raise SelfTestFailure(f"the engine produced {len(produced)} tokens, expected {n}")
    return len(produced), finish, "".join(text)


def post_json(url: str, body: dict[str, Any], timeout: float = HTTP_TIMEOUT_S) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = resp.read()
    except urllib.error.HTTPError as exc:
        raise SelfTestFailure(f"HTTP {exc.code} from {url}: {exc.read()[:500]!r}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise SelfTestFailure(f"no answer from {url}: {exc}") from exc
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise SelfTestFailure(f"{url} answered something that is not JSON: {payload[:200]!r}") from exc
    if not isinstance(data, dict):
        raise SelfTestFailure(f"{url} answered JSON that is not an object")
    return data


def check_chat_completion(data: dict[str, Any]) -> str:
    """Validate the shape of a non-streaming chat completion; returns a one-line description."""
    if data.get("object") != "chat.completion":
        raise SelfTestFailure(f"response object is {data.get('object')!r}, expected 'chat.completion'")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise SelfTestFailure("response has no choices")
    msg = choices[0].get("message") or {}
    if msg.get("role") != "assistant":
        raise SelfTestFailure(f"first choice's role is {msg.get('role')!r}, expected 'assistant'")
    usage = data.get("usage") or {}
    completion = usage.get("completion_tokens")
    if not isinstance(completion, int) or completion <= 0:
        raise SelfTestFailure(f"usage.completion_tokens is {completion!r}, expected a positive count")
    content = msg.get("content") or ""
    reasoning = msg.get("reasoning_content") or ""  # the analysis channel, where a short answer may still be
    return (f"model {data.get('model')!r}, finish {choices[0].get('finish_reason')!r}, "
            f"{usage.get('prompt_tokens')} prompt + {completion} completion tokens, {len(reasoning)} chars of "
            f"reasoning and {len(content)} of content")


async def _serve_one_request(engine: Engine, max_tokens: int) -> tuple[str, str]:
    from app.api import ApiServer, ServerConfig

    server = ApiServer(engine, ServerConfig(host="127.0.0.1", port=0))
    await server.start()
    try:
        url = f"{server.url}/v1/chat/completions"
        body = {"model": server.model_id, "max_tokens": max_tokens, "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello."}]}
        # urllib blocks; run it off the loop that serves the request.
        data = await asyncio.get_running_loop().run_in_executor(None, post_json, url, body)
        return server.url, check_chat_completion(data)
    finally:
        await server.stop()


def run_self_test(model_dir: Path | None = None, settings: EngineSettings | None = None,
                  out: TextIO | None = None, tokens: int = TOKENS,
                  load: Callable[[Path, EngineSettings], Engine] | None = None) -> SelfTestReport:
    """Run every step; raises :class:`SelfTestFailure` on the first failure (the report so far
    is on the exception's ``report`` attribute)."""
    from engine.settings import EngineSettings

    out = out or sys.stdout
    report = SelfTestReport()
    steps = _Steps(report, out)
    settings = settings or EngineSettings(context=2048)
    engine: Engine | None = None
    try:
        with steps.step("locate the demo model") as d:
            if model_dir is None:
                from app.core.models import demo_model_dir

                model_dir = demo_model_dir()
            if not (model_dir / "config.json").is_file():
                raise SelfTestFailure(f"{model_dir} has no config.json (is the bundle complete?)")
            d.append(str(model_dir))
        with steps.step("load the model") as d:
            if load is None:
                from engine.session import Engine as _Engine

                load = _Engine.load
            engine = load(model_dir, settings)
            d.append(f"{engine.info.name} on backend {engine.backend.name}")
            if engine.info.note:
                d.append(engine.info.note)
            if engine.info.backend_note:
                d.append(engine.info.backend_note)
        with steps.step(f"generate {tokens} tokens") as d:
            t0 = time.perf_counter()
            n, finish, text = generate_tokens(engine, tokens)
            took = time.perf_counter() - t0
            d.append(f"{n} tokens in {took:.2f} s ({n / took if took else 0:.1f} tok/s), finish {finish!r}, "
                     f"text {text[:40]!r}")
        with steps.step("answer one API request over HTTP") as d:
            url, desc = asyncio.run(_serve_one_request(engine, tokens))
            d.append(f"{url}/v1/chat/completions: {desc}")
    except SelfTestFailure as exc:
        exc.report = report  # type: ignore[attr-defined]
        raise
    finally:
        if engine is not None:
            engine.close()
    return report


def main(model_dir: str | None = None, backend: str = "auto", as_json: bool = False) -> int:
    """Exit status 0 when every step passed, 1 with the failing step named otherwise."""
    from engine.settings import EngineSettings, SettingsError

    # Human-readable progress goes to stderr when stdout carries the JSON report.
    progress = sys.stderr if as_json else sys.stdout
    t0 = time.perf_counter()
    try:
        settings = EngineSettings(backend=backend, context=2048)  # type: ignore[arg-type]
        report = run_self_test(Path(model_dir).expanduser() if model_dir else None, settings, out=progress)
    except (SelfTestFailure, SettingsError) as exc:
        print(f"neural self-test FAILED: {exc}", file=sys.stderr, flush=True)
        if as_json:
            partial = getattr(exc, "report", SelfTestReport())
            print(json.dumps({**partial.to_dict(), "ok": False, "error": str(exc)}, indent=2))
        return 1
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"neural self-test passed: {len(report.steps)} steps in {time.perf_counter() - t0:.1f} s",
              file=progress, flush=True)
    return 0
