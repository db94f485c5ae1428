"""The CUDA runtime's strided host-to-device copy, called through ctypes.

PyTorch exposes no ``cudaMemcpy2DAsync``, and a ``Tensor.copy_`` costs 10-25 us of host time
(dispatch, pinned-pointer queries) per call: direct prompt staging issued six of them per expert
and its launch time matched the copies' own (1.0-1.2 s of a 600-token prompt, MEASURED on the
H200 host). One 2-D copy moves one part of a run of experts into consecutive slots (source
rows contiguous, destination rows one slot apart), and the call releases the GIL.

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
from functools import lru_cache

log = logging.getLogger(__name__)
HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice


class CudaRuntime:
    def __init__(self, lib: ctypes.CDLL) -> None:
        fn = lib.cudaMemcpy2DAsync
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                       ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        self._copy2d = fn

    def copy_2d(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, stream: int) -> None:
        """``height`` rows of ``width`` bytes, host ``src`` (rows ``spitch`` apart) to device
        ``dst`` (rows ``dpitch`` apart), queued on ``stream``."""
        err = self._copy2d(dst, dpitch, src, spitch, width, height, HOST_TO_DEVICE, stream)
        if err != 0:
            raise RuntimeError(f"cudaMemcpy2DAsync failed with CUDA error {err} "
                               f"({height} x {width} bytes, pitches {spitch}/{dpitch})")


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
