"""The ctypes view of the CUDA runtime's 2-D copy (engine/gpu/cudart.py), without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.gpu import cudart


def test_the_runtime_is_found_or_absent_without_errors() -> None:
    rt = cudart.runtime()  # a CPU-only torch maps no libcudart: None; with CUDA: the loaded one
    assert rt is None or isinstance(rt, cudart.CudaRuntime)


def test_a_failed_copy_names_the_error_and_the_shape() -> None:
    calls = []

    def fake_copy(*args: object) -> int:
        calls.append(args)
        return 0 if len(calls) == 1 else 1  # the second call fails with cudaErrorInvalidValue

    rt = cudart.CudaRuntime(SimpleNamespace(cudaMemcpy2DAsync=fake_copy))  # type: ignore[arg-type]
    rt.copy_2d(dst=4096, dpitch=1000, src=8192, spitch=600, width=600, height=3, stream=7)
    assert calls[0] == (4096, 1000, 8192, 600, 600, 3, cudart.HOST_TO_DEVICE, 7)
    with pytest.raises(RuntimeError, match=r"CUDA error 1 \(3 x 600 bytes, pitches 600/1000\)"):
        rt.copy_2d(dst=4096, dpitch=1000, src=8192, spitch=600, width=600, height=3, stream=7)
