"""ui/latency.py: after the freeze a full garbage collection no longer scans the start-up objects
(in the app's process, torch and the window loaded, one took ~100 ms before: a GUI stall)."""

from __future__ import annotations

import gc

from ui.latency import freeze_long_lived


class Node:
    def __init__(self) -> None:
        self.ref: object = self  # a cycle: only the collector frees it


def test_freeze_moves_live_objects_out_and_still_frees_garbage() -> None:
    keep = [[Node()] for _ in range(20_000)]  # long-lived, GC-tracked
    gc.collect()
    before = len(gc.get_objects())
    try:
        freeze_long_lived()
        assert gc.get_freeze_count() >= len(keep)
        assert len(gc.get_objects()) < before - len(keep)  # a full scan no longer walks them
        cycles = [Node() for _ in range(100)]
        del cycles
        assert gc.collect() >= 100  # new garbage cycles are still collected
    finally:
        gc.unfreeze()


def test_full_collections_are_held_while_an_answer_streams(qtbot) -> None:
    """A streaming bubble puts the third generation's threshold out of reach (no automatic full pass inside an
    answer); the finished answer, the last of two nested streams, or a bubble deleted mid-answer gives it back."""
    from dataclasses import replace

    from ui.markdown_render import MarkdownRenderer
    from ui.message_view import MessageViewModel, MessageWidget

    base = gc.get_threshold()
    renderer = MarkdownRenderer()
    a = MessageWidget(MessageViewModel("a", "assistant", streaming=True), renderer)
    b = MessageWidget(MessageViewModel("b", "assistant", streaming=True), renderer)
    qtbot.addWidget(a)
    a.set_stream("Hello", "")
    assert gc.get_threshold()[2] >= 1 << 30 and gc.get_threshold()[:2] == base[:2]  # young passes unchanged
    b.set_stream("Hi", "")
    a.set_stream("Hello, world", "")  # one hold per bubble, however many deltas
    a.set_model(replace(a.vm, streaming=False))
    assert gc.get_threshold()[2] >= 1 << 30  # b still streams
    with qtbot.waitSignal(b.destroyed):
        b.deleteLater()
    assert gc.get_threshold() == base
    a.set_model(replace(a.vm, content="edited"))  # no second release
    assert gc.get_threshold() == base
