"""The prompt path's VRAM workspace, computable without importing Triton (the budget planner,
the benchmarks' pool arithmetic and the CLI use it on machines where Triton must not be
imported before TRITON_INTERPRET is decided)."""

from __future__ import annotations

from ...config import ModelConfig

MAX_ROWS = 8192  # rows of one GEMM wave (bounds the activation workspace)


def workspace_bytes(cfg: ModelConfig, tokens: int, block: int, max_rows: int = MAX_ROWS) -> int:
    """Peak GPU memory of a prompt of ``tokens`` beyond the core, K/V and pool (CALCULATED):
    residual + normalized hidden + contributions for the whole prompt, one block's attention
    and dense temporaries, one wave's activations."""
    h, k, i = cfg.hidden_size, cfg.num_experts_per_tok, cfg.intermediate_size
    b = min(block, tokens)
    whole = tokens * (2 * h * 2 + k * h * 2 + k * 16)  # x, t (bf16), contrib (bf16), ids/weights/order
    per_block = b * (3 * cfg.q_width * 2 + 4 * cfg.kv_width * 2 + 3 * h * 4 + (cfg.q_width + 2 * cfg.kv_width) * 2)
    wave = min(max_rows, tokens * k) * i * 2
    return whole + per_block + wave
