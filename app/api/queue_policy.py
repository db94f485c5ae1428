"""Admission to the engine's waiting line: estimated waits and first come, first served retries.

A refused request gets ``Retry-After`` = the estimated time until a place frees up (the running
generation's remaining time plus the line ahead, from a moving average of recent generation
times), capped at 60 s, which the official SDKs honour. It also leaves a reservation under its
retry key (a hash of auth header, path and body, identical on an SDK retry): while reservations
are outstanding, free places go to those returning requests first, so a client that retries is
not overtaken by one that arrived later. Reservations expire when their owner does not return.
"""

from __future__ import annotations

import math

INITIAL_JOB_SECONDS = 10.0  # before any generation was timed
MAX_RETRY_AFTER = 60  # the openai SDK ignores larger values
RESERVATION_GRACE_S = 30.0


class QueuePolicy:
    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self.avg_job_s = INITIAL_JOB_SECONDS
        self._timed = 0
        self._reserved: dict[str, tuple[int, float]] = {}  # key -> (count, expiry)

    def record_duration(self, seconds: float) -> None:
        self._timed += 1
        alpha = max(0.2, 1.0 / self._timed)  # plain mean for the first few, then a moving average
        self.avg_job_s += alpha * (seconds - self.avg_job_s)

    def _expire(self, now: float) -> None:
        for k in [k for k, (_, exp) in self._reserved.items() if exp < now]:
            del self._reserved[k]

    def outstanding(self, now: float) -> int:
        self._expire(now)
        return sum(n for n, _ in self._reserved.values())

    def admit(self, waiting: int, key: str | None, now: float) -> bool:
        """May a request join a line of ``waiting``? Consumes its reservation if it had one."""
        if waiting >= self.max_waiting:
            return False
        if key is not None and key in self._reserved:
            n, exp = self._reserved.pop(key)
            if n > 1:
                self._reserved[key] = (n - 1, exp)
            return True
        return waiting + self.outstanding(now) < self.max_waiting

    def retry_after(self, waiting: int, running_for: float, now: float, key: str | None) -> int:
        """Seconds until a place is likely free; leaves a reservation for ``key``."""
        # places that must free up before this one: one per generation that finishes
        position = max(1, waiting + self.outstanding(now) - self.max_waiting + 1)
        remaining = max(self.avg_job_s - running_for, 0.5)
        wait = max(1, min(MAX_RETRY_AFTER, math.ceil(remaining + (position - 1) * self.avg_job_s)))
        if key is not None:
            n, _ = self._reserved.get(key, (0, 0.0))
            self._reserved[key] = (n + 1, now + wait + RESERVATION_GRACE_S)
        return wait
