"""VRAM plan: what the dense core, K/V and buffers take, and how many expert slots remain.

Default budget: the whole process within ``vram_budget_gib`` (12 GiB), counting a fixed
allowance for the CUDA context and compiled kernels that PyTorch's allocator does not see.
An explicit ``pool_gib`` must fit next to everything else, or the plan is refused with a
message that names the numbers (the engine then falls back to the CPU backend).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ModelConfig
from .kv import KVCache
from .layout import ExpertLayout

GIB = 1 << 30
# CUDA context, cuBLAS/Triton modules, allocator slack (not in torch's counts). MEASURED on the
# H200 machine (torch 2.11, CUDA 13): process total minus planned allocations = 0.82 GiB.
CONTEXT_OVERHEAD = 850 << 20


class PlanError(ValueError):
    """The configuration cannot fit the VRAM budget."""


@dataclass(frozen=True)
class VramPlan:
    budget: int
    dense: int
    kv: int
    buffers: int
    overhead: int
    slot_bytes: int
    n_slots: int
    n_static: int
    n_scratch: int

    @property
    def pool(self) -> int:
        return (self.n_slots + self.n_scratch) * self.slot_bytes

    @property
    def total(self) -> int:
        return self.dense + self.kv + self.buffers + self.overhead + self.pool

    def describe(self) -> str:
        g = lambda b: f"{b / GIB:.2f}"
        return (f"budget {g(self.budget)} GiB = core {g(self.dense)} + K/V {g(self.kv)} + buffers {g(self.buffers)}"
                f" + context {g(self.overhead)} + pool {g(self.pool)} ({self.n_slots} slots: {self.n_static} static,"
                f" {self.n_slots - self.n_static} adaptive; {self.n_scratch} scratch)")


def dense_bytes(cfg: ModelConfig) -> int:
    """bf16 bytes of everything the GPU core reads per token (embedding stays on the host)."""
    h, e = cfg.hidden_size, cfg.num_local_experts
    qkv = (cfg.q_width + 2 * cfg.kv_width) * (h + 1)
    per_layer = qkv + h * cfg.q_width + h + cfg.num_attention_heads + 2 * h + e * (h + 1)
    return 2 * (cfg.num_hidden_layers * per_layer + h + cfg.vocab_size * h)


def buffer_bytes(cfg: ModelConfig, context: int) -> int:
    rope = 2 * context * (cfg.head_dim // 2) * 4
    logits = cfg.vocab_size * 4 * 2
    return rope + logits + (16 << 20)  # plus activations, routing, attention partials


def plan_vram(cfg: ModelConfig, context: int, kv_ring: int, budget_gib: float, pool_gib: float,
              static_slots: int, scratch_slots: int, overhead: int = CONTEXT_OVERHEAD,
              prompt_workspace: int = 0) -> VramPlan:
    """``prompt_workspace``: the prompt path's peak working memory at the full context
    (engine.gpu.prefill.workspace.workspace_bytes), reserved so a long prompt stays in budget."""
    layout = ExpertLayout.for_config(cfg)
    sb = layout.slot_bytes
    budget = int(budget_gib * GIB)
    dense = dense_bytes(cfg)
    kv = KVCache.bytes_for(cfg, context, kv_ring)
    buffers = buffer_bytes(cfg, context) + prompt_workspace
    fixed = dense + kv + buffers + overhead
    room = budget - fixed - scratch_slots * sb
    if pool_gib > 0:
        n_slots = int(pool_gib * GIB) // sb - scratch_slots
        if n_slots * sb > room:
            raise PlanError(f"expert pool of {pool_gib:.2f} GiB does not fit the {budget_gib:.2f} GiB VRAM budget "
                            f"next to the core ({dense / GIB:.2f} GiB), K/V ({kv / GIB:.2f} GiB), buffers and "
                            f"context ({(buffers + overhead) / GIB:.2f} GiB); at most {max(room, 0) / GIB:.2f} GiB")
    else:
        n_slots = max(room, 0) // sb
    n_slots = min(n_slots, cfg.num_hidden_layers * cfg.num_local_experts)
    if n_slots < cfg.num_experts_per_tok:
        raise PlanError(f"the {budget_gib:.2f} GiB VRAM budget leaves room for {max(n_slots, 0)} expert slots after "
                        f"the core ({dense / GIB:.2f} GiB), K/V ({kv / GIB:.2f} GiB) and buffers; "
                        f"need at least {cfg.num_experts_per_tok} — lower the context or raise the budget")
    n_static = n_slots // 2 if static_slots < 0 else min(static_slots, n_slots)
    return VramPlan(budget, dense, kv, buffers, overhead, sb, n_slots, n_static, scratch_slots)
