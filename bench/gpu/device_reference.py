"""The reference model (engine/reference.py) run on a chosen torch device.

Same math and code path as :class:`engine.reference.ReferenceModel`; only where tensors live
changes: dense weights and the K/V cache on ``device``, and MXFP4 experts dequantized there
(the LUT + ldexp of engine/mxfp4.py, tested equal in CI). On the H200 this makes an fp32
reference of a 120b-shape checkpoint fast enough to check every decode step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from engine.checkpoint import Checkpoint, bf16_bits_to_tensor
from engine.expert_cache import DequantizedExperts, ExpertWeights
from engine.mxfp4 import FP4_VALUES
from engine.reference import KVCache, ReferenceModel


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
        self._experts = _DeviceExperts(ck, dtype, device, expert_cache_bytes)

    def w(self, name: str) -> torch.Tensor:
        t = self._dense.get(name)
        if t is None:
            t = self.ck.bf16(name).to(self.dtype).to(self.device)
            self._dense[name] = t
        return t

    def embed(self, ids: list[int]) -> torch.Tensor:
        table = self.ck.array("model.embed_tokens.weight")
        return bf16_bits_to_tensor(table[ids]).to(self.dtype).to(self.device)

    def new_cache(self) -> KVCache:
        cfg = self.cfg
        empty = torch.zeros(cfg.num_key_value_heads, 0, cfg.head_dim, dtype=self.dtype, device=self.device)
        n = cfg.num_hidden_layers
        return KVCache([empty] * n, [empty] * n)

    def forward(self, ids: list[int], cache: KVCache | None = None, last_only: bool = False,
                attn_block: int = 0, progress: Callable[[int, int], None] | None = None,
                check: Callable[[], None] | None = None) -> torch.Tensor:
        with torch.device(self.device):
            return super().forward(ids, cache, last_only, attn_block, progress, check).to("cpu")


class ForcedRoutingReference(DeviceReference):
    """The reference with the expert *choice* taken from a recorded routing (weights are still
    the reference's softmax over its own router logits for those experts).

    Top-k is discontinuous: in a deep random model a rounding-level difference in one router
    input flips an expert, and the flip cascades, so unforced bf16 and fp32 references already
    disagree completely after a few layers. Forcing the choice compares everything else; each
    disagreement between the recorded choice and the reference's own top-k is logged with how
    far the recorded expert's logit sat below the reference's k-th logit (``flips``).
    """

    def __init__(self, ck: Checkpoint, dtype: torch.dtype, device: torch.device, forced: np.ndarray,
                 expert_cache_bytes: int = 256 << 20) -> None:
        super().__init__(ck, dtype, device, expert_cache_bytes)
        self.forced = forced  # [positions, layers, k] expert ids
        self.flips: list[tuple[int, int, float]] = []  # (position, layer, logit gap)
        self.routed = 0
        self._positions: torch.Tensor | None = None

    def layer(self, i: int, x: torch.Tensor, positions: torch.Tensor, cache: KVCache,
              attn_block: int = 0) -> torch.Tensor:
        self._positions = positions
        return super().layer(i, x, positions, cache, attn_block)

    def route(self, layer: int, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch.nn.functional as F

        assert self._positions is not None
        p = f"model.layers.{layer}.mlp.router."
        logits = F.linear(t, self.w(p + "weight"), self.w(p + "bias"))
        k = self.cfg.num_experts_per_tok
        pos = self._positions.cpu().numpy()
        idx = torch.as_tensor(self.forced[pos, layer], dtype=torch.long, device=logits.device)
        own_top, own_idx = torch.topk(logits.float(), k, dim=-1)
        for row in range(idx.shape[0]):
            self.routed += 1
            mine = set(idx[row].tolist())
            if mine != set(own_idx[row].tolist()):
                worst = float(logits[row, idx[row]].float().min())
                self.flips.append((int(pos[row]), layer, float(own_top[row, -1]) - worst))
        top = logits.gather(-1, idx)
        return idx, F.softmax(top, dim=-1, dtype=top.dtype)


class _DeviceExperts(DequantizedExperts):
    """Experts dequantized straight on the device (the host would be the bottleneck)."""

    def __init__(self, ck: Checkpoint, dtype: torch.dtype, device: torch.device, cache_bytes: int) -> None:
        super().__init__(ck, dtype, cache_bytes)
        self.device = device

    def _load(self, layer: int, e: int) -> ExpertWeights:
        a = self.ck.expert_arrays(layer, e)
        dev, dt = self.device, self.dtype
        return (dequantize_on(a["gate_up_proj_blocks"], a["gate_up_proj_scales"], dt, dev),
                bf16_bits_to_tensor(a["gate_up_proj_bias"]).to(dt).to(dev),
                dequantize_on(a["down_proj_blocks"], a["down_proj_scales"], dt, dev),
                bf16_bits_to_tensor(a["down_proj_bias"]).to(dt).to(dev))
