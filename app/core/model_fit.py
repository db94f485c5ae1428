"""Whether a model fits this machine: VRAM, RAM and disk, one line each.

No estimator of its own: VRAM and RAM come from the engine's one plan (engine.plan.estimate over
plan_vram, as Preferences and ``neural doctor`` use it) and the RAM budget arithmetic of
engine.residency; the machine's limits are the ones ``neural doctor`` probes (the caller passes
them: app.doctor sits above app.core).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.model_download import HEADROOM
from app.core.model_hub import GIB
from engine.config import ModelConfig
from engine.plan import Machine, estimate, fmt
from engine.residency.budget import MemoryInfo, RamBudget, ram_advice
from engine.settings import EngineSettings


@dataclass(frozen=True)
class FitLine:
    area: str  # "VRAM", "RAM", "Disk"
    status: str  # "ok", "warn", "fail", "info"
    text: str


def judge_fit(cfg: ModelConfig, settings: EngineSettings, gpu_present: bool, machine: Machine,
              ram_available: int | None, download_bytes: int, store_bytes: int, disk_free: int) -> list[FitLine]:
    """``download_bytes``: still to download; ``store_bytes``: the expert store to build next to it."""
    e = estimate(cfg, settings, gpu_present, machine)
    lines: list[FitLine] = []
    if not e.gpu:
        lines.append(FitLine("VRAM", "info", (e.note or "CPU engine selected.") + " Every expert is computed "
                             "from RAM."))
    elif e.vram is None or e.errors:
        lines.append(FitLine("VRAM", "fail", " ".join(e.errors) or "The GPU plan is refused."))
    else:
        p = e.vram
        card = f" on the card's {machine.vram_bytes / GIB:.1f} GiB" if machine.vram_bytes else ""
        where = (f"all {e.total_experts} experts in GPU slots" if p.n_slots >= e.total_experts else
                 f"{p.n_slots} of {e.total_experts} experts in GPU slots, the rest from RAM")
        lines.append(FitLine("VRAM", "ok", f"{fmt(p.total)} planned in the {settings.vram_budget_gib:g} GiB budget"
                             f"{card}: {where}."))
    # RAM as `neural doctor` judges it: experts the CPU reads (all but the static VRAM ones) + the engine
    store_ram = (e.total_experts - e.static) * e.expert_bytes
    engine_ram = e.ram_total - e.ram_experts_bytes
    if not machine.ram_bytes:
        lines.append(FitLine("RAM", "info", f"Needs ≈ {fmt(store_ram + engine_ram)}; this machine's RAM is unknown."))
    else:
        mem = MemoryInfo(machine.ram_bytes, ram_available if ram_available is not None else machine.ram_bytes)
        budget = RamBudget.compute(store_ram, settings, mem, engine_ram, memlock_limit=None)
        need = store_ram + engine_ram + budget.headroom_bytes
        advice = ram_advice(store_ram, settings, mem, engine_ram, memlock_limit=None)
        head = (f"Needs ≈ {fmt(need)} (experts {fmt(store_ram)}, engine {fmt(engine_ram)}, headroom "
                f"{fmt(budget.headroom_bytes)}); this machine has {fmt(machine.ram_bytes)}.")
        lines.append(FitLine("RAM", "warn" if advice else "ok", head + (" " + advice[0] if advice else "")))
    need_disk = download_bytes + store_bytes
    text = (f"Needs {fmt(need_disk)} ({fmt(download_bytes)} to download + {fmt(store_bytes)} expert store); "
            f"{fmt(disk_free)} free.")
    lines.append(FitLine("Disk", "ok" if need_disk + HEADROOM <= disk_free else "fail", text))
    return lines
