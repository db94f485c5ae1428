"""Shared by the store/adapter tests: random routing for a checkpoint's shape."""

from __future__ import annotations

import torch

from engine.checkpoint import Checkpoint


def routing(ck: Checkpoint, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hidden [T, H], expert ids [T, k] distinct per token, softmax weights [T, k])."""
    cfg = ck.config
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(tokens, cfg.hidden_size, generator=g)
    idx = torch.stack([torch.randperm(cfg.num_local_experts, generator=g)[: cfg.num_experts_per_tok]
                       for _ in range(tokens)])
    w = torch.softmax(torch.randn(tokens, cfg.num_experts_per_tok, generator=g), dim=-1)
    return t, idx, w
