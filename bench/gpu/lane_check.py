"""The decode copy lane (engine/gpu/copy_lane.py) on the GPU machine: same function, and what it does to a step.
``python3 -m bench.gpu.lane_check CKPT [TOKENS] [KEY=VALUE ...]`` (engine settings over the ones below, e.g.
``early_poll_ns=1000``: then "forced" runs the lane beside early launches that poll gently).

Loads the GPU backend once (12 GiB, 8 threads, frozen residency, early launch, decode_lane "on" so the lane exists
whatever the load-time check says; its verdict is printed), then decodes the same random token ids from position 0
six times: lane off, forced, forced-plain, forced-plain, forced, off ("-plain": without the early launch).
"Forced" fixes the split's rates so every layer sends as many misses as fit (two) down the lane: the same experts
each run, so the four forced runs must be bit-identical, as must the two off ones. Forced against off compares the
GPU's bf16 expert kernels with the CPU's on the same experts, summed in another order: the per-token relative
difference of the logits and the argmax agreement are printed (tolerance 2.5e-2, the GPU tests' bound for a
resident against a CPU-computed expert). Each run prints the lane's GPU-timed copy per expert and kernels per
layer. Under 64 tokens: no hot set installs during the runs. Last, the same ids with a hot set installed (resident
GPU experts, no lane) against "off": the spread of GPU against CPU experts without the lane, for a checkpoint whose
routing depends on rounding (the uniform synthetic: random routers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.cli.cmd_bench import engine_settings
from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.settings import EngineSettings

TOL = 2.5e-2


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ck = Checkpoint.open(Path(args[0]))
    n = min(int(args[1]) if len(args) > 1 else 32, 63)
    d = EngineSettings()
    s = engine_settings(argparse.Namespace(backend="gpu", dtype=d.dtype, threads=8, context=d.context, budget_gib=12.0,
                                           set=["refresh_every=0", "early_launch=true", "decode_lane=on", *args[2:]]))
    be = GpuBackend.create(ck, s, interpret=False, hot_set_file=None, use_graphs=True)
    lane = be.decoder.lane
    out: dict[str, Any] = {"lane": lane is not None, "check_at_load": be.lane_check, "tokens": n, "runs": []}
    if lane is None:
        out["why"] = "no lane: direct copies unavailable (stage_direct) or too few scratch slots"
        print(json.dumps(out))
        return 1
    direct = be.prefill.direct
    out["ready_layers"] = direct.ready_layers if direct is not None else 0
    out["direct_error"] = direct.error if direct is not None else "no direct copies"
    # first the split as it ships, from the load-time check's rates, learning as it goes
    rates = (lane.rates.cpu_ms, lane.rates.lane_ms)
    be.ids, be.checkpoints = [], []
    e0, t0 = be.decoder.stats.lane_experts, be.decoder.stats.tokens
    for t in np.random.default_rng(8).integers(0, ck.config.vocab_size, n):
        be.forward([int(t)])
    out["auto"] = {"start_rates_ms": [round(r, 4) for r in rates], "split": lane.report(),
                   "lane_experts_per_token": (be.decoder.stats.lane_experts - e0)
                   / max(1, be.decoder.stats.tokens - t0)}
    ids = [int(x) for x in np.random.default_rng(7).integers(0, ck.config.vocab_size, n)]
    runs: dict[str, list[list[torch.Tensor]]] = {"off": [], "forced": []}
    early = be.decoder.early_launch
    # "-plain": the layers launched after the CPU's result (no early launch: no kernel polls the host's flag)
    for mode in ("off", "forced", "forced-plain", "forced-plain", "forced", "off"):
        be.decoder.lane = lane if mode.startswith("forced") else None
        be.decoder.early_launch = early and not mode.endswith("plain")
        lane.rates.fix(10.0, 0.01)
        be.ids, be.checkpoints = [], []
        st = be.decoder.stats
        w0, t0, e0, c0, l0 = st.wall, st.tokens, st.lane_experts, st.cpu, st.lane
        k0, g0, x0 = lane.copy_ms, lane.kernel_ms, lane.timed  # summed over the timed uses (copy_lane.TIME_EVERY)
        got = [be.forward([t]).clone() for t in ids]
        runs[mode.split("-")[0]].append(got)
        toks = st.tokens - t0
        sent = max(1, lane.timed - x0)
        out["runs"].append({"mode": mode, "step_ms": round(1e3 * (st.wall - w0) / toks, 3),
                            "cpu_ms": round(1e3 * (st.cpu - c0) / toks, 3),
                            "lane_ms": round(1e3 * (st.lane - l0) / toks, 3),
                            "lane_experts_per_token": (st.lane_experts - e0) / toks,
                            "gpu_copy_ms_per_expert": round((lane.copy_ms - k0) / sent, 4),
                            "gpu_kernel_ms_per_layer": round((lane.kernel_ms - g0) * 2 / sent, 4)})
    # the spread any GPU-computed expert brings: the same ids with a hot set resident (GPU experts, no lane).
    # Where routing depends on rounding (a random router), this diverges as much as the lane does.
    be.decoder.lane = None
    out["resident_slots"] = be.install_hot_set()
    be.ids, be.checkpoints = [], []
    h0, r0 = be.decoder.stats.hits, be.decoder.stats.routed
    resident = [be.forward([t]).clone() for t in ids]
    out["resident_hit_rate"] = (be.decoder.stats.hits - h0) / max(1, be.decoder.stats.routed - r0)
    be.decoder.lane = lane
    be.decoder.early_launch = early

    def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))

    off, forced = runs["off"], runs["forced"]

    def rel_of(got: list[torch.Tensor]) -> list[float]:
        return [float((a.double() - b.double()).norm() / b.double().norm()) for a, b in zip(got, off[0], strict=True)]

    rel = rel_of(forced[0])
    agree = float(np.mean([int(a.argmax()) == int(b.argmax()) for a, b in zip(forced[0], off[0], strict=True)]))
    def sha(got: list[torch.Tensor]) -> str:  # to compare runs of two processes (e.g. one setting against another)
        return hashlib.sha256(b"".join(t.float().cpu().numpy().tobytes() for t in got)).hexdigest()[:16]

    out.update({"off_sha256": sha(off[0]), "forced_sha256": sha(forced[0]),
                "off_bit_identical": same(off[0], off[1]),
                "forced_bit_identical": all(same(forced[0], f) for f in forced[1:]),
                "max_rel_forced_vs_off": round(max(rel), 5), "mean_rel": round(float(np.mean(rel)), 5),
                "argmax_agree": agree, "late_steps": be.decoder.late_steps,
                # layers decoded by the native layer call (native_layer.py), and those it handed back to Python
                "native_layers": be.decoder.native_layers, "native_yields": be.decoder.native_yields})
    rel_res = rel_of(resident)
    out["max_rel_resident_vs_off"] = round(max(rel_res), 5)
    out["argmax_agree_resident"] = float(np.mean([int(a.argmax()) == int(b.argmax())
                                                  for a, b in zip(resident, off[0], strict=True)]))
    ok = out["off_bit_identical"] and out["forced_bit_identical"] and max(rel) < TOL and agree >= 0.9
    out["verdict"] = "PASS" if ok else "FAIL"
    be.close()
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
