"""One object the engine holds for RAM residency: budget, warm-up, lock, release, telemetry.

Hooks (all cheap, all safe to call from the engine thread):

    res = ResidencyManager.for_store(store, settings, hot=..., ranking=..., exclude=...)
    res.start()                      # after load: background warm-up, then lock the hottest part;
                                     # a sampler thread re-reads one layer's mincore every 0.25 s
    with res.computing(): ...        # around prompt processing + decode: pauses warm-up
    res.token_started(); ...; res.token_finished()   # around each decode step: faults per token
    res.prefetch(keys)               # optional: WILLNEED for experts the router picked
    res.experts_released(keys) / res.experts_needed(keys)   # admitted to / evicted from VRAM
    res.fill_telemetry(t)            # in Backend.fill_telemetry
    res.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .budget import MemoryInfo, RamBudget
from .faults import FaultMeter, FaultSummary
from .lock import LockResult, ReleasePolicy, ReleaseResult, lock_hot, unlock
from .os_memory import FaultCounts
from .ranking import ExpertRanking, WarmupPlan
from .regions import (
    ExpertKey,
    Mapping,
    Region,
    as_mappings,
    checkpoint_regions,
    store_mapping,
    store_regions,
)
from .resident import StoreResidency
from .warmer import ProgressFn, Warmer, WarmProgress, prefetch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResidencyStats:
    store_bytes: int
    resident_bytes: int  # latest mincore sample (refreshed a layer at a time)
    budget_bytes: int
    locked_bytes: int
    warm: WarmProgress | None
    faults: FaultSummary
    note: str  # e.g. why mlock was refused

    def telemetry_fields(self) -> dict[str, object]:
        """Values for engine.types.Telemetry (fields proposed to the lead; set only where present)."""
        return {
            "store_bytes": self.store_bytes,
            "store_resident_bytes": self.resident_bytes,
            "ram_budget_bytes": self.budget_bytes,
            "ram_locked_bytes": self.locked_bytes,
            "warmup_state": self.warm.state if self.warm else "off",
            "warmup_fraction": self.warm.fraction if self.warm else 0.0,
            "faults_major_per_token": self.faults.recent_major_per_token,
            "faults_minor_per_token": self.faults.recent_minor_per_token,
            "residency_note": self.note,
        }


class ResidencyManager:
    def __init__(self, mappings: Mapping | Sequence[Mapping], regions: Sequence[Region], settings: Any = None, *,
                 hot: Iterable[ExpertKey] = (), ranking: ExpertRanking | None = None,
                 exclude: Iterable[ExpertKey] = (), engine_bytes: int = 0, mem: MemoryInfo | None = None,
                 progress: ProgressFn | None = None, prefetch_enabled: bool = False,
                 sample_interval_s: float = 0.25) -> None:
        self.mappings = as_mappings(mappings)
        skip = set(exclude)
        cpu_store = sum(r.length for r in regions if r.key not in skip)
        self.budget = RamBudget.compute(cpu_store, settings, mem=mem, engine_bytes=engine_bytes)
        self.residency = StoreResidency(self.mappings, regions)
        self.plan = WarmupPlan.build(regions, self.budget.budget_bytes, hot=hot, ranking=ranking, exclude=skip)
        self.warmer: Warmer | None = None
        if bool(getattr(settings, "warmup", True)) and self.plan.regions:
            self.warmer = Warmer(self.mappings, self.plan, progress=progress, on_done=lambda _w: self._warmed())
        self.meter = FaultMeter(exclude=self.warmer.faults if self.warmer else None)
        self.lock_result = LockResult("none", self.budget.lock_bytes, 0)
        self.release = ReleasePolicy(self.mappings, self.residency, self.budget)
        self.prefetch_enabled = prefetch_enabled
        self._lock_thread: threading.Thread | None = None
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        self.sample_interval_s = sample_interval_s
        self._closed = False
        log.info("%s", self.budget.describe())

    @classmethod
    def for_store(cls, store: Any, settings: Any = None, **kw: Any) -> ResidencyManager:
        """For an open :class:`engine.store.reader.ExpertStore`."""
        return cls(store_mapping(store), store_regions(store), settings, **kw)

    @classmethod
    def for_checkpoint(cls, ck: Any, settings: Any = None, **kw: Any) -> ResidencyManager:
        """For experts read straight from a checkpoint's shards (our own mappings, same page cache)."""
        files, regions = checkpoint_regions(ck)
        maps = [Mapping.open(f) for f in files]
        return cls(maps, regions, settings, **kw)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """After load: warm up in the background (then lock), or only lock when warm-up is off."""
        if self.warmer is not None:
            self.warmer.start()
        elif self.budget.lock_bytes:
            self._lock_thread = threading.Thread(target=self._lock, name="neural-mlock", daemon=True)
            self._lock_thread.start()
        if self.sample_interval_s > 0:
            self._sampler = threading.Thread(target=self._sample_loop, name="neural-residency", daemon=True)
            self._sampler.start()

    def _sample_loop(self) -> None:
        # mincore of one layer is a few ms for gpt-oss-120b: kept off the token path, GIL released in the call;
        # one pass over every layer first, so no layer reads as empty for want of a sample
        step: Callable[[], object] = self.residency.refresh
        while True:
            try:
                step()
            except Exception:
                log.exception("residency sampling failed; stopping it")
                return
            step = self.sample
            if self._stop.wait(self.sample_interval_s):
                return

    def _warmed(self) -> None:
        """The warm-up's end (its thread): lock, and sample every layer, so that the resident figure is the
        store's now rather than whatever the round-robin sampler had reached (it said 50 % beside a finished
        warm-up)."""
        self._lock()
        if not self._closed:
            self.residency.refresh()

    def _lock(self) -> None:
        if self.budget.lock_bytes <= 0 or self._closed:
            return
        self.lock_result = lock_hot(self.mappings, self.plan.regions, self.budget.lock_bytes)
        self.release.locked = self.lock_result.keys
        log.info("%s", self.lock_result.message)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self.warmer is not None:
            self.warmer.cancel()
        threads = [t for t in (self._sampler, self.warmer and self.warmer.thread, self._lock_thread) if t]
        for t in threads:
            t.join(5.0)
        if any(t.is_alive() for t in threads):
            # a thread stuck in I/O may still touch the mapping: leave it mapped rather than crash
            log.warning("residency threads still busy at close; leaving the store mapping open")
            return
        if self.lock_result.regions:
            unlock(self.mappings, self.lock_result.regions)
        for m in self.mappings:
            m.close()

    # -- engine hooks ------------------------------------------------------------------------
    def compute_started(self) -> None:
        if self.warmer is not None:
            self.warmer.pause()

    def compute_finished(self) -> None:
        if self.warmer is not None:
            self.warmer.resume()

    @contextmanager
    def computing(self) -> Iterator[None]:
        self.compute_started()
        try:
            yield
        finally:
            self.compute_finished()

    def token_started(self) -> None:
        self.meter.start_token()

    def token_finished(self) -> FaultCounts:
        return self.meter.end_token()

    def sample(self) -> int:
        """Refresh one layer's residency (round-robin); returns the layer refreshed. The sampler
        thread calls this; call it directly only when constructed with ``sample_interval_s=0``."""
        return self.residency.refresh_next()

    def prefetch(self, keys: Iterable[ExpertKey]) -> int:
        if not self.prefetch_enabled:
            return 0
        regs = [r for k in keys for r in self.residency.regions(k)]
        return prefetch(self.mappings, regs)

    def experts_released(self, keys: Iterable[ExpertKey]) -> ReleaseResult:
        """Experts the CPU no longer reads (e.g. admitted to VRAM): they leave RAM only past the budget."""
        self.release.mark_released(keys)
        return self.release.enforce()

    def experts_needed(self, keys: Iterable[ExpertKey]) -> None:
        self.release.mark_needed(keys)

    # -- telemetry ---------------------------------------------------------------------------
    def stats(self) -> ResidencyStats:
        return ResidencyStats(self.residency.store_bytes, self.residency.resident_bytes, self.budget.budget_bytes,
                              self.lock_result.locked_bytes, self.warmer.progress() if self.warmer else None,
                              self.meter.summary(), self.lock_result.message if self.lock_result.refused else "")

    def fill_telemetry(self, t: Any) -> None:
        for name, value in self.stats().telemetry_fields().items():
            if hasattr(t, name):
                setattr(t, name, value)
