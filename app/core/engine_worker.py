"""The one owner of the Engine: a worker thread that runs every front end's generations in order.

The desktop app and the local API share one engine, which runs one generation at a time. Both
submit :class:`Job` s here (the GUI through Qt signals, the API through asyncio: thin adapters
in ``app/gui/engine_host.py`` and ``app/api/engine_bridge.py``), so the busy indicator and the
API's 429 see every generation whoever started it, one FIFO decides the order, and each job
ends with exactly one ``Done`` — also when the engine raises or forgets it.

The engine holds the K/V of one conversation at a time. A job names its conversation (the
GUI's conversation id; the API keys by the conversation's first messages), and the worker
swaps states on disk around it: the outgoing conversation is saved when another one needs the
engine (or after every turn when the job asks, as the GUI does so a restart resumes), and the
incoming one is restored if saved, so an IDE plugin's conversation and a GUI conversation do
not evict each other's K/V. Nothing here imports Qt or asyncio.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.types import CancelToken, Done, Event, Usage

log = logging.getLogger(__name__)

Work = Callable[[Any, CancelToken], Iterator[Event]]  # (engine, cancel) -> the engine's events
Sink = Callable[[Event], None]  # called on the worker thread, in order; the last call is a Done
StateSink = Callable[[str, int], None]  # (kind, tokens): "kept" | "restored" | "stale" | "missing" | "new"


class QueueFull(RuntimeError):
    def __init__(self, waiting: int, limit: int) -> None:
        super().__init__(f"{waiting} generation(s) are already waiting (limit {limit})")
        self.waiting, self.limit = waiting, limit


class WorkerStopped(RuntimeError):
    """The worker is not running (never started, or stopping)."""


class StatefulEngine(Protocol):
    @property
    def cached_ids(self) -> list[int]: ...

    def save_state(self, path: str | Path) -> None: ...

    def restore_state(self, path: str | Path) -> bool: ...


@dataclass(eq=False)
class Job:
    work: Work
    sink: Sink
    source: str = "api"  # who asked: "gui", "api", … (shown in busy indicators and logs)
    conversation: str | None = None  # whose K/V the job extends; None: no state swapping
    persist: bool = False  # save the state after the turn (else only when another conversation evicts it)
    on_state: StateSink | None = None
    cancel_token: CancelToken = field(default_factory=CancelToken)
    enqueued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    done: Done | None = None

    def cancel(self) -> None:
        """Stop it within one token, or drop it from the line if it has not started."""
        self.cancel_token.cancel()


def state_file_name(key: str) -> str:
    """A conversation key as a safe file name (the GUI's ids and the API's hashes are already safe)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:120] + ".kv"


