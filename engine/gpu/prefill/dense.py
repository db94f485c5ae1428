"""Dense per-layer prompt ops for a block of tokens, in PyTorch (cuBLAS GEMMs on the GPU).

These are the bf16 reference's own functions (engine/reference.py: RMSNorm, q/k/v with bias,
half-split RoPE/YaRN, o_proj + residual, router top-k + softmax over the k, final norm +
lm_head) applied to the GPU core's weights, so for a block of T tokens the dense math is the
reference's to the bit wherever the GEMM library sums in the same order. At prompt sizes
the GEMMs dominate and cuBLAS runs them near peak; fusing the pointwise ops would save
little next to the expert GEMMs and staging.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ...reference import apply_rope, rms_norm


def qkv_rope(core: Any, layer: int, x: torch.Tensor, positions: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [T, H] bf16 -> q [T, NH, D], k [T, NKV, D] (both after RoPE), v [T, NKV, D], contiguous."""
    cfg = core.cfg
    lw = core.layers[layer]
    t = x.shape[0]
    h = F.linear(rms_norm(x, lw.in_gain, cfg.rms_norm_eps), lw.w_qkv, lw.b_qkv)
    q, k, v = h.split([cfg.q_width, cfg.kv_width, cfg.kv_width], dim=1)
    cos = core.cos.index_select(0, positions).to(torch.bfloat16)
    sin = core.sin.index_select(0, positions).to(torch.bfloat16)
    q = apply_rope(q.reshape(t, cfg.num_attention_heads, cfg.head_dim), cos, sin)
    k = apply_rope(k.reshape(t, cfg.num_key_value_heads, cfg.head_dim), cos, sin)
    return q.contiguous(), k.contiguous(), v.reshape(t, cfg.num_key_value_heads, cfg.head_dim).contiguous()


def oproj_residual(core: Any, layer: int, x: torch.Tensor, attn: torch.Tensor) -> None:
    """x += W_o attn + b_o (bf16, in place); attn [T, NH, D]."""
    lw = core.layers[layer]
    x += F.linear(attn.reshape(attn.shape[0], -1), lw.w_o, lw.b_o)


def route(core: Any, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(normalized hidden t [N, H], expert ids [N, k], routing weights [N, k] bf16)."""
    cfg = core.cfg
    lw = core.layers[layer]
    t = rms_norm(x, lw.post_gain, cfg.rms_norm_eps)
    logits = F.linear(t, lw.w_router, lw.b_router)
    top, idx = torch.topk(logits, cfg.num_experts_per_tok, dim=-1)
    return t, idx, F.softmax(top, dim=-1, dtype=top.dtype)


def logits(core: Any, x: torch.Tensor) -> torch.Tensor:
    """fp32 logits [rows, vocab] of the final hidden rows x [rows, H]."""
    t = rms_norm(x, core.norm, core.cfg.rms_norm_eps)
    return F.linear(t, core.lm_head).float()
