"""The bare graph launch (engine/gpu/cudart.py GraphLauncher) and the early launch
(EngineSettings.early_launch) change no bits, and what they save (GPU machine):
``python3 -m bench.gpu.launch_check CKPT [TOKENS]``.

Loads the GPU backend once (12 GiB, 8 threads, frozen residency, the early graphs captured too),
then decodes the same token ids from position 0 six times, in the order launcher, replay, early,
early, replay, launcher (``replay``: PyTorch's ``CUDAGraph.replay()``; ``early``: each layer
launched before the previous layer's CPU experts are done), and prints one JSON line: whether
every token's logits are bit-identical to the first run's, and each run's launch phase (host
microseconds per layer), GPU wait and ms per token. Stays under 64 tokens so that no hot set is
installed in between.
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
from engine.gpu.backend import GpuBackend
from engine.settings import EngineSettings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ck = Checkpoint.open(Path(args[0]))
    n = min(int(args[1]) if len(args) > 1 else 48, 63)
    s = EngineSettings(backend="gpu", vram_budget_gib=12.0, cpu_threads=8, refresh_every=0, early_launch=True)
    be = GpuBackend.create(ck, s, interpret=False, hot_set_file=None, use_graphs=True)
    core = be.core
    launcher = core._launcher
    out: dict[str, Any] = {"launcher": launcher is not None, "early": core.can_early, "torch": torch.__version__,
                           "tokens": n, "runs": []}
    if launcher is None:
        print(json.dumps(out))
        return 1
    ids = [int(x) for x in np.random.default_rng(7).integers(0, ck.config.vocab_size, n)]
    first: list[torch.Tensor] | None = None
    same = True
    launches = ck.config.num_hidden_layers + 1
    for mode in ("launcher", "replay", "early", "early", "replay", "launcher"):
        core._launcher = None if mode == "replay" else launcher
        be.decoder.early_launch = mode == "early"
        be.ids, be.checkpoints = [], []
        st = be.decoder.stats
        l0, w0, t0, g0 = st.launch, st.wall, st.tokens, st.gpu_wait
        got = []
        tw = time.perf_counter()
        for t in ids:
            got.append(be.forward([t]).clone())
        wall = time.perf_counter() - tw
        if first is None:
            first = got
        else:
            same = same and all(torch.equal(a, b) for a, b in zip(first, got, strict=True))
        toks = st.tokens - t0
        out["runs"].append({"mode": mode, "launch_us_per_layer": 1e6 * (st.launch - l0) / (toks * (launches - 1)),
                            "gpu_wait_us_per_layer": 1e6 * (st.gpu_wait - g0) / (toks * (launches - 1)),
                            "step_ms": 1e3 * (st.wall - w0) / toks, "forward_ms": 1e3 * wall / n})
    core._launcher = launcher
    be.decoder.early_launch = False
    out["bit_identical"] = same
    out["late_steps"] = be.decoder.late_steps  # early-launched steps whose wait gave up (decoded again)
    print(json.dumps(out))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
