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
