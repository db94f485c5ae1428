"""The prompt lookahead and CPU share, A/B inside ONE process (GPU machine):

    python3 -m bench.gpu.lookahead_ab CKPT [--rounds 5] [--configs 0,16,28,16@0.9] [--json]

Why in one process: between fresh processes the host's rates moved by up to 1.6x in session 8's
call 1 (calibrated CPU pass 21-44 GB/s), more than the effect measured. Here one backend (12 GiB,
8 threads, the largest lookahead of the configurations reserved) runs a 600-token prompt, then
for each round and configuration (mirrored: the order reverses every round) a prompt of 600 at
position 0 and follow-ups of 600 and 400 new tokens at position 600. A configuration "N@S" uses
the first N lookahead slots and plans the CPU lane to S of the staging lane (prompt_cpu_share);
the split's rates stay the ones calibrated at load, so only the configuration changes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


def parse_config(text: str) -> tuple[int, float]:
    n, _, share = text.partition("@")
    return int(n), float(share) if share else 1.0


def main(argv: list[str] | None = None) -> int:
    from engine.checkpoint import Checkpoint
    from engine.gpu.backend import GpuBackend
    from engine.settings import EngineSettings

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--configs", default="0,16,28,16@0.9")
    p.add_argument("--json", action="store_true")
    p.add_argument("--interpret", action="store_true", help="the kernels under TRITON_INTERPRET=1 (plumbing check)")
    p.add_argument("--tokens", type=int, default=600, help="prompt and follow-up length (the 400 one scales)")
    a = p.parse_args(argv)
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    parsed = {c: parse_config(c) for c in configs}
    most = max(n for n, _ in parsed.values())
    s = EngineSettings(backend="gpu", vram_budget_gib=12.0, cpu_threads=8, lookahead_slots=most)
    t0 = time.perf_counter()
    be = GpuBackend.create(Checkpoint.open(Path(a.ckpt)), s, interpret=a.interpret, hot_set_file=None)
    runner = be.prefill
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "layers_ready": runner.wait_direct(120),
                           "calibration": dict(runner.calibration), "plan": be.plan.describe(), "runs": []}
    slots = list(runner.experts.ahead.slots)
    rng = np.random.default_rng(8)
    vocab = min(199_000, be.ck.config.vocab_size)
    n = a.tokens
    first = [int(x) for x in rng.integers(0, vocab, n)]
    runner.run(first, 0)  # positions 0..n-1 for the follow-ups
    follow = [int(x) for x in rng.integers(0, vocab, n)]
    kinds = [(f"first-{n}", 0, n), (f"follow-{n}", n, n), (f"follow-{n * 2 // 3}", n, n * 2 // 3)]
    times: dict[str, list[float]] = {}
    for r in range(a.rounds):
        for c in configs if r % 2 == 0 else configs[::-1]:
            n, share = parsed[c]
            runner.experts.ahead.slots = slots[:n]
            runner.experts.ahead.enabled = n > 0
            runner.split.cpu_share = share
            for kind, start, tokens in kinds:
                ids = first if start == 0 else follow[:tokens]
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                t = time.perf_counter()
                runner.run(ids, start)
                dt = time.perf_counter() - t
                st = runner.last.stats if runner.last is not None else None
                times.setdefault(f"{kind} {c}", []).append(dt)
                g = st.gpu if st else {}
                out["runs"].append({"round": r, "config": c, "kind": kind, "s": dt,
                                    "cpu_experts": st.cpu_experts if st else None,
                                    "ahead": st.ahead_experts if st else None, "cpu_jobs": st.cpu_jobs if st else None,
                                    "cpu_wait": st.cpu_wait if st else None, "launch": st.launch if st else None,
                                    "copies": g.get("copies"), "copies_ahead": g.get("copies_ahead"),
                                    "lane_cpu": dict(st.split) if st else {}})
    runner.experts.ahead.slots = slots
    summary = {k: {"median": statistics.median(v), "mean": statistics.mean(v), "runs": [round(x, 3) for x in v]}
               for k, v in times.items()}
    out["summary"] = summary
    be.close()
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(out["plan"])
        for k in sorted(summary):
            print(f"{k:24s} median {summary[k]['median']:.3f} s  mean {summary[k]['mean']:.3f} s  {summary[k]['runs']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
