"""Streaming a long answer with code (issue 21 point 9): a scripted engine feeds token deltas to the
chat view at a fixed rate while a QTimer probe measures how long the GUI event loop goes without
turning. Renders touch only the growing end, so no stall passes 50 ms and the render work stays
about linear in the answer's length.

A stall is judged by the GUI thread's own CPU time between two turns of the loop: on the shared
2-core machines a plain ``time.sleep(0.005)`` with no Qt at all sometimes wakes 30-70 ms late
(MEASURED here: 33.6 ms within a minute on an idle machine; a 72.9 ms gap with 2.3 ms of the
thread's CPU and no involuntary switch), which is the machine's scheduler, not our work. The wall
gaps are printed beside it. This test has no other thread, so time off the CPU is not a wait on
a lock of ours."""

from __future__ import annotations

import os
import time

import pytest

from ui.chat_view import ChatView
from ui.latency import freeze_long_lived
from ui.markdown_render import MarkdownRenderer, warm_up_lexers
from ui.message_view import MessageViewModel
from ui.qt import QApplication, QTimer
from ui.stream_body import FREEZE_CHARS, split_finished

CODE = '''```python
def fib(n: int) -> int:
    """The n-th Fibonacci number, iteratively."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Cache(dict):
    def __missing__(self, key):
        value = self[key] = fib(key) * 2 + len(str(key))
        return value
```
'''
PROSE = ("The function above walks the sequence once, so it runs in linear time; the cache keeps "
         "earlier results. **Note** that `fib(0)` is 0 and large inputs grow quickly.\n\n- one\n- two\n\n")


def answer_tokens(n_tokens: int) -> list[str]:
    """About four characters per token, as o200k gives on English and code."""
    text = ""
    while len(text) < n_tokens * 4:
        text += PROSE + CODE + "\n"
    text = text[: n_tokens * 4]
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def stream(qtbot, n_tokens: int, tok_per_s: float, busy_render: int = -1,
           busy_s: float = 0.0) -> tuple[float, float, float, float, int, int]:
    """(most GUI-thread CPU seconds between two turns of the loop, that gap's wall seconds, the
    longest wall gap, total render seconds, characters rendered, most in one update); render
    number ``busy_render`` also spins ``busy_s`` seconds (the probe's own check)."""
    warm_up_lexers().join()  # as the main window does at start
    freeze_long_lived()  # as the main window does once it is built (ui/latency.py)
    view = ChatView(MarkdownRenderer())
    qtbot.addWidget(view)
    view.resize(1000, 800)
    view.show()
    qtbot.waitExposed(view)
    w = view.append_message(MessageViewModel("a1", "assistant", streaming=True))
    tokens = answer_tokens(n_tokens)
    state = {"i": 0, "text": "", "render_s": 0.0, "renders": 0}
    orig = w._render_body

    def timed() -> None:
        t0 = time.perf_counter()
        if state["renders"] == busy_render:  # spin on the thread's own CPU clock: a busy CI machine may preempt it
            c0 = time.thread_time()
            while time.thread_time() - c0 < busy_s:
                pass
        state["renders"] += 1
        orig()
        state["render_s"] += time.perf_counter() - t0

    w._render_body = timed
    t_start = time.perf_counter()

    def feed() -> None:  # the engine's deltas arrive one per token, on schedule
        due = int((time.perf_counter() - t_start) * tok_per_s) + 1
        while state["i"] < min(due, len(tokens)):
            state["text"] += tokens[state["i"]]
            state["i"] += 1
            w.set_stream(state["text"], "")

    gaps: list[tuple[float, float]] = []  # (GUI-thread CPU s, wall s) between two probes
    last = [time.perf_counter(), time.thread_time()]

    def probe() -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        gaps.append((cpu - last[1], now - last[0]))
        last[0], last[1] = now, cpu

    feeder, prober = QTimer(), QTimer()
    feeder.timeout.connect(feed)
    prober.timeout.connect(probe)
    feeder.start(5)
    prober.start(5)
    qtbot.waitUntil(lambda: state["i"] >= len(tokens), timeout=int(n_tokens / tok_per_s * 1000) + 30000)
    qtbot.waitUntil(lambda: w.body.markdown == state["text"], timeout=10000)  # the last throttled render
    feeder.stop()
    prober.stop()
    QApplication.processEvents()
    cpu, wall = max(gaps)
    return cpu, wall, max(g[1] for g in gaps), state["render_s"], w.body.rendered_chars, w.body.max_render_chars


