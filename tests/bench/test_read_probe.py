"""bench.kernel.read_probe: every ISA's read loop timed, the kernel's own ISA restored even when a read fails."""

from __future__ import annotations

import numpy as np
import pytest

from bench.kernel.read_probe import best, probe_each_isa


class FakeKernel:
    """Records which ISA each read ran under; one ISA can be made to fail."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.isa, self.fail_on = "avx2", fail_on
        self.reads: list[tuple[str, int]] = []

    def available_isas(self) -> list[str]:
        return ["scalar", "avx2", "avx512"]

    def set_isa(self, name: str) -> None:
        self.isa = name

    def probe_read(self, buf: object, n: int) -> int:
        if self.isa == self.fail_on:
            raise RuntimeError("read failed")
        self.reads.append((self.isa, n))
        return 0


def test_every_loop_read_and_own_isa_restored() -> None:
    k = FakeKernel()
    rates = probe_each_isa(k, [(b"x" * 64, 64), (b"y" * 32, 32)], reps=2)
    assert set(rates) == {"scalar", "avx2", "avx512"} and all(r > 0 for r in rates.values())
    assert k.isa == "avx2"
    assert [n for isa, n in k.reads if isa == "avx512"] == [64, 64, 32, 64, 32]  # warm, then reps x reads
    assert best({"a": 1.0, "b": 3.0, "c": 2.0}) == ("b", 3.0)


def test_own_isa_restored_on_error() -> None:
    k = FakeKernel(fail_on="avx512")
    with pytest.raises(RuntimeError):
        probe_each_isa(k, [(b"x", 1)])
    assert k.isa == "avx2"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        probe_each_isa(FakeKernel(), [])
    with pytest.raises(ValueError):
        probe_each_isa(FakeKernel(), [(b"x", 1)], reps=0)


def test_native_kernel_reads_with_each_loop() -> None:
    pytest.importorskip("native._neural_native")
    from native.kernel import load_kernel

    k = load_kernel()
    own = k.isa
    buf = np.ones(1 << 20, np.uint8)
    rates = probe_each_isa(k, [(buf, buf.nbytes)])
    assert set(rates) == set(k.available_isas()) and k.isa == own
