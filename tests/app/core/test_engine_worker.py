"""The one engine worker: FIFO across front ends, exactly one Done, conversation states swapped on disk."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.engine_worker import EngineWorker, Job, QueueFull, WorkerStopped
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import CancelToken, Conversation, Done, Event, GenerationParams, Message, TextDelta, Usage


class FakeEngine:
    """Holds a list of ids; save/restore write them to a file (what the worker relies on)."""

    def __init__(self) -> None:
        self.cached_ids: list[int] = []
        self.restored: list[Path] = []

    def save_state(self, path: str | Path) -> None:
        Path(path).write_text(",".join(map(str, self.cached_ids)))

    def restore_state(self, path: str | Path) -> bool:
        self.restored.append(Path(path))
        self.cached_ids = [int(x) for x in Path(path).read_text().split(",") if x]
        return True


def collect(job_events: list[Any]) -> Any:
    return job_events.append


def wait_done(job: Job, timeout: float = 10.0) -> Done:
    end = time.monotonic() + timeout
    while job.done is None:
        assert time.monotonic() < end, "job never finished"
        time.sleep(0.005)
    return job.done


def test_fifo_across_sources_busy_counts_and_queue_limit() -> None:
    eng = FakeEngine()
    w = EngineWorker(eng, max_waiting=2).start()
    gate = threading.Event()
    order: list[str] = []

    def work(name: str, block: bool = False):
        def run(engine: Any, cancel: CancelToken) -> Iterator[Event]:
            order.append(name)
            if block:
                gate.wait(5)
            yield TextDelta("final", name)
            yield Done("stop", Usage())
        return run

    seen: list[Any] = []
    first = w.submit(Job(work("gui", block=True), seen.append, source="gui"))
    while not w.busy:
        time.sleep(0.001)
    assert w.running is first and w.running.source == "gui"
    a = w.submit(Job(work("api-1"), seen.append, source="api"))
    b = w.submit(Job(work("api-2"), seen.append, source="api"))
    assert w.waiting == 2
    with pytest.raises(QueueFull):  # the API's 429 sees the GUI's generation and the line
        w.submit(Job(work("api-3"), seen.append))
    gate.set()
    for j in (first, a, b):
        assert wait_done(j).finish_reason == "stop"
    assert order == ["gui", "api-1", "api-2"]
    assert sum(isinstance(e, Done) for e in seen) == 3
    assert w.stop()
    with pytest.raises(WorkerStopped):
        w.submit(Job(work("late"), seen.append))


def test_exactly_one_done_when_work_raises_forgets_done_or_is_cancelled() -> None:
    w = EngineWorker(FakeEngine()).start()

    def raises(engine: Any, cancel: CancelToken) -> Iterator[Event]:
        yield TextDelta("final", "x")
        raise RuntimeError("boom")

    def no_done(engine: Any, cancel: CancelToken) -> Iterator[Event]:
        yield TextDelta("final", "x")

    def two_dones(engine: Any, cancel: CancelToken) -> Iterator[Event]:
        yield Done("stop", Usage())
        yield Done("length", Usage())

    for fn, want in ((raises, "error"), (no_done, "error"), (two_dones, "stop")):
        events: list[Any] = []
        job = w.submit(Job(fn, events.append))
        assert wait_done(job).finish_reason == want
        time.sleep(0.02)
        assert [type(e).__name__ for e in events].count("Done") == 1
    gate = threading.Event()

    def blocker(engine: Any, cancel: CancelToken) -> Iterator[Event]:
        gate.wait(5)
        yield Done("stop", Usage())

    running = w.submit(Job(blocker, lambda e: None))
    queued_events: list[Any] = []
    queued = w.submit(Job(blocker, queued_events.append))
    assert w.discard(queued) and queued_events[-1].finish_reason == "cancelled"
    gate.set()
    wait_done(running)
    w.stop()


def test_conversations_keep_their_state_when_another_runs_in_between(tmp_path: Path) -> None:
    eng = FakeEngine()
    w = EngineWorker(eng, states_dir=tmp_path).start()
    notes: list[tuple[str, int]] = []

    def turn(ids: list[int]):
        def run(engine: FakeEngine, cancel: CancelToken) -> Iterator[Event]:
            engine.cached_ids = engine.cached_ids + ids
            yield Done("stop", Usage())
        return run

    def job(key: str | None, ids: list[int], persist: bool = False) -> Done:
        return wait_done(w.submit(Job(turn(ids), lambda e: None, conversation=key, persist=persist,
                                      on_state=lambda k, n: notes.append((k, n)))))

    job("api-A", [1, 2, 3])
    job("gui-B", [7, 8], persist=True)  # evicts A: A is saved first
    assert (tmp_path / "api-A.kv").is_file() and (tmp_path / "gui-B.kv").is_file()
    job("api-A", [4])
    assert eng.cached_ids == [1, 2, 3, 4] and notes[-1] == ("restored", 3)
    job("api-A", [5])
    assert notes[-1] == ("kept", 4)
    job(None, [9])  # an unkeyed request (a raw completion) also saves the owner first
    job("api-A", [6])
    assert eng.cached_ids == [1, 2, 3, 4, 5, 6]
    job("gui-B", [])  # B's saved turn (it began on A's tokens: the fake engine never rewinds)
    assert eng.cached_ids == [1, 2, 3, 7, 8] and notes[-1] == ("restored", 5)
    w.stop()


def test_real_engine_resumes_an_api_conversation_after_a_gui_one(tiny_model: Path, tmp_path: Path) -> None:
    eng = Engine.load(tiny_model, EngineSettings(backend="cpu", dtype="float32", context=512))
    w = EngineWorker(eng, states_dir=tmp_path).start()
    params = GenerationParams(max_tokens=4, temperature=0)
    api = Conversation((Message("user", "Write a function that adds two numbers."),))
    gui = Conversation((Message("user", "Something else entirely, please."),))

    def run(conv: Conversation, key: str) -> Done:
        return wait_done(w.submit(Job(lambda e, c: e.generate(conv, params, c), lambda ev: None,
                                      conversation=key)), timeout=120)

    first = run(api, "api-x")
    run(gui, "gui-y")
    again = run(Conversation((*api.messages, Message("assistant", "ok"), Message("user", "More."))), "api-x")
    assert first.usage.cached_tokens == 0
    assert again.usage.cached_tokens >= first.usage.prompt_tokens - 1  # its history was not reprocessed
    w.stop()
    eng.close()
