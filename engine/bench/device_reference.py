"""The reference model (engine/reference.py) run on a chosen torch device.

Same math and code path as :class:`engine.reference.ReferenceModel`; only where tensors live
changes: dense weights and the K/V cache on ``device``, and MXFP4 experts dequantized there
(the LUT + ldexp of engine/mxfp4.py, tested equal in CI). On the H200 this makes an fp32
reference of a 120b-shape checkpoint fast enough to check every decode step.
"""

from __future__ import annotations

import numpy as np
import torch

from ..checkpoint import Checkpoint, bf16_bits_to_tensor
from ..mxfp4 import FP4_VALUES
from ..reference import KVCache, ReferenceModel


def dequantize_on(blocks: np.ndarray, scales: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """engine.mxfp4.dequantize, computed on ``device``."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=device)
    b = torch.from_numpy(np.ascontiguousarray(blocks)).to(device).to(torch.int64)
    s = torch.from_numpy(np.ascontiguousarray(scales)).to(device).to(torch.int32) - 127
    vals = torch.stack((lut[b & 0x0F], lut[b >> 4]), dim=-1).reshape(*b.shape[:-1], 32)
    vals = torch.ldexp(vals, s.unsqueeze(-1).to(torch.float32))
    return vals.reshape(*b.shape[:-2], b.shape[-2] * 32).to(dtype)


class DeviceReference(ReferenceModel):
    def __init__(self, ck: Checkpoint, dtype: torch.dtype, device: torch.device,
                 expert_cache_bytes: int = 256 << 20) -> None:
        super().__init__(ck, dtype, expert_cache_bytes=expert_cache_bytes)
        self.device = device

    def w(self, name: str) -> torch.Tensor:
        t = self._dense.get(name)
        if t is None:
            t = self.ck.bf16(name).to(self.dtype).to(self.device)
            self._dense[name] = t
        return t

    def expert_weights(self, layer: int, e: int) -> tuple[torch.Tensor, ...]:
        key = (layer, e)
        hit = self._experts.get(key)
        if hit is not None:
            self._experts.move_to_end(key)
            return hit
        a = self.ck.expert_arrays(layer, e)
        dev, dt = self.device, self.dtype
        out = (dequantize_on(a["gate_up_proj_blocks"], a["gate_up_proj_scales"], dt, dev),
               bf16_bits_to_tensor(a["gate_up_proj_bias"]).to(dt).to(dev),
               dequantize_on(a["down_proj_blocks"], a["down_proj_scales"], dt, dev),
               bf16_bits_to_tensor(a["down_proj_bias"]).to(dt).to(dev))
        self._experts[key] = out
        self._expert_bytes += sum(t.numel() * t.element_size() for t in out)
        while self._expert_bytes > self._expert_cache_bytes and len(self._experts) > 1:
            _, old = self._experts.popitem(last=False)
            self._expert_bytes -= sum(t.numel() * t.element_size() for t in old)
        return out

    def embed(self, ids: list[int]) -> torch.Tensor:
        table = self.ck.array("model.embed_tokens.weight")
        return bf16_bits_to_tensor(table[ids]).to(self.dtype).to(self.device)

    def new_cache(self) -> KVCache:
        cfg = self.cfg
        empty = torch.zeros(cfg.num_key_value_heads, 0, cfg.head_dim, dtype=self.dtype, device=self.device)
        n = cfg.num_hidden_layers
        return KVCache([empty] * n, [empty] * n)

    def forward(self, ids: list[int], cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        with torch.device(self.device):
            return super().forward(ids, cache, last_only).to("cpu")
