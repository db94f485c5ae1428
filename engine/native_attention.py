"""One decode token's attention of the CPU engine on the native kernel (``neural_attn_decode_bf16``).

Deep in a conversation the full-attention layers dominate a CPU decode token's attention: PyTorch's
path converts the whole bf16 K/V to fp32 per layer per token and multiplies in fp32 (about 8 ms of a
34 ms token at 4,096 keys on the 4-layer 120b shape, 2 threads; profiled). The native call reads the
bf16 rows once, on the experts' thread team: scores in a fixed 16-lane order,
the softmax with the sink in key order, the probabilities rounded to bf16 as the GPU kernels and the
PyTorch path round them, then P.V in key order. The same bits on every ISA; against the PyTorch path
the sums go in another order (fp32 rounding, tested with a tolerance).

A prompt's rows (several queries) stay with the PyTorch path.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)


class NativeAttention:
    """Attention of one query row over bf16 K/V on the CPU, or None where it does not apply."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.enabled = True

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor,
                 scale: float) -> torch.Tensor | None:
        """``q`` fp32 [heads, 1, D] (bf16-exact values), ``k``/``v`` bf16 [kv_heads, S, D] (the keys the
        query sees), ``sinks`` fp32 [heads]: the attention output fp32 [1, heads * D] before o_proj."""
        heads, n, d = q.shape
        kvh, s = k.shape[0], k.shape[1]
        if not self.enabled or n != 1 or k.dtype != torch.bfloat16 or v.dtype != torch.bfloat16 \
                or k.device.type != "cpu" or q.dtype != torch.float32 or heads % kvh or d % 16 or s < 1 \
                or k.shape != v.shape or k.stride() != v.stride() or k.stride(2) != 1 or k.stride(1) != d:
            return None
        try:
            out = self.kernel.attn_decode_bf16(
                k.data_ptr(), v.data_ptr(), k.stride(0), kvh, s, q.reshape(heads, d).contiguous().numpy(),
                sinks.reshape(heads).contiguous().numpy(), scale, True)
        except Exception as exc:  # the kernel is an optimisation: fall back, say why once
            log.warning("native decode attention unavailable (%s); using the PyTorch path", exc)
            self.enabled = False
            return None
        return torch.from_numpy(out).reshape(1, heads * d)
