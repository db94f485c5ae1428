"""What a benchmark ran on: engine version, device, and the checkpoint's routing.

Every benchmark report carries these so a figure can be traced to the code, the machine
and the weights that produced it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def engine_version() -> dict[str, Any]:
    """Package version plus ``git describe`` of the source tree when it is a git checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg: str | None = version("neural")
    except PackageNotFoundError:  # a source tree that was never pip-installed: read pyproject.toml
        pkg = _pyproject_version()
    out: dict[str, Any] = {"package": pkg, "git": None}
    if (REPO_ROOT / ".git").exists():
        try:
            res = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=REPO_ROOT,
                                 capture_output=True, text=True, timeout=10, check=False)
            if res.returncode == 0:
                out["git"] = res.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _pyproject_version() -> str | None:
    import tomllib

    try:
        with (REPO_ROOT / "pyproject.toml").open("rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, ValueError):
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _physical_cores() -> int | None:
    """Distinct (package, core) pairs from /proc/cpuinfo; None where that is not available."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    cores: set[tuple[str, str]] = set()
    phys = core = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("physical id"):
            phys = line.split(":", 1)[1].strip()
        elif line.startswith("core id"):
            core = line.split(":", 1)[1].strip()
        elif not line.strip():
            if phys is not None and core is not None:
                cores.add((phys, core))
            phys = core = None
    return len(cores) or None


def _ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": _physical_cores(),
        "ram_bytes": _ram_bytes(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": props.name, "memory_bytes": int(props.total_memory),
                       "count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    return info


@dataclass(frozen=True)
class Routing:
    """How the checkpoint's router distributes tokens over experts, as far as it is known."""

    kind: str  # "skewed", "uniform" or "natural" (real weights)
    skew: float | None  # the router-bias skew of a synthetic checkpoint
    synthetic: dict[str, Any] | None  # SYNTHETIC.json without its shape block

    def describe(self) -> str:
        if self.kind == "natural":
            return "natural (real weights: routing is whatever the model does)"
        mode = (self.synthetic or {}).get("routing", {})
        if isinstance(mode, dict) and mode.get("mode") == "drift":
            return (f"{self.kind}, drifting (synthetic: a hot set per token topic that follows the text, "
                    f"skew {self.skew:g})")
        return f"{self.kind} (synthetic router-bias skew {self.skew:g})"


def checkpoint_routing(model_dir: Path) -> Routing:
    """Synthetic checkpoints state their skew in SYNTHETIC.json (engine.synth): 0 is uniform."""
    path = Path(model_dir) / "SYNTHETIC.json"
    if not path.is_file():
        return Routing("natural", None, None)
    try:
        meta = json.loads(path.read_text())
        skew = float(meta.get("skew", 0.0))
    except (OSError, ValueError, TypeError):
        return Routing("natural", None, None)
    meta = {k: v for k, v in meta.items() if k != "shape"}
    return Routing("skewed" if skew > 0 else "uniform", skew, meta)


def pick_model_dir(model_dir: Path, routing: str | None) -> Path:
    """A folder holding one checkpoint per routing (``DIR/skewed``, ``DIR/uniform``) resolves to
    the requested one; a plain checkpoint folder is returned as is."""
    if routing and not (model_dir / "config.json").is_file() and (model_dir / routing / "config.json").is_file():
        return model_dir / routing
    return model_dir