def test_split_finished_never_cuts_inside_a_fence():
    text = "para\n\n```py\na\n\nb\n```\n\nnext"
    cut = split_finished(text)
    assert text[:cut] == "para\n\n```py\na\n\nb\n```\n\n"
    assert split_finished("```\nopen fence\n\nstill code\n") == 0
    assert split_finished("~~~~\n```\n\n~~~~\n\nx") == len("~~~~\n```\n\n~~~~\n\n")


def test_body_matches_a_whole_render(qtbot):
    """Segments show the same text as one render of the whole answer (tables, code, lists)."""
    view = ChatView(MarkdownRenderer())
    qtbot.addWidget(view)
    w = view.append_message(MessageViewModel("a1", "assistant", streaming=True))
    text = "".join(answer_tokens(1500))
    for i in range(0, len(text), 97):
        w.body.set_markdown(text[:i])
    w.body.set_markdown(text)
    assert len(w.body.segments) >= len(text) // (FREEZE_CHARS + len(CODE) + len(PROSE)) > 1
    plain = "".join(s.toPlainText() + "\n" for s in (*w.body.segments, w.body.tail))
    whole = view.renderer.render(text).code_blocks
    assert w.body.code_blocks == whole  # every code block, in order, copyable by its global index
    assert plain.count("def fib") == text.count("def fib")


def test_streaming_work_per_update_is_bounded_and_total_is_linear(qtbot):
    """Deterministic part (fast suite): the answer fed 16 characters (four tokens) per update, as a
    throttled stream delivers it; no update renders more than the tail, and twice the answer costs
    about twice the work (a whole re-render per update costs four times). The wall-clock stall
    bound is the slow test below (timing on a shared CI machine is not reliable)."""
    view = ChatView(MarkdownRenderer())
    qtbot.addWidget(view)

    def work(n_tokens: int) -> tuple[int, int]:
        w = view.append_message(MessageViewModel(f"a{n_tokens}", "assistant", streaming=True))
        text = "".join(answer_tokens(n_tokens))
        for i in range(16, len(text) + 16, 16):
            w.body.set_markdown(text[:i])
        assert w.body.markdown == text
        return w.body.rendered_chars, w.body.max_render_chars

    chars1, most1 = work(700)
    chars2, most2 = work(1400)
    print(f"MEASURED render work: {chars1} chars for 700 tokens, {chars2} for 1400; most in one update {most2}")
    assert max(most1, most2) <= FREEZE_CHARS + len(CODE) + len(PROSE)
    assert chars2 <= 2.3 * chars1


# the offscreen platform says it cannot propagate size hints when the window is shown: not ours
@pytest.mark.qt_log_ignore("does not support propagateSizeHints")
def test_the_probe_sees_a_render_that_works_too_long(qtbot):
    """The stall bound can fail: one render that spins 80 ms of CPU shows as at least that much
    GUI-thread work between two turns of the loop."""
    cpu, wall, *_ = stream(qtbot, 120, 120.0, busy_render=3, busy_s=0.080)
    assert cpu >= 0.075 and wall >= cpu - 0.001  # two clocks: the thread's CPU clock may run a few µs ahead


def quiet_cpu(limit_s: float = 90.0) -> float:
    """Wait (at most ``limit_s``) until the machine's other processes use under a third of one core, so that the
    probe's CPU clock counts our work: on a 2-core VM a process left busy by an earlier test shares the cores (a
    fresh-clone CI run of session 24 read 70.7 ms at load 1.0; alone, the same build 15.3-31.6 ms at load 0.2).
    Seconds waited."""
    import psutil

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        if psutil.cpu_percent(interval=1.0) * (os.cpu_count() or 1) / 100.0 < 0.33:
            break
    return time.perf_counter() - t0


@pytest.mark.slow
# the offscreen platform says it cannot propagate size hints when the window is shown: not ours
@pytest.mark.qt_log_ignore("does not support propagateSizeHints")
def test_streaming_8000_tokens_with_code_at_60_per_s_never_stalls(qtbot):
    waited = quiet_cpu()
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cpu, cpu_wall, wall, render_s, chars, most = stream(qtbot, 8000, 60.0)
    *_x, chars_half, _m = stream(qtbot, 4000, 60.0)
    assert chars <= 2.6 * chars_half  # twice the answer, about twice the render work
    load = max(load0, os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    print(f"MEASURED 8000 tokens at 60 tok/s: most GUI-thread CPU between two turns {cpu * 1000:.1f} ms "
          f"(a {cpu_wall * 1000:.1f} ms gap), longest wall gap {wall * 1000:.1f} ms, render {render_s:.2f} s, "
          f"chars {chars}, most in one update {most}, load average {load:.1f} on {os.cpu_count()} cores, "
          f"waited {waited:.0f} s for the other processes' CPU to settle")
    assert cpu <= 0.050, f"the GUI thread worked {cpu * 1000:.0f} ms without turning the event loop"
