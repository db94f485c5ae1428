"""This machine's prompt-path rates, measured once at load for the CPU/GPU split (split.py).

The two lanes of a prompt run together and share the cores and the memory, so each is timed
while the other works: the CPU kernel on 1 and ``tokens`` tokens of non-resident experts while
a background lane stages experts the way prompts will (straight from the registered mapping
when direct copies are ready, else through the packing ring), and that lane's per-expert time
while the CPU kernel runs. On the H200 host packing fell from 11.5 to 9.2 GB/s beside the CPU
kernel; with direct copies a quiet calibration predicted about 0.9 s of CPU jobs for a
600-token prompt that took 1.24 s (the copy engine reads host memory at ~50 GB/s beside them),
so the CPU lane outlasted the copies by 0.77 s (MEASURED, session 7).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .direct import plan_copies, run_copies
from .split import SplitModel

log = logging.getLogger(__name__)
Loop = Callable[[threading.Event, threading.Event], float]  # (stop, started) -> seconds per expert


class BackgroundLane:
    """``loop`` on its own thread while the caller measures something else."""

    def __init__(self, loop: Loop, start_timeout: float = 10.0) -> None:
        self._stop, self._started = threading.Event(), threading.Event()
        self._result: list[float] = []

        def run() -> None:
            try:
                self._result.append(loop(self._stop, self._started))
            except Exception:  # a calibration aid: the defaults stand in for a failed lane
                log.exception("calibration lane failed")
            finally:
                self._started.set()

        self._thread = threading.Thread(target=run, name="neural-calibrate-lane", daemon=True)
        self._thread.start()
        self._started.wait(start_timeout)

    def stop(self) -> float:
        """Stop the loop; its seconds per expert (0.0 when it did nothing)."""
        self._stop.set()
        self._thread.join()
        return self._result[0] if self._result else 0.0


def pack_loop(runner: Any, staged: list[tuple[int, int]]) -> Loop:
    """Pack experts through the staging ring until stopped; seconds of packing per expert."""

    def loop(stop: threading.Event, started: threading.Event) -> float:
        ring = runner.ring
        if ring is None or not staged:
            return 0.0
        p0, n = ring.pack_seconds, 0
        while not stop.is_set() or n == 0:
            layer, e = staged[n % len(staged)]
            ring.submit(layer, [e])
            _, _, buf = ring.take()
            ring.give_back(buf, None)
            n += 1
            started.set()
        return float(ring.pack_seconds - p0) / n

    return loop


def copy_loop(runner: Any, mapped: list[tuple[int, int]]) -> Loop:
    """Copy experts from the registered mapping into the first scratch slot (unused at load) on a
    side stream until stopped, eight per synchronisation as a prompt's waves do; wall seconds
    per expert."""
    d, core = runner.direct, runner.core
    slot, sb = core.plan.n_slots, core.plan.slot_bytes
    batch = [plan_copies(d, layer, [e], [slot], sb) for layer, e in mapped]

    def loop(stop: threading.Event, started: threading.Event) -> float:
        stream = torch.cuda.Stream(core.dev)
        with torch.cuda.stream(stream):
            for copies in batch:  # untimed: first touch
                run_copies(d, core.pool, copies)
            stream.synchronize()
            started.set()
            n, t0 = 0, time.perf_counter()
            while not stop.is_set() or n == 0:
                for copies in batch:
                    run_copies(d, core.pool, copies)
                stream.synchronize()
                n += len(batch)
        return (time.perf_counter() - t0) / n

    return loop


def measure_rates(runner: Any, tokens: int = 16, reps: int = 2) -> dict[str, float]:
    """Time the lanes side by side on non-resident experts and set ``runner.split.rates``."""
    cfg, core = runner.cfg, runner.core
    nbytes = core.layout.payload_bytes
    table = core.np_table
    cold = [(layer, int(e)) for layer in range(cfg.num_hidden_layers) for e in np.flatnonzero(table[layer] < 0)]
    if len(cold) < 4:
        return {}
    rng = np.random.default_rng(0)
    picks = [cold[int(i)] for i in rng.permutation(len(cold))]
    x = rng.standard_normal((tokens, cfg.hidden_size)).astype(np.float32)
    w = np.ones(tokens, dtype=np.float32)
    out = np.empty_like(x)

    def cpu_time(layer: int, e: int, n: int) -> float:
        t0 = time.perf_counter()
        runner.cpu.compute(layer, e, x[:n], w[:n], out[:n])
        return time.perf_counter() - t0

    cpu_time(*picks[0], tokens)  # first touch of the kernel's threads
    others = picks[2 * reps + 1 :]
    d = runner.direct
    mapped = [p for p in others if d is not None and d.ready(p[0])][:8] if runner.cuda else []
    lane = BackgroundLane(copy_loop(runner, mapped) if mapped else pack_loop(runner, others[: 8 * reps]))
    one = min(cpu_time(layer, e, 1) for layer, e in picks[1 : 1 + reps])
    many = min(cpu_time(layer, e, tokens) for layer, e in picks[1 + reps : 1 + 2 * reps])
    per_expert = lane.stop()
    stage = per_expert if per_expert and not mapped else runner.split.rates.stage * nbytes
    direct = per_expert if mapped else 0.0
    runner.split.rates = r = SplitModel.fitted(one, many, tokens, stage, nbytes, direct)
    got = {"cpu_1_token_s": one, f"cpu_{tokens}_tokens_s": many, "pack_s": stage, "direct_s": direct,
           "cpu_pass_gbps": 1e-9 / r.cpu_pass, "cpu_token_gbps": 1e-9 / r.cpu_token, "stage_gbps": 1e-9 / r.stage,
           "direct_gbps": 1e-9 / r.direct}
    log.info("prompt split rates: %s", {k: round(v, 5) for k, v in got.items()})
    return got
