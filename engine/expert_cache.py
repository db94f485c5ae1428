"""Dequantized experts, one at a time, in a byte-bounded LRU — for the PyTorch paths (the
reference, and the GPU backend's torch fallbacks for CPU experts). Never a whole layer at once."""

from __future__ import annotations

from collections import OrderedDict

import torch

from .checkpoint import Checkpoint, bf16_bits_to_tensor
from .mxfp4 import dequantize

ExpertWeights = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # w1 [2I,H], b1, w2 [H,I], b2


class DequantizedExperts:
    def __init__(self, ck: Checkpoint, dtype: torch.dtype = torch.float32, cache_bytes: int = 256 << 20) -> None:
        self.ck = ck
        self.dtype = dtype
        self._cache: OrderedDict[tuple[int, int], ExpertWeights] = OrderedDict()
        self._limit = cache_bytes
        self._bytes = 0

    def get(self, layer: int, e: int) -> ExpertWeights:
        key = (layer, e)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        w = self._load(layer, e)
        self._cache[key] = w
        self._bytes += sum(t.numel() * t.element_size() for t in w)
        while self._bytes > self._limit and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._bytes -= sum(t.numel() * t.element_size() for t in old)
        return w

    def _load(self, layer: int, e: int) -> ExpertWeights:
        """Dequantize one expert (a subclass may do it elsewhere, e.g. on the GPU)."""
        a = self.ck.expert_arrays(layer, e)
        return (
            dequantize(a["gate_up_proj_blocks"], a["gate_up_proj_scales"], self.dtype),
            bf16_bits_to_tensor(a["gate_up_proj_bias"]).to(self.dtype),
            dequantize(a["down_proj_blocks"], a["down_proj_scales"], self.dtype),
            bf16_bits_to_tensor(a["down_proj_bias"]).to(self.dtype),
        )
