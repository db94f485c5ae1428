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


@pytest.mark.parametrize("rel", [0, 1, 16, 64, 1000, 1022, 1023, 1024, 2048, 4095])
@pytest.mark.parametrize("n", [63, 64, 4096 + 77, (1 << 20) + 13])
def test_copy_stream_either_direction(kernel: NativeKernel, rel: int, n: int) -> None:
    """dst just above src modulo 4 KiB takes the backward loop (4K aliasing), other offsets the forward one."""
    src_buf = np.random.default_rng(rel + n).integers(0, 256, n + 8192, dtype=np.uint8)
    dst_buf = np.full(n + 8192, 0xCD, dtype=np.uint8)
    s0 = (-src_buf.ctypes.data) % 4096 + 7  # an odd source address
    src = src_buf[s0 : s0 + n]
    d0 = (src.ctypes.data + rel - dst_buf.ctypes.data) % 4096
    dst = dst_buf[d0 : d0 + n]
    assert (dst.ctypes.data - src.ctypes.data) % 4096 == rel
    kernel.copy_stream(dst, src)
    assert np.array_equal(dst, src)
    assert (dst_buf[:d0] == 0xCD).all() and (dst_buf[d0 + n :] == 0xCD).all()
