"""The CPU side of hybrid decode: the experts of one layer that are not resident in VRAM.

``NativeMisses`` calls the native AVX-512/AVX2 kernel (through the adapter store/native_experts.py)
on the expert bytes where they sit (the checkpoint's memory-mapped tensors, raw MXFP4), and — for
admission candidates — lets it copy the bytes it reads into a pinned capture buffer laid out as a
VRAM slot (copy-on-compute). ``TorchMisses`` is the PyTorch fallback with the same contract
(used when the extension is missing, and in CI); it fills capture buffers with a plain copy.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import torch

from native.kernel import Span

from ..checkpoint import Checkpoint
from ..expert_cache import DequantizedExperts
from ..reference import expert_forward
from .layout import ExpertLayout

log = logging.getLogger(__name__)


class MissExperts(Protocol):
    name: str

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray], heads: dict[int, int] | None = None) -> None:
        """out[H] = sum_k weights[k] * expert_k(x) (zeros if no experts); for each expert in
        ``captures`` also write its slot-layout bytes into that (pinned, uint8) buffer. ``heads``: experts
        computed over their first n gate_up units only (the copy lane computes the rest; never captured)."""
        ...

    def compute_beside(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                       captures: dict[int, np.ndarray], heads: dict[int, int] | None = None
                       ) -> contextlib.AbstractContextManager[Span]:
        """:meth:`compute` while the with-block does other work (the copy lane's queueing); ``out`` holds the result
        when the block ends, and the Span given the seconds the experts took (not the block). The block must not
        compute experts itself."""
        ...

    def prefault(self) -> float:
        """Touch every expert page once (so decode never takes first-touch page faults); seconds."""
        ...


class NativeMisses:
    """The native adapter (store/native_experts.py) with capture into the VRAM slot layout."""

    def __init__(self, ck: Checkpoint, layout: ExpertLayout, threads: int) -> None:
        from ..store.native_experts import NativeExperts

        # bf16 inputs, as the GPU experts use: the kernel may run its vdpbf16ps loop
        self.experts = NativeExperts(ck.config, ck, threads=threads, bf16_inputs=True,
                                     capture_offsets=layout.native_offsets())
        if self.experts.record_bytes > layout.slot_bytes:
            raise RuntimeError("native record layout does not fit a VRAM slot")
        self.name = self.experts.name

    def prefault(self) -> float:
        return self.experts.prefault()

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray], heads: dict[int, int] | None = None) -> None:
        self.experts.moe_token(layer, experts, weights, x, out, captures, heads)

    def compute_beside(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                       captures: dict[int, np.ndarray], heads: dict[int, int] | None = None
                       ) -> contextlib.AbstractContextManager[Span]:
        # the kernel's worker threads compute while the block runs on this one, which joins them at its end
        return self.experts.moe_token_beside(layer, experts, weights, x, out, captures, heads)


class TorchMisses:
    """fp32 PyTorch experts (dequantized once per expert, LRU-cached)."""

    def __init__(self, ck: Checkpoint, layout: ExpertLayout, cache_bytes: int = 512 << 20) -> None:
        self.ck = ck
        self.layout = layout
        self.name = "torch"
        self._experts = DequantizedExperts(ck, torch.float32, cache_bytes)

    def _weights(self, layer: int, e: int) -> tuple[torch.Tensor, ...]:
        return self._experts.get(layer, e)

    def prefault(self) -> float:
        return 0.0

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray], heads: dict[int, int] | None = None) -> None:
        cfg = self.ck.config
        acc = torch.zeros(cfg.hidden_size, dtype=torch.float32)
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None]
        for e, w in zip(experts, np.asarray(weights, dtype=np.float32), strict=True):
            w1, b1, w2, b2 = self._weights(layer, e)
            if heads and e in heads:  # the first n units: their gate_up rows (interleaved pairs), down columns
                n = heads[e]
                w1, b1, w2 = w1[: 2 * n], b1[: 2 * n], w2[:, :n]
            acc += float(w) * expert_forward(t, w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)[0]
            if e in captures:
                self.layout.pack_expert(self.ck, layer, e, captures[e])
        out[:] = acc.numpy()

    @contextlib.contextmanager
    def compute_beside(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                       captures: dict[int, np.ndarray], heads: dict[int, int] | None = None) -> Iterator[Span]:
        span = Span()
        t0 = time.perf_counter()
        self.compute(layer, x, experts, weights, out, captures, heads)  # no threads of its own: first, then the block
        span.seconds = time.perf_counter() - t0
        yield span


def make_miss_experts(ck: Checkpoint, layout: ExpertLayout, threads: int, prefer_native: bool = True) -> MissExperts:
    if prefer_native:
        try:
            return NativeMisses(ck, layout, threads)
        except Exception as exc:  # extension missing or unloadable: say so and use PyTorch
            log.warning("native CPU expert kernel unavailable (%s); CPU misses use PyTorch", exc)
    return TorchMisses(ck, layout)
