"""The API's adapter to the one engine worker (app/core/engine_worker.py).

The engine runs one generation at a time for every front end, so the API does not own a thread:
it submits jobs to the :class:`~app.core.engine_worker.EngineWorker` (the GUI's, when the desktop
app serves the API; its own for ``neural serve``) and bridges each job's events to the event
loop through ``loop.call_soon_threadsafe`` into an ``asyncio.Queue`` that the request handler
iterates. The waiting line counts every front end's jobs: a full line answers 429 at once, with a
``Retry-After`` from the measured generation time (QueuePolicy). Cancelling a job (client gone)
sets its :class:`CancelToken`, which the engine checks between tokens and prompt layers, and
drops it from the line if it had not started yet. A job names its conversation (a hash of its
first messages), so its K/V survives another conversation running in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app.core.engine_worker import EngineWorker, QueueFull, WorkerStopped
from app.core.engine_worker import Job as WorkerJob
from engine.types import CancelToken, Done, Event

from .errors import ApiError
from .queue_policy import QueuePolicy

log = logging.getLogger(__name__)

# A job's work: given its cancel token, return the engine's event iterator.
Work = Callable[[CancelToken], Iterator[Event]]

_END: Any = object()


class Job:
    """One queued generation and the asyncio side of its event stream."""

    def __init__(self, bridge: EngineBridge, loop: asyncio.AbstractEventLoop) -> None:
        self._bridge = bridge
        self._loop = loop
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self.enqueued_at = time.monotonic()
        self.started = asyncio.Event()
        self.finished = False
        self.core: WorkerJob | None = None

    @property
    def cancel_token(self) -> CancelToken:
        assert self.core is not None
        return self.core.cancel_token

    @property
    def started_at(self) -> float | None:
        return self.core.started_at if self.core is not None else None

    # -- worker thread side --------------------------------------------------------------
    def _post(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)
        except RuntimeError:  # loop closed: nobody is listening any more
            if self.core is not None:
                self.core.cancel()

    def _sink(self, ev: Event) -> None:
        if not self.started.is_set():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.started.set)
        self._post(ev)
        if isinstance(ev, Done):  # the worker's last call for this job
            self._bridge._ended(self)
            self._post(_END)

    # -- event loop side -----------------------------------------------------------------
    def cancel(self) -> None:
        """Stop this generation (within one token) or drop it from the line if still waiting."""
        if self.core is not None:
            self.core.cancel()
            self._bridge.worker_discard(self.core)

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
    """The API's bounded, FIFO view of the shared engine worker."""

    def __init__(self, max_waiting: int = 32, worker: EngineWorker | None = None) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must be >= 0")
        self.max_waiting = max_waiting
        self.policy = QueuePolicy(max_waiting)
        self.rejected = 0
        self.completed = 0
        self.worker = worker
        self._owns_worker = worker is None
        self._lock = threading.Lock()
        self._mine: set[Job] = set()
        self._stopping = False

    def start(self, engine: Any = None, states_dir: Path | None = None) -> None:
        """Use the shared worker, or start this server's own around ``engine``."""
        self._stopping = False
        if self.worker is None:
            # the policy decides admission; the worker's own limit only backs it up
            self.worker = EngineWorker(engine, states_dir, max_waiting=self.max_waiting + 64)
            self._owns_worker = True
        self.worker.start()

    async def stop(self, timeout: float = 10.0) -> None:
        """Cancel this server's jobs; stop the worker if it is this server's own (off the loop)."""
        self._stopping = True
        with self._lock:
            mine = list(self._mine)
        for job in mine:
            job.cancel()
        worker = self.worker
        if worker is not None and self._owns_worker:
            self.worker = None
            await asyncio.get_running_loop().run_in_executor(None, worker.stop, timeout)

    def submit(self, work: Work, retry_key: str | None = None, conversation: str | None = None) -> Job:
        """Queue a generation; raises a 429 :class:`ApiError` when the line is full.

        ``retry_key`` identifies a request across client retries (a hash of its body): one that
        was refused keeps its place ahead of newcomers when it comes back (see QueuePolicy)."""
        worker = self.worker
        if self._stopping or worker is None:
            raise ApiError(503, "The server is shutting down; retry against a running server.", code="server_stopping")
        job = Job(self, asyncio.get_running_loop())
        with self._lock:
            now = time.monotonic()
            running = worker.running
            busy = running is not None or worker.waiting > 0
            running_for = now - running.started_at if running is not None and running.started_at else 0.0
            if busy and not self.policy.admit(worker.waiting, retry_key, now):
                raise self._full(worker.waiting, self.policy.retry_after(worker.waiting, running_for, now, retry_key))
            job.core = WorkerJob(lambda _engine, cancel: work(cancel), job._sink, source="api",
                                 conversation=conversation)
            try:
                worker.submit(job.core)
            except QueueFull as exc:
                raise self._full(exc.waiting, self.policy.retry_after(exc.waiting, running_for, now, retry_key)) \
                    from None
            except WorkerStopped:
                raise ApiError(503, "The engine is not running; retry against a running server.",
                               code="server_stopping") from None
            self._mine.add(job)
        return job

    def _full(self, waiting: int, wait: int) -> ApiError:
        self.rejected += 1
        return ApiError(
            429,
            f"The engine is busy and {waiting} request(s) are already waiting (limit {self.max_waiting}, set "
            f"with --queue; the desktop app's generations count too). Retry in about {wait} s; this request "
            "keeps its place in line if it is retried unchanged.",
            code="queue_full", headers={"Retry-After": str(wait)},
        )

    def worker_discard(self, core: WorkerJob) -> None:
        if self.worker is not None:
            self.worker.discard(core)

    def _ended(self, job: Job) -> None:  # on the worker thread
        with self._lock:
            self._mine.discard(job)
            self.completed += 1
            started = job.started_at
            if started is not None:
                self.policy.record_duration(time.monotonic() - started)

    @property
    def busy(self) -> bool:
        return self.worker is not None and self.worker.busy

    @property
    def waiting(self) -> int:
        return self.worker.waiting if self.worker is not None else 0
