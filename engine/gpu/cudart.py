"""The CUDA runtime's strided host-to-device copy and graph launch, called through ctypes.

PyTorch exposes no ``cudaMemcpy2DAsync``, and a ``Tensor.copy_`` costs 10-25 us of host time
(dispatch, pinned-pointer queries) per call: direct prompt staging issued six of them per expert
and its launch time matched the copies' own (1.0-1.2 s of a 600-token prompt, MEASURED on the
H200 host). One 2-D copy moves one part of a run of experts into consecutive slots (source
rows contiguous, destination rows one slot apart), and the call releases the GIL.

``CUDAGraph.replay()`` refills the default generator's seed and offset tensors before its
``cudaGraphLaunch`` (for graphs that use PyTorch's RNG, which the engine's graphs never do: their
kernels are Triton's and sampling hashes its own seed from the control block). ``graph_launch`` is
the bare ``cudaGraphLaunch``. MEASURED on the H200 host (bench/results/h200-session12): 1-4 us less
host time per layer launch (the decode step's launch phase 10-11 against 11-15 us per layer at 18
layers, A B B A in one call), bit-identical logits (bench/gpu/launch_check.py); the launch itself
stays about 10-13 us there.

The library is the one PyTorch already loaded (same runtime, same context): found in the
process's mappings on Linux, beside torch's own DLLs on Windows. Where it cannot be found the
callers fall back to tensor copies (``runtime()`` returns None).
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
from collections.abc import Callable, Sequence
from functools import cached_property, lru_cache
from typing import Any

log = logging.getLogger(__name__)
HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice


class CudaRuntime:
    def __init__(self, lib: ctypes.CDLL) -> None:
        fn = lib.cudaMemcpy2DAsync
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                       ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        self._copy2d = fn
        launch = getattr(lib, "cudaGraphLaunch", None)
        if launch is not None:
            launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            launch.restype = ctypes.c_int
        self._launch = launch
        memset = getattr(lib, "cudaMemset2DAsync", None)
        if memset is not None:
            memset.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t,
                               ctypes.c_void_p]
            memset.restype = ctypes.c_int
        self._memset2d = memset
        devptr = getattr(lib, "cudaHostGetDevicePointer", None)
        if devptr is not None:
            devptr.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint]
            devptr.restype = ctypes.c_int
        self._devptr = devptr

        # the decode layer's native miss path waits for the lane (cudaStreamQuery) and times some uses (events)
        self._sync = [getattr(lib, name, None) for name in ("cudaStreamQuery", "cudaEventRecord")]
        # a batch of 1-D copies in one call (CUDA 12.8+; 13.0 dropped its failIdx argument, so the version decides
        # the signature native/neural_lane.c calls it with)
        self._batch = getattr(lib, "cudaMemcpyBatchAsync", None)
        version = getattr(lib, "cudaRuntimeGetVersion", None)
        self.version = 0
        if version is not None:
            v = ctypes.c_int(0)
            if version(ctypes.byref(v)) == 0:
                self.version = int(v.value)

    @property
    def can_launch_graphs(self) -> bool:
        return self._launch is not None

    @cached_property
    def addresses(self) -> tuple[int, int]:
        """(cudaMemcpy2DAsync, cudaGraphLaunch or 0): the functions' addresses, for a native caller that issues a
        layer's copies and launch in one call (native/neural_lane.c); read on first use, once, not per layer."""
        copy = ctypes.cast(self._copy2d, ctypes.c_void_p).value or 0
        launch = ctypes.cast(self._launch, ctypes.c_void_p).value or 0 if self._launch is not None else 0
        return int(copy), int(launch)

    @cached_property
    def sync_addresses(self) -> tuple[int, int]:
        """(cudaStreamQuery, cudaEventRecord), or (0, 0) where the library lacks either (native/neural_lane.c's
        neural_lane_layer calls them)."""
        got = [ctypes.cast(f, ctypes.c_void_p).value or 0 if f is not None else 0 for f in self._sync]
        return (int(got[0]), int(got[1])) if all(got) else (0, 0)

    @cached_property
    def batch_copy(self) -> tuple[int, int]:
        """(cudaMemcpyBatchAsync's address, its signature: 12 for CUDA 12.8-12.9, 13 from 13.0), or (0, 0) where the
        runtime has none (before 12.8) or its version is unknown."""
        abi = batch_abi(self.version)
        if self._batch is None or not abi:
            return 0, 0
        return int(ctypes.cast(self._batch, ctypes.c_void_p).value or 0), abi

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        """Queue an instantiated graph (``cudaGraphExec_t``) on ``stream``."""
        assert self._launch is not None
        err = self._launch(graph_exec, stream)
        if err != 0:
            raise RuntimeError(f"cudaGraphLaunch failed with CUDA error {err}")

    def copy_2d(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, stream: int) -> None:
        """``height`` rows of ``width`` bytes, host ``src`` (rows ``spitch`` apart) to device
        ``dst`` (rows ``dpitch`` apart), queued on ``stream``."""
        err = self._copy2d(dst, dpitch, src, spitch, width, height, HOST_TO_DEVICE, stream)
        if err != 0:
            raise RuntimeError(f"cudaMemcpy2DAsync failed with CUDA error {err} "
                               f"({height} x {width} bytes, pitches {spitch}/{dpitch})")

    def device_pointer(self, host: int) -> int:
        """The device address of registered (mapped) host memory at ``host`` (the same address on UVA systems)."""
        if self._devptr is None:
            return host
        out = ctypes.c_void_p()
        err = self._devptr(ctypes.byref(out), host, 0)
        if err != 0:
            raise RuntimeError(f"cudaHostGetDevicePointer failed with CUDA error {err}")
        return int(out.value or 0)

    def memset_2d(self, dst: int, pitch: int, value: int, width: int, height: int, stream: int) -> None:
        """``height`` rows of ``width`` device bytes at ``dst`` (rows ``pitch`` apart) set to ``value``, queued on
        ``stream``."""
        if self._memset2d is None:
            raise RuntimeError("this CUDA runtime has no cudaMemset2DAsync")
        err = self._memset2d(dst, pitch, value, width, height, stream)
        if err != 0:
            raise RuntimeError(f"cudaMemset2DAsync failed with CUDA error {err} ({height} x {width} bytes, "
                               f"pitch {pitch})")


