"""Tile sizes of the prompt kernels, one place for the GPU and the interpreter tests.

Every tile size is a Triton constexpr. The GPU defaults were chosen offline for sm_90 at the
120b shape among configurations that compile without register spills (``python -m
bench.gpu.aot --sweep``: registers / stack per kernel, no GPU needed);
``bench/gpu/prompt_device.py`` stage ``tiles`` times those candidates on the H200, and the
fastest goes here (docs/perf-prompt.md records it). ``NEURAL_PREFILL_TILES`` overrides.
Under TRITON_INTERPRET=1 the cost is per program, so the interpreter uses few, large tiles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ...config import ModelConfig


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class PrefillTiles:
    attn_m: int = 16  # query tokens per attention program (x the padded GQA group = rows)
    attn_n: int = 64  # keys per attention step
    attn_warps: int = 8  # 4 warps spill at 128 rows x head_dim 64 (aot.py: 255 regs + stack)
    attn_stages: int = 2
    gemm_m: int = 64  # token rows per expert GEMM tile (design doc: 64 beat 16)
    gemm_p: int = 64  # gate/up pairs per gate_up program
    gemm_n: int = 64  # output columns per down program
    gemm_k: int = 128  # reduction step (elements; codes are half as many bytes); H200, 13k-token layer:
    # 57.2 ms at k=128 vs 102.4 ms at k=64 (prompt_device stage tiles, 2026-11-29); 241 regs, no spills
    gemm_warps: int = 8  # no spills at 64x64x128 (aot.py; 4 warps at 64x64x64: 255 regs)
    gemm_stages: int = 3
    bf16_dot: bool = True  # GPU: bf16 tensor-core dots (operands are bf16-exact); interpreter: fp32

    @classmethod
    def for_config(cls, cfg: ModelConfig, interpret: bool = False) -> PrefillTiles:
        if interpret:
            return cls(attn_m=16, attn_n=64, gemm_m=32, gemm_p=min(64, pow2(cfg.intermediate_size)),
                       gemm_n=min(64, pow2(cfg.hidden_size)), gemm_k=64, bf16_dot=False)
        tiles = cls()
        env = os.environ.get("NEURAL_PREFILL_TILES")  # e.g. "gemm_m=64,gemm_p=32" (device sweeps)
        if env:
            tiles = tiles.with_overrides(env)
        return tiles

    def with_overrides(self, spec: str) -> PrefillTiles:
        """``"name=value,..."`` -> a copy with those fields changed (ints; bf16_dot takes 0/1)."""
        kw: dict[str, int | bool] = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, _, value = item.partition("=")
            if name not in self.__dataclass_fields__:
                raise ValueError(f"unknown prompt tile {name!r}")
            kw[name] = bool(int(value)) if name == "bf16_dot" else int(value)
        return replace(self, **kw)  # type: ignore[arg-type]

    def check(self, cfg: ModelConfig) -> None:
        """tl.dot needs every dimension >= 16 and tl.arange powers of two."""
        for name in ("attn_m", "attn_n", "gemm_m", "gemm_p", "gemm_n", "gemm_k"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"prompt tile {name}={v} must be a power of two")
        if self.gemm_k < 32 or self.gemm_k % 32:
            raise ValueError("gemm_k must be a multiple of 32 (one MXFP4 block)")
        if cfg.hidden_size % 32 or cfg.intermediate_size % 32:
            raise ValueError("hidden and intermediate sizes must be multiples of 32")
