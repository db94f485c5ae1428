"""Background warm-up of the expert store, and prefetch of the experts a prompt routes to.

The warmer reads a :class:`~engine.residency.ranking.WarmupPlan` in order, a few MiB at a time,
on a daemon thread. Each chunk is brought in without holding the GIL for the I/O
(``MADV_POPULATE_READ``, or ``pread`` into a reusable buffer, then one touch per page so the
pages are mapped, which also makes reclaim treat them as in use). The engine pauses the warmer
while it computes — at most the chunk in flight (~1 ms from NVMe) can delay a prompt — and the
warmer never re-warms after a prompt: the design doc measured bulk re-warming after a long
prompt as a loss (first answer 10.7 vs 13.3 tok/s).

Pages past the file's current end are never touched (that would be SIGBUS on a truncated store);
they are reported as missing instead.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from . import os_memory
from .os_memory import PAGE, ZERO_FAULTS, FaultCounts, OsCallError
from .ranking import WarmupPlan
from .regions import Mapping, Region, as_mappings, live_spans

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 2 << 20


@dataclass(frozen=True)
class WarmProgress:
    state: str  # idle | running | paused | done | cancelled | error
    done_bytes: int
    total_bytes: int
    regions_done: int
    regions_total: int
    missing_bytes: int  # planned bytes past the end of the file
    seconds: float
    method: str
    message: str = ""

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 1.0


ProgressFn = Callable[[WarmProgress], None]


def touch_pages(view: np.ndarray, base_address: int, offset: int, length: int) -> int:
    """Read one byte in every page of ``[offset, offset+length)``; returns their sum (so it is not elided)."""
    if length <= 0:
        return 0
    first_boundary = ((base_address + offset) // PAGE + 1) * PAGE - base_address
    s = int(view[offset])
    if first_boundary < offset + length:
        s += int(view[first_boundary : offset + length : PAGE].sum(dtype=np.uint64))
    return s


class Warmer:
    """Warms ``plan`` on a background thread; pause/resume/cancel from any thread."""

    def __init__(self, mappings: Mapping | Sequence[Mapping], plan: WarmupPlan | Sequence[Region],
                 progress: ProgressFn | None = None,
                 chunk_bytes: int = DEFAULT_CHUNK, method: str = "auto",
                 on_done: Callable[[Warmer], None] | None = None, progress_every_s: float = 0.25) -> None:
        self.mappings = as_mappings(mappings)
        self.regions = tuple(plan.regions if isinstance(plan, WarmupPlan) else plan)
        self.chunk = max(PAGE, chunk_bytes - chunk_bytes % PAGE)
        self.method = self._pick_method(method)
        self._progress_fn = progress
        self._on_done = on_done
        self._every = progress_every_s
        self._run = threading.Event()  # set = may work; cleared by pause()
        self._run.set()
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._faults = ZERO_FAULTS
        self._thread: threading.Thread | None = None
        total = sum(r.length for r in self.regions)
        self._p = WarmProgress("idle", 0, total, 0, len(self.regions), 0, 0.0, self.method)
        self.pause_waits = 0  # how often a chunk boundary found the warmer paused
        self._buf: memoryview | None = None

    def _pick_method(self, method: str) -> str:
        if method != "auto":
            return method
        # Linux: populate (fallback read); elsewhere PrefetchVirtualMemory/WILLNEED + touch
        return "populate" if sys.platform.startswith("linux") else "touch"

    # -- control -----------------------------------------------------------------------------
    def start(self) -> Warmer:
        if self._thread is not None:
            raise RuntimeError("warmer already started")
        self._thread = threading.Thread(target=self._main, name="neural-warmup", daemon=True)
        self._thread.start()
        return self

    def pause(self) -> None:
        """Stop after the chunk in flight (the engine calls this when a prompt starts)."""
        self._run.clear()
        self._switch("running", "paused")

    def resume(self) -> None:
        self._run.set()
        self._switch("paused", "running")

    def _switch(self, old: str, new: str) -> None:
        with self._lock:
            if self._p.state == old:
                self._p = replace(self._p, state=new)

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def cancel(self) -> None:
        self._cancel.set()
        self._run.set()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def progress(self) -> WarmProgress:
        with self._lock:
            return self._p

    def faults(self) -> FaultCounts:
        """Faults taken by the warmer thread so far (FaultMeter subtracts them from token faults)."""
        with self._lock:
            return self._faults

    # -- work --------------------------------------------------------------------------------
    def _set(self, **kw: object) -> WarmProgress:
        with self._lock:
            self._p = replace(self._p, **kw)  # type: ignore[arg-type]
            return self._p

    def _report(self, p: WarmProgress) -> None:
        if self._progress_fn is not None:
            try:
                self._progress_fn(p)
            except Exception:  # a UI callback must not kill warm-up
                log.exception("warm-up progress callback failed")

    def _main(self) -> None:
        t0 = time.perf_counter()
        last = 0.0
        self._report(self._set(state="running" if self._run.is_set() else "paused"))
        failed: list[str] = []
        try:
            for i, r in enumerate(self.regions):
                try:
                    missing = self._warm_region(r)
                except OsCallError as exc:  # an unreadable page (EIO/EFAULT): skip this record, keep going
                    failed.append(f"{r.key}: {exc}")
                    missing = 0
                if self._cancel.is_set():
                    break
                p = self._set(regions_done=i + 1, seconds=time.perf_counter() - t0,
                              missing_bytes=self._p.missing_bytes + missing)
                if p.seconds - last >= self._every:
                    last = p.seconds
                    self._report(p)
            state = "cancelled" if self._cancel.is_set() else "done"
            msg = ""
            if failed:
                msg = f"{len(failed)} of {len(self.regions)} records could not be read (first: {failed[0]})"
                log.warning("warm-up: %s", msg)
                if len(failed) == len(self.regions):
                    state = "error"
            p = self._set(state=state, message=msg, seconds=time.perf_counter() - t0)
        except Exception as exc:  # keep the engine running; warm-up is an optimisation
            log.exception("warm-up failed")
            p = self._set(state="error", message=str(exc), seconds=time.perf_counter() - t0)
        self._report(p)
        if self._on_done is not None and p.state == "done":
            try:
                self._on_done(self)
            except Exception:
                log.exception("warm-up completion hook failed")

    def _wait_turn(self) -> bool:
        """Block while paused; False when cancelled."""
        if not self._run.is_set():
            self.pause_waits += 1
            self._run.wait()
        return not self._cancel.is_set()

    def _warm_region(self, r: Region) -> int:
        """Warm one record chunk by chunk; returns its bytes past the end of the file."""
        m = self.mappings[r.file]
        off, n = m.clip(r, m.file_size())
        missing = r.length - n
        pos = off
        while pos < off + n:
            if not self._wait_turn():
                return missing
            step = min(self.chunk, off + n - pos)
            f0 = os_memory.read_faults(thread=True) if sys.platform.startswith("linux") else ZERO_FAULTS
            self._warm_chunk(m, pos, step)
            if sys.platform.startswith("linux"):
                d = os_memory.read_faults(thread=True) - f0
                with self._lock:
                    self._faults = self._faults + d
            pos += step
            with self._lock:
                self._p = replace(self._p, done_bytes=self._p.done_bytes + step)
        with self._lock:
            self._p = replace(self._p, done_bytes=self._p.done_bytes + missing)
        return missing

    def _warm_chunk(self, m: Mapping, off: int, n: int) -> None:
        if m.view is None:
            raise RuntimeError("mapping closed during warm-up")
        if self.method == "populate" and sys.platform.startswith("linux"):
            try:
                os_memory.madvise(m.address + off, n, os_memory.MADV_POPULATE_READ)
                return
            except OsCallError as exc:
                if exc.errno != errno.EINVAL:  # EFAULT/EIO: a page that cannot be read
                    raise
                self.method = "read" if m.fd is not None else "touch"  # kernel older than 5.14
                self._set(method=self.method)
        if self.method == "read" and m.fd is not None and hasattr(os, "preadv"):
            buf = self._buffer()
            pos = off
            while pos < off + n:
                k = min(len(buf), off + n - pos)
                os.preadv(m.fd, [buf[:k]], pos)
                pos += k
        elif sys.platform == "win32":
            os_memory.prefetch_virtual_memory([(m.address + off, n)])
        elif sys.platform.startswith("linux"):
            os_memory.madvise(m.address + off, n, os_memory.MADV_WILLNEED)
        touch_pages(m.view, m.address, off, n)

    def _buffer(self) -> memoryview:
        if self._buf is None:
            self._buf = memoryview(bytearray(min(self.chunk, 1 << 20)))
        return self._buf


def prefetch(mappings: Mapping | Sequence[Mapping], regions: Sequence[Region]) -> int:
    """Ask the OS to start reading ``regions`` now (non-blocking); returns the bytes advised.

    madvise(WILLNEED) on Linux, PrefetchVirtualMemory on Windows. Clipped to the file's current
    size; failures are logged, never raised (a prefetch is only a hint). The design doc measured a
    per-kernel-call cold prefetch as neutral, so the engine keeps it off by default."""
    spans = [(a, n) for _r, a, n in live_spans(as_mappings(mappings), regions)]
    if not spans:
        return 0
    try:
        if sys.platform.startswith("linux"):
            for a, n in spans:
                os_memory.madvise(a, n, os_memory.MADV_WILLNEED)
        elif sys.platform == "win32":
            os_memory.prefetch_virtual_memory(spans)
        else:
            return 0
    except OsCallError as exc:
        log.debug("prefetch hint refused: %s", exc)
        return 0
    return sum(n for _a, n in spans)


def evict(mappings: Mapping | Sequence[Mapping], regions: Sequence[Region]) -> int:
    """Drop ``regions`` from RAM as far as this process can (benchmarks and tests: a cold store
    without root). Unmaps them from our page tables (MADV_DONTNEED, harmless for read-only file
    mappings: the next touch reads the file again), then drops the clean cached pages
    (POSIX_FADV_DONTNEED). Pages another mapping still maps stay; measure with StoreResidency.
    Returns the bytes advised; Linux only (0 elsewhere)."""
    if not sys.platform.startswith("linux"):
        return 0
    maps = as_mappings(mappings)
    total = 0
    for r, addr, n in live_spans(maps, regions):
        try:
            os_memory.madvise(addr, n, os_memory.MADV_DONTNEED)
            fd = maps[r.file].fd
            if fd is not None:
                a, span = os_memory.page_span(r.offset, n)
                os_memory.fadvise_dontneed(fd, a, span)
            total += n
        except OSError as exc:
            log.debug("evict %s: %s", r.key, exc)
    return total
