"""lock_hot (mlock) including a refused lock, unlock, and the release policy."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import PAGE, RECORD, linux_only

from engine.residency import Mapping, ReleasePolicy, StoreResidency, lock_hot, os_memory, unlock
from engine.residency.os_memory import OsCallError
from engine.residency.warmer import touch_pages

pytestmark = linux_only
ROOT = Path(__file__).resolve().parents[3]


def locked_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmLck:"):
            return int(line.split()[1])
    raise AssertionError("no VmLck line")


def can_lock(nbytes: int) -> bool:
    lim = os_memory.memlock_limit()
    return lim is None or lim >= nbytes + locked_kib() * 1024


def test_lock_and_unlock_change_locked_memory(store):
    m, regions = store
    if not can_lock(3 * RECORD + 4 * PAGE):
        pytest.skip("this user cannot mlock a few pages")
    before = locked_kib()
    res = lock_hot(m, regions, budget_bytes=3 * RECORD)
    assert res.method == "mlock" and not res.refused
    assert res.locked_bytes == 3 * RECORD and len(res.regions) == 3
    assert res.keys == {(0, 0), (0, 1), (0, 2)}
    assert locked_kib() - before >= 3 * RECORD // 1024
    assert StoreResidency(m, regions).refresh([(0, 0), (0, 1), (0, 2)]) == 3 * RECORD  # mlock faults them in
    assert unlock(m, res.regions) == 3 * RECORD
    assert locked_kib() == before


def test_zero_budget_locks_nothing(store):
    m, regions = store
    res = lock_hot(m, regions, 0)
    assert (res.method, res.locked_bytes, res.refused) == ("none", 0, False)
    assert lock_hot(m, regions, RECORD - 1).locked_bytes == 0  # the first record does not fit


def test_refused_mlock_reports_and_keeps_what_was_locked(store, monkeypatch):
    m, regions = store
    calls = []

    def limited(addr: int, n: int) -> None:
        calls.append(n)
        if len(calls) > 2:
            raise OsCallError(errno.ENOMEM, "mlock failed: Cannot allocate memory")

    monkeypatch.setattr(os_memory, "mlock", limited)
    res = lock_hot(m, regions, 10 * RECORD)
    assert res.refused and res.locked_bytes == 2 * RECORD and len(res.regions) == 2
    assert "mlock refused (ENOMEM)" in res.message and "RLIMIT_MEMLOCK" in res.message
    assert "mlock_gib=0" in res.message and "continuing" in res.message


def test_eperm_refusal(store, monkeypatch):
    m, regions = store

    def denied(addr: int, n: int) -> None:
        raise OsCallError(errno.EPERM, "mlock failed: Operation not permitted")

    monkeypatch.setattr(os_memory, "mlock", denied)
    res = lock_hot(m, regions, 10 * RECORD)
    assert res.refused and res.locked_bytes == 0 and "EPERM" in res.message


def test_other_mlock_errors_also_fall_back(store, monkeypatch):
    m, regions = store

    def weird(addr: int, n: int) -> None:
        raise OsCallError(errno.EINVAL, "mlock failed: Invalid argument")

    monkeypatch.setattr(os_memory, "mlock", weird)
    res = lock_hot(m, regions, 10 * RECORD)
    assert res.refused and res.message.startswith("mlock failed (EINVAL")


REFUSED_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys
    sys.path.insert(0, sys.argv[1])
    from engine.residency import Mapping, Region, lock_hot, os_memory
    PAGE = os_memory.PAGE
    m = Mapping.open(sys.argv[2])
    limit = 16 * PAGE
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)  # drops CAP_IPC_LOCK, so the rlimit applies
    regions = [Region(0, e, e * 6 * PAGE, 6 * PAGE) for e in range(8)]
    r = lock_hot(m, regions, 8 * 6 * PAGE)
    print(json.dumps({"refused": r.refused, "locked": r.locked_bytes, "n": len(r.regions),
                      "message": r.message, "limit": os_memory.memlock_limit()}))
""")


def test_tiny_rlimit_memlock_in_a_subprocess(tmp_path):
    path = tmp_path / "lockme.bin"
    path.write_bytes(b"\7" * (48 * PAGE))
    os.chmod(tmp_path, 0o755)
    proc = subprocess.run([sys.executable, "-c", REFUSED_SCRIPT, str(ROOT), str(path)],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and "PermissionError" in proc.stderr:
        pytest.skip(f"cannot drop privileges here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["limit"] == 16 * PAGE
    assert out["refused"] is True
    assert out["n"] == 2 and out["locked"] == 12 * PAGE  # 2 records of 6 pages fit under 16 pages
    assert "RLIMIT_MEMLOCK is 64 KiB" in out["message"] and "ulimit -l" in out["message"]


class MadviseSpy:
    def __init__(self, fail_cold: bool = False) -> None:
        self.calls: list[int] = []
        self.fail_cold = fail_cold
        self.real = os_memory.madvise

    def __call__(self, addr: int, n: int, advice: int) -> None:
        self.calls.append(advice)
        if self.fail_cold and advice == os_memory.MADV_COLD:
            raise OsCallError(errno.EINVAL, "madvise failed: Invalid argument")
        self.real(addr, n, advice)


def warm_all(m: Mapping, regions) -> StoreResidency:
    touch_pages(m.view, m.address, 0, m.size)
    sr = StoreResidency(m, regions)
    sr.refresh()
    return sr


def test_release_keeps_experts_while_within_budget(store, monkeypatch):
    m, regions = store
    sr = warm_all(m, regions)
    spy = MadviseSpy()
    monkeypatch.setattr(os_memory, "madvise", spy)
    policy = ReleasePolicy(m, sr, budget=sr.store_bytes)
    policy.mark_released([(0, 0), (1, 1)])
    res = policy.enforce()
    assert res.released == [] and res.over_bytes == 0 and spy.calls == []
    assert policy.candidates == [(0, 0), (1, 1)]


def test_release_past_budget_oldest_first_and_unlocks(store, monkeypatch):
    m, regions = store
    if not can_lock(RECORD + 4 * PAGE):
        pytest.skip("this user cannot mlock a few pages")
    sr = warm_all(m, regions)
    lock = lock_hot(m, [sr.regions((1, 1))[0]], RECORD)
    assert lock.locked_bytes == RECORD
    before = locked_kib()
    spy = MadviseSpy()
    monkeypatch.setattr(os_memory, "madvise", spy)
    policy = ReleasePolicy(m, sr, budget=sr.store_bytes - RECORD - 10, locked=lock.keys)
    policy.mark_released([(1, 1), (0, 0), (2, 2)])
    policy.mark_needed([(0, 0)])  # evicted from VRAM again: the CPU needs it, keep it
    res = policy.enforce()
    assert res.over_bytes == RECORD + 10
    assert res.released == [(1, 1), (2, 2)]  # oldest first, until the excess is covered
    assert res.bytes == 2 * RECORD
    assert spy.calls == [os_memory.MADV_COLD, os_memory.MADV_COLD]
    assert locked_kib() < before and (1, 1) not in policy.locked
    assert policy.candidates == []


def test_release_falls_back_to_dontneed_without_madv_cold(store, monkeypatch):
    m, regions = store
    sr = warm_all(m, regions)
    spy = MadviseSpy(fail_cold=True)
    monkeypatch.setattr(os_memory, "madvise", spy)
    policy = ReleasePolicy(m, sr, budget=0)
    policy.mark_released([(2, 0)])
    assert policy.enforce().released == [(2, 0)]
    assert spy.calls == [os_memory.MADV_COLD, os_memory.MADV_DONTNEED]