def batch_abi(version: int) -> int:
    """cudaMemcpyBatchAsync's signature in a runtime of ``version`` (cudaRuntimeGetVersion: 1000 x major + 10 x
    minor): 12 with failIdx (12.8, 12.9), 13 without it (13.0 on), 0 where there is none."""
    return 13 if version >= 13000 else 12 if version >= 12080 else 0


def _candidates() -> list[str]:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/maps") as f:
                paths = {line.split()[-1] for line in f if "libcudart.so" in line}
        except OSError:
            return []
        return sorted(paths)
    if sys.platform == "win32":
        import torch

        return sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "cudart64_*.dll")))
    return []


@lru_cache(maxsize=1)
def runtime() -> CudaRuntime | None:
    """The loaded CUDA runtime, or None (not loaded, statically linked, or no such symbol)."""
    for path in _candidates():
        try:
            return CudaRuntime(ctypes.CDLL(path))
        except (OSError, AttributeError) as exc:
            log.info("CUDA runtime %s unusable for 2-D copies: %s", path, exc)
    return None


@lru_cache(maxsize=1)
def wait_value_address() -> int:
    """The driver's cuStreamWaitValue32 (its _v2 where the driver has it), or 0: a stream waits in the GPU's
    front-end until a 32-bit word in (pinned, mapped) memory holds a value, with no kernel polling it. The driver
    library is the one the runtime already loaded."""
    names = ["libcuda.so.1"] if sys.platform.startswith("linux") else ["nvcuda.dll"] if sys.platform == "win32" else []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        fn = getattr(lib, "cuStreamWaitValue32_v2", None) or getattr(lib, "cuStreamWaitValue32", None)
        if fn is not None:
            return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)
    return 0


class GraphLauncher:
    """The layer and tail graphs launched by ``cudaGraphLaunch`` on the thread's current stream,
    without ``CUDAGraph.replay()``'s generator prologue (see the module docstring). The graphs
    must stay alive as long as this (the engine's core holds both)."""

    def __init__(self, rt: CudaRuntime, execs: list[int], current_stream: Callable[[], int]) -> None:
        self._launch = rt.graph_launch
        self._execs = execs
        self._stream = current_stream

    @classmethod
    def for_graphs(cls, graphs: Sequence[Any], device: Any) -> GraphLauncher | None:
        """None where the runtime, ``raw_cuda_graph_exec`` (PyTorch >= 2.6) or the raw-stream query
        is missing: the caller keeps ``replay()``."""
        rt = runtime()
        if rt is None or not rt.can_launch_graphs:
            return None
        try:
            import torch

            execs = [int(g.raw_cuda_graph_exec()) for g in graphs]
            raw_stream = torch._C._cuda_getCurrentRawStream
            index = int(device.index if device.index is not None else torch.cuda.current_device())
            int(raw_stream(index))
        except (AttributeError, RuntimeError, TypeError) as exc:
            log.info("graphs replay through PyTorch (%s)", exc)
            return None
        if not all(execs):
            return None
        return cls(rt, execs, lambda: int(raw_stream(index)))

    def launch(self, i: int) -> None:
        self._launch(self._execs[i], self._stream())
