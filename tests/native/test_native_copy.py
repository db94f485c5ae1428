"""The non-temporal copy the staging ring packs experts with (engine/gpu/prefill/staging.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from native.kernel import NativeKernel


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 63, 64, 65, 1000, (2 << 20) + 7])
@pytest.mark.parametrize("dst_off", [0, 1, 9])
def test_copy_stream_is_a_copy_at_any_size_and_alignment(kernel: NativeKernel, n: int, dst_off: int) -> None:
    src = np.random.default_rng(n).integers(0, 256, n + 5, dtype=np.uint8)[5:]  # unaligned source
    buf = np.full(n + 32, 0xAB, dtype=np.uint8)
    dst = buf[dst_off : dst_off + n]
    kernel.copy_stream(dst, src)
    assert np.array_equal(dst, src)
    assert (buf[:dst_off] == 0xAB).all() and (buf[dst_off + n :] == 0xAB).all()  # nothing around it


def test_copy_stream_refuses_mismatched_or_read_only(kernel: NativeKernel) -> None:
    with pytest.raises(ValueError):
        kernel.copy_stream(np.zeros(8, np.uint8), np.zeros(9, np.uint8))
    ro = np.zeros(8, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        kernel.copy_stream(ro, np.zeros(8, np.uint8))


def test_copy_stream_runs_from_several_threads(kernel: NativeKernel) -> None:
    """The staging ring calls it from its packing threads at once (no team, no lock)."""
    src = np.random.default_rng(1).integers(0, 256, 8 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    chunks = [(s, min(s + (1 << 20), src.size)) for s in range(0, src.size, 1 << 20)]
    threads = [threading.Thread(target=kernel.copy_stream, args=(dst[a:b], src[a:b])) for a, b in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(dst, src)
