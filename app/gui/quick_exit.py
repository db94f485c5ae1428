"""Ending the desktop app's process once the user's data is saved.

By the time the window's close has run its course (AppController.aclose) the conversations are
in SQLite (closed), the settings on disk, the open conversation's K/V state saved by the engine
worker and the API server stopped. What a normal interpreter exit would still do is tear the
engine down piece by piece: join its prompt and RAM-residency threads (each may wait out a read
of the store), unmap tens of GB, free GPU memory, destroy every Qt object and module: the 3-12 s
the process lingered after Ctrl+Q (issue 21). The OS releases all of that at once when the
process ends, so the app ends it here, after flushing what is buffered.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn, Protocol


class _Lock(Protocol):
    def unlock(self) -> None: ...


def end_now(code: int, *locks: _Lock) -> NoReturn:
    """Release ``locks`` (the single-instance lock file: removed, so the next start sees no
    stale lock), flush the log and the standard streams, then end the process with ``code``."""
    for lock in locks:
        lock.unlock()
    logging.shutdown()  # flushes and closes every handler (the log file)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe must not keep the process alive
            pass
    os._exit(code)
