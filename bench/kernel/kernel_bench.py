"""Kernel-vs-DRAM benchmark: is the expert kernel at the memory wall?

Builds a synthetic store of 120b-shape experts larger than the last-level cache, then in one run
measures (a) a plain read of the store by the same thread team (the probe: what the memory can
deliver to these threads) and (b) the one-token kernel over random experts, 4 per call like a
decode layer. Rounds alternate probe and kernel so drifting background load hits both.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.kernel.read_probe import best, probe_each_isa
from engine.store.format import PART_NAMES, RecordLayout, encode_record
from engine.store.native_experts import expert_ref_from_record
from engine.store.reader import ExpertStore
from engine.store.writer import StoreWriter, store_meta
from native.kernel import NativeKernel, load_kernel

H120, I120 = 2880, 2880
EXPERTS_PER_CALL = 4
TOKEN_EXPERTS = 88  # CPU-computed experts per token in the design's 120b budget


@dataclass(frozen=True)
class KernelBench:
    probe_gbps: float  # the read loop of the kernel's own ISA
    kernel_gbps: float
    ratio: float  # kernel / probe_gbps
    best_probe_gbps: float  # the best of every ISA's read loop (bench.kernel.read_probe), the fairer wall
    best_probe_isa: str
    ratio_best: float  # kernel / best_probe_gbps
    ms_per_token_88: float
    threads: int
    isa: str
    inputs: str  # "bf16" (the engine's default mode) or "fp32"
    prefetch: int
    format: str
    advise: str  # page hint given to the store mapping before its first touch (none, huge, populate)
    store_gib: float
    experts_in_store: int
    expert_bytes: int
    calls: int
    rounds: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def write_synthetic_store(path: Path, gib: float, fmt: str = "raw", seed: int = 0,
                          progress: Callable[[int, int], None] | None = None) -> Path:
    """A store of random 120b-shape experts totalling at least ``gib`` GiB (codes random, scales
    in a realistic 118..126 band so no slow denormal/overflow arithmetic skews the timing)."""
    layout = RecordLayout.build(H120, I120, fmt)
    n = max(EXPERTS_PER_CALL, -(-int(gib * (1 << 30)) // layout.fixed_bytes))
    rng = np.random.default_rng(seed)
    g = H120 // 32
    pool = rng.integers(0, 256, 1 << 26, dtype=np.uint8)
    scales = rng.integers(118, 127, (2 * I120 + H120) * g, dtype=np.uint8)
    sizes = {p: int(np.prod(s)) for p, s in (("gu_codes", (2 * I120, g, 16)), ("dn_codes", (H120, g, 16)))}
    meta = store_meta(layout, 1, n, "synthetic-kernel-bench", 7.0, 1.702, source="neural bench kernel")
    with StoreWriter(path, meta) as w:
        for e in range(n):
            off = (e * 7919 * 64) % (len(pool) - sizes["gu_codes"])
            parts: dict[str, np.ndarray] = {
                "gu_codes": pool[off : off + sizes["gu_codes"]].reshape(2 * I120, g, 16),
                "dn_codes": pool[off + 17 : off + 17 + sizes["dn_codes"]].reshape(H120, g, 16),
                "gu_scales": np.roll(scales, e)[: 2 * I120 * g].reshape(2 * I120, g),
                "dn_scales": np.roll(scales, e)[2 * I120 * g :].reshape(H120, g),
                "gu_bias": np.zeros(2 * I120, np.uint16),
                "dn_bias": np.zeros(H120, np.uint16),
            }
            rec, n_exc = encode_record({p: parts[p] for p in PART_NAMES}, layout)
            w.add(rec, n_exc)
            if progress is not None:
                progress(e + 1, n)
        return w.commit()


@contextlib.contextmanager
def _store_at(path: str | None, gib: float, fmt: str,
              progress: Callable[[int, int], None] | None) -> Iterator[Path]:
    if path:
        p = Path(path)
        if not p.is_file():
            write_synthetic_store(p, gib, fmt, progress=progress)
        yield p
        return
    d = tempfile.mkdtemp(prefix="neural-kbench-")
    try:
        yield write_synthetic_store(Path(d) / "bench.nstore", gib, fmt, progress=progress)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_kernel_bench(threads: int = 0, store_gib: float = 2.0, fmt: str = "raw", isa: str = "auto",
                     seconds: float = 4.0, rounds: int = 3, path: str | None = None, seed: int = 0,
                     kernel: NativeKernel | None = None, prefetch: int | None = None, inputs: str = "bf16",
                     advise: str = "none", progress: Callable[[int, int], None] | None = None) -> KernelBench:
    k = kernel or load_kernel()
    if inputs not in ("bf16", "fp32"):
        raise ValueError(f"inputs must be bf16 or fp32, not {inputs!r}")
    k.set_isa(isa)
    k.set_threads(threads if threads > 0 else (os.cpu_count() or 1))
    if prefetch is not None:
        k.set_prefetch(prefetch)
    with _store_at(path, store_gib, fmt, progress) as p, ExpertStore.open(p) as store:
        n, layout = store.experts, store.layout
        shape = k.shape(H120, I120, store.fmt, 7.0, 1.702, layout.offsets, bf16_inputs=inputs == "bf16")
        base, owner = k.pointer(store.buf)
        if advise != "none":  # before the probe's first touch, so the faults see it (False: not here)
            k.advise(base, len(store.buf), advise)
        refs = [expert_ref_from_record(k, base + store.offset(0, e), layout, store.n_exc(0, e)) for e in range(n)]
        sizes = store.table["size"].astype(np.int64)
        total = int(store.table["off"][-1] + sizes[-1] - store.table["off"][0])
        span = (base + int(store.table["off"][0]), total)
        rng = random.Random(seed)
        x = np.random.default_rng(seed).standard_normal(H120).astype(np.float32)
        out = np.empty(H120, np.float32)
        w = np.full(EXPERTS_PER_CALL, 0.25, np.float32)

        k.probe_read(span[0], span[1])  # fault the mapping in; the first touch is not what we measure
        probe, kern, calls_done = [], [], 0
        bests: list[tuple[str, float]] = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            reps = 0
            while reps < 3 or time.perf_counter() - t0 < seconds / 4:
                k.probe_read(span[0], span[1])
                reps += 1
            probe.append(reps * total / (time.perf_counter() - t0))
            nbytes, calls = 0, 0
            t0 = time.perf_counter()
            while calls < 8 or time.perf_counter() - t0 < seconds / 2:
                ids = rng.sample(range(n), EXPERTS_PER_CALL)
                k.moe_token(shape, [refs[i] for i in ids], w, x, out)
                nbytes += int(sizes[ids].sum())
                calls += 1
            dt = time.perf_counter() - t0
            kern.append((nbytes / dt, dt / calls))
            calls_done += calls
            bests.append(best(probe_each_isa(k, [span], reps=2)))
        del owner
        probe_bps = statistics.median(probe)
        best_bps = statistics.median(b for _, b in bests)
        best_isa = max(bests, key=lambda ib: ib[1])[0]
        kern_bps = statistics.median(b for b, _ in kern)
        call_s = statistics.median(c for _, c in kern)
        return KernelBench(
            probe_gbps=round(probe_bps / 1e9, 3),
            kernel_gbps=round(kern_bps / 1e9, 3),
            ratio=round(kern_bps / probe_bps, 4),
            best_probe_gbps=round(best_bps / 1e9, 3),
            best_probe_isa=best_isa,
            ratio_best=round(kern_bps / best_bps, 4),
            ms_per_token_88=round(call_s * (TOKEN_EXPERTS / EXPERTS_PER_CALL) * 1e3, 3),
            threads=k.threads,
            isa=k.isa,
            inputs=inputs,
            prefetch=k.prefetch,
            format=store.fmt,
            advise=advise,
            store_gib=round(total / (1 << 30), 3),
            experts_in_store=n,
            expert_bytes=int(layout.fixed_bytes),
            calls=calls_done,
            rounds=rounds,
        )
