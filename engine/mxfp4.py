"""MXFP4 (E2M1 codes + E8M0 block scales) decoding, exactly as the gpt-oss references do it.

Low nibble = even element, high nibble = odd element; value = LUT[code] * 2^(scale - 127).
Every such value is exactly representable in bf16 and fp32, so dequantizing one expert at a
time loses nothing; we never dequantize a whole layer's experts at once.
"""

from __future__ import annotations

import numpy as np
import torch

FP4_VALUES: tuple[float, ...] = (
    +0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
)
_LUT = torch.tensor(FP4_VALUES, dtype=torch.float32)


def _as_tensor(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a
    return torch.from_numpy(np.array(a, copy=True))


def dequantize(blocks: np.ndarray | torch.Tensor, scales: np.ndarray | torch.Tensor,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """blocks uint8 [..., G, 16], scales uint8 [..., G] -> [..., G*32] in ``dtype``."""
    b = _as_tensor(blocks).to(torch.int64)
    s = _as_tensor(scales).to(torch.int32) - 127
    if b.shape[:-1] != s.shape or b.shape[-1] != 16:
        raise ValueError(f"MXFP4 shape mismatch: blocks {tuple(b.shape)} vs scales {tuple(s.shape)}")
    lo = _LUT[b & 0x0F]
    hi = _LUT[b >> 4]
    vals = torch.stack((lo, hi), dim=-1).reshape(*b.shape[:-1], 32)  # [..., G, 32]
    vals = torch.ldexp(vals, s.unsqueeze(-1).to(torch.float32))
    return vals.reshape(*b.shape[:-2], b.shape[-2] * 32).to(dtype)


def quantize_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encode fp32 [..., K] (K % 32 == 0) to MXFP4 blocks/scales by nearest code.

    Used by tests and tools that need a real round trip; synthetic checkpoints write random
    codes directly.
    """
    v = np.asarray(values, dtype=np.float32)
    *pre, k = v.shape
    g = k // 32
    blocks = v.reshape(*pre, g, 32)
    amax = np.abs(blocks).max(axis=-1)
    # choose the scale so the block max maps onto 6.0 (largest E2M1 magnitude)
    exp = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)), 0).astype(np.int32)
    exp = np.clip(exp, -127, 127)
    scaled = blocks / np.ldexp(1.0, exp)[..., None]
    lut = np.array(FP4_VALUES, dtype=np.float32)
    codes = np.abs(scaled[..., None] - lut).argmin(axis=-1).astype(np.uint8)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return packed, (exp + 127).astype(np.uint8)
