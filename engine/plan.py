"""The one memory plan: what a model and a set of engine settings take in VRAM and RAM.

Pure arithmetic (no torch) from the model's shapes and :class:`EngineSettings`. The GPU backend
allocates exactly what :func:`plan_vram` plans (dense core, K/V, buffers, the prompt path's
workspace, the CUDA context allowance and the expert pool with its scratch slots); Preferences,
``neural doctor`` and the benches show and use the same numbers through :func:`estimate`.

Default budget: the whole process within ``vram_budget_gib``. An explicit ``pool_gib`` must fit
next to everything else, or the plan is refused with a message that names the numbers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from .config import MXFP4_BLOCK, ModelConfig
from .settings import EngineSettings

GIB = 1 << 30
MIB = 1 << 20
BF16 = 2
# CUDA context, cuBLAS/Triton modules, allocator slack (not in torch's counts). MEASURED on the
# H200 machine (torch 2.11, CUDA 13): process total minus planned allocations = 0.82 GiB.
CONTEXT_OVERHEAD = 850 << 20
MAX_ROWS = 8192  # rows of one prompt GEMM wave (bounds the activation workspace)
SLOT_ALIGN = 256
# native record order (native/neural_experts.h NEURAL_PART_*): the slot layout follows it
SLOT_PARTS = ("gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales",
              "gate_up_proj_bias", "down_proj_bias")


class PlanError(ValueError):
    """The configuration cannot fit the VRAM budget."""


def fmt(n: int) -> str:
    """GiB for big numbers, MiB for the small ones a tiny model gives."""
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / MIB:.1f} MiB"


# ---- the pieces -------------------------------------------------------------------------------
def slot_parts(cfg: ModelConfig) -> tuple[dict[str, int], dict[str, int], int]:
    """(offsets, sizes, slot bytes) of one expert in a VRAM slot: the six checkpoint parts end to
    end, each start aligned to 256 bytes (engine.gpu.layout.ExpertLayout uses this)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    gh, gi = h // MXFP4_BLOCK, i // MXFP4_BLOCK
    sizes = {"gate_up_proj_blocks": 2 * i * gh * 16, "gate_up_proj_scales": 2 * i * gh,
             "down_proj_blocks": h * gi * 16, "down_proj_scales": h * gi,
             "gate_up_proj_bias": 2 * i * 2, "down_proj_bias": h * 2}
    offsets: dict[str, int] = {}
    at = 0
    for part in SLOT_PARTS:
        offsets[part] = at
        at = (at + sizes[part] + SLOT_ALIGN - 1) // SLOT_ALIGN * SLOT_ALIGN
    return offsets, sizes, at


def slot_bytes(cfg: ModelConfig) -> int:
    return slot_parts(cfg)[2]


def dense_bytes(cfg: ModelConfig) -> int:
    """bf16 bytes of everything the GPU core reads per token (the embedding stays on the host)."""
    h, e = cfg.hidden_size, cfg.num_local_experts
    qkv = (cfg.q_width + 2 * cfg.kv_width) * (h + 1)
    per_layer = qkv + h * cfg.q_width + h + cfg.num_attention_heads + 2 * h + e * (h + 1)
    return BF16 * (cfg.num_hidden_layers * per_layer + h + cfg.vocab_size * h)


def embedding_bytes(cfg: ModelConfig) -> int:
    return BF16 * cfg.vocab_size * cfg.hidden_size


def kv_rows(cfg: ModelConfig, context: int, kv_ring: int) -> list[int]:
    """Rows of K/V per layer: the context for full layers, the ring for sliding ones."""
    return [min(kv_ring, context) if (cfg.is_sliding(i) and kv_ring) else context
            for i in range(cfg.num_hidden_layers)]


def kv_bytes(cfg: ModelConfig, context: int, kv_ring: int) -> int:
    return sum(kv_rows(cfg, context, kv_ring)) * cfg.kv_width * BF16 * 2  # K and V


