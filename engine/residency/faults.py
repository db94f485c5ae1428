"""Page faults per token: the symptom the design doc measured (1,000–1,500 per first-answer token
against 10–350 for follow-ups when the OS had trimmed expert pages).

The CPU expert kernel runs on native worker threads, so the meter reads process-wide counters
(RUSAGE_SELF / GetProcessMemoryInfo) and subtracts the faults the background warmer took in
the same interval (it counts its own with RUSAGE_THREAD), so warm-up I/O is not blamed on tokens.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from . import os_memory
from .os_memory import ZERO_FAULTS, FaultCounts

FaultSource = Callable[[], FaultCounts]


@dataclass(frozen=True)
class FaultSummary:
    tokens: int
    total: FaultCounts
    last: FaultCounts
    max_total: int  # worst single token (major + minor)
    recent_major_per_token: float
    recent_minor_per_token: float

    @property
    def major_per_token(self) -> float:
        return self.total.major / self.tokens if self.tokens else 0.0

    @property
    def minor_per_token(self) -> float:
        return self.total.minor / self.tokens if self.tokens else 0.0


class FaultMeter:
    """Counts faults per token. Call :meth:`start_token`/:meth:`end_token` around each decode
    step (or use ``with meter.token():``); :meth:`summary` is cheap and thread-safe."""

    def __init__(self, source: FaultSource | None = None, exclude: FaultSource | None = None,
                 window: int = 32) -> None:
        self._source = source or (lambda: os_memory.read_faults(thread=False))
        self._exclude = exclude
        self._lock = threading.Lock()
        self._recent: deque[FaultCounts] = deque(maxlen=window)
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._tokens = 0
            self._total = ZERO_FAULTS
            self._last = ZERO_FAULTS
            self._max = 0
            self._recent.clear()
            self._open: tuple[FaultCounts, FaultCounts] | None = None

    def _read(self) -> tuple[FaultCounts, FaultCounts]:
        return self._source(), (self._exclude() if self._exclude else ZERO_FAULTS)

    def start_token(self) -> None:
        self._open = self._read()

    def end_token(self) -> FaultCounts:
        """Faults since :meth:`start_token`, recorded as one token; returns them."""
        if self._open is None:
            raise RuntimeError("end_token() without start_token()")
        (p0, x0), (p1, x1) = self._open, self._read()
        self._open = None
        d = (p1 - p0) - (x1 - x0)
        d = FaultCounts(max(0, d.major), max(0, d.minor))
        with self._lock:
            self._tokens += 1
            self._total = self._total + d
            self._last = d
            self._max = max(self._max, d.total)
            self._recent.append(d)
        return d

    def token(self) -> _TokenScope:
        return _TokenScope(self)

    def summary(self) -> FaultSummary:
        with self._lock:
            n = len(self._recent)
            maj = sum(f.major for f in self._recent) / n if n else 0.0
            mnr = sum(f.minor for f in self._recent) / n if n else 0.0
            return FaultSummary(self._tokens, self._total, self._last, self._max, maj, mnr)


class _TokenScope:
    def __init__(self, meter: FaultMeter) -> None:
        self.meter = meter
        self.faults = ZERO_FAULTS

    def __enter__(self) -> _TokenScope:
        self.meter.start_token()
        return self

    def __exit__(self, *exc: object) -> None:
        self.faults = self.meter.end_token()


def measure(fn: Callable[[], object], thread: bool = False) -> FaultCounts:
    """Faults taken while running ``fn`` (thread-only counters where the OS has them)."""
    before = os_memory.read_faults(thread=thread)
    fn()
    return os_memory.read_faults(thread=thread) - before
