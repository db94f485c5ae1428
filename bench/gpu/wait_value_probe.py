"""How fast the GPU's front-end wakes on a host flag (cuStreamWaitValue32), against the host launching the work.

    python -m bench.gpu.wait_value_probe [--rounds 400] [--copy-mib 64]

With the copy lane on, decode layers are launched the plain way (engine/gpu/decoder.py): an early-launched graph's
first kernel polls the host's flag from every program and halved the lane's copy rate (session 18), so each layer
pays the host's launch and the GPU's start after its CPU experts (gpu_wait ~54 us a layer on the H200 host, session
25). A stream memory operation waits in the GPU's front-end instead of in a kernel: queued ahead (the next layer's
graph behind ``cuStreamWaitValue32`` on the flag the host raises), it would start the graph without the host's launch
and, maybe, without slowing the copies. This measures, with pinned flags (MEASURED, microseconds of host time):
- ``host_issue``: the host queues ``cuStreamWriteValue32`` and spins until the value lands (a driver call's round
  trip: what any launch pays at least); ``host_kernel``: a one-element kernel, then the write (a launch's);
- ``front_end``: wait and write queued earlier, the front-end waiting; the host raises the flag and spins until the
  write lands (the wake's latency);
- each beside host-to-device copies of ``--copy-mib`` MiB back to back on another stream (the lane's DMA), and the
  copies' GB/s with a wait pending on the compute stream against none (does the front-end's polling slow them?).
One JSON line at the end; exits 2 with a message where CUDA or the driver's stream memory operations are missing.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from typing import Any

EQ = 0x1  # CU_STREAM_WAIT_VALUE_EQ


def _driver() -> tuple[Any, Any]:
    """(cuStreamWaitValue32, cuStreamWriteValue32) from the loaded driver, the _v2 names where they exist."""
    lib = ctypes.CDLL("libcuda.so.1")
    fns = []
    for base in ("cuStreamWaitValue32", "cuStreamWriteValue32"):
        fn = getattr(lib, base + "_v2", None) or getattr(lib, base)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
        fns.append(fn)
    return fns[0], fns[1]


def _spin(flags: Any, i: int, v: int, limit_s: float = 2.0) -> None:
    t = time.perf_counter()
    while int(flags[i]) != v:
        if time.perf_counter() - t > limit_s:
            raise TimeoutError(f"flag {i} never reached {v}")


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_us": round(statistics.median(xs), 2), "p90_us": round(xs[int(0.9 * (len(xs) - 1))], 2)}


def run(rounds: int, copy_mib: int) -> dict[str, Any]:
    import torch

    from engine.gpu import cudart

    rt = cudart.runtime()
    if not torch.cuda.is_available() or rt is None:
        raise RuntimeError("no CUDA device or runtime library")
    wait, write = _driver()
    flags = torch.zeros(2, dtype=torch.int32, pin_memory=True)  # [go, done]
    np_flags = flags.numpy()
    go, done = (rt.device_pointer(flags.data_ptr() + 4 * i) for i in (0, 1))
    s = torch.cuda.Stream()
    raw = s.cuda_stream
    x = torch.zeros(1, device="cuda")
    value = [0]

    def check(rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"{what} failed with CUDA driver error {rc} (stream memory operations unsupported?)")

    def host_issue(kernel: bool) -> float:
        value[0] += 1
        t = time.perf_counter()
        if kernel:
            with torch.cuda.stream(s):
                x.add_(1)
        check(write(raw, done, value[0], 0), "cuStreamWriteValue32")
        _spin(np_flags, 1, value[0])
        return (time.perf_counter() - t) * 1e6

    def front_end() -> float:
        value[0] += 1
        v = value[0]
        check(wait(raw, go, v, EQ), "cuStreamWaitValue32")
        check(write(raw, done, v, 0), "cuStreamWriteValue32")
        t = time.perf_counter()
        while time.perf_counter() - t < 2e-4:  # the front-end reaches the wait
            pass
        t = time.perf_counter()
        np_flags[0] = v
        _spin(np_flags, 1, v)
        return (time.perf_counter() - t) * 1e6

    def measure() -> dict[str, Any]:
        out = {}
        for name, fn in (("host_issue", lambda: host_issue(False)), ("host_kernel", lambda: host_issue(True)),
                         ("front_end", front_end)):
            for _ in range(10):
                fn()
            out[name] = _stats([fn() for _ in range(rounds)])
        return out

    result: dict[str, Any] = {"rounds": rounds, "alone": measure()}
    src = torch.empty(copy_mib << 20, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty_like(src, device="cuda")
    cs = torch.cuda.Stream()

    def copy_rate(seconds: float) -> float:
        n, t = 0, time.perf_counter()
        with torch.cuda.stream(cs):
            while time.perf_counter() - t < seconds:
                dst.copy_(src, non_blocking=True)
                cs.synchronize()
                n += 1
        return n * src.numel() / (time.perf_counter() - t) / 1e9

    result["copy_GB_s_alone"] = round(copy_rate(0.5), 2)
    value[0] += 1
    check(wait(raw, go, value[0], EQ), "cuStreamWaitValue32")  # pending for the copies' whole window
    result["copy_GB_s_beside_pending_wait"] = round(copy_rate(0.5), 2)
    np_flags[0] = value[0]
    s.synchronize()
    stop = threading.Event()

    def copies() -> None:
        with torch.cuda.stream(cs):
            while not stop.is_set():
                dst.copy_(src, non_blocking=True)
                cs.synchronize()

    th = threading.Thread(target=copies, daemon=True)
    th.start()
    try:
        result["beside_copies"] = measure()
    finally:
        stop.set()
        th.join()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu.wait_value_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--copy-mib", type=int, default=64)
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.copy_mib < 1:
        ap.error("--rounds and --copy-mib must be >= 1")
    try:
        r = run(a.rounds, a.copy_mib)
    except (RuntimeError, OSError, AttributeError, TimeoutError) as exc:
        print(f"wait_value_probe: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
