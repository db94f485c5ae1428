"""The ctypes view of the CUDA runtime's 2-D copy (engine/gpu/cudart.py), without a GPU."""

from __future__ import annotations

import ctypes
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


class FakeGraph:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def raw_cuda_graph_exec(self) -> int:
        return self.handle


def fake_runtime(results: list[int], calls: list[tuple[object, ...]]) -> cudart.CudaRuntime:
    def launch(*args: object) -> int:
        calls.append(args)
        return results.pop(0) if results else 0

    return cudart.CudaRuntime(SimpleNamespace(cudaMemcpy2DAsync=lambda *a: 0, cudaGraphLaunch=launch))  # type: ignore[arg-type]


def test_graphs_launch_on_the_current_raw_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(cudart, "runtime", lambda: fake_runtime([0, 0, 2], calls))
    streams = iter([0, 11, 22, 33])  # the probe at construction, then one per launch
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: next(streams), raising=False)
    gl = cudart.GraphLauncher.for_graphs([FakeGraph(101), FakeGraph(202)], SimpleNamespace(index=0))
    assert gl is not None
    gl.launch(1)
    gl.launch(0)
    assert calls == [(202, 11), (101, 22)]
    with pytest.raises(RuntimeError, match="cudaGraphLaunch failed with CUDA error 2"):
        gl.launch(0)


def test_without_the_launch_symbol_or_the_exec_handle_graphs_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    no_launch = cudart.CudaRuntime(SimpleNamespace(cudaMemcpy2DAsync=lambda *a: 0))  # type: ignore[arg-type]
    assert not no_launch.can_launch_graphs
    monkeypatch.setattr(cudart, "runtime", lambda: no_launch)
    assert cudart.GraphLauncher.for_graphs([FakeGraph(1)], SimpleNamespace(index=0)) is None
    monkeypatch.setattr(cudart, "runtime", lambda: fake_runtime([], []))
    assert cudart.GraphLauncher.for_graphs([object()], SimpleNamespace(index=0)) is None  # PyTorch < 2.6
    assert cudart.GraphLauncher.for_graphs([FakeGraph(0)], SimpleNamespace(index=0)) is None
    assert cudart.GraphLauncher.for_graphs([FakeGraph(5)], SimpleNamespace(index=0)) is not None


def test_memset_2d_passes_its_shape_and_names_a_failure() -> None:
    calls: list[tuple[object, ...]] = []

    def fake_memset(*args: object) -> int:
        calls.append(args)
        return 0 if len(calls) == 1 else 1

    rt = cudart.CudaRuntime(SimpleNamespace(cudaMemcpy2DAsync=lambda *a: 0,  # type: ignore[arg-type]
                                            cudaMemset2DAsync=fake_memset))
    rt.memset_2d(dst=4096, pitch=90, value=0, width=16, height=2880, stream=7)
    assert calls[0] == (4096, 90, 0, 16, 2880, 7)
    with pytest.raises(RuntimeError, match=r"CUDA error 1 \(2880 x 16 bytes, pitch 90\)"):
        rt.memset_2d(dst=4096, pitch=90, value=0, width=16, height=2880, stream=7)
    bare = cudart.CudaRuntime(SimpleNamespace(cudaMemcpy2DAsync=lambda *a: 0))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no cudaMemset2DAsync"):
        bare.memset_2d(dst=0, pitch=1, value=0, width=1, height=1, stream=0)


def test_the_batch_copy_signature_follows_the_runtime_version() -> None:
    """cudaMemcpyBatchAsync came in CUDA 12.8 with a failIdx argument that 13.0 dropped (native/neural_lane.c calls
    either); before 12.8, or where the version is unknown, there is none to call."""
    assert [cudart.batch_abi(v) for v in (0, 12060, 12080, 12090, 13000, 13020)] == [0, 0, 12, 12, 13, 13]

    def lib(version: int, batch: bool) -> SimpleNamespace:
        def get_version(out: object) -> int:
            out._obj.value = version  # type: ignore[attr-defined]  # a ctypes byref
            return 0

        fns = {"cudaMemcpy2DAsync": lambda *a: 0, "cudaRuntimeGetVersion": get_version}
        if batch:
            fns["cudaMemcpyBatchAsync"] = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)
        return SimpleNamespace(**fns)

    rt = cudart.CudaRuntime(lib(13000, True))  # type: ignore[arg-type]
    addr, abi = rt.batch_copy
    assert rt.version == 13000 and abi == 13 and addr == ctypes.cast(rt._batch, ctypes.c_void_p).value
    assert cudart.CudaRuntime(lib(12080, True)).batch_copy[1] == 12  # type: ignore[arg-type]
    assert cudart.CudaRuntime(lib(12060, True)).batch_copy == (0, 0)  # type: ignore[arg-type]
    assert cudart.CudaRuntime(lib(13000, False)).batch_copy == (0, 0)  # type: ignore[arg-type]
