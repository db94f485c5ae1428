"""The bridge between the synchronous engine and the asyncio server.

``Engine.generate`` is a blocking generator and the engine runs one generation at a time,
so a single dedicated worker thread drains a FIFO of jobs. Each job's events travel back to
the event loop through ``loop.call_soon_threadsafe`` into an ``asyncio.Queue`` that the
request handler iterates. The waiting line is bounded: a full line answers 429 at once,
with a ``Retry-After`` from the measured generation time, rather than letting clients pile up
behind a long generation. Cancelling a job (client
gone) sets its :class:`CancelToken`, which the engine checks between tokens, and drops it
from the line if it had not started yet.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.types import CancelToken, Done, Event, Usage

from .errors import ApiError
from .queue_policy import QueuePolicy

log = logging.getLogger(__name__)

# A job's work: given its cancel token, return the engine's event iterator.
Work = Callable[[CancelToken], Iterator[Event]]

_END: Any = object()


class Job:
    """One queued generation and the asyncio side of its event stream."""

    def __init__(self, bridge: EngineBridge, work: Work, loop: asyncio.AbstractEventLoop) -> None:
        self._bridge = bridge
        self._work = work
        self._loop = loop
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self.cancel_token = CancelToken()
        self.enqueued_at = time.monotonic()
        self.started = asyncio.Event()
        self.finished = False
        self.started_at: float | None = None

    # -- worker thread side --------------------------------------------------------------
    def _post(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)
        except RuntimeError:  # loop closed: nobody is listening any more
            self.cancel_token.cancel()

    def _mark_started(self) -> None:
        self.started_at = time.monotonic()
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.started.set)

    def _run(self) -> None:
        saw_done = False
        try:
            for ev in self._work(self.cancel_token):
                if isinstance(ev, Done):
                    saw_done = True
                self._post(ev)
                if saw_done:
                    break
        except Exception as exc:  # the engine failed: report it as this job's result
            log.exception("generation failed")
            self._post(Done("error", Usage(), error=f"{type(exc).__name__}: {exc}"))
            saw_done = True
        if not saw_done:
            if self.cancel_token.cancelled:
                self._post(Done("cancelled", Usage()))
            else:
                self._post(Done("error", Usage(), error="the engine ended without a Done event"))
        self._post(_END)

    # -- event loop side -----------------------------------------------------------------
    def cancel(self) -> None:
        """Stop this generation (within one token) or drop it from the line if still waiting."""
        self.cancel_token.cancel()
        self._bridge._discard(self)

    def __aiter__(self) -> Job:
        return self

    async def __anext__(self) -> Event:
        if self.finished:
            raise StopAsyncIteration
        item = await self._events.get()
        if item is _END:
            self.finished = True
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]


class EngineBridge:
    """Owns the worker thread and the bounded FIFO in front of the engine."""

    def __init__(self, max_waiting: int = 32) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must be >= 0")
        self.max_waiting = max_waiting
        self.policy = QueuePolicy(max_waiting)
        self.rejected = 0
        self._cond = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: Job | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.completed = 0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop_forever, name="neural-api-engine", daemon=True)
        self._thread.start()

    async def stop(self, timeout: float = 10.0) -> None:
        """Cancel everything and wait (off the event loop) for the worker to finish its token."""
        with self._cond:
            self._stopping = True
            jobs = [*self._waiting, *([self._running] if self._running else [])]
            self._waiting.clear()
            self._cond.notify_all()
        for job in jobs:
            job.cancel_token.cancel()
            if job is not self._running:
                job._post(Done("cancelled", Usage(), error="server stopping"))
                job._post(_END)
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, timeout)

    def submit(self, work: Work, retry_key: str | None = None) -> Job:
        """Queue a generation; raises a 429 :class:`ApiError` when the line is full.

        ``retry_key`` identifies a request across client retries (a hash of its body): one that
        was refused keeps its place ahead of newcomers when it comes back (see QueuePolicy)."""
        job = Job(self, work, asyncio.get_running_loop())
        with self._cond:
            if self._stopping or self._thread is None:
                raise ApiError(503, "The server is shutting down; retry against a running server.",
                               code="server_stopping")
            busy = self._running is not None or bool(self._waiting)
            now = time.monotonic()
            running_for = now - self._running.started_at if self._running and self._running.started_at else 0.0
            if busy and not self.policy.admit(len(self._waiting), retry_key, now):
                wait = self.policy.retry_after(len(self._waiting), running_for, now, retry_key)
                self.rejected += 1
                raise ApiError(
                    429,
                    f"The engine is busy and {len(self._waiting)} request(s) are already waiting (limit "
                    f"{self.max_waiting}, set with --queue). Retry in about {wait} s; this request keeps its "
                    f"place in line if it is retried unchanged.",
                    code="queue_full", headers={"Retry-After": str(wait)},
                )
            self._waiting.append(job)
            self._cond.notify()
        return job

    def _discard(self, job: Job) -> None:
        with self._cond:
            if job in self._waiting:
                self._waiting.remove(job)
                job._post(Done("cancelled", Usage()))
                job._post(_END)

    @property
    def busy(self) -> bool:
        return self._running is not None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _loop_forever(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = self._waiting.popleft()
                self._running = job
            try:
                if job.cancel_token.cancelled:
                    job._post(Done("cancelled", Usage()))
                    job._post(_END)
                else:
                    job._mark_started()
                    job._run()
            finally:
                with self._cond:
                    if job.started_at is not None:
                        self.policy.record_duration(time.monotonic() - job.started_at)
                    self._running = None
                    self.completed += 1
