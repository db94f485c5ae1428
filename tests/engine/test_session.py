"""The engine interface: events, prefix reuse, cancellation, state save/restore."""

from __future__ import annotations

import pytest
import torch

from engine.reference import ReferenceModel
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import CancelToken, Conversation, Done, GenerationParams, Message, Progress, TextDelta


@pytest.fixture
def engine(tiny_model):
    eng = Engine.load(tiny_model, EngineSettings(backend="reference", dtype="float32"))
    yield eng
    eng.close()


def count_processed(eng: Engine) -> list[int]:
    seen: list[int] = []
    orig = eng.backend.forward

    def forward(ids, progress=None, cancel=None):
        seen.append(len(ids))
        return orig(ids, progress, cancel)

    eng.backend.forward = forward  # type: ignore[method-assign]
    return seen


def run(eng, conv, **kw):
    events = list(eng.generate(conv, GenerationParams(temperature=0, **kw)))
    assert sum(isinstance(e, Done) for e in events) == 1 and isinstance(events[-1], Done)
    return events


def test_generate_yields_text_and_one_done(engine):
    conv = Conversation((Message("user", "hello"),), current_date="2026-11-29")
    events = run(engine, conv, max_tokens=12)
    done = events[-1]
    assert done.finish_reason in ("length", "stop", "tool_calls")
    assert done.usage.prompt_tokens == len(engine.render(conv))
    assert done.usage.completion_tokens == len(done.token_ids) <= 12
    assert done.error is None


def test_follow_up_processes_only_new_tokens(engine):
    conv1 = Conversation((Message("user", "first question"),), current_date="2026-11-29")
    d1 = run(engine, conv1, max_tokens=4)[-1]
    conv2 = Conversation((*conv1.messages, Message("assistant", "answer"), Message("user", "and then?")),
                         current_date="2026-11-29")
    seen = count_processed(engine)
    d2 = run(engine, conv2, max_tokens=4)[-1]
    ids2 = engine.render(conv2)
    ids1 = engine.render(conv1)
    assert d2.usage.cached_tokens >= len(ids1) - 1  # everything up to the first reply was reused
    assert seen[0] == len(ids2) - d2.usage.cached_tokens  # only the new tokens went through the model
    assert d1.usage.cached_tokens == 0


def test_same_prompt_twice_recomputes_one_token(engine):
    conv = Conversation((Message("user", "x"),), current_date="2026-11-29")
    run(engine, conv, max_tokens=1)
    seen = count_processed(engine)
    d = run(engine, conv, max_tokens=1)[-1]
    assert seen[0] == 1 and d.usage.cached_tokens == d.usage.prompt_tokens - 1


def test_cancel_stops_within_one_token(engine):
    cancel = CancelToken()
    conv = Conversation((Message("user", "go"),), current_date="2026-11-29")
    gen = engine.generate(conv, GenerationParams(temperature=1.0, seed=1, max_tokens=200), cancel)
    n = 0
    for ev in gen:
        if isinstance(ev, TextDelta) and not cancel.cancelled:
            cancel.cancel()
            n = 0
        if isinstance(ev, Done):
            assert ev.finish_reason == "cancelled"
            assert ev.usage.completion_tokens < 200
        n += 1
    assert cancel.cancelled


def test_engine_logits_match_reference(engine, tiny_model):
    ids = [5, 9, 100, 3, 77, 12, 40, 41, 42, 43, 44]
    got = torch.from_numpy(engine.logits(ids))
    want = ReferenceModel(engine.ck, torch.float32).forward(ids)
    assert float((got - want).abs().max() / want.abs().max()) <= 1e-5


def test_state_saved_and_restored_continues_identically(engine, tiny_model, tmp_path):
    conv = Conversation((Message("user", "remember this"),), current_date="2026-11-29")
    run(engine, conv, max_tokens=3)
    engine.save_state(tmp_path / "s.kv")
    ids = engine.cached_ids
    nxt = engine.backend.forward([7])

    fresh = Engine.load(tiny_model, EngineSettings(backend="reference", dtype="float32"))
    assert fresh.restore_state(tmp_path / "s.kv")
    assert fresh.cached_ids == ids
    assert torch.equal(fresh.backend.forward([7]), nxt)


def test_state_of_another_model_is_refused(engine, synth_dir, tmp_path):
    run(engine, Conversation((Message("user", "a"),), current_date="2026-11-29"), max_tokens=1)
    engine.save_state(tmp_path / "s.kv")
    other = Engine.load(synth_dir("tiny", 5), EngineSettings(backend="reference"))
    assert not other.restore_state(tmp_path / "s.kv")
    assert not other.restore_state(tmp_path / "missing.kv")
    (tmp_path / "junk.kv").write_bytes(b"not a state")
    assert not other.restore_state(tmp_path / "junk.kv")
    assert other.cached_ids == []


def test_prompt_longer_than_context_is_an_error_event(tiny_model):
    eng = Engine.load(tiny_model, EngineSettings(backend="reference", context=32))
    conv = Conversation((Message("user", "word " * 50),), current_date="2026-11-29")
    done = list(eng.generate(conv, GenerationParams(max_tokens=2)))[-1]
    assert done.finish_reason == "error" and "context" in (done.error or "")


def test_cpu_engine_reports_ram_residency(tiny_model):
    pytest.importorskip("native.kernel")
    eng = Engine.load(tiny_model, EngineSettings(backend="cpu"))
    try:
        if eng.backend.name != "cpu-native":
            pytest.skip(f"native kernel not loadable here: {eng.info.backend_note}")
        list(eng.generate(Conversation((Message("user", "hi"),), current_date="2026-11-29"),
                          GenerationParams(max_tokens=3, temperature=0)))
        t = eng.telemetry()
        assert t.store_bytes > 0 and t.warmup_state
        assert 0 <= t.store_resident_bytes <= t.store_bytes
    finally:
        eng.close()


def test_prompt_progress_is_live_in_telemetry(engine):
    """Telemetry shows the prompt's progress while it runs (front ends that poll)."""
    seen: list[tuple[int, int]] = []
    orig = engine.backend.forward

    def forward(ids, progress=None, cancel=None):
        if progress is None:  # a decode step
            return orig(ids, None, cancel)

        def spy(done, total):
            progress(done, total)
            t = engine.telemetry()
            seen.append((t.prompt_done, t.prompt_total))

        return orig(ids, spy, cancel)

    engine.backend.forward = forward  # type: ignore[method-assign]
    conv = Conversation((Message("user", "hello there"),), current_date="2026-11-29")
    events = list(engine.generate(conv, GenerationParams(max_tokens=2, temperature=0)))
    n = len(engine.render(conv))
    assert seen and seen[-1] == (n, n) and all(total == n for _, total in seen)
    assert [e for e in events if isinstance(e, Progress)][-1] == Progress(n, n)
    assert (engine.telemetry().prompt_done, engine.telemetry().prompt_total) == (0, 0)
