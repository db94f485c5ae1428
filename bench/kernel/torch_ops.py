"""How many PyTorch operations a CPU-engine decode token runs between the native calls, and their time.

    python -m bench.kernel.torch_ops CKPT [--threads 2] [--tokens 16] [--top 0]

Loads CKPT on the CPU engine (native experts, projections, attention, norms and RoPE, bf16), decodes a prompt of 8
and 32 untimed tokens, then ``--tokens`` more under torch's profiler, and prints the aten operations a token and
their own CPU time a token (the profiler's overhead included: compare runs of one build against another, not
against wall time). ``--top N`` lists the N operations with the most own time.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--top", type=int, default=0)
    a = ap.parse_args(argv)
    if a.tokens < 1:
        ap.error("--tokens must be at least 1")

    from torch.profiler import ProfilerActivity, profile

    from engine.session import Engine
    from engine.settings import EngineSettings

    eng = Engine.load(a.ckpt, EngineSettings(backend="cpu", cpu_threads=a.threads))
    try:
        be = eng.backend
        vocab = eng.config.vocab_size
        feed = [int(i) for i in np.random.default_rng(0).integers(100, min(vocab, 30000), 40 + a.tokens)]
        be.forward(feed[:8])
        for t in feed[8:40]:  # warm: first touches and caches are not decode
            be.forward([t])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for t in feed[40:]:
                be.forward([t])
    finally:
        eng.close()
    ops = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    calls = sum(e.count for e in ops) / a.tokens
    own_ms = sum(e.self_cpu_time_total for e in ops) / a.tokens / 1e3
    print(f"{a.ckpt}: {be.name}, {a.threads} threads: {calls:.0f} aten operations a token, {own_ms:.3f} ms of their "
          f"own time a token (under the profiler) MEASURED")
    for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[: a.top]:
        print(f"  {e.key:28s} {e.count / a.tokens:7.1f} a token  {e.self_cpu_time_total / a.tokens / 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
