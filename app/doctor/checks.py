"""``neural doctor``: is this machine and this configuration able to run the model well, and if
not, what exactly to change.

The facts come from :mod:`app.doctor.probes`; each ``check_*`` function here turns facts into
one checklist line (ok / warn / fail / info) with a fix where there is something to do. The
targets come from the design doc: an NVIDIA GPU with at least 12 GiB, a CUDA build of
PyTorch, an AVX-512 CPU (AVX2 works, slower) and RAM for the CPU-side experts plus headroom
for the operating system and other programs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.config import ModelConfig
from engine.plan import Machine, estimate
from engine.settings import EngineSettings

from . import store as doctor_store
from .check import Check
from .probes import GpuFacts, SystemFacts, machine_limits

GIB = 1024**3
MIN_VRAM_GIB = 12.0  # the design doc's smallest supported card (RTX 3080 Ti)
MIN_CAPABILITY = (8, 0)  # bf16 tensor cores: Ampere or newer
RAM_HEADROOM_GIB = 3.0  # fallback only: engine.residency.budget decides the headroom when present
MIN_FREE_DISK_GIB = 1.0  # conversations, saved K/V states, logs

@dataclass
class Target:
    """The model and settings the doctor judges, and where they came from."""

    model_dir: Path
    settings: EngineSettings
    source: str


@dataclass
class Plan:
    """What the settings would use on this model (from the estimate shared with the GUI)."""

    gpu: bool
    vram_budget_bytes: int
    vram_bytes: int
    pool_bytes: int
    expert_bytes: int
    slots: int
    static: int
    adaptive: int
    ram_bytes: int
    store_ram_bytes: int  # expert store bytes the CPU reads from RAM (static VRAM experts excluded)
    engine_ram_bytes: int  # embeddings (and on the CPU engine the dense core and K/V)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    scratch: int = 0  # scratch slots in the pool, the prompt lookahead's included


def gib(n: float) -> str:
    """GiB with one decimal; MiB for the small demo models, whose sizes would all read 0.0 GiB."""
    return f"{n / GIB:.1f} GiB" if n >= 0.1 * GIB or n == 0 else f"{n / 2**20:.1f} MiB"


# ---- GPU, driver, CUDA -------------------------------------------------------------------------
def check_gpu(g: GpuFacts, settings: EngineSettings) -> list[Check]:
    if g.torch_error and not g.torch_version:
        return [Check("GPU", "fail", g.torch_error,
                      "Reinstall Neural (or `pip install torch`): the engine needs PyTorch.")]
    cuda = f"CUDA {g.torch_cuda}" if g.torch_cuda else "no CUDA"
    driver = f", driver {g.driver_version}" if g.driver_version else ""
    wants_gpu = settings.backend in ("auto", "gpu")
    if g.devices:
        d = g.devices[0]
        cap = f"sm_{d.capability[0]}{d.capability[1]}" if d.capability else "sm_?"
        free = f", {gib(d.free_bytes)} free" if d.free_bytes is not None else ""
        head = f"{d.name}, {gib(d.total_bytes)} ({cap}){free}{driver}; PyTorch {g.torch_version} with {cuda}"
        out = [Check("GPU", "ok", head)]
        if d.capability and d.capability < MIN_CAPABILITY:
            out[0] = Check("GPU", "warn", head + " — older than Ampere: the GPU kernels need bf16 tensor cores",
                           "Use an RTX 30-series or newer card; meanwhile set Backend to cpu in Preferences.")
        elif d.total_bytes < MIN_VRAM_GIB * GIB * 0.97:  # cards report a little under their nominal size
            out[0] = Check("GPU", "warn", head + f" — less than {MIN_VRAM_GIB:g} GiB of VRAM: fewer experts fit",
                           "Expect lower speed than the design target; lower the VRAM budget to fit the card.")
        budget = int(settings.vram_budget_gib * GIB)
        want = f"{settings.vram_budget_gib:g} GiB"
        if wants_gpu and budget > d.total_bytes:
            out.append(Check("VRAM budget", "fail", f"the VRAM budget ({want}) exceeds the card ({gib(d.total_bytes)})",
                             f"Set the VRAM budget to at most {max(1.0, d.total_bytes / GIB - 0.5):.1f} GiB in "
                             "Preferences (or --budget-gib)."))
        elif wants_gpu and d.free_bytes is not None and budget > d.free_bytes:
            out.append(Check("VRAM budget", "warn",
                             f"other programs hold VRAM: {gib(d.free_bytes)} free, budget {want}",
                             "Close games, browsers with hardware acceleration or other models, or lower the VRAM "
                             "budget to what is free."))
        if not wants_gpu:
            out.append(Check("GPU", "info", f"backend is set to {settings.backend}: the GPU is not used",
                             "Set Backend to auto in Preferences to use the GPU."))
        else:
            import importlib.util
            import sys

            if importlib.util.find_spec("triton") is None:  # the GPU kernels are Triton kernels
                pkg = "triton-windows==3.8.0.post29" if sys.platform == "win32" else "triton"
                out.append(Check("GPU kernels", "fail", "Triton is not installed: the GPU kernels cannot be "
                                 "compiled, so the app runs the CPU engine",
                                 f"Reinstall Neural (the installer ships it), or `pip install {pkg}`."))
        return out
    if g.smi_gpus:  # the driver sees a card, PyTorch does not
        if not g.torch_cuda:
            return [Check("GPU", "fail", f"{g.smi_gpus[0]} found{driver}, but PyTorch {g.torch_version} is a "
                          "CPU-only build", "Install the CUDA build of Neural (or `pip install torch --index-url "
                          "https://download.pytorch.org/whl/cu130`).")]
        why = g.torch_error or "torch.cuda.is_available() is False"
        return [Check("GPU", "fail", f"{g.smi_gpus[0]} found{driver}, but PyTorch ({cuda}) cannot use it: {why}",
                      f"Update the NVIDIA driver to one that supports CUDA {g.torch_cuda} (the driver's CUDA "
                      "version is shown by nvidia-smi), then restart.")]
    if g.smi_error:
        return [Check("GPU", "fail", f"the NVIDIA driver does not answer: {g.smi_error}",
                      "Reinstall the NVIDIA driver from nvidia.com and restart.")]
    return [Check("GPU", "warn", f"no NVIDIA GPU found (PyTorch {g.torch_version}, {cuda}): the CPU engine computes "
                  "everything, which is slow for gpt-oss-120b",
                  "Use a machine with an NVIDIA card of 12 GiB or more, and its current driver.")]


def check_direct(g: GpuFacts, settings: EngineSettings) -> list[Check]:
    """Whether prompts can copy experts straight from the checkpoint's mapping, from the probe's try."""
    from engine.plan import direct_copies_possible

    d = g.direct
    if not d.tried or settings.backend == "cpu":
        return []
    engine_on = direct_copies_possible(settings.stage_direct)
    if d.registered and d.same_bytes:
        rate = f" ({d.gb_s:g} GB/s on a 16 MiB probe)" if d.gb_s else ""
        if engine_on:
            return [Check("Direct copies", "ok",
                          f"the GPU copies experts straight from the checkpoint's mapping{rate}")]
        why = "stage_direct is off" if settings.stage_direct == "off" else \
            "stage_direct=auto uses them on Linux only: they are not measured on Windows yet"
        return [Check("Direct copies", "info", f"a read-only file mapping registers with CUDA here and copies the "
                      f"right bytes{rate}, but prompts pack experts through pinned buffers ({why})",
                      'Add "stage_direct": "on" to the "engine" section of the app\'s settings.json (its config '
                      "folder) to copy experts straight from the mapping: faster prompts, with up to the machine's "
                      "RAM less 16 GiB page-locked.")]
    if d.registered and d.same_bytes is False:
        fix = 'Set "stage_direct": "off" in settings.json.' if engine_on else ""
        return [Check("Direct copies", "warn" if engine_on else "info", "a registered file mapping copied different "
                      "bytes to the GPU than it holds", fix)]
    what = d.error or "the try did not finish"
    if settings.stage_direct == "on":
        return [Check("Direct copies", "warn", f"stage_direct=on, but {what}: prompts pack experts instead",
                      'Set "stage_direct" back to "auto" in settings.json; a newer NVIDIA driver may help.')]
    return [Check("Direct copies", "info", f"unavailable ({what}): prompts pack experts through pinned buffers")]


# ---- CPU -----------------------------------------------------------------------------------------
def check_cpu(facts: SystemFacts) -> list[Check]:
    c = facts.cpu
    cores = f"{c.physical_cores or '?'} cores / {c.logical_cores} threads"
    where = f"{c.model or 'unknown CPU'}, {cores}"
    out: list[Check]
    if c.avx512:
        out = [Check("CPU", "ok", f"{where}: AVX-512 ({c.isa_source})")]
    elif c.avx2:
        out = [Check("CPU", "warn", f"{where}: AVX2, no AVX-512 ({c.isa_source}) — the CPU expert kernel runs its "
                     "AVX2 path, slower per byte", "Nothing to fix; an AVX-512 CPU (e.g. Intel 11th gen) is the "
                     "design target. Keep the VRAM pool large so fewer experts run on the CPU.")]
    elif c.avx2 is None:
        out = [Check("CPU", "info", f"{where}: vector extensions unknown ({c.isa_source or 'no probe'})")]
    else:
        out = [Check("CPU", "warn", f"{where}: neither AVX2 nor AVX-512 — the CPU kernel runs its scalar path, "
                     "very slowly", "Use an x86-64 CPU with AVX2 (2013 or newer) or AVX-512.")]
    if c.native_error:
        out.append(Check("CPU kernel", "warn", f"native expert kernel not loadable: {c.native_error}",
                         "The PyTorch fallback works but is far slower. Reinstall Neural; from source, install "
                         "with a C compiler present (pip install -e .)."))
    else:
        out.append(Check("CPU kernel", "ok", f"native expert kernel loads; it uses the {c.native_isa} path"))
    return out


# ---- model, store, settings ----------------------------------------------------------------------
def check_model(target: Target) -> tuple[list[Check], ModelConfig | None]:
    from engine.checkpoint import Checkpoint
    from engine.config import ConfigError
    from engine.safetensors_io import CheckpointError

    d = target.model_dir
    try:
        ck = Checkpoint.open(d)
    except (CheckpointError, ConfigError, OSError) as exc:
        return [Check("Model", "fail", f"{d} ({target.source}) cannot be used: {exc}",
                      "Choose the folder of gpt-oss-120b or gpt-oss-20b (it holds config.json and the "
                      "*.safetensors files) in Preferences, or pass it: neural doctor --model DIR.")], None
    cfg = ck.config
    ck.close()
    shape = (f"{cfg.num_hidden_layers} layers × {cfg.num_local_experts} experts (top-{cfg.num_experts_per_tok}), "
             f"{cfg.expert_bytes():,} B per expert")
    label = doctor_store.model_label(d)
    if label is not None:
        return [Check("Model", "info", f"{d.name} ({target.source}): {label} — {shape}",
                      "For real answers, download gpt-oss-120b (or gpt-oss-20b) from Hugging Face and choose its "
                      "folder in Preferences.")], cfg
    return [Check("Model", "ok", f"{d} ({target.source}): {shape}")], cfg


def check_store(target: Target, cfg: ModelConfig) -> list[Check]:
    """The expert store beside the checkpoint, through engine.store when this build has it."""
    return doctor_store.check_store(target.model_dir, cfg)


def make_plan(cfg: ModelConfig, settings: EngineSettings, gpu_usable: bool,
              store_file_bytes: int | None = None, machine: Machine | None = None) -> Plan:
    """``store_file_bytes``: size of the built store when there is one (the packed format is smaller
    than the checkpoint's bytes per expert)."""
    e = estimate(cfg, settings, gpu_usable, machine)  # the engine's own plan, as Preferences shows it
    per_expert = store_file_bytes / e.total_experts if store_file_bytes else e.expert_bytes
    # Experts in adaptive slots still live in RAM (they are admitted from there and may be evicted).
    store_ram = int((e.total_experts - e.static) * per_expert)
    return Plan(e.gpu, int(settings.vram_budget_gib * GIB), e.vram_total, e.pool_bytes, e.expert_bytes, e.slots,
                e.static, e.adaptive, e.ram_total, store_ram, e.ram_total - e.ram_experts_bytes,
                list(e.errors), list(e.warnings), e.vram.n_scratch if e.vram else 0)


def check_settings(plan: Plan, settings: EngineSettings) -> list[Check]:
    if plan.gpu:
        line = (f"VRAM budget {settings.vram_budget_gib:g} GiB → pool {gib(plan.pool_bytes)} = {plan.slots} expert "
                f"slots ({plan.static} static, {plan.adaptive} adaptive) + {plan.scratch} scratch at "
                f"{plan.expert_bytes / 2**20:.1f} MiB per expert; VRAM in use ≈ {gib(plan.vram_bytes)}; "
                f"context {settings.context}, K/V ring {settings.kv_ring}")
    else:
        line = f"CPU engine: every expert from RAM; context {settings.context}, {settings.threads()} threads"
    out = [Check("Settings", "fail" if plan.errors else "ok", line,
                 " ".join(plan.errors) + (" Change it in Preferences." if plan.errors else ""))]
    out += [Check("Settings", "warn", w) for w in plan.warnings]
    return out


def check_memory(facts: SystemFacts, plan: Plan | None, settings: EngineSettings) -> list[Check]:
    """RAM for the CPU-side expert store plus headroom, judged by engine.residency's budget
    arithmetic (the numbers the engine itself will use); a plain comparison if that is absent."""
    m = facts.memory
    if m.error:
        return [Check("RAM", "info", m.error)]
    have = f"{gib(m.total_bytes)} total, {gib(m.available_bytes)} available"
    if plan is None:
        return [Check("RAM", "info", have)]
    try:
        from engine.residency.budget import MemoryInfo, RamBudget, ram_advice
    except ImportError:
        return _check_memory_plain(m.total_bytes, m.available_bytes, plan, have)
    mem = MemoryInfo(m.total_bytes, m.available_bytes)
    budget = RamBudget.compute(plan.store_ram_bytes, settings, mem, plan.engine_ram_bytes)
    need = plan.store_ram_bytes + plan.engine_ram_bytes + budget.headroom_bytes
    line = (f"{have}; needs ≈ {gib(need)} = experts read from RAM {gib(plan.store_ram_bytes)} + engine "
            f"{gib(plan.engine_ram_bytes)} + headroom {gib(budget.headroom_bytes)}; warm-up keeps "
            f"{budget.fraction:.0%} of those experts in RAM")
    advice = ram_advice(plan.store_ram_bytes, settings, mem, plan.engine_ram_bytes)
    if not advice:
        return [Check("RAM", "ok", line)]
    return [Check("RAM", "warn", line, advice[0])] + [Check("RAM", "warn", a) for a in advice[1:]]


def _check_memory_plain(total: int, available: int, plan: Plan, have: str) -> list[Check]:
    need = plan.store_ram_bytes + plan.engine_ram_bytes + int(RAM_HEADROOM_GIB * GIB)
    want = f"experts and engine need ≈ {gib(need - int(RAM_HEADROOM_GIB * GIB))} + {RAM_HEADROOM_GIB:g} GiB headroom"
    if need > total:
        return [Check("RAM", "warn", f"{have}; {want}", "Part of the store will be read from disk while answering: "
                      "raise the VRAM pool (pool_gib) so fewer experts stay in RAM, use gpt-oss-20b, or add RAM.")]
    if need > available:
        return [Check("RAM", "warn", f"{have}; {want}", "Close other programs before loading the model, or lower "
                      "ram_budget_gib so warm-up does not push them into swap.")]
    return [Check("RAM", "ok", f"{have}; {want}")]


def check_disk(facts: SystemFacts) -> list[Check]:
    d = facts.disk
    if d.error:
        return [Check("Disk", "warn", f"cannot measure free space at {d.path}: {d.error}")]
    line = f"{gib(d.free_bytes)} free of {gib(d.total_bytes)} at the data folder {d.path}"
    if d.free_bytes < MIN_FREE_DISK_GIB * GIB:
        return [Check("Disk", "warn", line, "Free some space: conversations and saved states are written there.")]
    return [Check("Disk", "ok", line)]


# ---- the whole checklist -------------------------------------------------------------------------
def diagnose(facts: SystemFacts, target: Target) -> list[Check]:
    checks = [Check("System", "info", f"{facts.platform}, Python {facts.python}"
                    + (", bundled build" if facts.frozen else ""))]
    checks += check_gpu(facts.gpu, target.settings)
    checks += check_direct(facts.gpu, target.settings)
    checks += check_cpu(facts)
    model_checks, cfg = check_model(target)
    checks += model_checks
    plan = None
    gpu_usable = bool(facts.gpu.devices)
    if cfg is not None:
        checks += check_store(target, cfg)
        try:
            _gpu, machine = machine_limits(facts.gpu, facts.cpu.logical_cores, facts.memory)
            machine = replace(machine, vram_bytes=None)  # check_gpu judges the VRAM budget already
            plan = make_plan(cfg, target.settings, gpu_usable, doctor_store.store_file_bytes(target.model_dir),
                             machine)
        except Exception as exc:  # the doctor reports, it never crashes
            checks.append(Check("Settings", "warn", f"cannot estimate what the settings use: {exc}"))
        else:
            checks += check_settings(plan, target.settings)
    checks += check_memory(facts, plan, target.settings)
    checks += check_disk(facts)
    return checks


def resolve_target(model_arg: str | None) -> tuple[Target, Path]:
    """The model and settings the app would use, and the app's data dir."""
    from app.core.models import demo_model_dir
    from app.core.paths import AppPaths
    from app.core.settings import load_settings

    paths = AppPaths.default()
    saved = load_settings(paths.settings_file)
    settings = saved.engine_settings()
    if model_arg:
        return Target(Path(model_arg).expanduser(), settings, "command line"), paths.data_dir
    if saved.model_dir:
        return Target(Path(saved.model_dir), settings, f"from {paths.settings_file}"), paths.data_dir
    return Target(demo_model_dir(), settings, "the bundled demo; no model configured"), paths.data_dir


MARK = {"ok": "[ OK ]", "warn": "[WARN]", "fail": "[FAIL]", "info": "[INFO]"}


def render(checks: list[Check]) -> str:
    width = max(len(c.area) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{MARK[c.status]} {c.area:<{width}}  {c.summary}")
        if c.fix:
            lines.append(f"{'':6} {'':<{width}}  fix: {c.fix}")
    fails = sum(c.status == "fail" for c in checks)
    warns = sum(c.status == "warn" for c in checks)
    verdict = ("Ready." if not fails and not warns else
               f"{fails} problem(s) to fix, {warns} warning(s)." if fails else f"Usable; {warns} warning(s).")
    lines.append(verdict)
    return "\n".join(lines)


def report_dict(facts: SystemFacts, target: Target, checks: list[Check]) -> dict[str, Any]:
    return {
        "ok": not any(c.status == "fail" for c in checks),
        "model_dir": str(target.model_dir),
        "model_source": target.source,
        "settings": target.settings.to_dict(),
        "checks": [asdict(c) for c in checks],
        "facts": facts.to_dict(),
    }


def main(model_arg: str | None = None, as_json: bool = False) -> int:
    from .probes import gather

    target, data_dir = resolve_target(model_arg)
    facts = gather(data_dir)
    checks = diagnose(facts, target)
    if as_json:
        print(json.dumps(report_dict(facts, target, checks), indent=2, default=str))
    else:
        print(render(checks))
    return 1 if any(c.status == "fail" for c in checks) else 0
