"""Where a prompt's time goes: host phases (perf_counter) and GPU phases (CUDA events).

GPU phases are timed with event pairs recorded around the launches and read once at the end
of the prompt (reading them earlier would synchronize). On the CPU/interpreter path the
same names are filled with host times of the launches, which then are the compute times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


class GpuTimer:
    """Accumulates named GPU intervals; ``resolve()`` turns the recorded pairs into seconds."""

    def __init__(self, cuda: bool, enabled: bool = True) -> None:
        self.cuda = cuda
        self.enabled = enabled
        self.pairs: list[tuple[str, Any, Any]] = []
        self.host: dict[str, float] = {}

    def start(self, stream: Any = None) -> Any:
        if not self.enabled:
            return None
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        return ev

    def stop(self, name: str, begin: Any, stream: Any = None) -> None:
        if not self.enabled:
            return
        if not self.cuda:
            self.host[name] = self.host.get(name, 0.0) + time.perf_counter() - begin
            return
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        self.pairs.append((name, begin, ev))

    def resolve(self) -> dict[str, float]:
        out = dict(self.host)
        for name, a, b in self.pairs:
            out[name] = out.get(name, 0.0) + a.elapsed_time(b) / 1e3
        self.pairs.clear()
        self.host.clear()
        return out


@dataclass
class PrefillStats:
    tokens: int = 0
    start: int = 0
    blocks: int = 0
    wall: float = 0.0  # whole run(): time to the last token's logits
    # GPU (seconds of device time)
    gpu: dict[str, float] = field(default_factory=dict)  # attention, dense, gemm, copies, combine, tail
    # host (seconds)
    routing_sync: float = 0.0  # main thread waiting for the routing to reach the host
    stage_wait: float = 0.0  # main thread waiting for the producer to fill a buffer
    pack: float = 0.0  # producer: packing experts into pinned buffers
    pack_event_wait: float = 0.0  # producer: waiting for a buffer's previous copy
    cpu_jobs: float = 0.0  # worker: native multi-token kernel
    cpu_wait: float = 0.0  # main thread waiting for the worker at the end of a layer
    launch: float = 0.0  # main thread issuing kernels and copies
    # counts
    gemm_rows: int = 0
    gemm_waves: int = 0
    resident_experts: int = 0
    staged_experts: int = 0
    staged_bytes: int = 0
    direct_experts: int = 0  # of the staged: copied straight from the registered mapping (direct.py)
    ahead_experts: int = 0  # of the direct: copied during the previous layer (lookahead.py)
    ahead_used: int = 0  # of those: experts the routing then used
    cpu_experts: int = 0
    cpu_rows: int = 0
    split: dict[str, float] = field(default_factory=dict)  # lanes observed vs predicted (split.py)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("gpu", "split")}
        d["gpu"] = dict(self.gpu)
        d["split"] = dict(self.split)
        d["tokens_per_s"] = self.tokens_per_s
        return d

    def summary(self) -> str:
        g = self.gpu
        return (f"{self.tokens} tokens in {self.wall:.3f} s ({self.tokens_per_s:.0f} tok/s): GPU gemm "
                f"{g.get('gemm', 0):.3f} s, attention {g.get('attention', 0):.3f} s, dense {g.get('dense', 0):.3f} s, "
                f"staging copies {g.get('copies', 0):.3f} s ({self.staged_experts} experts, "
                f"{self.staged_bytes / 1e9:.2f} GB, {self.direct_experts} direct, {self.ahead_experts} ahead "
                f"({self.ahead_used} used), {g.get('copies_ahead', 0):.3f} s), pack {self.pack:.3f} s, "
                f"stage wait {self.stage_wait:.3f} s, "
                f"CPU jobs {self.cpu_jobs:.3f} s ({self.cpu_experts} experts, waited {self.cpu_wait:.3f} s), "
                f"routing sync {self.routing_sync:.3f} s, launch {self.launch:.3f} s")
