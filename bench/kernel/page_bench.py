"""Does the page size of the expert mapping matter? The same store read through 4 KiB and 2 MiB mappings.

Session 3 found the memory-mapped store (tmpfs, 4 KiB pages) read 12-21% slower by the CPU kernel than the C
harness's anonymous memory on the H200 host, and left it there. This puts one store's bytes behind each kind of
mapping a user's machine can give and measures, rounds alternating forward and back so drifting load hits all:
the team's plain read (the DRAM probe), the one-token kernel over random experts (4 a call, as
``neural bench kernel``) and, with CUDA, host-to-device copies from the registered mapping (the prompt path's
direct copies).

    python -m bench.kernel.page_bench [--threads 8] [--store-gib 4] [--shm /dev/shm] [--disk /tmp]
        [--rounds 3] [--seconds 2] [--modes tmpfs-4k,tmpfs-2m,disk,anon-2m,anon-4k] [--json]
    python -m bench.kernel.page_bench --collapse CKPT_DIR [--threads 8]

Modes: ``tmpfs-4k`` the file in tmpfs mapped as the engine maps it today; ``tmpfs-2m`` a copy of it in tmpfs mapped
2 MiB-aligned and collapsed (bench/kernel/huge_map.py); ``disk`` a copy on the disk's file system mapped plainly
(the kernel's own choice; newer ext4/xfs cache large folios); ``anon-2m`` / ``anon-4k`` anonymous memory with and
without MADV_HUGEPAGE (the C harness's kind). The table gives each mapping's bytes mapped with 2 MiB entries, so a
mode that did not get the pages it names shows it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.store.native_experts import expert_ref_from_record
from engine.store.reader import ExpertStore
from native.kernel import load_kernel

from .huge_map import HUGE, collapse, map_aligned, pmd_mapped_bytes
from .kernel_bench import EXPERTS_PER_CALL, H120, I120, write_synthetic_store

MODES = ("tmpfs-4k", "tmpfs-2m", "disk", "anon-2m", "anon-4k")


def _anon(src: np.ndarray, huge: bool) -> np.ndarray:
    m = mmap.mmap(-1, src.nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # shared would be tmpfs
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    a = np.frombuffer(m, dtype=np.uint8)
    skip = -int(a.ctypes.data) % HUGE  # a 2 MiB-aligned start, so huge pages can map it
    a = a[skip : skip + src.nbytes]
    a[:] = src
    return a


def _write_copy(src: Path, dst: Path) -> None:
    """A copy written through the page cache in 64 MiB writes (a copy_file_range/sendfile copy may cache it in
    small folios; a model downloaded or copied by a user is written like this)."""
    with open(src, "rb") as f, open(dst, "wb") as g:
        while chunk := f.read(64 << 20):
            g.write(chunk)


@contextlib.contextmanager
def _buffers(modes: list[str], shm: Path, disk: Path, gib: float, threads: int,
             log: Any) -> Iterator[tuple[ExpertStore, dict[str, np.ndarray], dict[str, float]]]:
    files: list[Path] = []
    setup: dict[str, float] = {}
    try:
        src = shm / "neural-page-bench-a.nstore"
        files.append(src)
        t0 = time.perf_counter()
        write_synthetic_store(src, gib)
        setup["write_s"] = round(time.perf_counter() - t0, 2)
        store = ExpertStore.open(src)
        bufs: dict[str, np.ndarray] = {}
        for mode in modes:
            t0 = time.perf_counter()
            if mode == "tmpfs-4k":
                bufs[mode] = store.buf
            elif mode == "tmpfs-2m":
                dst = shm / "neural-page-bench-b.nstore"
                files.append(dst)
                _write_copy(src, dst)
                v = map_aligned(dst)
                if v is None:
                    raise RuntimeError("map_aligned is not available on this OS")
                collapse(v, threads=threads)
                bufs[mode] = v
            elif mode == "disk":
                dst = disk / "neural-page-bench-c.nstore"
                files.append(dst)
                _write_copy(src, dst)
                bufs[mode] = np.memmap(dst, dtype=np.uint8, mode="r")
            elif mode in ("anon-2m", "anon-4k"):
                bufs[mode] = _anon(store.buf, mode == "anon-2m")
            else:
                raise ValueError(f"--modes: unknown mode {mode!r} (choose from {', '.join(MODES)})")
            setup[f"{mode}_s"] = round(time.perf_counter() - t0, 2)
            print(f"{mode} ready in {setup[f'{mode}_s']} s", file=log, flush=True)
        yield store, bufs, setup
    finally:
        for f in files:
            with contextlib.suppress(OSError):
                f.unlink()


def _dma_gbps(buf: np.ndarray, reps: int = 3) -> tuple[float, float]:
    """(seconds to register the mapping with CUDA, median H2D GB/s of 256 MiB copies from it); (0, 0) without CUDA."""
    try:
        import torch
    except ImportError:
        return 0.0, 0.0
    if not torch.cuda.is_available():
        return 0.0, 0.0
    from engine.gpu.prefill.direct import as_tensor, cuda_register, cuda_unregister

    a = int(buf.ctypes.data)
    t0 = time.perf_counter()
    err = cuda_register(a, buf.nbytes)
    reg_s = time.perf_counter() - t0
    if err:
        raise RuntimeError(f"cudaHostRegister failed with CUDA error {err}")
    try:
        src = as_tensor(buf)
        chunk = 256 << 20
        dst = torch.empty(chunk, dtype=torch.uint8, device="cuda")
        rates = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for off in range(0, buf.nbytes - chunk + 1, chunk):
                dst.copy_(src[off : off + chunk], non_blocking=True)
            torch.cuda.synchronize()
            rates.append((buf.nbytes // chunk) * chunk / (time.perf_counter() - t0) / 1e9)
        return reg_s, statistics.median(rates)
    finally:
        cuda_unregister(a)


def run_page_bench(modes: list[str], threads: int = 8, store_gib: float = 4.0, shm: str = "/dev/shm",
                   disk: str = "/tmp", rounds: int = 3, seconds: float = 2.0, dma: bool = True,
                   seed: int = 0, log: Any = sys.stderr) -> dict[str, Any]:
    k = load_kernel()
    k.set_threads(threads)
    rng = random.Random(seed)
    x = np.random.default_rng(seed).standard_normal(H120).astype(np.float32)
    out = np.empty(H120, np.float32)
    w = np.full(EXPERTS_PER_CALL, 0.25, np.float32)
    with _buffers(modes, Path(shm), Path(disk), store_gib, threads, log) as (store, bufs, setup):
        n, layout = store.experts, store.layout
        shape = k.shape(H120, I120, store.fmt, 7.0, 1.702, layout.offsets, bf16_inputs=True)
        sizes = store.table["size"].astype(np.int64)
        first = int(store.table["off"][0])
        span = int(store.table["off"][-1] + sizes[-1]) - first
        refs: dict[str, list[Any]] = {}
        owners = []
        for mode, b in bufs.items():
            base, owner = k.pointer(b)
            owners.append(owner)
            refs[mode] = [expert_ref_from_record(k, base + store.offset(0, e), layout, store.n_exc(0, e))
                          for e in range(n)]
            k.probe_read(base + first, span)  # first touch: faults are not what we measure
        probe: dict[str, list[float]] = {m: [] for m in bufs}
        kern: dict[str, list[float]] = {m: [] for m in bufs}
        order = list(bufs)
        for r in range(rounds):
            for mode in order if r % 2 == 0 else order[::-1]:
                base, _ = k.pointer(bufs[mode])
                t0, reps = time.perf_counter(), 0
                while reps < 3 or time.perf_counter() - t0 < seconds / 4:
                    k.probe_read(base + first, span)
                    reps += 1
                probe[mode].append(reps * span / (time.perf_counter() - t0) / 1e9)
                nbytes, calls, t0 = 0, 0, time.perf_counter()
                while calls < 8 or time.perf_counter() - t0 < seconds / 2:
                    ids = rng.sample(range(n), EXPERTS_PER_CALL)
                    k.moe_token(shape, [refs[mode][i] for i in ids], w, x, out)
                    nbytes += int(sizes[ids].sum())
                    calls += 1
                kern[mode].append(nbytes / (time.perf_counter() - t0) / 1e9)
        rows = []
        for mode, b in bufs.items():
            reg_s, dma_rate = _dma_gbps(b) if dma else (0.0, 0.0)
            p, kk = statistics.median(probe[mode]), statistics.median(kern[mode])
            rows.append({"mode": mode, "pmd_mib": pmd_mapped_bytes(b) >> 20, "probe_gbps": round(p, 2),
                         "kernel_gbps": round(kk, 2), "ratio": round(kk / p, 3),
                         "kernel_runs": [round(v, 2) for v in kern[mode]],
                         "probe_runs": [round(v, 2) for v in probe[mode]],
                         "register_s": round(reg_s, 3), "dma_gbps": round(dma_rate, 2)})
        del owners
        store.close()
    return {"threads": k.threads, "isa": k.isa, "store_gib": round(span / (1 << 30), 2), "rounds": rounds,
            "setup_s": setup, "rows": rows}


def thp_settings() -> dict[str, str]:
    out = {}
    for name in ("enabled", "shmem_enabled", "defrag"):
        with contextlib.suppress(OSError):
            out[name] = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text().strip()
    return out


def collapse_dir(folder: str, threads: int) -> list[dict[str, Any]]:
    """``--collapse DIR``: every .safetensors shard in DIR rebuilt in 2 MiB pages (tmpfs: lasts while the file
    does), so the device's decode runs can compare the mappings on the same physical pages."""
    rows = []
    for f in sorted(Path(folder).glob("*.safetensors")):
        v = map_aligned(f)
        if v is None:
            raise RuntimeError("map_aligned is not available on this OS")
        t0 = time.perf_counter()
        collapse(v, threads=threads)
        rows.append({"file": f.name, "gib": round(v.nbytes / 2**30, 2), "s": round(time.perf_counter() - t0, 2),
                     "pmd_gib": round(pmd_mapped_bytes(v) / 2**30, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.page_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--store-gib", type=float, default=4.0)
    p.add_argument("--shm", default="/dev/shm")
    p.add_argument("--disk", default="/tmp")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0, help="per mode and round (half probe, half kernel)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--no-dma", action="store_true")
    p.add_argument("--collapse", metavar="DIR", help="only collapse DIR's .safetensors shards into 2 MiB pages")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.collapse:
        try:
            for row in collapse_dir(a.collapse, a.threads):
                print(json.dumps(row))
        except (OSError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        r = run_page_bench([m for m in a.modes.split(",") if m], a.threads, a.store_gib, a.shm, a.disk, a.rounds,
                           a.seconds, not a.no_dma)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    r["thp"] = thp_settings()
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"{r['threads']} threads, {r['isa']}, {r['store_gib']} GiB store, THP {r['thp']} (MEASURED, medians of "
          f"{r['rounds']} alternating rounds)")
    print(f"{'mode':<10} {'2 MiB-mapped':>13} {'probe GB/s':>11} {'kernel GB/s':>12} {'ratio':>6} {'DMA GB/s':>9}")
    for row in r["rows"]:
        print(f"{row['mode']:<10} {row['pmd_mib']:>10} MiB {row['probe_gbps']:>11.2f} {row['kernel_gbps']:>12.2f} "
              f"{row['ratio']:>6.3f} {row['dma_gbps']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
