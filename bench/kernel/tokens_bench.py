"""Multi-token kernel benchmark: prompt groups of T tokens through one expert (``expert_tokens``).

The prompt path sends each group of <= 16 tokens routed to a non-resident expert to the native
multi-token call, which reads the expert's bytes once per call. Over the same synthetic store as
``neural bench kernel`` (random experts, so every call reads from DRAM), for each T this reports
milliseconds per group, GB/s of expert bytes, and token-experts per second, next to the
one-token kernel (4 experts per call, as decode) measured in the same run.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from engine.store.native_experts import expert_ref_from_record
from engine.store.reader import ExpertStore
from native.kernel import MAX_TOKENS, NativeKernel, load_kernel

from .kernel_bench import EXPERTS_PER_CALL, H120, I120, _store_at


@dataclass(frozen=True)
class TokensRow:
    tokens: int
    ms_per_group: float
    gbps: float  # expert bytes read per second
    token_experts_per_s: float
    cpu_ms_per_group: float  # process CPU time (all kernel threads, spinning included): steadier on a shared machine


@dataclass(frozen=True)
class TokensBench:
    rows: list[TokensRow]
    one_token_gbps: float  # the decode kernel (4 experts per call), same run
    one_token_ms_per_expert: float
    threads: int
    isa: str
    inputs: str
    advise: str
    expert_bytes: int
    experts_in_store: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _timed(seconds: float, rounds: int, call: Callable[[], None]) -> tuple[float, float]:
    """Median wall and process-CPU seconds per call over ``rounds`` rounds of about ``seconds / rounds``."""
    wall, cpu = [], []
    for _ in range(rounds):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while n < 3 or time.perf_counter() - t0 < seconds / rounds:
            call()
            n += 1
        wall.append((time.perf_counter() - t0) / n)
        cpu.append((time.process_time() - c0) / n)
    return statistics.median(wall), statistics.median(cpu)


def run_tokens_bench(tokens: Sequence[int] = (1, 2, 4, 8, 16), threads: int = 0, store_gib: float = 2.0,
                     fmt: str = "raw", isa: str = "auto", seconds: float = 3.0, rounds: int = 3,
                     path: str | None = None, seed: int = 0, kernel: NativeKernel | None = None,
                     inputs: str = "bf16", advise: str = "none",
                     progress: Callable[[int, int], None] | None = None) -> TokensBench:
    if inputs not in ("bf16", "fp32"):
        raise ValueError(f"inputs must be bf16 or fp32, not {inputs!r}")
    bad = [t for t in tokens if not 1 <= t <= MAX_TOKENS]
    if bad or not tokens:
        raise ValueError(f"tokens must be 1..{MAX_TOKENS} per group, got {list(tokens)}")
    k = kernel or load_kernel()
    k.set_isa(isa)
    k.set_threads(threads if threads > 0 else (os.cpu_count() or 1))
    with _store_at(path, store_gib, fmt, progress) as p, ExpertStore.open(p) as store:
        n, layout = store.experts, store.layout
        shape = k.shape(H120, I120, store.fmt, 7.0, 1.702, layout.offsets, bf16_inputs=inputs == "bf16")
        base, owner = k.pointer(store.buf)
        span = len(store.buf)
        if advise != "none":
            k.advise(base, span, advise)
        refs = [expert_ref_from_record(k, base + store.offset(0, e), layout, store.n_exc(0, e)) for e in range(n)]
        k.probe_read(base, span - span % 256)  # fault the mapping in; first touch is not what we measure
        eb = int(layout.fixed_bytes)
        rng, xr = random.Random(seed), np.random.default_rng(seed)
        rows = []
        for t in tokens:
            x = xr.standard_normal((t, H120)).astype(np.float32)
            w = np.full(t, 0.5, np.float32)
            out = np.empty((t, H120), np.float32)

            def group(x: np.ndarray = x, w: np.ndarray = w, out: np.ndarray = out) -> None:
                k.expert_tokens(shape, refs[rng.randrange(n)], x, w, out)

            dt, ct = _timed(seconds, rounds, group)
            rows.append(TokensRow(t, round(dt * 1e3, 3), round(eb / dt / 1e9, 3), round(t / dt, 1), round(ct * 1e3, 3)))
        x1 = xr.standard_normal(H120).astype(np.float32)
        o1 = np.empty(H120, np.float32)
        w4 = np.full(EXPERTS_PER_CALL, 0.25, np.float32)
        dt, _ = _timed(seconds, rounds, lambda: k.moe_token(
            shape, [refs[i] for i in rng.sample(range(n), EXPERTS_PER_CALL)], w4, x1, o1))
        del owner
        return TokensBench(rows, round(EXPERTS_PER_CALL * eb / dt / 1e9, 3), round(dt / EXPERTS_PER_CALL * 1e3, 3),
                           k.threads, k.isa, inputs, advise, eb, n)
