"""Facts about this machine for ``neural doctor``: GPU, driver and CUDA, CPU vector ISA, RAM, disk.

Every probe returns what it found plus, where it could not find out, why: a probe never
raises, because the doctor exists for broken machines. The judgement of the facts (what is
good enough, what to fix) lives in :mod:`app.doctor`, so it can be tested with made-up facts.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Windows IsProcessorFeaturePresent ids (winnt.h): AVX2 and AVX-512F availability, OS support included.
PF_AVX2_INSTRUCTIONS_AVAILABLE = 40
PF_AVX512F_INSTRUCTIONS_AVAILABLE = 41
# The AVX-512 subsets the native kernel's AVX-512 path is compiled for (native/neural_internal.h).
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl")


@dataclass
class GpuDevice:
    name: str
    total_bytes: int
    free_bytes: int | None = None
    capability: tuple[int, int] | None = None


@dataclass
class DirectCopyFacts:
    """Whether the copy engine can read a read-only file mapping registered with CUDA (the prompt path's direct
    copies, engine/gpu/prefill/direct.py), tried on a small temporary file."""

    tried: bool = False
    registered: bool | None = None
    error: str | None = None
    same_bytes: bool | None = None
    gb_s: float | None = None  # host-to-device rate of the probe's copies (small: a lower bound)


@dataclass
class GpuFacts:
    torch_version: str = ""
    torch_cuda: str | None = None  # CUDA version PyTorch was built for; None = CPU-only build
    cuda_available: bool = False
    devices: list[GpuDevice] = field(default_factory=list)
    torch_error: str | None = None
    driver_version: str | None = None  # from nvidia-smi
    smi_gpus: list[str] = field(default_factory=list)  # GPU names nvidia-smi lists
    smi_error: str | None = None  # None also when nvidia-smi is simply not installed
    direct: DirectCopyFacts = field(default_factory=DirectCopyFacts)


@dataclass
class CpuFacts:
    model: str = ""
    logical_cores: int = 0
    physical_cores: int | None = None
    avx2: bool | None = None  # None = could not tell
    avx512: bool | None = None
    isa_source: str = ""
    native_isa: str | None = None  # the path the native kernel picks; None when it cannot load
    native_error: str | None = None


@dataclass
class MemoryFacts:
    total_bytes: int = 0
    available_bytes: int = 0
    error: str | None = None


@dataclass
class DiskFacts:
    path: str = ""
    free_bytes: int = 0
    total_bytes: int = 0
    error: str | None = None


@dataclass
class SystemFacts:
    platform: str
    python: str
    frozen: bool
    gpu: GpuFacts
    cpu: CpuFacts
    memory: MemoryFacts
    disk: DiskFacts

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- GPU ---------------------------------------------------------------------------------------
def probe_torch_gpu(facts: GpuFacts) -> None:
    try:
        import torch
    except Exception as exc:  # a broken install is exactly what the doctor is for
        facts.torch_error = f"PyTorch cannot be imported: {type(exc).__name__}: {exc}"
        return
    facts.torch_version = str(torch.__version__)
    facts.torch_cuda = torch.version.cuda
    try:
        facts.cuda_available = bool(torch.cuda.is_available())
        for i in range(torch.cuda.device_count() if facts.cuda_available else 0):
            props = torch.cuda.get_device_properties(i)
            free: int | None = None
            with contextlib.suppress(Exception):  # some drivers refuse it; the total is enough
                free, _total = torch.cuda.mem_get_info(i)
            facts.devices.append(GpuDevice(props.name, int(props.total_memory), free, (props.major, props.minor)))
    except Exception as exc:
        facts.torch_error = f"CUDA initialisation failed: {type(exc).__name__}: {exc}"


def probe_nvidia_smi(facts: GpuFacts, timeout: float = 15.0) -> None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return
    try:
        res = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        facts.smi_error = f"nvidia-smi failed: {exc}"
        return
    if res.returncode != 0:
        facts.smi_error = f"nvidia-smi exited {res.returncode}: {(res.stderr or res.stdout).strip()[:300]}"
        return
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            facts.smi_gpus.append(parts[0])
            facts.driver_version = parts[1]


def probe_direct_copy(facts: GpuFacts, mib: int = 16, reps: int = 5) -> None:
    """Register a read-only mapping of a temporary file as the engine registers the checkpoint's shards, copy it to
    the GPU, compare the bytes. On Windows this is the only way to know (the engine's "auto" leaves it off there)."""
    if not facts.cuda_available:
        return
    import mmap
    import tempfile

    d = facts.direct
    d.tried = True
    n = mib << 20
    path = None
    try:
        import numpy as np
        import torch

        from engine.gpu import cudart
        from engine.gpu.prefill.direct import cuda_register, cuda_unregister

        fd, path = tempfile.mkstemp(prefix="neural-doctor-", suffix=".bin")
        want = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
        with os.fdopen(fd, "wb") as out:
            out.write(want.tobytes())
        with open(path, "rb") as f, mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ) as mm:
            host = np.frombuffer(mm, dtype=np.uint8)
            ptr = host.ctypes.data
            err = cuda_register(ptr, n)
            d.registered = err == 0
            if err:
                d.error = f"cudaHostRegister of a read-only file mapping returned CUDA error {err}"
            else:
                try:
                    rt = cudart.runtime()
                    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
                    stream = torch.cuda.current_stream()
                    times = []
                    for _ in range(reps):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record(stream)
                        if rt is not None:
                            rt.copy_2d(dst.data_ptr(), n, ptr, n, n, 1, stream.cuda_stream)
                        else:  # a registered range counts as pinned: torch issues one cudaMemcpyAsync
                            dst.copy_(torch.from_numpy(host), non_blocking=True)
                        end.record(stream)
                        end.synchronize()
                        times.append(start.elapsed_time(end))
                    d.same_bytes = bool(np.array_equal(dst.cpu().numpy(), want))
                    d.gb_s = round(n / (sorted(times)[len(times) // 2] * 1e6), 1)
                finally:
                    cuda_unregister(ptr)
            del host
    except Exception as exc:  # the doctor reports, it never crashes
        d.error = f"{type(exc).__name__}: {exc}"
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


def probe_gpu() -> GpuFacts:
    facts = GpuFacts()
    probe_torch_gpu(facts)
    probe_nvidia_smi(facts)
    probe_direct_copy(facts)
    return facts


# ---- CPU ---------------------------------------------------------------------------------------
def isa_from_cpuinfo(text: str) -> tuple[str, bool, bool]:
    """(model name, AVX2+FMA, AVX-512 F/BW/DQ/VL) from the text of /proc/cpuinfo."""
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, {"avx2", "fma"} <= flags, set(AVX512_FLAGS) <= flags


def _windows_cpu_model() -> str:
    try:
        import winreg  # type: ignore[import-not-found,unused-ignore]

        key = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE,  # type: ignore[attr-defined,unused-ignore]
                             r"HARDWARE\DESCRIPTION\System\CentralProcessor\0")
        return str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()  # type: ignore[attr-defined,unused-ignore]
    except Exception:
        return platform.processor()


def probe_cpu() -> CpuFacts:
    facts = CpuFacts(logical_cores=os.cpu_count() or 0)
    try:
        import psutil

        facts.physical_cores = psutil.cpu_count(logical=False)
    except Exception:
        pass
    if sys.platform.startswith("linux"):
        try:
            facts.model, facts.avx2, facts.avx512 = isa_from_cpuinfo(Path("/proc/cpuinfo").read_text())
            facts.isa_source = "/proc/cpuinfo"
        except OSError as exc:
            facts.isa_source = f"/proc/cpuinfo unreadable ({exc})"
    elif sys.platform == "win32":
        facts.model = _windows_cpu_model()
        try:
            import ctypes

            present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined,unused-ignore]
            facts.avx2 = bool(present(PF_AVX2_INSTRUCTIONS_AVAILABLE))
            facts.avx512 = bool(present(PF_AVX512F_INSTRUCTIONS_AVAILABLE))
            facts.isa_source = "IsProcessorFeaturePresent"
        except Exception as exc:
            facts.isa_source = f"IsProcessorFeaturePresent failed ({exc})"
    else:
        facts.model = platform.processor() or platform.machine()
    # The native kernel's own CPUID check is the one that decides the path it runs: prefer it.
    try:
        from native.kernel import load_kernel

        kernel = load_kernel()
        feats = kernel.features()
        facts.avx2, facts.avx512 = "avx2" in feats, "avx512" in feats
        facts.native_isa = kernel.best_isa()
        facts.isa_source = "native kernel CPUID"
    except Exception as exc:
        facts.native_error = str(exc)
    return facts


# ---- memory and disk ---------------------------------------------------------------------------
def probe_memory() -> MemoryFacts:
    try:
        import psutil

        vm = psutil.virtual_memory()
        return MemoryFacts(int(vm.total), int(vm.available))
    except Exception as exc:
        return MemoryFacts(error=f"psutil unavailable: {exc}")


def probe_disk(path: Path) -> DiskFacts:
    # The data dir may not exist yet on a fresh machine: measure the nearest existing parent.
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as exc:
        return DiskFacts(str(path), error=str(exc))
    return DiskFacts(str(path), int(usage.free), int(usage.total))


def gather(data_dir: Path) -> SystemFacts:
    return SystemFacts(
        platform=f"{platform.system()} {platform.release()} ({platform.machine()})",
        python=platform.python_version(),
        frozen=bool(getattr(sys, "frozen", False)),
        gpu=probe_gpu(),
        cpu=probe_cpu(),
        memory=probe_memory(),
        disk=probe_disk(data_dir),
    )


# ---- the limits the settings are judged against (Preferences and doctor) ------------------------
def machine_limits(gpu: GpuFacts, cpu_cores: int, memory: MemoryFacts) -> tuple[bool, Any]:
    """(a usable CUDA GPU is present, engine.plan.Machine) from the probed facts."""
    from engine.plan import Machine

    card = gpu.devices[0].total_bytes if gpu.cuda_available and gpu.devices else None
    return card is not None, Machine(cpu_cores or None, memory.total_bytes or None, card)


def this_machine() -> tuple[bool, Any]:
    """The quick probes (no nvidia-smi, no native kernel load): cheap enough for a dialog."""
    g = GpuFacts()
    probe_torch_gpu(g)
    return machine_limits(g, os.cpu_count() or 0, probe_memory())
