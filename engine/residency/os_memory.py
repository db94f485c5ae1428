"""Thin ctypes bindings for the OS memory calls residency needs, behind one platform check.

Linux: mincore, madvise, mlock/munlock from libc; page faults from getrusage.
Windows: QueryWorkingSetEx, PrefetchVirtualMemory, VirtualLock/Unlock, SetProcessWorkingSetSizeEx
and GetProcessMemoryInfo from kernel32. The Windows paths are written against the documented
signatures but are not exercised by the Linux test suite.

Every call reports failure as an :class:`OsCallError` carrying errno (or the Windows error code),
so callers can fall back with a clear message instead of crashing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from dataclasses import dataclass

IS_LINUX = sys.platform.startswith("linux")
IS_WINDOWS = sys.platform == "win32"
PAGE = mmap.PAGESIZE

# Linux madvise advice values (asm-generic/mman-common.h); Python 3.11's mmap lacks the newer ones.
MADV_WILLNEED = 3
MADV_DONTNEED = 4
MADV_COLD = 20  # Linux 5.4+: reclaim these pages first, do not drop them now
MADV_POPULATE_READ = 22  # Linux 5.14+: prefault page tables, returns an error instead of SIGBUS


class OsCallError(OSError):
    """An OS memory call failed; ``errno`` says why (EPERM/ENOMEM for a refused mlock)."""


@dataclass(frozen=True)
class FaultCounts:
    major: int  # faults that needed I/O (Linux); 0 on Windows, which reports one total
    minor: int  # faults served from RAM; on Windows the PageFaultCount total

    @property
    def total(self) -> int:
        return self.major + self.minor

    def __sub__(self, other: FaultCounts) -> FaultCounts:
        return FaultCounts(self.major - other.major, self.minor - other.minor)

    def __add__(self, other: FaultCounts) -> FaultCounts:
        return FaultCounts(self.major + other.major, self.minor + other.minor)


ZERO_FAULTS = FaultCounts(0, 0)


def page_span(address: int, length: int) -> tuple[int, int]:
    """Page-aligned (start, length) covering ``[address, address + length)``."""
    start = address - address % PAGE
    end = address + length
    end += -end % PAGE
    return start, end - start


def _raise_errno(name: str) -> None:
    err = ctypes.get_errno()
    raise OsCallError(err, f"{name} failed: {os.strerror(err)}")


if sys.platform.startswith("linux"):
    import resource

    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    _libc.mincore.restype = ctypes.c_int
    _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _libc.madvise.restype = ctypes.c_int
    _libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.mlock.restype = ctypes.c_int
    _libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.munlock.restype = ctypes.c_int

    def mincore(address: int, length: int, vec_address: int) -> None:
        """Fill one byte per page at ``vec_address``; bit 0 set = page resident. ``address`` page-aligned."""
        if _libc.mincore(address, length, vec_address) != 0:
            _raise_errno("mincore")

    def madvise(address: int, length: int, advice: int) -> None:
        start, span = page_span(address, length)
        if _libc.madvise(start, span, advice) != 0:
            _raise_errno("madvise")

    def mlock(address: int, length: int) -> None:
        start, span = page_span(address, length)
        if _libc.mlock(start, span) != 0:
            _raise_errno("mlock")

    def munlock(address: int, length: int) -> None:
        start, span = page_span(address, length)
        if _libc.munlock(start, span) != 0:
            _raise_errno("munlock")

    def memlock_limit() -> int | None:
        """Bytes this process may mlock (None = unlimited or privileged)."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if soft == resource.RLIM_INFINITY:
            return None
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            return None  # root holds CAP_IPC_LOCK; the rlimit does not apply
        return int(soft)

    def read_faults(thread: bool = False) -> FaultCounts:
        """Cumulative faults of this process (or only the calling thread)."""
        who = resource.RUSAGE_THREAD if thread else resource.RUSAGE_SELF
        ru = resource.getrusage(who)
        return FaultCounts(int(ru.ru_majflt), int(ru.ru_minflt))

    def fadvise_dontneed(fd: int, offset: int = 0, length: int = 0) -> None:
        """Ask the kernel to drop clean cached pages of a file (a cold start without root)."""
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)

