"""The host's part of a GPU decode layer, Python path against the one native call, on the CPU alone.

    python -m bench.kernel.native_layer_host CKPT [--threads 2] [--tokens 64] [--misses 3] [--seed 0]

What a decode layer costs the host between the router's flag and the flag its CPU result raises, in the early
launch's mode (no copy lane: engine/gpu/native_layer.py without a lane), with the GPU left out: the routing row is
written and its flag raised by this process, every expert is a miss. A (the Python path of Decoder.step): the
row read, the hit/miss loop, the admission check, ``NativeMisses.compute`` (NativeExperts' wrapper and
``neural_moe_token``), the CPU flag. B: ``NativeLayer.run`` (native/neural_lane.c::neural_lane_layer: the same
work in C) and its bookkeeping. Each layer's experts stream ~13 MB a miss through the caches at the 120b shape, so
whatever runs between two layers' kernels runs on caches the last one flushed, as on the GPU machine. Tokens
alternate A B B A over the same random routing; per layer, the median and mean microseconds of each path and the
difference (MEASURED), which the experts' own span (the kernel's, the same in both) does not explain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

BT = 16  # the row's block (the GPU kernels' block_t)


class HostCore:
    """The pinned buffers the decoder and the native call read and write (GpuCore's host side), in plain memory."""

    def __init__(self, cfg: Any) -> None:
        n, h = cfg.num_hidden_layers, cfg.hidden_size
        self.cfg = cfg
        self.kern = SimpleNamespace(block_t=BT)
        self.np_flags = np.zeros(n + 1, np.int32)
        self.np_cpu_done = np.zeros(n, np.int32)
        self.np_route = np.full((n, 4 * BT), -1, np.int32)
        self.np_t = np.random.default_rng(1).standard_normal(h).astype(np.float32)
        self.np_cpu_moe = np.zeros((2, h), np.float32)


def python_layer(c: HostCore, misses: Any, layer: int, step: int, k: int) -> None:
    """Decoder.step's early-launch path from the flag to the CPU flag (no lane, no capture possible)."""
    flags = c.np_flags
    while flags[layer] != step:
        pass
    row = c.np_route[layer]
    ids = row[:k].tolist()
    wts = row[BT : BT + k].view(np.float32).tolist()
    slots = row[2 * BT : 2 * BT + k].tolist()
    miss_ids: list[int] = []
    miss_w: list[float] = []
    for e, w, s in zip(ids, wts, slots, strict=True):
        if s < 0:
            miss_ids.append(e)
            miss_w.append(w)
    caps: dict[int, int] = {}
    misses.compute(layer, c.np_t, miss_ids, miss_w, c.np_cpu_moe[layer % 2], caps, None)
    c.np_cpu_done[layer] = step


def run(ckpt: str, threads: int, tokens: int, n_miss: int, seed: int) -> dict[str, Any]:
    from engine.checkpoint import Checkpoint
    from engine.gpu.cpu_experts import NativeMisses
    from engine.gpu.layout import ExpertLayout
    from engine.gpu.native_layer import NativeLayer, Runtime

    ck = Checkpoint.open(ckpt)
    cfg = ck.config
    misses = NativeMisses(ck, ExpertLayout.for_config(cfg), threads)
    c = HostCore(cfg)
    n, k, e = cfg.num_hidden_layers, cfg.num_experts_per_tok, cfg.num_local_experts
    # no graphs to launch (their addresses 0): the layer after next is the GPU's
    nat = NativeLayer(c, misses.experts, None, Runtime(0, 0, 0, 0, (0,) * n, 0, None, 0, None), 0)
    rng = np.random.default_rng(seed)
    step = 0
    got: dict[str, list[float]] = {"python": [], "native": []}
    outs: dict[str, list[bytes]] = {"python": [], "native": []}
    for t in range(tokens + 4):  # 4 untimed (first touches)
        routing = [rng.choice(e, size=k, replace=False) for _ in range(n)]
        weights = [rng.dirichlet(np.ones(k)).astype(np.float32) for _ in range(n)]
        for path in (("python", "native") if t % 2 == 0 else ("native", "python")):  # A B, B A, ...
            step += 1
            for layer in range(n):
                row = c.np_route[layer]
                row[:k] = routing[layer]
                row[BT : BT + k] = weights[layer].view(np.int32)
                row[2 * BT : 2 * BT + k] = -1
                row[2 * BT : 2 * BT + k - n_miss] = 0  # the first k - n_miss are hits
                c.np_flags[layer] = step
                t0 = time.perf_counter()
                if path == "python":
                    python_layer(c, misses, layer, step, k)
                else:
                    j = nat.run(layer, step)
                    nat.learn(layer, j)
                dt = time.perf_counter() - t0
                if t >= 4:
                    got[path].append(dt * 1e6)
                    outs[path].append(c.np_cpu_moe[layer % 2].tobytes())
    same = outs["python"] == outs["native"]
    med = {p: statistics.median(v) for p, v in got.items()}
    mean = {p: statistics.fmean(v) for p, v in got.items()}
    return {"ckpt": ckpt, "threads": threads, "tokens": tokens, "layers": n, "misses_per_layer": n_miss,
            "median_us_per_layer_MEASURED": {p: round(v, 1) for p, v in med.items()},
            "mean_us_per_layer_MEASURED": {p: round(v, 1) for p, v in mean.items()},
            "saved_median_us_per_layer": round(med["python"] - med["native"], 1),
            "saved_mean_us_per_layer": round(mean["python"] - mean["native"], 1),
            "same_results": same}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.native_layer_host", description=__doc__.split("\n")[0])
    p.add_argument("ckpt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--misses", type=int, default=3, help="misses a layer (the rest hits), 1..k")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    r = run(a.ckpt, a.threads, a.tokens, a.misses, a.seed)
    print(json.dumps(r))
    return 0 if r["same_results"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
