"""RAM budget arithmetic, doctor advice and the residency settings."""

from __future__ import annotations

import pytest

from engine.residency import GIB, MemoryInfo, RamBudget, default_headroom, ram_advice
from engine.settings import EngineSettings, SettingsError

STORE = int(55.1 * GIB)  # gpt-oss-120b packed store
PC64 = 64 * 10**9  # the design's 64 GB PC as psutil reports it (59.6 GiB)


def settings(**kw) -> EngineSettings:
    return EngineSettings(**kw)


def test_headroom_is_a_sixteenth_with_a_floor():
    assert default_headroom(PC64) == PC64 // 16
    assert default_headroom(16 * GIB) == 3 * GIB
    assert default_headroom(256 * GIB) == 16 * GIB


def test_auto_budget_is_what_is_free_after_headroom_and_engine():
    mem = MemoryInfo(PC64, 56 * GIB)
    b = RamBudget.compute(STORE, settings(), mem, engine_bytes=2 * GIB, memlock_limit=None)
    assert b.headroom_bytes == PC64 // 16
    assert b.room_bytes == 56 * GIB - PC64 // 16 - 2 * GIB
    assert b.budget_bytes == b.room_bytes < STORE  # the store only partly fits
    assert not b.fits_store
    assert 0.8 < b.fraction < 0.95
    assert b.over_budget(b.budget_bytes) == 0
    assert b.over_budget(b.budget_bytes + 123) == 123
    assert "auto" in b.describe()


def test_auto_budget_caps_at_the_store():
    b = RamBudget.compute(10 * GIB, None, MemoryInfo(128 * GIB, 100 * GIB), memlock_limit=None)
    assert b.budget_bytes == 10 * GIB and b.fits_store and b.fraction == 1.0


def test_explicit_budget_wins_even_past_free_ram():
    mem = MemoryInfo(PC64, 20 * GIB)
    b = RamBudget.compute(STORE, settings(ram_budget_gib=30.0), mem, memlock_limit=None)
    assert b.requested_bytes == 30 * GIB == b.budget_bytes
    b = RamBudget.compute(STORE, settings(ram_budget_gib=80.0), MemoryInfo(256 * GIB, 200 * GIB),
                          memlock_limit=None)
    assert b.budget_bytes == STORE  # never more than the store


def test_lock_is_capped_by_budget_free_ram_and_rlimit():
    mem = MemoryInfo(PC64, 50 * GIB)
    b = RamBudget.compute(STORE, settings(mlock_gib=8.0), mem, memlock_limit=None)
    assert b.lock_bytes == 8 * GIB and not b.lock_limited
    b = RamBudget.compute(STORE, settings(mlock_gib=8.0), mem, memlock_limit=64 << 20)
    assert b.lock_bytes == 64 << 20 and b.lock_limited
    b = RamBudget.compute(STORE, settings(ram_budget_gib=4.0, mlock_gib=4.0), MemoryInfo(PC64, 5 * GIB),
                          headroom_bytes=4 * GIB, memlock_limit=None)
    assert b.lock_bytes == 1 * GIB  # only 1 GiB free after headroom: never lock past it
    b = RamBudget.compute(STORE, settings(), mem, memlock_limit=None)
    assert b.lock_bytes == 0


def test_advice_is_empty_when_everything_fits():
    assert ram_advice(10 * GIB, settings(), MemoryInfo(64 * GIB, 50 * GIB), memlock_limit=None) == []


def test_advice_when_the_machine_is_too_small():
    out = ram_advice(STORE, settings(), MemoryInfo(32 * GIB, 30 * GIB), memlock_limit=None)
    assert len(out) == 1
    assert "this PC has 32.0 GiB" in out[0] and "pool_gib" in out[0]


def test_advice_when_other_programs_hold_the_ram():
    cpu_side = STORE - 6 * GIB  # a 6 GiB VRAM pool's static experts need no RAM
    assert ram_advice(cpu_side, settings(), MemoryInfo(PC64, 55 * GIB), engine_bytes=GIB, memlock_limit=None) == []
    out = ram_advice(cpu_side, settings(), MemoryInfo(PC64, 40 * GIB), engine_bytes=GIB, memlock_limit=None)
    assert len(out) == 1
    assert "Close other programs" in out[0] and "ram_budget_gib to" in out[0]
    assert "for the engine" in out[0]


def test_advice_on_budget_settings():
    mem = MemoryInfo(128 * GIB, 100 * GIB)
    too_big = ram_advice(STORE, settings(ram_budget_gib=99.0), mem, memlock_limit=None)
    assert any("ram_budget_gib=99 is more than" in s for s in too_big)
    too_small = ram_advice(STORE, settings(ram_budget_gib=20.0), mem, memlock_limit=None)
    assert any("keeps only 36%" in s and "set 0 (auto)" in s for s in too_small)


def test_advice_on_mlock_settings():
    mem = MemoryInfo(128 * GIB, 100 * GIB)
    limited = ram_advice(STORE, settings(mlock_gib=8.0), mem, memlock_limit=8 << 20)
    assert len(limited) == 1 and "only 8.0 MiB (RLIMIT_MEMLOCK)" in limited[0] and "ulimit -l" in limited[0]
    assert ram_advice(STORE, settings(mlock_gib=8.0), mem, memlock_limit=None) == []
    starved = ram_advice(STORE, settings(mlock_gib=60.0), MemoryInfo(PC64, 50 * GIB), memlock_limit=None)
    assert any("locked pages cannot be reclaimed" in s for s in starved)


def test_memory_info_now_reads_psutil():
    m = MemoryInfo.now()
    assert 0 < m.available <= m.total


@pytest.mark.parametrize("kw, match", [
    ({"ram_budget_gib": -1.0}, "ram_budget_gib"),
    ({"mlock_gib": -0.5}, "mlock_gib"),
    ({"ram_budget_gib": 8.0, "mlock_gib": 9.0}, "must not exceed the RAM budget"),
    ({"warmup": 1}, "warmup"),
])
def test_settings_validation(kw, match):
    with pytest.raises(SettingsError, match=match):
        EngineSettings(**kw)


def test_settings_defaults_and_round_trip():
    s = EngineSettings()
    assert (s.ram_budget_gib, s.warmup, s.mlock_gib) == (0.0, True, 0.0)
    s2 = EngineSettings.from_dict({**s.to_dict(), "ram_budget_gib": 40.0, "mlock_gib": 4.0, "warmup": False})
    assert (s2.ram_budget_gib, s2.warmup, s2.mlock_gib) == (40.0, False, 4.0)
    EngineSettings(mlock_gib=4.0)  # with an auto budget any lock size is accepted here; the budget caps it


MEMINFO = """MemTotal:       131072000 kB
MemFree:         1000000 kB
MemAvailable:   120000000 kB
Buffers:           12 kB
"""


def test_meminfo_parse_matches_psutil_fields():
    m = MemoryInfo.from_proc_meminfo(MEMINFO)
    assert m == MemoryInfo(131072000 * 1024, 120000000 * 1024)
    assert MemoryInfo.from_proc_meminfo("MemTotal: 5 kB\n") is None  # no MemAvailable: unknown


def test_memory_info_without_psutil_reads_proc_meminfo(monkeypatch):
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/meminfo is Linux")
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil -> ImportError (a bare device machine)
    m = MemoryInfo.now()
    assert 0 < m.available <= m.total
