"""Direct copies and the lookahead change no bits (GPU machine):
``python3 -m bench.gpu.direct_check CKPT [TOKENS]``.

Loads the GPU backend once (12 GiB, 8 threads, frozen residency, the fixed split with no CPU
experts, so every non-resident expert goes to the GPU however it is staged), waits for the
checkpoint's registration, then runs the same prompt with direct copies, with direct copies and
the next layer's experts staged ahead into the lookahead slots (lookahead.py), and through the
packing ring, twice each in mirrored order, and prints whether the last-token logits are
bit-identical and each run's time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.checkpoint import Checkpoint
from engine.gpu import cudart
from engine.gpu.backend import GpuBackend
from engine.settings import EngineSettings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ck = Checkpoint.open(Path(args[0]))
    n = int(args[1]) if len(args) > 1 else 600
    s = EngineSettings(backend="gpu", vram_budget_gib=12.0, cpu_threads=8, refresh_every=0, prompt_split="fixed",
                       stage_direct="on")
    t0 = time.perf_counter()
    be = GpuBackend.create(ck, s, interpret=False, hot_set_file=None, use_graphs=True)
    load_s = time.perf_counter() - t0
    runner = be.prefill
    assert runner.direct is not None, "no direct copies"
    ready = runner.wait_direct(120)
    ids = [int(x) for x in np.random.default_rng(5).integers(0, 199_000, n)]
    direct = runner.direct
    out: dict[str, Any] = {"load_s": load_s, "layers_ready": ready, "locked_gib": direct.locked_bytes / 2**30,
                              "error": direct.error, "tokens": n, "runs": [],
                              "cudart_2d_copies": cudart.runtime() is not None}
    logits: dict[str, torch.Tensor] = {}
    runner.experts.cpu_max = 0  # the CPU computes nothing: which device computes an expert changes bits
    out["ahead_slots"] = len(runner.experts.ahead.slots)
    for name in ("direct", "ahead", "ring", "ring", "ahead", "direct"):
        runner.experts.direct = None if name == "ring" else direct
        runner.experts.ahead.enabled = name == "ahead" and bool(runner.experts.ahead.slots)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        got = runner.run(ids, 0)
        dt = time.perf_counter() - t0
        st = runner.last.stats if runner.last is not None else None
        out["runs"].append({"path": name, "s": dt, "direct_experts": st.direct_experts if st else None,
                            "staged": st.staged_experts if st else None, "cpu": st.cpu_experts if st else None,
                            "ahead": st.ahead_experts if st else None, "ahead_used": st.ahead_used if st else None,
                            "summary": st.summary() if st else ""})
        if name in logits:
            out[f"{name}_repeat_identical"] = bool(torch.equal(logits[name], got))
        logits[name] = got
    out["direct_vs_ring_identical"] = bool(torch.equal(logits["direct"], logits["ring"]))
    out["ahead_vs_direct_identical"] = bool(torch.equal(logits["ahead"], logits["direct"]))
    out["max_abs_diff"] = float((logits["direct"] - logits["ring"]).abs().max())
    runner.experts.direct = direct
    be.close()
    print(json.dumps(out, indent=1))
    return 0 if out["direct_vs_ring_identical"] and out["ahead_vs_direct_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
