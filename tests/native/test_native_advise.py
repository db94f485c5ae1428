"""Page hints for memory-mapped stores (native neural_advise): applied or cleanly refused, never a
change to the bytes, and bad arguments named."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from native.kernel import KernelError, NativeKernel


@pytest.mark.parametrize("advice", ["huge", "populate", "willneed"])
def test_advise_a_file_mapping_keeps_its_bytes(kernel: NativeKernel, tmp_path: Path, advice: str) -> None:
    data = np.random.default_rng(3).integers(0, 256, (4 << 20) + 123, dtype=np.uint8)
    path = tmp_path / "store.bin"
    path.write_bytes(data.tobytes())
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, np.uint8)
        applied = kernel.advise(view[4097:], view.size - 4097, advice)  # unaligned start: rounded out to pages
        if sys.platform.startswith("linux") and advice != "huge":
            assert applied  # MADV_WILLNEED always, MADV_POPULATE_READ since 5.14
        if sys.platform == "win32" and advice == "huge":
            assert not applied
        assert np.array_equal(view, data)
        del view


def test_advise_rejects_unknown_advice_and_unmapped_memory(kernel: NativeKernel) -> None:
    with pytest.raises(ValueError, match="advice"):
        kernel.advise(np.zeros(16, np.uint8), 16, "sequential")
    if sys.platform.startswith("linux"):
        anon = mmap.mmap(-1, 1 << 16)
        base = np.frombuffer(anon, np.uint8).ctypes.data
        anon.close()  # the range is unmapped now
        with pytest.raises(KernelError, match="advise"):
            kernel.advise(kernel.ffi.cast("void *", base), 1 << 16, "populate")
