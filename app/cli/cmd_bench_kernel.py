"""``neural bench kernel``: the native expert kernel against a DRAM read probe, same threads."""

from __future__ import annotations

import argparse
import json
import platform
import sys

from .lab import ensure_lab

NAME = "bench"
HELP = "Benchmarks (kernel: native CPU expert kernel vs. a DRAM read probe)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    k = sub.add_parser("kernel", help="expert kernel GB/s vs. a plain DRAM read with the same threads",
                       description="Builds a synthetic store of 120b-shape experts larger than the last-level "
                                   "cache and measures the one-token kernel (4 random experts per call) against "
                                   "a plain read of the same memory by the same thread team.")
    k.add_argument("--threads", type=int, default=0, help="kernel threads including the caller (0 = all CPUs)")
    k.add_argument("--store-gib", type=float, default=2.0, help="synthetic store size (>= 2 GiB exceeds the LLC)")
    k.add_argument("--format", default="raw", choices=["raw", "packed"])
    k.add_argument("--isa", default="auto", choices=["auto", "avx512bf16", "avx512", "avx2", "scalar"])
    k.add_argument("--inputs", default="bf16", choices=["bf16", "fp32"],
                   help="input precision: bf16 (the engine's default dtype; enables the vdpbf16ps loop) or fp32")
    k.add_argument("--seconds", type=float, default=4.0, help="measuring time per round")
    k.add_argument("--rounds", type=int, default=3, help="alternating probe/kernel rounds (median reported)")
    k.add_argument("--prefetch", type=int, default=None, metavar="BYTES",
                   help="software prefetch distance of the SIMD kernels (tuning; 0 = off)")
    k.add_argument("--advise", default="none", choices=["none", "huge", "populate"],
                   help="page hint for the store mapping before its first touch (Linux MADV_HUGEPAGE / "
                        "MADV_POPULATE_READ, Windows PrefetchVirtualMemory; ignored where unsupported)")
    k.add_argument("--tokens", default=None, metavar="T,T,...",
                   help="measure the multi-token (prompt group) kernel at these group sizes, e.g. 1,2,4,8,16, "
                        "next to the one-token kernel, instead of the probe comparison")
    k.add_argument("--path", default=None, help="keep the synthetic store at this path (reused if present)")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(_bench=run_kernel)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(args: argparse.Namespace) -> int:
    return int(args._bench(args))


def run_kernel(args: argparse.Namespace) -> int:
    ensure_lab()
    from bench.kernel.kernel_bench import run_kernel_bench
    from native.kernel import KernelError, NativeUnavailable

    from .cmd_build_store import stderr_progress
    from .common import fail

    if args.tokens:
        return run_tokens(args)
    try:
        r = run_kernel_bench(threads=args.threads, store_gib=args.store_gib, fmt=args.format, isa=args.isa,
                             seconds=args.seconds, rounds=max(1, args.rounds), path=args.path,
                             prefetch=args.prefetch, inputs=args.inputs, advise=args.advise,
                             progress=stderr_progress("synthetic store"))
    except (NativeUnavailable, KernelError) as exc:
        return fail(str(exc))
    if args.json:
        d = r.as_dict()
        d["cpu"] = cpu_name()
        print(json.dumps(d))
        return 0
    print(f"cpu: {cpu_name()}", file=sys.stderr)
    print(f"store: {r.store_gib:.2f} GiB, {r.experts_in_store} experts of the 120b shape "
          f"({r.expert_bytes:,} B each, {r.format}); {r.threads} threads, {r.isa} path, {r.inputs} inputs",
          file=sys.stderr)
    print(f"DRAM read probe : {r.probe_gbps:8.2f} GB/s   ({r.isa} read loop)")
    print(f"best read probe : {r.best_probe_gbps:8.2f} GB/s   ({r.best_probe_isa} read loop, the best of every ISA's)")
    print(f"expert kernel   : {r.kernel_gbps:8.2f} GB/s   ratio {r.ratio:.3f}, {r.ratio_best:.3f} of the best")
    print(f"88 experts/token: {r.ms_per_token_88:8.2f} ms   ({r.calls} calls of 4 experts, {r.rounds} rounds)")
    return 0


def run_tokens(args: argparse.Namespace) -> int:
    from bench.kernel.tokens_bench import run_tokens_bench
    from native.kernel import KernelError, NativeUnavailable

    from .cmd_build_store import stderr_progress
    from .common import fail

    try:
        tokens = [int(t) for t in str(args.tokens).split(",") if t.strip()]
        r = run_tokens_bench(tokens, threads=args.threads, store_gib=args.store_gib, fmt=args.format, isa=args.isa,
                             seconds=args.seconds, rounds=max(1, args.rounds), path=args.path, inputs=args.inputs,
                             advise=args.advise, progress=stderr_progress("synthetic store"))
    except ValueError as exc:
        return fail(f"--tokens: {exc}")
    except (NativeUnavailable, KernelError) as exc:
        return fail(str(exc))
    if args.json:
        d = r.as_dict()
        d["cpu"] = cpu_name()
        print(json.dumps(d))
        return 0
    print(f"cpu: {cpu_name()}; {r.threads} threads, {r.isa} path, {r.inputs} inputs, "
          f"{r.expert_bytes:,} B per expert", file=sys.stderr)
    for row in r.rows:
        print(f"T={row.tokens:2d}: {row.ms_per_group:8.2f} ms/group {row.gbps:7.2f} GB/s "
              f"{row.token_experts_per_s:9.1f} token-experts/s  (CPU {row.cpu_ms_per_group:.2f} ms)")
    print(f"one-token kernel: {r.one_token_ms_per_expert:8.2f} ms/expert {r.one_token_gbps:7.2f} GB/s")
    return 0
