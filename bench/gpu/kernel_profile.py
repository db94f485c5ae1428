"""Where a decode layer's GPU time goes (GPU machine):
``python3 -m bench.gpu.kernel_profile CKPT [TOKENS] [TILES ...]``.

Loads the GPU backend (12 GiB, 8 threads, frozen residency), decodes 72 tokens to warm up (the
hot set is installed after 64), then
TOKENS more under torch.profiler with CUPTI, once with the plain launch and once with the early
launch. From the kernels' own start and end times it prints one JSON line per mode:
- per kernel name: count, mean and p50 duration (us);
- the chain from the combine's end to the router's top-k end (what the host waits for before its
  CPU experts can start), its mean span and the sum of the idle gaps between its kernels;
- the resident experts' span after the top-k.
The host's own phases (launch, GPU wait) come with it from the decoder's stats. Each TILES
argument (``qkv_pairs=4,warps=8``: fields of engine/gpu/launch.py Tiles) is then profiled with the
early launch after the graphs are captured again with those tiles (the K/V of position 0 is
overwritten by the capture: times only, no bits).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.gpu.launch import Kernels
from engine.settings import EngineSettings

CHAIN_END = "router_topk_kernel"
WARM = 72


def kernels_of(trace: Path) -> list[tuple[str, float, float]]:
    """(short name, start us, duration us) of every GPU kernel in a chrome trace, in start order."""
    ev = json.loads(trace.read_text())["traceEvents"]
    out = [(str(e["name"]).split("(")[0].split("<")[0], float(e["ts"]), float(e["dur"]))
           for e in ev if e.get("cat") == "kernel"]
    return sorted(out, key=lambda k: k[1])


def summarize(ks: list[tuple[str, float, float]]) -> dict[str, Any]:
    by: dict[str, list[float]] = {}
    for name, _, dur in ks:
        by.setdefault(name, []).append(dur)
    per = {n: {"count": len(d), "mean_us": round(statistics.fmean(d), 2), "p50_us": round(statistics.median(d), 2)}
           for n, d in sorted(by.items(), key=lambda kv: -sum(kv[1]))}
    spans, gaps, tails = [], [], []
    i = 0
    while i < len(ks):
        if ks[i][0].startswith("combine") or ks[i][0] == "start_kernel":
            t_end = ks[i][1] + ks[i][2]
            j, gap, prev_end = i + 1, 0.0, t_end
            while j < len(ks) and ks[j][0] != CHAIN_END and not ks[j][0].startswith(("combine", "start")):
                gap += max(0.0, ks[j][1] - prev_end)
                prev_end = ks[j][1] + ks[j][2]
                j += 1
            if j < len(ks) and ks[j][0] == CHAIN_END:
                gap += max(0.0, ks[j][1] - prev_end)
                spans.append(ks[j][1] + ks[j][2] - t_end)
                gaps.append(gap)
                k = j + 1
                while k < len(ks) and ks[k][0].startswith("expert"):
                    k += 1
                if k > j + 1:
                    tails.append(ks[k - 1][1] + ks[k - 1][2] - (ks[j][1] + ks[j][2]))
            i = j
        else:
            i += 1

    def stat(x: list[float]) -> dict[str, float] | None:
        return {"n": len(x), "mean_us": round(statistics.fmean(x), 2), "p50_us": round(statistics.median(x), 2)} \
            if x else None

    return {"kernels": per, "combine_to_topk": stat(spans), "idle_gaps_in_chain": stat(gaps),
            "experts_after_topk": stat(tails)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ck = Checkpoint.open(Path(args[0]))
    n = int(args[1]) if len(args) > 1 else 16
    s = EngineSettings(backend="gpu", vram_budget_gib=12.0, cpu_threads=8, refresh_every=0, early_launch=True)
    be = GpuBackend.create(ck, s, interpret=False, hot_set_file=None, use_graphs=True)
    ids = [int(x) for x in np.random.default_rng(7).integers(0, ck.config.vocab_size, WARM + n * (len(args) + 1))]
    for t in ids[:WARM]:
        be.forward([t])
    layers = ck.config.num_hidden_layers
    core = be.core
    base = core.kern.t
    runs: list[tuple[str, str]] = [("plain", ""), ("early", "")] + [("early", v) for v in args[2:]]
    at = WARM
    for mode, tiles in runs:
        if tiles:
            kw = {k: int(v) for k, v in (p.split("=") for p in tiles.split(","))}
            polls = core.kern.wait_polls
            core.kern = Kernels(ck.config, replace(base, **kw), core.layout)
            core.kern.wait_polls = polls
            core.attn_scratch = core.kern.attn_scratch(core.dev)
            core.capture_graphs(early=True)
            for t in ids[:4]:
                be.forward([t])
        be.decoder.early_launch = mode == "early"
        st = be.decoder.stats
        l0, g0, w0, c0, t0 = st.launch, st.gpu_wait, st.wall, st.cpu, st.tokens
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for t in ids[at: at + n]:
                be.forward([t])
            torch.cuda.synchronize()
        at += n
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "trace.json"
            prof.export_chrome_trace(str(p))
            out = summarize(kernels_of(p))
        toks = max(1, st.tokens - t0)
        out.update(mode=mode, tiles=tiles or "default", tokens=toks, layers=layers,
                   host_us_per_layer={"launch": 1e6 * (st.launch - l0) / (toks * layers),
                                      "gpu_wait": 1e6 * (st.gpu_wait - g0) / (toks * layers),
                                      "cpu": 1e6 * (st.cpu - c0) / (toks * layers),
                                      "wall": 1e6 * (st.wall - w0) / (toks * layers)})
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
