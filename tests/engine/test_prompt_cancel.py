"""Prompts that can be stopped and that report progress while they run (issue 16, point 4).

The contract (engine/backend.py::Backend.forward): the backend polls the CancelToken between
layers, attention blocks and expert groups; on a stop it rewinds to the length it held before
the call and raises PromptCancelled; the session yields Progress events live and ends a stopped
prompt with exactly one Done("cancelled").
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import CancelToken, Done, GenerationParams, Progress, PromptCancelled

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo-model"


class CancelAtCheck(CancelToken):
    """Cancels itself at its n-th check: a stop at an exact point of the prompt."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.calls = n, 0

    def check(self) -> None:
        self.calls += 1
        if self.calls == self.n:
            self.cancel()
        super().check()


@pytest.fixture(scope="module")
def two_backends(tiny_model):
    """Two reference backends on one checkpoint (their dequantized experts are kept across tests)."""
    ck = Checkpoint.open(tiny_model)
    return ReferenceBackend(ck, torch.float32, block=8), ReferenceBackend(ck, torch.float32, block=8)


@pytest.mark.parametrize("n", [1, 3, 6, 30])  # before layer 0, attention blocks, before/among expert groups
def test_backend_rewinds_exactly_on_a_stop(two_backends, n):
    be, fresh = two_backends
    be.truncate(0)
    fresh.truncate(0)
    head, tail = list(range(3, 23)), list(range(40, 80))
    be.forward(head)
    before = {k: v.clone() for k, v in be.state_tensors().items()}
    cancel = CancelAtCheck(n)
    with pytest.raises(PromptCancelled):
        be.forward(tail, cancel=cancel)
    assert cancel.calls == n  # raised at the check that saw the stop, no work after it
    assert be.length == len(head)
    after = be.state_tensors()
    assert all(torch.equal(before[k], after[k]) for k in before)
    fresh.forward(head)
    assert torch.equal(be.forward(tail), fresh.forward(tail))


def test_cancel_is_not_an_exception_a_fallback_can_swallow():
    assert not issubclass(PromptCancelled, Exception)
    parent = CancelToken()
    child = parent.child()
    assert not child.cancelled
    parent.cancel()
    assert child.cancelled
    with pytest.raises(PromptCancelled):
        child.check()


@pytest.fixture
def tiny_engine(tiny_model):
    eng = Engine.load(tiny_model, EngineSettings(backend="reference", dtype="float32"))
    yield eng
    eng.close()


def test_progress_events_arrive_while_the_prompt_runs(tiny_engine):
    """Fails when Progress events are only yielded after the backend returns: the backend waits
    (up to 5 s) after its first progress report for the consumer to have received it."""
    eng = tiny_engine
    received = threading.Event()
    state = {"waited": False, "forward_done": False}
    orig = eng.backend.forward

    def forward(ids, progress=None, cancel=None):
        if progress is None:
            return orig(ids, None, cancel)

        def spy(done, total):
            progress(done, total)
            if not state["waited"]:
                state["waited"] = True
                received.wait(5.0)

        out = orig(ids, spy, cancel)
        state["forward_done"] = True
        return out

    eng.backend.forward = forward  # type: ignore[method-assign]
    ids = list(range(3, 60))
    first_seen_during_prompt = None
    events = []
    for ev in eng.complete(ids, GenerationParams(max_tokens=1, temperature=0)):
        if isinstance(ev, Progress) and first_seen_during_prompt is None:
            first_seen_during_prompt = not state["forward_done"]
            received.set()
        events.append(ev)
    assert first_seen_during_prompt is True
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[-1] == Progress(len(ids), len(ids))
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    assert sum(isinstance(e, Done) for e in events) == 1 and events[-1].finish_reason == "length"


def test_closing_the_stream_mid_prompt_stops_it(tiny_engine):
    """A client that goes away (the generator is closed) stops the prompt and frees the engine."""
    eng = tiny_engine
    gen = eng.complete(list(range(3, 400)), GenerationParams(max_tokens=4, temperature=0))
    assert isinstance(next(gen), Progress)
    t0 = time.perf_counter()
    gen.close()
    assert time.perf_counter() - t0 <= 0.5
    assert eng.backend.length == 0 and eng.cached_ids == []
    done = list(eng.complete([5, 6, 7], GenerationParams(max_tokens=1, temperature=0)))[-1]
    assert isinstance(done, Done) and done.finish_reason == "length"


@pytest.mark.skipif(not DEMO.is_dir(), reason="the bundled demo model is missing")
def test_cancel_during_a_prompt_on_the_cpu_engine():
    """A 3,000-token prompt after a cached prefix, stopped after its first layer: Done("cancelled")
    within 0.5 s, the engine holds the prefix again, and the next request's logits and
    cached_tokens equal those of a fresh engine that never saw the stopped prompt."""
    settings = EngineSettings(backend="cpu", cpu_threads=2)
    eng, fresh = Engine.load(DEMO, settings), Engine.load(DEMO, settings)
    try:
        vocab = eng.config.vocab_size
        head = [(i * 37) % (vocab - 300) + 10 for i in range(200)]
        long = head + [(i * 7919) % (vocab - 300) + 10 for i in range(3000)]
        follow = [*head, 11, 12, 13, 14, 15]
        params = GenerationParams(max_tokens=1, temperature=0)
        assert list(eng.complete(head, params))[-1].finish_reason == "length"

        cancel = CancelToken()
        t_cancel = None
        events = []
        for ev in eng.complete(long, params, cancel):
            events.append(ev)
            if isinstance(ev, Progress) and t_cancel is None:
                t_cancel = time.perf_counter()
                cancel.cancel()
        latency = time.perf_counter() - t_cancel
        done = events[-1]
        assert isinstance(done, Done) and done.finish_reason == "cancelled"
        assert sum(isinstance(e, Done) for e in events) == 1
        assert done.usage.cached_tokens == len(head) and done.usage.completion_tokens == 0
        assert latency <= 0.5, f"stop took {latency:.3f} s"
        assert eng.backend.length == len(head) and eng.cached_ids == head  # rewound: stopped mid-prompt

        got, reused = eng.prefill(follow)
        fresh.prefill(head)
        want, reused_fresh = fresh.prefill(follow)
        assert reused == reused_fresh == len(head)
        assert torch.equal(got, want)
    finally:
        eng.close()
        fresh.close()
