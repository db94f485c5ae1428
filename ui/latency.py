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
