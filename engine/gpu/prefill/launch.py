"""Launch wrappers of the prompt kernels: grids and constexprs in one place, so the GPU path and
the interpreter tests always launch a kernel the same way."""

from __future__ import annotations

import torch

from ...config import ModelConfig
from ..layout import ExpertLayout
from .kernels.attention import prompt_attn_kernel
from .kernels.moe_gemm import moe_down_kernel, moe_gate_up_kernel
from .tiles import PrefillTiles, cdiv, pow2


class PrefillKernels:
    def __init__(self, cfg: ModelConfig, tiles: PrefillTiles, layout: ExpertLayout) -> None:
        tiles.check(cfg)
        self.cfg = cfg
        self.t = tiles
        self.layout = layout
        self.gp = pow2(cfg.gqa_group)
        self.offsets = layout.kernel_offsets()

    def attention(self, q: torch.Tensor, k_blk: torch.Tensor, v_blk: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, sinks: torch.Tensor, start: int, window: int, out: torch.Tensor) -> None:
        """q/out [T, NH, D], k_blk/v_blk [T, NKV, D] of positions start .., caches [RING, NKV, D]
        holding the positions before start (all bf16, contiguous). The cache is not written."""
        c, t = self.cfg, self.t
        n = q.shape[0]
        base = start - start % t.attn_n  # key tiles are aligned to absolute positions
        if base < start:  # extend the block at the front by the cached rows [base, start)
            rows = torch.arange(base, start, device=k_cache.device) % k_cache.shape[0]
            k_blk = torch.cat([k_cache.index_select(0, rows), k_blk])
            v_blk = torch.cat([v_cache.index_select(0, rows), v_blk])
        grid = (cdiv(n, t.attn_m), c.num_key_value_heads)
        prompt_attn_kernel[grid](q, k_blk, v_blk, k_cache, v_cache, sinks, out, start, base, n, c.head_dim ** -0.5,
                                 NH=c.num_attention_heads, NKV=c.num_key_value_heads, G=c.gqa_group, GP=self.gp,
                                 D=c.head_dim, RING=k_cache.shape[0], WINDOW=window, BLOCK_M=t.attn_m,
                                 BLOCK_N=t.attn_n, BF16_DOT=t.bf16_dot, num_warps=t.attn_warps,
                                 num_stages=t.attn_stages)

    def gate_up(self, pool: torch.Tensor, x: torch.Tensor, order: torch.Tensor, tiles: torch.Tensor, tile0: int,
                n_tiles: int, act: torch.Tensor) -> None:
        c, t, o = self.cfg, self.t, self.offsets
        grid = (n_tiles, cdiv(c.intermediate_size, t.gemm_p))
        moe_gate_up_kernel[grid](pool, x, order, tiles, act, self.layout.slot_bytes, c.swiglu_limit, c.swiglu_alpha,
                                 tile0, H=c.hidden_size, INTER=c.intermediate_size, TOPK=c.num_experts_per_tok,
                                 OFF_GS=o["OFF_GS"], OFF_GB=o["OFF_GB"], BLOCK_M=t.gemm_m, BLOCK_P=t.gemm_p,
                                 BLOCK_K=t.gemm_k, BF16_DOT=t.bf16_dot, num_warps=t.gemm_warps,
                                 num_stages=t.gemm_stages)

    def down(self, pool: torch.Tensor, act: torch.Tensor, order: torch.Tensor, w_flat: torch.Tensor,
             tiles: torch.Tensor, tile0: int, n_tiles: int, out: torch.Tensor) -> None:
        c, t, o = self.cfg, self.t, self.offsets
        grid = (n_tiles, cdiv(c.hidden_size, t.gemm_n))
        moe_down_kernel[grid](pool, act, order, w_flat, tiles, out, self.layout.slot_bytes, tile0, H=c.hidden_size,
                              INTER=c.intermediate_size, OFF_DB=o["OFF_DB"], OFF_DS=o["OFF_DS"],
                              OFF_DBIAS=o["OFF_DBIAS"], BLOCK_M=t.gemm_m, BLOCK_N=t.gemm_n, BLOCK_K=t.gemm_k,
                              BF16_DOT=t.bf16_dot, num_warps=t.gemm_warps, num_stages=t.gemm_stages)

    def experts(self, pool: torch.Tensor, x: torch.Tensor, order: torch.Tensor, w_flat: torch.Tensor,
                tiles: torch.Tensor, tile0: int, n_tiles: int, act: torch.Tensor, out: torch.Tensor) -> None:
        """One wave: gate_up then down for tiles [tile0, tile0 + n_tiles)."""
        if n_tiles <= 0:
            return
        self.gate_up(pool, x, order, tiles, tile0, n_tiles, act)
        self.down(pool, act, order, w_flat, tiles, tile0, n_tiles, out)
