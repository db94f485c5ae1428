"""Short pauses on the GUI thread: keep Python's full garbage collections small.

A full (generation 2) collection scans every object the collector tracks; in the streaming test's
process one took 79.5 ms, and landing inside an answer it stalled the event loop for 95 ms (the
limit is 50 ms; tests/ui/test_ui_stream_stall.py). Objects built at start-up live for the whole
session (modules, Qt wrappers, the renderer's tables, the engine's), so they are moved out of the
collector's view once they exist (``gc.freeze``): a full collection then scans only what the
session created since. Called when the window is built and again after a model has loaded.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect what is garbage now (so it is not kept forever), then freeze the rest."""
    gc.collect()
    gc.freeze()


# Full collections held while answers stream: one landing inside a long answer still took 50-60 ms (the streaming
# test's process, session 24: nine automatic ones of 2-59 ms over two answers, and a 71 ms stall on a loaded
# machine). While any answer streams the third generation's threshold is out of reach, so the collector runs only its
# cheap young passes; when the last stream ends the threshold comes back and the pending full pass runs then, between
# answers.
_held = 0
_saved: tuple[int, int, int] | None = None


def hold_full_collections() -> None:
    """No automatic full collection until the matching :func:`release_full_collections` (calls nest)."""
    global _held, _saved
    if _held == 0:
        _saved = gc.get_threshold()
        gc.set_threshold(_saved[0], _saved[1], 1 << 30)
    _held += 1


def release_full_collections() -> None:
    """End one :func:`hold_full_collections`; the last restores the collector's thresholds."""
    global _held
    if _held == 0:
        return
    _held -= 1
    if _held == 0 and _saved is not None:
        gc.set_threshold(*_saved)
