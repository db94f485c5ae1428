"""What a set of engine settings gives on a given model: slots, VRAM and RAM, before loading.

Pure arithmetic from the model's shapes (:class:`ModelConfig`) and :class:`EngineSettings`,
following the design doc's accounting: VRAM = dense core (bf16 attention, router, lm_head)
+ K/V cache (sliding layers limited to the K/V ring) + expert pool; pool slots = pool bytes /
expert bytes, minus scratch; RAM = the experts that stay on the CPU side. For gpt-oss-120b
at the optimized profile this gives about 500 slots and 2.9 GiB of core, as the doc states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import ModelConfig
from engine.settings import EngineSettings

GIB = 1024**3
BF16 = 2


def fmt(n: int) -> str:
    """GiB for big numbers, MiB for the small ones a tiny model gives."""
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / 1024**2:.1f} MiB"


def dense_core_bytes(cfg: ModelConfig) -> int:
    """bf16 bytes of the per-layer attention + router + norms and the lm_head (embeddings stay in RAM)."""
    h, q, kv = cfg.hidden_size, cfg.q_width, cfg.kv_width
    per_layer = (h * q + q) + 2 * (h * kv + kv) + (q * h + h) + cfg.num_attention_heads  # qkv, o, sinks
    per_layer += h * cfg.num_local_experts + cfg.num_local_experts + 2 * h  # router, two norms
    return BF16 * (cfg.num_hidden_layers * per_layer + cfg.vocab_size * h + h)


def embedding_bytes(cfg: ModelConfig) -> int:
    return BF16 * cfg.vocab_size * cfg.hidden_size


def kv_cache_bytes(cfg: ModelConfig, context: int, kv_ring: int) -> int:
    per_token_layer = 2 * cfg.kv_width * BF16  # K and V
    total = 0
    for layer in range(cfg.num_hidden_layers):
        tokens = context
        if cfg.is_sliding(layer) and kv_ring > 0:
            tokens = min(context, max(kv_ring, cfg.sliding_window))
        total += tokens * per_token_layer
    return total


@dataclass(frozen=True)
class Estimate:
    expert_bytes: int
    total_experts: int
    dense_bytes: int
    kv_bytes: int
    pool_bytes: int
    slots: int  # usable expert slots (scratch excluded)
    static: int
    adaptive: int
    scratch: int
    vram_total: int
    ram_experts_bytes: int  # experts computed by the CPU from RAM
    ram_total: int
    gpu: bool
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    note: str = ""
    if_gpu: Estimate | None = None  # what the same settings give on a CUDA GPU (when none is present)

    def summary(self) -> str:
        lead = f"{self.note} " if self.note else ""
        if not self.gpu:
            text = (f"{lead}CPU engine: all {self.total_experts} experts are computed from RAM. "
                    f"RAM ≈ {fmt(self.ram_total)} (experts {fmt(self.ram_experts_bytes)}, K/V {fmt(self.kv_bytes)}).")
            if self.if_gpu is not None:
                text += "\nOn a CUDA GPU these settings would give: " + self.if_gpu.summary()
            return text
        return (f"{lead}≈ {self.slots} expert slots ({self.static} static, {self.adaptive} adaptive) + {self.scratch} "
                f"scratch.\nVRAM ≈ {fmt(self.vram_total)} = core {fmt(self.dense_bytes)} + K/V {fmt(self.kv_bytes)} + "
                f"pool {fmt(self.pool_bytes)}.\nRAM ≈ {fmt(self.ram_total)} "
                f"({self.total_experts - self.slots} of {self.total_experts} experts on the CPU side).")


def estimate(cfg: ModelConfig, s: EngineSettings, gpu_present: bool | None = None) -> Estimate:
    """``gpu_present``: whether a CUDA GPU exists (None = unknown: assume one for "auto")."""
    use_gpu = s.backend == "gpu" or (s.backend == "auto" and gpu_present is not False)
    note = ""
    if s.backend == "auto" and gpu_present is False:
        note = "No CUDA GPU found, so Auto runs the CPU engine."
    elif s.backend == "gpu" and gpu_present is False:
        note = "No CUDA GPU found: the GPU backend will fall back to the CPU engine."
    eb = cfg.expert_bytes()
    total = cfg.num_hidden_layers * cfg.num_local_experts
    dense = dense_core_bytes(cfg)
    kv = kv_cache_bytes(cfg, s.context, s.kv_ring)
    errors: list[str] = []
    warnings: list[str] = []
    if s.kv_ring and s.kv_ring < cfg.sliding_window:
        errors.append(f"K/V ring {s.kv_ring} is shorter than the model's sliding window ({cfg.sliding_window}).")
    if s.context > cfg.max_position_embeddings:
        errors.append(f"Context {s.context} exceeds the model's maximum ({cfg.max_position_embeddings}).")
    if not use_gpu:
        ram_exp = total * eb
        alt = None
        if s.backend in ("auto", "gpu"):
            alt = estimate(cfg, s, gpu_present=True)
            warnings.extend(f"On a GPU: {e}" for e in alt.errors)
        return Estimate(eb, total, dense, kv, 0, 0, 0, 0, 0, 0, ram_exp,
                        ram_exp + embedding_bytes(cfg) + dense + kv, False, errors, warnings, note, alt)
    budget = int(s.vram_budget_gib * GIB)
    pool = int(s.pool_gib * GIB) if s.pool_gib > 0 else max(0, budget - dense - kv)
    raw_slots = pool // eb
    slots = max(0, min(raw_slots - s.scratch_slots, total))
    if raw_slots - s.scratch_slots > total:
        warnings.append(f"The pool holds every expert ({total}); a smaller pool frees VRAM for nothing lost.")
    if raw_slots < s.scratch_slots:
        errors.append(f"The pool ({pool / GIB:.2f} GiB) does not even hold the {s.scratch_slots} scratch slots.")
    static = slots // 2 if s.static_slots < 0 else s.static_slots
    if static > slots:
        errors.append(f"Static slots ({static}) exceed the usable slots the pool gives ({slots}).")
        static = slots
    vram = dense + kv + pool
    if vram > budget:
        errors.append(f"Core + K/V + pool need {vram / GIB:.2f} GiB, more than the VRAM budget "
                      f"({s.vram_budget_gib:g} GiB). Lower the pool, context or K/V ring, or raise the budget.")
    ram_exp = (total - slots) * eb
    return Estimate(eb, total, dense, kv, pool, slots, static, slots - static, s.scratch_slots, vram, ram_exp,
                    ram_exp + embedding_bytes(cfg), True, errors, warnings, note)


def cuda_present() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install must not break the preferences dialog
        return False
