"""K/V cache on the GPU: full layers sized to the context, sliding layers as a ring.

Layer l stores position p in row ``p % rows[l]`` of a [rows, kv_heads, head_dim] bf16 buffer
(K and V separately), with rows = context for full-attention layers and rows = kv_ring
(>= the window) for sliding ones. After processing ``n`` tokens a sliding ring holds
positions [n - ring, n); the next token needs [pos - window + 1, pos], so the cache can be
rewound to any m >= n - ring + window - 1 without reprocessing ("slack"). Further back,
a ring checkpoint (a copy of every sliding ring taken at some length) brings the rings back
to that length, and only the tokens after it are run again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import ModelConfig
from ..plan import kv_bytes, kv_rows


@dataclass
class RingCheckpoint:
    length: int
    rings: list[tuple[torch.Tensor, torch.Tensor]]  # per sliding layer (host copies)


class KVCache:
    def __init__(self, cfg: ModelConfig, context: int, kv_ring: int, device: torch.device) -> None:
        window = cfg.sliding_window
        if kv_ring and kv_ring < window:
            raise ValueError(f"kv_ring={kv_ring} must be at least the sliding window ({window})")
        self.cfg = cfg
        self.context = context
        self.window = window
        self.rows = kv_rows(cfg, context, kv_ring)
        shape = (cfg.num_key_value_heads, cfg.head_dim)
        self.k = [torch.zeros((r, *shape), dtype=torch.bfloat16, device=device) for r in self.rows]
        self.v = [torch.zeros((r, *shape), dtype=torch.bfloat16, device=device) for r in self.rows]
        self.sliding = [i for i in range(cfg.num_hidden_layers) if self.rows[i] < context]

    @staticmethod
    def bytes_for(cfg: ModelConfig, context: int, kv_ring: int) -> int:
        return kv_bytes(cfg, context, kv_ring)

    def window_of(self, layer: int) -> int:
        return self.window if self.cfg.is_sliding(layer) else 0

    def min_rewind(self, length: int) -> int:
        """Smallest length the cache can be cut back to from ``length`` without a checkpoint."""
        if not self.sliding:
            return 0
        ring = min(self.rows[i] for i in self.sliding)
        return max(0, length - ring + self.window - 1) if length > ring else 0

    def checkpoint(self, length: int) -> RingCheckpoint:
        return RingCheckpoint(length, [(self.k[i].to("cpu", copy=True), self.v[i].to("cpu", copy=True))
                                       for i in self.sliding])

    def restore(self, cp: RingCheckpoint) -> None:
        for i, (k, v) in zip(self.sliding, cp.rings, strict=True):
            self.k[i].copy_(k)
            self.v[i].copy_(v)

    def export(self, length: int) -> dict[str, torch.Tensor]:
        """Reference layout k.{i}/v.{i}: [kv_heads, length, head_dim] on the CPU; positions a ring
        no longer holds (never attended again) are zeros."""
        out: dict[str, torch.Tensor] = {}
        pos = torch.arange(length)
        for i, rows in enumerate(self.rows):
            for name, buf in (("k", self.k[i]), ("v", self.v[i])):
                full = torch.zeros((length, *buf.shape[1:]), dtype=torch.bfloat16)
                keep = pos >= length - rows
                if keep.any():
                    src = buf.index_select(0, (pos[keep] % rows).to(buf.device)).cpu()
                    full[keep] = src
                out[f"{name}.{i}"] = full.transpose(0, 1).contiguous()
        return out

    def load(self, tensors: dict[str, torch.Tensor], length: int) -> None:
        if length > self.context:
            raise ValueError(f"saved state of {length} tokens exceeds the context ({self.context})")
        pos = torch.arange(length)
        for i, rows in enumerate(self.rows):
            for name, buf in (("k", self.k[i]), ("v", self.v[i])):
                src = tensors[f"{name}.{i}"]
                if src.shape != (buf.shape[1], length, buf.shape[2]):
                    raise ValueError(f"saved {name}.{i} has shape {tuple(src.shape)}, expected "
                                     f"{(buf.shape[1], length, buf.shape[2])}")
                keep = pos >= length - rows
                rows_src = src.transpose(0, 1)[keep].to(torch.bfloat16)
                buf.index_copy_(0, (pos[keep] % rows).to(buf.device), rows_src.to(buf.device))
