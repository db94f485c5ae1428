"""VRAM report/release: a no-op without CUDA; the before/after arithmetic against a fake allocator.

The real release runs only on the GPU machine (bench/residency/residency_bench.py records it)."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from engine.residency import release_unused_vram, vram_report

GIB = 1 << 30


def test_no_cuda_is_a_cheap_no_op():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = vram_report()
    assert not r.available and r.reserved_bytes == 0
    rel = release_unused_vram()
    assert rel.released_bytes == 0 and rel.seconds == 0.0
    assert "nothing to release" in rel.describe()


class FakeAllocator:
    """Mimics torch.cuda's caching allocator numbers: empty_cache drops only the unused cache."""

    def __init__(self, allocated: int, reserved: int, total: int = 24 * GIB) -> None:
        self.allocated, self.reserved, self.total = allocated, reserved, total
        self.log: list[str] = []
        self.current: object = 0

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def memory_allocated(self, dev) -> int:
        return self.allocated

    def memory_reserved(self, dev) -> int:
        return self.reserved

    def mem_get_info(self, dev) -> tuple[int, int]:
        return self.total - self.reserved, self.total

    def synchronize(self, dev) -> None:
        self.log.append(f"sync {dev}")

    def empty_cache(self) -> None:
        self.log.append(f"empty_cache on {self.current}")
        self.reserved = self.allocated

    @contextmanager
    def device(self, dev):
        prev, self.current = self.current, dev
        try:
            yield
        finally:
            self.current = prev


def test_release_reports_reserved_before_and_after():
    fake = FakeAllocator(allocated=int(9.7 * GIB), reserved=int(10.83 * GIB))
    torch_mod = SimpleNamespace(cuda=fake)
    before = vram_report(torch_mod=torch_mod)
    assert before.available and before.cached_bytes == int(10.83 * GIB) - int(9.7 * GIB)
    rel = release_unused_vram(device=1, torch_mod=torch_mod)
    assert fake.log == ["sync 1", "empty_cache on 1"]  # synchronized first, on the asked device
    assert rel.before.reserved_bytes == int(10.83 * GIB)
    assert rel.after.reserved_bytes == rel.after.allocated_bytes == int(9.7 * GIB)
    assert rel.released_bytes == int(10.83 * GIB) - int(9.7 * GIB)
    assert "10.830 -> 9.700 GiB" in rel.describe()
    assert rel.after.free_bytes == 24 * GIB - int(9.7 * GIB)


def test_release_without_sync():
    fake = FakeAllocator(allocated=GIB, reserved=2 * GIB)
    release_unused_vram(synchronize=False, torch_mod=SimpleNamespace(cuda=fake))
    assert fake.log == ["empty_cache on 0"]


def test_peak_reserved_window():
    from engine.residency.vram import peak_reserved, reset_peak

    class Peaks(FakeAllocator):
        peak = 0

        def reset_peak_memory_stats(self, dev) -> None:
            self.log.append(f"reset {dev}")
            self.peak = self.reserved

        def max_memory_reserved(self, dev) -> int:
            return max(self.peak, self.reserved)

    fake = Peaks(allocated=GIB, reserved=2 * GIB)
    mod = SimpleNamespace(cuda=fake)
    reset_peak(torch_mod=mod)
    fake.reserved = 5 * GIB  # a prompt's workspace
    fake.peak = 5 * GIB
    release_unused_vram(torch_mod=mod)
    assert peak_reserved(torch_mod=mod) == 5 * GIB and fake.reserved == GIB
    assert fake.log[0] == "reset 0"
    if not torch.cuda.is_available():
        reset_peak()  # no CUDA: no-ops
        assert peak_reserved() == 0