class EngineWorker:
    def __init__(self, engine: StatefulEngine | None, states_dir: Path | None = None, max_waiting: int = 32) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must be >= 0")
        self.engine = engine
        self.states_dir = states_dir
        self.max_waiting = max_waiting
        self.completed = 0
        self._cond = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: Job | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._listeners: list[Callable[[], None]] = []
        self._owner: str | None = None  # conversation whose K/V the engine holds
        self._owner_ids: list[int] = []
        self._owner_saved = True

    # ---- status --------------------------------------------------------------------------------
    @property
    def running(self) -> Job | None:
        return self._running

    @property
    def busy(self) -> bool:
        return self._running is not None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def set_engine(self, engine: StatefulEngine | None) -> None:
        """A (re)loaded engine holds no conversation yet; jobs submitted later run on it."""
        with self._cond:
            self.engine = engine  # type: ignore[assignment]
            self._owner, self._owner_ids, self._owner_saved = None, [], True

    def add_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` runs (on any thread) whenever a job starts, ends or joins the line."""
        self._listeners.append(fn)

    def _changed(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:  # a front end's status hook must never stop the engine
                log.exception("engine worker listener failed")

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> EngineWorker:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="neural-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> bool:
        """Cancel the running job and everything waiting; True when the thread ended in time."""
        with self._cond:
            self._stopping = True
            dropped = list(self._waiting)
            self._waiting.clear()
            if self._running is not None:
                self._running.cancel()
            self._cond.notify_all()
        for job in dropped:
            job.cancel_token.cancel()
            self._finish(job, Done("cancelled", Usage(), error="the engine is shutting down"))
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    # ---- submitting ----------------------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        """Queue ``job``; raises :class:`QueueFull` when the line is full, :class:`WorkerStopped`
        when the worker is not running."""
        with self._cond:
            if self._stopping or self._thread is None:
                raise WorkerStopped("the engine is not running")
            if (self._running is not None or self._waiting) and len(self._waiting) >= self.max_waiting:
                raise QueueFull(len(self._waiting), self.max_waiting)
            self._waiting.append(job)
            self._cond.notify()
        self._changed()
        return job

    def discard(self, job: Job) -> bool:
        """Drop a job that has not started (it ends with Done("cancelled")); False if it had."""
        with self._cond:
            if job not in self._waiting:
                return False
            self._waiting.remove(job)
        job.cancel_token.cancel()
        self._finish(job, Done("cancelled", Usage()))
        self._changed()
        return True

    def forget(self, conversation: str) -> None:
        """A conversation was deleted: drop its saved state (the engine may keep its tokens)."""
        path = self._state_path(conversation)
        if path is not None:
            path.unlink(missing_ok=True)
        if self._owner == conversation:
            self._owner = None

    # ---- the worker thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = self._waiting.popleft()
                self._running = job
            job.started_at = time.monotonic()
            self._changed()
            try:
                self._run(job)
            finally:
                with self._cond:
                    self._running = None
                    self.completed += 1
                self._changed()

    def _run(self, job: Job) -> None:
        if job.cancel_token.cancelled:
            self._finish(job, Done("cancelled", Usage()))
            return
        try:
            self._swap_in(job)
        except Exception:  # a state file problem costs a reprocess, never the answer
            log.exception("switching conversation state failed")
            self._owner = None
        done: Done | None = None
        try:
            for ev in job.work(self.engine, job.cancel_token):
                if isinstance(ev, Done):
                    done = ev
                    break
                job.sink(ev)
        except Exception as exc:  # the engine failed: this job's result, not the worker's end
            log.exception("generation failed")
            done = Done("error", Usage(), error=f"{type(exc).__name__}: {exc}")
        if done is None:
            done = (Done("cancelled", Usage()) if job.cancel_token.cancelled
                    else Done("error", Usage(), error="the engine ended without a result"))
        self._swap_out(job, done)
        self._finish(job, done)

    def _finish(self, job: Job, done: Done) -> None:
        job.done = done
        try:
            job.sink(done)
        except Exception:
            log.exception("delivering the end of a generation failed")

    # ---- conversation states -------------------------------------------------------------------
    def _state_path(self, conversation: str) -> Path | None:
        return self.states_dir / state_file_name(conversation) if self.states_dir is not None else None

    def _swap_in(self, job: Job) -> None:
        key = job.conversation
        if self.engine is None:
            return
        if key is None:  # an unkeyed job replaces the engine's tokens: keep the owner's first
            self._save_owner()
            self._owner = None
            return
        eng = self.engine
        if key == self._owner and eng.cached_ids == self._owner_ids:
            self._report(job, "kept", len(self._owner_ids))
            return
        self._save_owner()
        path = self._state_path(key)
        if path is not None and path.is_file():
            ok = eng.restore_state(path)
            self._report(job, "restored" if ok else "stale", len(eng.cached_ids) if ok else 0)
        else:
            self._report(job, "missing", 0)
        self._owner, self._owner_ids, self._owner_saved = key, list(eng.cached_ids), True

    def _swap_out(self, job: Job, done: Done) -> None:
        if job.conversation is None or self.engine is None:
            return
        self._owner, self._owner_ids = job.conversation, list(self.engine.cached_ids)
        self._owner_saved = False
        if job.persist and done.finish_reason != "error":
            self._save_owner()

    def _save_owner(self) -> None:
        if self.engine is None or self._owner is None or self._owner_saved or self.engine.cached_ids != self._owner_ids:
            return
        path = self._state_path(self._owner)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.engine.save_state(path)
            self._owner_saved = True
        except Exception:  # the turn is still good; it only costs a reprocess next time
            log.exception("saving the state of conversation %s failed", self._owner)

    @staticmethod
    def _report(job: Job, kind: str, tokens: int) -> None:
        if job.on_state is not None:
            with contextlib.suppress(Exception):
                job.on_state(kind, tokens)
