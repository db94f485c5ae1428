"""cudaMemcpyBatchAsync as a ctypes callback with the C signature of CUDA 12.8-12.9 (abi 12: a failIdx before the
stream) or 13 (abi 13), copying host bytes, for native/neural_lane.c to call without a GPU. It checks what the
runtime would reject or what would change the copies' meaning: one attribute entry for all copies from index 0,
source access in stream order (cudaMemcpySrcAccessOrderStream = 1), no location hints or flags."""

from __future__ import annotations

import ctypes

_ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.c_size_t]
BATCH12 = ctypes.CFUNCTYPE(ctypes.c_int, *_ARGS, ctypes.c_void_p, ctypes.c_void_p)
BATCH13 = ctypes.CFUNCTYPE(ctypes.c_int, *_ARGS, ctypes.c_void_p)
INVALID_VALUE = 1  # cudaErrorInvalidValue


class BatchCopy:
    def __init__(self, abi: int, fail: int = 0, short: bool = False) -> None:
        """``fail``: the CUDA error every call returns after copying (0: none); ``short``: each copy one byte short
        (a runtime that lands other bytes)."""
        self.abi, self.fail = abi, fail
        self.calls: list[tuple[int, int]] = []  # (copies, stream)

        def batch(dsts: int, srcs: int, sizes: int, count: int, attrs: int, idxs: int, nattrs: int,
                  *rest: int) -> int:
            stream = rest[-1]
            if abi == 12 and not rest[0]:  # the failIdx pointer
                return INVALID_VALUE
            attr = list((ctypes.c_int * 6).from_address(attrs))
            if nattrs != 1 or (ctypes.c_size_t * 1).from_address(idxs)[0] != 0 or attr != [1, 0, 0, 0, 0, 0]:
                return INVALID_VALUE
            d = (ctypes.c_void_p * count).from_address(dsts)
            s = (ctypes.c_void_p * count).from_address(srcs)
            n = (ctypes.c_size_t * count).from_address(sizes)
            for i in range(count):
                ctypes.memmove(d[i], s[i], n[i] - short)
            self.calls.append((count, int(stream or 0)))
            return self.fail

        self._cb = (BATCH12 if abi == 12 else BATCH13)(batch)

    @property
    def address(self) -> int:
        return ctypes.cast(self._cb, ctypes.c_void_p).value or 0