def buffer_bytes(cfg: ModelConfig, context: int) -> int:
    rope = 2 * context * (cfg.head_dim // 2) * 4
    logits = cfg.vocab_size * 4 * 2
    return rope + logits + (16 << 20)  # plus activations, routing, attention partials


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


# ---- the VRAM plan ----------------------------------------------------------------------------
@dataclass(frozen=True)
class VramPlan:
    budget: int
    dense: int
    kv: int
    buffers: int  # rope tables, logits, decode activations
    workspace: int  # the prompt path's peak working memory at the planned prompt length
    overhead: int
    slot_bytes: int
    n_slots: int
    n_static: int
    n_scratch: int  # all scratch slots, the lookahead's included
    n_ahead: int = 0  # of the scratch slots: the prompt path's lookahead (engine/gpu/prefill/lookahead.py)

    @property
    def pool(self) -> int:
        return (self.n_slots + self.n_scratch) * self.slot_bytes

    @property
    def total(self) -> int:
        return self.dense + self.kv + self.buffers + self.workspace + self.overhead + self.pool

    def describe(self) -> str:
        return (f"budget {fmt(self.budget)} = core {fmt(self.dense)} + K/V {fmt(self.kv)} + buffers "
                f"{fmt(self.buffers)} + prompt workspace {fmt(self.workspace)} + context {fmt(self.overhead)} + pool "
                f"{fmt(self.pool)} ({self.n_slots} slots: {self.n_static} static, {self.n_slots - self.n_static} "
                f"adaptive; {self.n_scratch} scratch{f', {self.n_ahead} of them lookahead' if self.n_ahead else ''})")


def plan_vram(cfg: ModelConfig, s: EngineSettings, *, workspace_tokens: int | None = None,
              overhead: int = CONTEXT_OVERHEAD, cuda: bool = True) -> VramPlan:
    """The plan the GPU backend allocates. ``workspace_tokens``: the longest prompt the workspace
    is reserved for (default: the whole context, so a long prompt stays in budget). ``cuda=False``
    (the kernels under Triton's interpreter, tests): no lookahead slots, which need CUDA copies."""
    if s.kv_ring and s.kv_ring < cfg.sliding_window:
        raise PlanError(f"K/V ring {s.kv_ring} is shorter than the model's sliding window ({cfg.sliding_window})")
    sb = slot_bytes(cfg)
    budget = int(s.vram_budget_gib * GIB)
    dense = dense_bytes(cfg)
    kv = kv_bytes(cfg, s.context, s.kv_ring)
    buffers = buffer_bytes(cfg, s.context)
    ws = workspace_bytes(cfg, s.context if workspace_tokens is None else workspace_tokens, s.prompt_block)
    fixed = dense + kv + buffers + ws + overhead
    total = cfg.num_hidden_layers * cfg.num_local_experts

    def slots_beside(scratch: int) -> tuple[int, int]:
        """(bytes left for the pool's slots, slots planned) next to ``scratch`` scratch slots."""
        room = budget - fixed - scratch * sb
        return room, int(s.pool_gib * GIB) // sb - scratch if s.pool_gib > 0 else max(room, 0) // sb

    ahead = planned_lookahead(s, cuda)
    room, n_slots = slots_beside(s.scratch_slots + ahead)
    if ahead and n_slots >= total:  # every expert resident: nothing to stage ahead
        ahead = 0
        room, n_slots = slots_beside(s.scratch_slots)
    scratch = s.scratch_slots + ahead
    if s.pool_gib > 0 and n_slots * sb > room:
        raise PlanError(f"expert pool of {s.pool_gib:.2f} GiB does not fit the {s.vram_budget_gib:.2f} GiB VRAM "
                        f"budget next to the core ({fmt(dense)}), K/V ({fmt(kv)}), buffers, prompt workspace "
                        f"and context ({fmt(buffers + ws + overhead)}); at most {fmt(max(room, 0))}")
    n_slots = min(n_slots, total)
    if n_slots < cfg.num_experts_per_tok:
        raise PlanError(f"the {s.vram_budget_gib:.2f} GiB VRAM budget leaves room for {max(n_slots, 0)} expert slots "
                        f"after the core ({fmt(dense)}), K/V ({fmt(kv)}), buffers and prompt workspace; need at least "
                        f"{cfg.num_experts_per_tok} — lower the context or raise the budget")
    n_static = n_slots // 2 if s.static_slots < 0 else min(s.static_slots, n_slots)
    return VramPlan(budget, dense, kv, buffers, ws, overhead, sb, n_slots, n_static, scratch, ahead)


def planned_lookahead(s: EngineSettings, cuda: bool = True) -> int:
    """Lookahead slots the plan reserves (unless every expert is resident): only where the prompt
    path copies experts straight from the mapping, which needs CUDA."""
    return s.lookahead_slots if cuda and s.scratch_slots > 0 and direct_copies_possible(s.stage_direct) else 0


def direct_copies_possible(stage_direct: str) -> bool:
    """Whether the prompt path may copy experts straight from the checkpoint's page-locked mapping:
    "on", or "auto" on Linux (never measured on Windows, where file mappings and page-locking
    work differently). engine/gpu/prefill/direct.py registers accordingly."""
    return stage_direct == "on" or (stage_direct == "auto" and sys.platform.startswith("linux"))


# ---- what the settings give on this machine (Preferences, doctor) -----------------------------
@dataclass(frozen=True)
class Machine:
    """This machine's limits as ``neural doctor`` probes them (None = unknown)."""

    logical_cores: int | None = None
    ram_bytes: int | None = None
    vram_bytes: int | None = None  # the card's total memory; None without a usable GPU


@dataclass(frozen=True)
class Estimate:
    expert_bytes: int
    total_experts: int
    gpu: bool
    vram: VramPlan | None  # the engine's plan when the GPU backend would run
    kv_bytes: int
    ram_experts_bytes: int  # experts computed by the CPU from RAM
    ram_total: int
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    note: str = ""
    if_gpu: Estimate | None = None  # what the same settings give on a CUDA GPU (when none is present)

    @property
    def slots(self) -> int:
        return self.vram.n_slots if self.vram else 0

    @property
    def static(self) -> int:
        return self.vram.n_static if self.vram else 0

    @property
    def adaptive(self) -> int:
        return self.slots - self.static

    @property
    def pool_bytes(self) -> int:
        return self.vram.pool if self.vram else 0

    @property
    def vram_total(self) -> int:
        return self.vram.total if self.vram else 0

    def summary(self) -> str:
        lead = f"{self.note} " if self.note else ""
        if not self.gpu:
            text = (f"{lead}CPU engine: all {self.total_experts} experts are computed from RAM. "
                    f"RAM ≈ {fmt(self.ram_total)} (experts {fmt(self.ram_experts_bytes)}, K/V {fmt(self.kv_bytes)}).")
            if self.if_gpu is not None:
                text += "\nOn a CUDA GPU these settings would give: " + self.if_gpu.summary()
            return text
        if self.vram is None:
            return f"{lead}The GPU plan is refused (see below)."
        p = self.vram
        return (f"{lead}{p.n_slots} expert slots ({p.n_static} static, {p.n_slots - p.n_static} adaptive) + "
                f"{p.n_scratch} scratch.\nVRAM {fmt(p.total)} = core {fmt(p.dense)} + K/V {fmt(p.kv)} + buffers "
                f"{fmt(p.buffers)} + prompt workspace {fmt(p.workspace)} + CUDA context {fmt(p.overhead)} + pool "
                f"{fmt(p.pool)}.\nRAM ≈ {fmt(self.ram_total)} ({self.total_experts - p.n_slots} of "
                f"{self.total_experts} experts on the CPU side).")


def machine_errors(s: EngineSettings, m: Machine, gpu: bool) -> list[str]:
    """Settings this machine cannot honour, each naming the field and the machine's figure."""
    out: list[str] = []
    if m.logical_cores and s.cpu_threads > m.logical_cores:
        out.append(f"CPU threads: {s.cpu_threads} is more than this machine's {m.logical_cores} cores.")
    if m.ram_bytes:
        ram = m.ram_bytes / GIB
        if s.ram_budget_gib > ram:
            out.append(f"RAM budget: {s.ram_budget_gib:g} GiB is more than this machine's {ram:.1f} GiB of RAM.")
        if s.mlock_gib > ram * 0.9:
            out.append(f"Lock in RAM: {s.mlock_gib:g} GiB would leave the system no room "
                       f"(this machine has {ram:.1f} GiB; at most {ram * 0.9:.1f}).")
    if gpu and m.vram_bytes and s.vram_budget_gib * GIB > m.vram_bytes:
        out.append(f"VRAM budget: {s.vram_budget_gib:g} GiB is more than the card's {m.vram_bytes / GIB:.1f} GiB.")
    return out


def estimate(cfg: ModelConfig, s: EngineSettings, gpu_present: bool | None = None,
             machine: Machine | None = None) -> Estimate:
    """``gpu_present``: whether a usable CUDA GPU exists (None = unknown: assume one for "auto")."""
    use_gpu = s.backend == "gpu" or (s.backend == "auto" and gpu_present is not False)
    note = ""
    if s.backend == "auto" and gpu_present is False:
        note = "No CUDA GPU found, so Auto runs the CPU engine."
    elif s.backend == "gpu" and gpu_present is False:
        note = "No CUDA GPU found: the GPU backend will fall back to the CPU engine."
    eb = cfg.expert_bytes()
    total = cfg.num_hidden_layers * cfg.num_local_experts
    kv = kv_bytes(cfg, s.context, s.kv_ring)
    errors = machine_errors(s, machine, use_gpu) if machine else []
    warnings: list[str] = []
    if s.context > cfg.max_position_embeddings:
        errors.append(f"Context {s.context} exceeds the model's maximum ({cfg.max_position_embeddings}).")
    if not use_gpu:
        if s.kv_ring and s.kv_ring < cfg.sliding_window:
            errors.append(f"K/V ring {s.kv_ring} is shorter than the model's sliding window ({cfg.sliding_window}).")
        alt = None
        if s.backend in ("auto", "gpu"):
            alt = estimate(cfg, s, gpu_present=True)
            warnings.extend(f"On a GPU: {e}" for e in alt.errors)
        ram_exp = total * eb
        return Estimate(eb, total, False, None, kv, ram_exp, ram_exp + embedding_bytes(cfg) + dense_bytes(cfg) + kv,
                        errors, warnings, note, alt)
    try:
        plan: VramPlan | None = plan_vram(cfg, s)
    except PlanError as exc:
        plan = None
        errors.append(str(exc)[0].upper() + str(exc)[1:] + ".")
    slots = plan.n_slots if plan else 0
    if plan and s.pool_gib > 0 and int(s.pool_gib * GIB) // plan.slot_bytes - plan.n_scratch > total:
        warnings.append(f"The pool holds every expert ({total}); a smaller pool frees VRAM for nothing lost.")
    if plan and s.static_slots > plan.n_slots:  # the engine would clamp: refuse rather than mislead
        errors.append(f"Static slots ({s.static_slots}) exceed the {plan.n_slots} slots the pool gives.")
    ram_exp = (total - slots) * eb
    return Estimate(eb, total, True, plan, kv, ram_exp, ram_exp + embedding_bytes(cfg), errors, warnings, note)
