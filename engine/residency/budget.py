"""RAM budget arithmetic for the expert store, and the advice ``neural doctor`` prints.

The store (55.1 GiB packed for gpt-oss-120b) barely fits next to the OS on a 64 GB PC, so the
engine decides up front how much of it to keep in RAM (warm-up target), how much of that to
lock (mlock / Windows soft minimum working set), and when released experts really must leave.

"Available" is psutil's figure: free RAM plus reclaimable page cache, which includes store pages
already cached — so the budget does not shrink just because the store is warm. Locked pages are
not reclaimable, so the budget is computed before locking.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIN_HEADROOM = 3 * GIB  # desktop + a browser; the design's 64 GB PC had 54–57 GiB free
_AUTO = object()


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def human_bytes(n: float) -> str:
    """GiB for big amounts, MiB/KiB for small ones (a typical RLIMIT_MEMLOCK is 8 MiB)."""
    if n >= GIB:
        return gib(n)
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / 1024:.0f} KiB"


def default_headroom(total_bytes: int) -> int:
    """RAM left to the OS and other programs: 1/16 of the machine, at least 3 GiB."""
    return max(MIN_HEADROOM, total_bytes // 16)


@dataclass(frozen=True)
class MemoryInfo:
    total: int
    available: int

    @classmethod
    def now(cls) -> MemoryInfo:
        try:
            import psutil
        except ImportError:  # e.g. a bare benchmark machine; Linux gives the same figures directly
            info = cls.from_proc_meminfo()
            if info is None:
                raise
            return info
        vm = psutil.virtual_memory()
        return cls(int(vm.total), int(vm.available))

    @classmethod
    def from_proc_meminfo(cls, text: str | None = None) -> MemoryInfo | None:
        """MemTotal and MemAvailable from /proc/meminfo (what psutil reports on Linux); None if absent."""
        if text is None:
            try:
                with open("/proc/meminfo") as f:
                    text = f.read()
            except OSError:
                return None
        kib: dict[str, int] = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                kib[name.strip()] = int(parts[0])
        if "MemTotal" not in kib or "MemAvailable" not in kib:
            return None
        return cls(kib["MemTotal"] * 1024, kib["MemAvailable"] * 1024)


def current_memlock_limit() -> int | None:
    """Bytes this process may mlock (None = no limit applies, or not Linux)."""
    if sys.platform.startswith("linux"):
        from .os_memory import memlock_limit

        return memlock_limit()
    return None


@dataclass(frozen=True)
class RamBudget:
    store_bytes: int  # store bytes the CPU reads from RAM (static-VRAM experts may be left out)
    total_bytes: int
    available_bytes: int
    headroom_bytes: int
    engine_bytes: int  # other engine RAM not yet allocated when measured (dense weights, buffers)
    requested_bytes: int  # ram_budget_gib in bytes; 0 = auto
    mlock_requested_bytes: int
    memlock_limit: int | None
    budget_bytes: int  # store bytes to keep in RAM (warm-up target)
    lock_bytes: int  # store bytes to lock (<= budget)

    @classmethod
    def compute(cls, store_bytes: int, settings: Any = None, mem: MemoryInfo | None = None, engine_bytes: int = 0,
                headroom_bytes: int | None = None, memlock_limit: Any = _AUTO) -> RamBudget:
        """``settings``: an EngineSettings (ram_budget_gib, mlock_gib) or None for auto/no lock."""
        mem = mem or MemoryInfo.now()
        headroom = default_headroom(mem.total) if headroom_bytes is None else int(headroom_bytes)
        limit = current_memlock_limit() if memlock_limit is _AUTO else memlock_limit
        requested = int(float(getattr(settings, "ram_budget_gib", 0.0)) * GIB)
        mlock_req = int(float(getattr(settings, "mlock_gib", 0.0)) * GIB)
        room = max(0, mem.available - headroom - engine_bytes)
        budget = min(store_bytes, requested) if requested else min(store_bytes, room)
        lock = min(mlock_req, budget, room)  # locked pages cannot be reclaimed: never past what is free
        if limit is not None and sys.platform != "win32":
            lock = min(lock, int(limit))
        return cls(int(store_bytes), mem.total, mem.available, headroom, int(engine_bytes), requested, mlock_req,
                   limit, max(0, budget), max(0, lock))

    @property
    def room_bytes(self) -> int:
        """RAM free for the store after headroom and the engine's own needs."""
        return max(0, self.available_bytes - self.headroom_bytes - self.engine_bytes)

    @property
    def fits_store(self) -> bool:
        return self.store_bytes <= self.room_bytes

    @property
    def fraction(self) -> float:
        """Share of the store the budget keeps in RAM."""
        return self.budget_bytes / self.store_bytes if self.store_bytes else 1.0

    @property
    def lock_limited(self) -> bool:
        """True when RLIMIT_MEMLOCK cut the lock below what was asked (and allowed by the budget)."""
        want = min(self.mlock_requested_bytes, self.budget_bytes, self.room_bytes)
        return self.memlock_limit is not None and self.lock_bytes < want

    def over_budget(self, resident_store_bytes: int) -> int:
        """Bytes of store that must leave RAM to get back within the budget (0 = keep everything)."""
        return max(0, int(resident_store_bytes) - self.budget_bytes)

    def describe(self) -> str:
        mode = "auto" if not self.requested_bytes else "set"
        s = (f"RAM budget {gib(self.budget_bytes)} ({mode}) for a {gib(self.store_bytes)} store "
             f"({self.fraction:.0%}); {gib(self.available_bytes)} available of {gib(self.total_bytes)}, "
             f"headroom {gib(self.headroom_bytes)}")
        if self.mlock_requested_bytes:
            s += f"; lock {gib(self.lock_bytes)}"
        return s


