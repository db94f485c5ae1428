"""One decode row's RMSNorm and RoPE of the CPU engine on the native kernel (``neural_rms_norm_bf16``,
``neural_rope_bf16``).

Between the native projections, attention and experts, a CPU decode token spent 2.1-3.5 ms in PyTorch operations
on one-row tensors at 4 layers (about 1,100 of them: dtype copies, pow, mean, rsqrt, chunk, cat; session 20's
split on the H200 host and the 2-core VM). The norms and RoPE were ~1 ms of it on the VM (two norms and two RoPEs a
layer at 40-80 us each, with the engine's wrappers). Each is one call here of a few microseconds.
RoPE gives apply_rope's bits; RMSNorm sums in its own fixed order (see native/neural_rows.c), so its output may
differ from rms_norm's by one bf16 unit on a rare element. Several rows (a prompt) stay with PyTorch.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)


class NativeRows:
    """``rms_norm`` and ``apply_rope`` of one bf16 row on the CPU, or None / False where they do not apply."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.enabled = True

    def _give_up(self, exc: Exception) -> None:
        log.warning("native row operations unavailable (%s); using PyTorch", exc)
        self.enabled = False

    def rms_norm(self, x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor | None:
        """reference.rms_norm for x bf16 [1, n] (n a multiple of 16), gain bf16 [n]; None where it does not apply."""
        n = x.shape[-1]
        if not self.enabled or x.dtype != torch.bfloat16 or gain.dtype != torch.bfloat16 or x.device.type != "cpu" \
                or x.numel() != n or n % 16 or gain.numel() != n or not x.is_contiguous() or not gain.is_contiguous():
            return None
        out = torch.empty_like(x)
        try:
            self.kernel.rms_norm_bf16(x.data_ptr(), gain.data_ptr(), n, eps, out.data_ptr())
        except Exception as exc:
            self._give_up(exc)
            return None
        return out

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
        """reference.apply_rope in place for x bf16 [1, heads, D] (one position), cos/sin bf16 [1, D/2]: True when
        done, False where it does not apply (x unchanged)."""
        if not self.enabled or x.dim() != 3 or x.shape[0] != 1 or x.dtype != torch.bfloat16 \
                or x.device.type != "cpu" or not x.is_contiguous() or cos.dtype != torch.bfloat16 \
                or sin.dtype != torch.bfloat16 or cos.numel() * 2 != x.shape[2] or sin.numel() != cos.numel() \
                or not cos.is_contiguous() or not sin.is_contiguous():
            return False
        try:
            self.kernel.rope_bf16(x.data_ptr(), x.shape[1], x.shape[2], cos.data_ptr(), sin.data_ptr())
        except Exception as exc:
            self._give_up(exc)
            return False
        return True
