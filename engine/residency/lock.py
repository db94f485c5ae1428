"""Keeping the hottest store pages in RAM, and letting released experts go only past the budget.

Linux: ``mlock`` of the hottest records up to the lock budget. An unprivileged user is limited
by RLIMIT_MEMLOCK (often 8 MiB); when the kernel refuses (EPERM/ENOMEM/EAGAIN) the records
locked so far stay locked, the rest stay merely warm, and the result carries a message saying
how to raise the limit — the engine keeps running.

Windows: a soft minimum working set (SetProcessWorkingSetSizeEx with the hard limits disabled),
so the memory manager trims our pages last. This path is written to the documented API but is
not exercised by the Linux tests.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sys
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import os_memory
from .budget import RamBudget, gib, human_bytes
from .os_memory import OsCallError
from .regions import ExpertKey, Mapping, Region, as_mappings, live_spans
from .resident import StoreResidency

log = logging.getLogger(__name__)
_REFUSED = (errno.EPERM, errno.ENOMEM, errno.EAGAIN)


@dataclass(frozen=True)
class LockResult:
    method: str  # mlock | working-set-minimum | none
    requested_bytes: int
    locked_bytes: int
    regions: tuple[Region, ...] = ()
    refused: bool = False
    message: str = ""

    @property
    def keys(self) -> set[ExpertKey]:
        return {r.key for r in self.regions}


def _limit_text() -> str:
    lim = None
    if sys.platform.startswith("linux"):
        lim = os_memory.memlock_limit()
    return "unlimited" if lim is None else human_bytes(lim)


def lock_hot(mappings: Mapping | Sequence[Mapping], regions: Sequence[Region], budget_bytes: int) -> LockResult:
    """Lock ``regions`` in order (hottest first) until ``budget_bytes``; never raises for a refusal."""
    budget = max(0, int(budget_bytes))
    if budget == 0 or not regions:
        return LockResult("none", budget, 0)
    fitting: list[Region] = []
    used = 0
    for r in regions:
        if used + r.length > budget:
            break
        used += r.length
        fitting.append(r)
    picked = live_spans(as_mappings(mappings), fitting)
    if sys.platform.startswith("linux"):
        return _mlock(picked, budget)
    if sys.platform == "win32":
        return _ws_minimum(picked, budget)
    return LockResult("none", budget, 0, message=f"memory locking is not supported on {sys.platform}")


def _mlock(picked: list[tuple[Region, int, int]], budget: int) -> LockResult:
    done: list[Region] = []
    locked = 0
    if not sys.platform.startswith("linux"):
        return LockResult("none", budget, 0)
    for r, addr, n in picked:
        try:
            os_memory.mlock(addr, n)
        except OsCallError as exc:
            why = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            if exc.errno in _REFUSED:
                msg = (f"mlock refused ({why}) after {human_bytes(locked)} of {human_bytes(budget)}: RLIMIT_MEMLOCK is "
                       f"{_limit_text()}. Raise it (`ulimit -l unlimited`, or 'memlock' in "
                       f"/etc/security/limits.conf) or set mlock_gib=0; continuing with the store warm "
                       f"but not locked.")
            else:
                msg = f"mlock failed ({why}: {exc}); continuing without locking the rest."
            log.warning(msg)
            return LockResult("mlock", budget, locked, tuple(done), refused=True, message=msg)
        done.append(r)
        locked += n
    return LockResult("mlock", budget, locked, tuple(done), message=f"locked {gib(locked)} of the store in RAM")


def _ws_minimum(picked: list[tuple[Region, int, int]], budget: int) -> LockResult:  # pragma: no cover - Windows
    total = sum(n for _r, _o, n in picked)
    if sys.platform == "win32":
        try:
            os_memory.set_working_set_minimum(total)
        except OsCallError as exc:
            msg = f"SetProcessWorkingSetSizeEx refused ({exc}); continuing without a working-set minimum."
            return LockResult("working-set-minimum", budget, 0, refused=True, message=msg)
    msg = f"soft minimum working set {gib(total)}: Windows trims these pages last"
    return LockResult("working-set-minimum", budget, total, tuple(r for r, _o, _n in picked), message=msg)


def unlock(mappings: Mapping | Sequence[Mapping], regions: Iterable[Region]) -> int:
    """munlock ``regions``; returns bytes unlocked (errors are logged, not raised)."""
    if not sys.platform.startswith("linux"):
        return 0
    total = 0
    for r, addr, n in live_spans(as_mappings(mappings), regions):
        try:
            os_memory.munlock(addr, n)
            total += n
        except OsCallError as exc:
            log.debug("munlock %s: %s", r.key, exc)
    return total


@dataclass
class ReleaseResult:
    released: list[ExpertKey] = field(default_factory=list)
    bytes: int = 0
    over_bytes: int = 0


class ReleasePolicy:
    """Experts the CPU no longer needs (e.g. admitted to VRAM) are *candidates*; their pages are
    unlocked and marked cold (reclaim first) only while the store's resident bytes exceed the budget.
    Without pressure they stay, so an expert evicted from VRAM later is still in RAM (the audit's
    remaining first-answer faults were first touches of released experts)."""

    def __init__(self, mappings: Mapping | Sequence[Mapping], residency: StoreResidency, budget: RamBudget | int,
                 locked: Iterable[ExpertKey] = ()) -> None:
        self.mappings = as_mappings(mappings)
        self.residency = residency
        self.budget_bytes = budget.budget_bytes if isinstance(budget, RamBudget) else int(budget)
        self.locked = set(locked)
        self._candidates: OrderedDict[ExpertKey, None] = OrderedDict()  # oldest release first
        self.cold_supported = sys.platform.startswith("linux") or sys.platform == "win32"

    @property
    def candidates(self) -> list[ExpertKey]:
        return list(self._candidates)

    def mark_released(self, keys: Iterable[ExpertKey]) -> None:
        for k in keys:
            self._candidates[k] = None
            self._candidates.move_to_end(k)

    def mark_needed(self, keys: Iterable[ExpertKey]) -> None:
        for k in keys:
            self._candidates.pop(k, None)

    def enforce(self, resident_bytes: int | None = None) -> ReleaseResult:
        """Release candidates, oldest first, until resident store bytes fit the budget again."""
        resident = self.residency.resident_bytes if resident_bytes is None else int(resident_bytes)
        over = max(0, resident - self.budget_bytes)
        out = ReleaseResult(over_bytes=over)
        if over == 0:
            return out
        while self._candidates and out.bytes < over:
            k, _ = self._candidates.popitem(last=False)
            regs = self.residency.regions(k)
            held = int(self.residency.resident[k[0], k[1]])
            if k in self.locked:
                unlock(self.mappings, regs)
                self.locked.discard(k)
            self._make_cold(regs)
            out.released.append(k)
            out.bytes += held
        return out

    def _make_cold(self, regs: list[Region]) -> None:
        for r, addr, n in live_spans(self.mappings, regs):
            try:
                if sys.platform.startswith("linux"):
                    try:
                        os_memory.madvise(addr, n, os_memory.MADV_COLD)
                    except OsCallError as exc:
                        if exc.errno != errno.EINVAL:
                            raise
                        # kernel < 5.4: unmap from our page tables; the cache copy stays reclaimable
                        os_memory.madvise(addr, n, os_memory.MADV_DONTNEED)
                elif sys.platform == "win32":
                    # VirtualUnlock on pages that are not locked removes them from the working set
                    with contextlib.suppress(OsCallError):
                        os_memory.virtual_unlock(addr, n)
            except OsCallError as exc:
                log.debug("release %s: %s", r.key, exc)