def ram_advice(store_bytes: int, settings: Any = None, mem: MemoryInfo | None = None, engine_bytes: int = 0,
               headroom_bytes: int | None = None, memlock_limit: Any = _AUTO) -> list[str]:
    """Warnings for ``neural doctor``: what RAM cannot hold, and which setting to change. [] = fine."""
    b = RamBudget.compute(store_bytes, settings, mem, engine_bytes, headroom_bytes, memlock_limit)
    out: list[str] = []
    need = b.store_bytes + b.headroom_bytes + b.engine_bytes
    extra = f", plus {gib(b.engine_bytes)} for the engine" if b.engine_bytes else ""
    if b.total_bytes < need:
        out.append(
            f"RAM: this PC has {gib(b.total_bytes)}; the expert store needs {gib(b.store_bytes)} plus "
            f"{gib(b.headroom_bytes)} for the OS and other programs{extra}. Part of the store will be read "
            f"from disk while answering (slow first answers, many page faults). A larger VRAM pool "
            f"(setting pool_gib) keeps more experts on the GPU and fewer in RAM; more RAM fixes it.")
    elif b.available_bytes < need:
        out.append(
            f"RAM: only {gib(b.available_bytes)} of {gib(b.total_bytes)} is free now; the expert store needs "
            f"{gib(b.store_bytes)} plus {gib(b.headroom_bytes)} headroom{extra}. Close other programs "
            f"(browsers, games, virtual machines) before loading the model, or set ram_budget_gib to "
            f"{b.room_bytes / GIB:.1f} so warm-up does not push them into swap.")
    if b.requested_bytes:
        if b.requested_bytes > b.room_bytes:
            out.append(
                f"ram_budget_gib={b.requested_bytes / GIB:g} is more than the {gib(b.room_bytes)} free after "
                f"headroom; warm-up would push other programs out of RAM. Lower it, or set it to 0 (auto).")
        elif b.requested_bytes < b.store_bytes and b.room_bytes >= b.store_bytes:
            out.append(
                f"ram_budget_gib={b.requested_bytes / GIB:g} keeps only {b.fraction:.0%} of the "
                f"{gib(b.store_bytes)} store in RAM although all of it fits; set 0 (auto) or "
                f"{b.store_bytes / GIB:.1f} for faster first answers.")
    if b.mlock_requested_bytes:
        if b.lock_limited and b.memlock_limit is not None:
            out.append(
                f"mlock_gib={b.mlock_requested_bytes / GIB:g} but this user may lock only "
                f"{human_bytes(b.memlock_limit)} (RLIMIT_MEMLOCK). Raise it (`ulimit -l`, or 'memlock' in "
                f"/etc/security/limits.conf) or set mlock_gib=0; the engine runs without locking the rest.")
        if b.mlock_requested_bytes > b.room_bytes:
            out.append(
                f"mlock_gib={b.mlock_requested_bytes / GIB:g} is more than the {gib(b.room_bytes)} free after "
                f"headroom; locked pages cannot be reclaimed, so other programs would swap. Lower mlock_gib.")
    return out
