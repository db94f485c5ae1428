"""The CPU side of hybrid decode: the experts of one layer that are not resident in VRAM.

``NativeMisses`` calls the native AVX-512/AVX2 kernel (native/kernel.py) on the expert bytes
where they sit (the checkpoint's memory-mapped tensors, raw MXFP4), and — for admission
candidates — lets it copy the bytes it reads into a pinned capture buffer laid out as a
VRAM slot (copy-on-compute). ``TorchMisses`` is the PyTorch fallback with the same contract
(used when the extension is missing, and in CI); it fills capture buffers with a plain copy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..expert_cache import DequantizedExperts
from ..reference import expert_forward
from .layout import SLOT_PARTS, ExpertLayout

log = logging.getLogger(__name__)


class MissExperts(Protocol):
    name: str

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray]) -> None:
        """out[H] = sum_k weights[k] * expert_k(x) (zeros if no experts); for each expert in
        ``captures`` also write its slot-layout bytes into that (pinned, uint8) buffer."""
        ...

    def prefault(self) -> float:
        """Touch every expert page once (so decode never takes first-touch page faults); seconds."""
        ...


class NativeMisses:
    def __init__(self, ck: Checkpoint, layout: ExpertLayout, threads: int) -> None:
        from native.kernel import load_kernel

        self.k = load_kernel()
        self.k.set_threads(threads)
        cfg = ck.config
        self.ck = ck
        self.layout = layout
        # bf16 inputs, as the GPU experts use: the kernel may run its vdpbf16ps loop
        self.shape = self.k.shape(cfg.hidden_size, cfg.intermediate_size, "raw", cfg.swiglu_limit,
                                  cfg.swiglu_alpha, layout.native_offsets(), bf16_inputs=True)
        if self.k.record_bytes(self.shape) > layout.slot_bytes:
            raise RuntimeError("native record layout does not fit a VRAM slot")
        self.name = f"native-{self.k.isa}-{self.k.threads}t"
        self._parts: dict[tuple[int, int], list[np.ndarray]] = {}
        self._refs: dict[tuple[int, int], Any] = {}

    def _expert_parts(self, layer: int, e: int) -> list[np.ndarray]:
        key = (layer, e)
        parts = self._parts.get(key)
        if parts is None:
            a = self.ck.expert_arrays(layer, e)
            parts = [np.ascontiguousarray(a[p]) for p in SLOT_PARTS]  # views into the mapping
            self._parts[key] = parts
        return parts

    def _ref(self, layer: int, e: int, capture: np.ndarray | None) -> Any:
        if capture is not None:
            return self.k.expert(self._expert_parts(layer, e), capture=capture)
        ref = self._refs.get((layer, e))
        if ref is None:
            ref = self.k.expert(self._expert_parts(layer, e))
            self._refs[(layer, e)] = ref
        return ref

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray]) -> None:
        if not experts:
            out.fill(0.0)
            return
        if captures:
            refs = [self._ref(layer, e, captures.get(e)) for e in experts]
        else:
            get = self._refs.get
            refs = [get((layer, e)) or self._ref(layer, e, None) for e in experts]
        self.k.moe_token(self.shape, refs, np.asarray(weights, dtype=np.float32), x, out)

    def prefault(self) -> float:
        t0 = time.perf_counter()
        for layer in range(self.ck.config.num_hidden_layers):
            for part in SLOT_PARTS:
                self.k.probe_read(self.ck.array(f"model.layers.{layer}.mlp.experts.{part}"))
        return time.perf_counter() - t0


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
                captures: dict[int, np.ndarray]) -> None:
        cfg = self.ck.config
        acc = torch.zeros(cfg.hidden_size, dtype=torch.float32)
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None]
        for e, w in zip(experts, np.asarray(weights, dtype=np.float32), strict=True):
            w1, b1, w2, b2 = self._weights(layer, e)
            acc += float(w) * expert_forward(t, w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)[0]
            if e in captures:
                self.layout.pack_expert(self.ck, layer, e, captures[e])
        out[:] = acc.numpy()


def make_miss_experts(ck: Checkpoint, layout: ExpertLayout, threads: int, prefer_native: bool = True) -> MissExperts:
    if prefer_native:
        try:
            return NativeMisses(ck, layout, threads)
        except Exception as exc:  # extension missing or unloadable: say so and use PyTorch
            log.warning("native CPU expert kernel unavailable (%s); CPU misses use PyTorch", exc)
    return TorchMisses(ck, layout)