elif sys.platform == "win32":
    from ctypes import wintypes

    _k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _k32.GetCurrentProcess.restype = wintypes.HANDLE

    class _PROCESS_MEMORY_COUNTERS(ctypes.Structure):
        _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD),
                    ("PeakWorkingSetSize", ctypes.c_size_t), ("WorkingSetSize", ctypes.c_size_t),
                    ("QuotaPeakPagedPoolUsage", ctypes.c_size_t), ("QuotaPagedPoolUsage", ctypes.c_size_t),
                    ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t),
                    ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
                    ("PagefileUsage", ctypes.c_size_t), ("PeakPagefileUsage", ctypes.c_size_t)]

    class _WIN32_MEMORY_RANGE_ENTRY(ctypes.Structure):
        _fields_ = [("VirtualAddress", ctypes.c_void_p), ("NumberOfBytes", ctypes.c_size_t)]

    class _WS_EX_INFO(ctypes.Structure):  # PSAPI_WORKING_SET_EX_INFORMATION
        _fields_ = [("VirtualAddress", ctypes.c_void_p), ("VirtualAttributes", ctypes.c_size_t)]

    _QUOTA_LIMITS_HARDWS_MIN_DISABLE = 0x2
    _QUOTA_LIMITS_HARDWS_MAX_DISABLE = 0x8

    def _raise_last(name: str) -> None:
        err = ctypes.get_last_error()
        raise OsCallError(err, f"{name} failed: Windows error {err}")

    def read_faults(thread: bool = False) -> FaultCounts:
        """Process-wide page faults (Windows gives one count, soft and hard together)."""
        pmc = _PROCESS_MEMORY_COUNTERS()
        pmc.cb = ctypes.sizeof(pmc)
        if not _k32.K32GetProcessMemoryInfo(wintypes.HANDLE(_k32.GetCurrentProcess()), ctypes.byref(pmc), pmc.cb):
            _raise_last("GetProcessMemoryInfo")
        return FaultCounts(0, int(pmc.PageFaultCount))

    def working_set_pages(address: int, length: int) -> list[bool]:
        """Per page: is it in this process's working set (QueryWorkingSetEx 'Valid' bit)."""
        start, span = page_span(address, length)
        n = span // PAGE
        entries = (_WS_EX_INFO * n)()
        for i in range(n):
            entries[i].VirtualAddress = start + i * PAGE
        if not _k32.K32QueryWorkingSetEx(wintypes.HANDLE(_k32.GetCurrentProcess()), entries, ctypes.sizeof(entries)):
            _raise_last("QueryWorkingSetEx")
        return [bool(e.VirtualAttributes & 1) for e in entries]

    def prefetch_virtual_memory(ranges: list[tuple[int, int]]) -> None:
        arr = (_WIN32_MEMORY_RANGE_ENTRY * len(ranges))()
        for i, (a, n) in enumerate(ranges):
            arr[i].VirtualAddress, arr[i].NumberOfBytes = a, n
        proc = wintypes.HANDLE(_k32.GetCurrentProcess())
        if not _k32.PrefetchVirtualMemory(proc, ctypes.c_size_t(len(ranges)), arr, 0):
            _raise_last("PrefetchVirtualMemory")

    def virtual_lock(address: int, length: int) -> None:
        if not _k32.VirtualLock(ctypes.c_void_p(address), ctypes.c_size_t(length)):
            _raise_last("VirtualLock")

    def virtual_unlock(address: int, length: int) -> None:
        if not _k32.VirtualUnlock(ctypes.c_void_p(address), ctypes.c_size_t(length)):
            _raise_last("VirtualUnlock")

    def set_working_set_minimum(min_bytes: int) -> None:
        """Soft minimum working set: Windows trims below it only under real memory pressure."""
        proc = wintypes.HANDLE(_k32.GetCurrentProcess())
        cur_min, cur_max, flags = ctypes.c_size_t(), ctypes.c_size_t(), wintypes.DWORD()
        if not _k32.GetProcessWorkingSetSizeEx(proc, ctypes.byref(cur_min), ctypes.byref(cur_max),
                                               ctypes.byref(flags)):
            _raise_last("GetProcessWorkingSetSizeEx")
        new_max = max(cur_max.value, min_bytes + (64 << 20))
        soft = _QUOTA_LIMITS_HARDWS_MIN_DISABLE | _QUOTA_LIMITS_HARDWS_MAX_DISABLE
        if not _k32.SetProcessWorkingSetSizeEx(proc, ctypes.c_size_t(min_bytes), ctypes.c_size_t(new_max),
                                               wintypes.DWORD(soft)):
            _raise_last("SetProcessWorkingSetSizeEx")

else:

    def read_faults(thread: bool = False) -> FaultCounts:
        import resource as _res

        ru = _res.getrusage(_res.RUSAGE_SELF)
        return FaultCounts(int(ru.ru_majflt), int(ru.ru_minflt))
