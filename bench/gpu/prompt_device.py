"""GPU prompt path on the device machine: correctness at the 120b expert shape, tiles, TTFT.

    python3 -m bench.gpu.prompt_device run --out DIR [--layers 18] [--stages env,synth,check,tiles,ttft]
    python3 -m bench.gpu.prompt_device run --out DIR --device cpu      # dry run (tiny, interpreter)

One call does everything (device tool, repo root, carry [".whl"]); see docs/perf-prompt.md.
Stages (each recorded in DIR/results.json even if a later one fails):
  env    versions, GPU, CPU; builds the native CPU kernel from the carried wheels if needed
  synth  a synthetic checkpoint with the 120b attention/expert shapes and ``--layers`` layers
         (uniform routing; fewer layers if the checkpoint folder has no room)
  check  a 512-token prompt in blocks of 128 (the ring of 256 wraps) and in one block of 512,
         then 8 decode steps from the prompt's K/V: logits at every position and K/V of every
         layer against the fp32 reference forced to the engine's expert choice (bench/gpu/
         device_reference.py); pass = within 1.5x the bf16 reference's own distance
  tiles  times the expert GEMM and the attention kernel for the spill-free tile candidates of
         bench/gpu/aot.py on a 13k-token layer; pack and PCIe rates of the staging ring
  ttft   3k- and 13k-token prompts at the 12 GiB budget (pool = the 36-layer plan's slots per
         layer, after the prompt workspace, scaled to ``--layers``): time to first token with
         its split (GPU GEMM, staging copies, CPU jobs, routing sync), prompt tokens/s, x36 estimate
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch

from bench.gpu.prompt_stages import STAGES

GIB = 1 << 30
REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.out = Path(a.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.cuda = a.device == "cuda"
        self.dev = torch.device("cuda" if self.cuda else "cpu")
        self.preset = a.preset if self.cuda else "tiny"
        self.layers = a.layers if self.cuda else 4
        self.results: dict[str, Any] = {"argv": sys.argv, "stages": {}}
        self.ckpt: Path | None = None

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=2, default=str))

    def stage(self, name: str, fn: Any) -> None:
        if name not in self.a.stages.split(","):
            return
        log(f"stage {name} ...")
        t0 = time.perf_counter()
        try:
            res = fn(self)
            res["seconds"] = round(time.perf_counter() - t0, 1)
            self.results["stages"][name] = res
            log(f"stage {name} done in {res['seconds']} s: {json.dumps(res, default=str)[:2000]}")
        except Exception as exc:
            self.results["stages"][name] = {"error": f"{type(exc).__name__}: {exc}",
                                            "traceback": traceback.format_exc()}
            log(f"stage {name} FAILED: {exc}\n{traceback.format_exc()}")
        finally:
            import gc

            gc.collect()
            if self.cuda:
                torch.cuda.empty_cache()
            self.save()

    # ---- model, settings, backend -------------------------------------------------------------
    def config(self, layers: int | None = None):  # type: ignore[no-untyped-def]
        from engine.config import ModelConfig
        from engine.synth import shape_with

        return ModelConfig.from_dict(shape_with(self.preset, num_hidden_layers=layers or self.layers).config_dict())

    def open_ck(self):  # type: ignore[no-untyped-def]
        from engine.checkpoint import Checkpoint

        if self.ckpt is None:  # synth not run in this call: use what an earlier call wrote
            base = Path(self.a.ckpt_dir)
            self.ckpt = base / f"{self.preset}-L{self.layers}-uniform"
            if not (self.ckpt / "DONE").is_file():
                done = sorted(base.glob(f"{self.preset}-L*-uniform/DONE"), key=lambda p: p.stat().st_mtime)
                if done:
                    self.ckpt = done[-1].parent
        ck = Checkpoint.open(self.ckpt)
        self.layers = ck.config.num_hidden_layers
        return ck

    def settings(self, ck, prompt_tokens: int, **kw: Any):  # type: ignore[no-untyped-def]
        """The 36-layer model's slots per layer at the budget, after the prompt's workspace."""
        from engine.gpu.layout import ExpertLayout
        from engine.plan import plan_vram, workspace_bytes
        from engine.settings import EngineSettings

        a, cfg = self.a, ck.config
        sb = ExpertLayout.for_config(cfg).slot_bytes
        if self.cuda:
            full = self.config(36)
            ws = workspace_bytes(full, prompt_tokens, 4096)
            p36 = plan_vram(full, EngineSettings(context=a.context, kv_ring=256, vram_budget_gib=a.budget,
                                                 scratch_slots=6), workspace_tokens=prompt_tokens)
            slots = round(p36.n_slots * cfg.num_hidden_layers / 36)
            self.results["pool_equivalence"] = {"plan_36_layers_minus_prompt_workspace": p36.describe(),
                                                "prompt_workspace_gib": ws / GIB, "slots_36": p36.n_slots,
                                                "slots_here": slots, "layers_here": cfg.num_hidden_layers}
            context, ring = a.context, 256
        else:
            slots, context, ring = cfg.num_hidden_layers * cfg.num_local_experts // 4, 128, 16
        base: dict[str, Any] = {"context": context, "kv_ring": ring, "pool_gib": (slots + 6) * sb / GIB,
                                "scratch_slots": 6, "static_slots": -1, "refresh_every": 8, "refresh_m": 16,
                                "prefill_weight": 16.0, "cpu_threads": a.threads, "vram_budget_gib": a.budget,
                                "prompt_block": 4096 if self.cuda else 32}
        base.update(kw)
        return EngineSettings(**base)

    def backend(self, ck, settings):  # type: ignore[no-untyped-def]
        from engine.gpu.backend import GpuBackend
        from engine.gpu.prefill.runner import PrefillRunner

        be = GpuBackend.create(ck, settings, interpret=not self.cuda, hot_set_file=None,
                               use_graphs=self.cuda)
        runner = PrefillRunner(be.core, ck, settings, pack_threads=self.a.pack_threads,
                               staged_group=self.a.staged_group)
        log(f"backend: {be.plan.describe()}; CPU groups: {runner.cpu.name}")
        return be, runner

    def ids(self, n: int, seed: int) -> list[int]:
        vocab = self.config().vocab_size
        return [int(x) for x in np.random.default_rng(seed).integers(0, min(vocab, 199_000), n)]

    def calibrate(self, be, runner, n: int) -> int:  # type: ignore[no-untyped-def]
        """Hot set from a warm-up prompt's routing (what the engine would have learned)."""
        runner.run(self.ids(n, seed=101), 0)
        be.policy.observe_prompt(runner.last.routing)
        return int(be.install_hot_set())




def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.gpu.prompt_device")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    r.add_argument("--preset", default="120b-shape")
    r.add_argument("--layers", type=int, default=18, help="18: the layer count of the llama.cpp prompt bar")
    r.add_argument("--ckpt-dir", default="/dev/shm/neural-prompt")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--threads", type=int, default=8)
    r.add_argument("--pack-threads", type=int, default=4)
    r.add_argument("--staged-group", type=int, default=1, help="staged experts per GEMM wave (<= scratch slots)")
    r.add_argument("--budget", type=float, default=12.0)
    r.add_argument("--context", type=int, default=16384)
    r.add_argument("--lengths", default="3000,13000")
    r.add_argument("--repeats", type=int, default=2)
    r.add_argument("--stages", default="env,synth,check,tiles,ttft")
    a = p.parse_args(argv)
    b = Bench(a)
    for name, fn in STAGES:
        b.stage(name, fn)
    (b.out / "summary.txt").write_text(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "traceback"}
                                                   for k, v in b.results["stages"].items()}, indent=1,
                                                  default=str)[:20000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
