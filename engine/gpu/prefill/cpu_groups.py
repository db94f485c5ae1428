"""Prompt experts computed on the CPU: small groups of non-resident experts.

``compute(layer, expert, x, w, out)`` writes ``out[i] = w[i] * expert(x[i])`` (fp32) for a
group of tokens. The native adapter's multi-token entry point (store/native_experts.py
``expert_tokens``, up to 16 tokens per kernel call) reads the expert's bytes once per call from
where they sit (the memory-mapped checkpoint, raw MXFP4), so a small group costs one pass
over the expert instead of a 13 MB copy over PCIe. Larger groups (only when there are no
scratch slots) are cut into calls of 16. Without the extension the PyTorch fallback has
the same contract.
"""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np
import torch

from ...checkpoint import Checkpoint
from ...expert_cache import DequantizedExperts
from ...reference import expert_forward

log = logging.getLogger(__name__)


class CpuGroups(Protocol):
    name: str

    def compute(self, layer: int, expert: int, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None: ...

    def compute_groups(self, layer: int, experts: list[int], counts: np.ndarray, x: np.ndarray, w: np.ndarray,
                       out: np.ndarray) -> None:
        """Several experts' groups, one after another in the rows (group g: the next counts[g] rows)."""
        ...


class NativeGroups:
    """The native adapter's N-token entry point (store/native_experts.py)."""

    def __init__(self, ck: Checkpoint, threads: int) -> None:
        from ...store.native_experts import NativeExperts

        # bf16 inputs, as the model rounds them (and the GPU experts): exact products, the BF16 loop on AMD
        self.experts = NativeExperts(ck.config, ck, threads=threads, bf16_inputs=True)
        self.name = self.experts.name

    def compute(self, layer: int, expert: int, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        self.experts.expert_tokens(layer, expert, x, w, out)

    def compute_groups(self, layer: int, experts: list[int], counts: np.ndarray, x: np.ndarray, w: np.ndarray,
                       out: np.ndarray) -> None:
        # one native call per 16 experts instead of one per expert: the GIL is released for the
        # whole call, which the prompt's launch thread needs meanwhile
        self.experts.expert_groups(layer, experts, counts, x, w, out)


class TorchGroups:
    """fp32 PyTorch experts (dequantized once per expert, LRU-cached)."""

    name = "torch"

    def __init__(self, ck: Checkpoint, cache_bytes: int = 256 << 20) -> None:
        self.ck = ck
        self._experts = DequantizedExperts(ck, torch.float32, cache_bytes)

    def _weights(self, layer: int, e: int) -> tuple[torch.Tensor, ...]:
        return self._experts.get(layer, e)

    def compute(self, layer: int, expert: int, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        cfg = self.ck.config
        w1, b1, w2, b2 = self._weights(layer, expert)
        y = expert_forward(torch.from_numpy(x), w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)
        out[:] = (y * torch.from_numpy(w)[:, None]).numpy()

    def compute_groups(self, layer: int, experts: list[int], counts: np.ndarray, x: np.ndarray, w: np.ndarray,
                       out: np.ndarray) -> None:
        at = 0
        for e, n in zip(experts, counts.tolist(), strict=True):
            self.compute(layer, e, x[at : at + n], w[at : at + n], out[at : at + n])
            at += n


def make_cpu_groups(ck: Checkpoint, threads: int, prefer_native: bool = True) -> CpuGroups:
    if prefer_native:
        try:
            return NativeGroups(ck, threads)
        except Exception as exc:  # extension missing or unloadable: say so and use PyTorch
            log.warning("native CPU expert kernel unavailable for prompts (%s); using PyTorch", exc)
    return TorchGroups(ck)
