"""The performance report in one run on the GPU machine (issue 9).

    python3 -m bench.harness.suite --out DIR [--layers 18] [--stages env,synth,decode,prompt]
    python3 -m bench.harness.suite --out DIR --dry-run        # tiny model, CPU engine: the plumbing only

Builds the native kernel if needed (from wheels carried in .whl/), writes a synthetic 120b-shape
checkpoint with uniform routing to /dev/shm and its routing variants sharing the expert bytes
(skewed: a static router-bias skew; drift: a hot set per token topic that follows the text),
then runs ``neural bench decode`` (each routing, depths 0 and 8192) and ``neural bench prompt``
(3k and 13k tokens) at the 12 GiB budget with 8 CPU threads, each in its own process with a
time limit, and prints the table last. With fewer than 36 layers the expert pool is the 36-layer plan's slots per layer
(``pool_gib`` computed here), and figures are scaled to 36 layers as CALCULATED columns.
Everything lands in DIR: suite.json (every report), suite.log, table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .suite_table import suite_table

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
FULL_LAYERS = 36


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def scaled_pool_gib(layers: int, budget_gib: float, context: int, settings_kw: dict[str, Any]) -> tuple[float, str]:
    """The pool (GiB) that gives a ``layers``-layer 120b-shape model the 36-layer plan's expert
    slots per layer at ``budget_gib`` — so a shorter model is not flattered by a bigger share."""
    from dataclasses import replace

    from engine.config import ModelConfig
    from engine.plan import plan_vram
    from engine.settings import EngineSettings
    from engine.synth import shape_with

    s = EngineSettings.from_dict({"vram_budget_gib": budget_gib, "context": context, **settings_kw})
    full = ModelConfig.from_dict(shape_with("120b-shape").config_dict())
    plan = plan_vram(full, replace(s, pool_gib=0.0))
    slots = plan.n_slots * layers // FULL_LAYERS
    # half a slot of margin: the setting is printed with 6 decimals, and plan_vram floors
    pool = (slots + plan.n_scratch + 0.5) * plan.slot_bytes / GIB
    return pool, (f"36-layer plan at {budget_gib:g} GiB: {plan.describe()}; scaled to {layers} layers: "
                  f"{slots} slots + {plan.n_scratch} scratch = pool_gib {pool:.4f}")


class Suite:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.out = Path(a.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, Any] = {"args": vars(a), "stages": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self.root = Path(a.ckpt_root)

    def save(self) -> None:
        (self.out / "suite.json").write_text(json.dumps(self.results, indent=2, default=str))

    def stage(self, name: str, fn: Any) -> None:
        t0 = time.perf_counter()
        log(f"== {name}")
        try:
            self.results["stages"][name] = {"ok": True, **(fn() or {})}
        except Exception as exc:  # one failed stage must not lose the others' results
            log(f"{name} FAILED: {type(exc).__name__}: {exc}")
            self.results["stages"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        self.results["stages"][name]["seconds"] = round(time.perf_counter() - t0, 1)
        self.save()

    def env(self) -> dict[str, Any]:
        from bench.gpu.native_build import ensure_native

        info: dict[str, Any] = {"native": ensure_native()}
        try:
            import torch

            info["torch"] = torch.__version__
            info["cuda"] = torch.cuda.is_available() and torch.cuda.get_device_name()
        except Exception as exc:
            info["torch_error"] = str(exc)
        return info

    def synth(self) -> dict[str, Any]:
        """One full write (uniform routing), then routing variants sharing its expert shards."""
        a = self.a
        info: dict[str, Any] = {}
        base = self.root / "uniform"
        variants = {"skewed": ["--routing", "static", "--skew", str(a.skew)], "drift": ["--routing", "drift"]}
        jobs = []
        if not (base / "SYNTHETIC.json").is_file() or a.rewrite:
            jobs.append(("uniform", ["--preset", a.preset, "--layers", str(a.layers), "--seed", "1",
                                     "--jobs", str(a.jobs), *([] if a.dry_run else ["--fast"])]))
        for name in a.routings.split(","):
            if name in variants and (not (self.root / name / "SYNTHETIC.json").is_file() or a.rewrite):
                jobs.append((name, ["--like", str(base), *variants[name]]))
        for name, args in jobs:
            cmd = [sys.executable, "-m", "app.cli.main", "synth", *args, "--out", str(self.root / name)]
            log(" ".join(cmd))
            p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               timeout=a.stage_timeout, check=False)
            if p.returncode:
                raise RuntimeError(f"synth {name} exited {p.returncode}")
            info[name] = p.stdout.strip()
            log(p.stdout.strip())
        return info

    def bench(self, kind: str, routing: str, extra: list[str]) -> dict[str, Any]:
        a = self.a
        # skewed/uniform: the bench picks ROOT/<routing> and checks it; other variants by folder
        by_name = routing in ("skewed", "uniform")
        where = [str(self.root), "--routing", routing] if by_name else [str(self.root / routing)]
        cmd = [sys.executable, "-m", "app.cli.main", "bench", kind, *where,
               "--backend", a.backend, "--budget-gib", str(a.budget), "--threads", str(a.threads),
               "--context", str(a.context), "--repeats", str(a.repeats), "--warmup", str(a.warmup), "--json", *extra]
        if self.pool_gib:
            cmd += ["--set", f"pool_gib={self.pool_gib:.6f}"]
        log(" ".join(cmd))
        t0 = time.perf_counter()
        with (self.out / "suite.log").open("a") as errlog:
            errlog.write(f"\n$ {' '.join(cmd)}\n")
            errlog.flush()
            p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=errlog, text=True,
                               timeout=a.stage_timeout, check=False)
        if p.returncode:
            raise RuntimeError(f"bench {kind} {routing} exited {p.returncode} (see suite.log)")
        report = json.loads(p.stdout)
        report["wall_s"] = round(time.perf_counter() - t0, 1)
        return {"report": report}

    def run(self) -> int:
        a = self.a
        stages = a.stages.split(",")
        self.pool_gib = 0.0
        if "env" in stages:
            self.stage("env", self.env)
        if "synth" in stages:
            self.stage("synth", self.synth)
        if not a.dry_run and a.layers < FULL_LAYERS:
            self.pool_gib, why = scaled_pool_gib(a.layers, a.budget, a.context, {})
            self.results["pool"] = why
            log(why)
        depths = ["--tokens", str(a.tokens), "--depth", a.depths]
        for routing in a.routings.split(","):
            if "decode" in stages:
                self.stage(f"decode-{routing}", lambda r=routing: self.bench("decode", r, depths))
        if "prompt" in stages:
            self.stage("prompt-uniform", lambda: self.bench("prompt", "uniform", ["--tokens", a.prompts]))
        self.results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.save()
        table = suite_table(self.results, FULL_LAYERS)
        (self.out / "table.md").write_text(table + "\n")
        print(table, flush=True)
        return 0 if all(s["ok"] for s in self.results["stages"].values()) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.harness.suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=18, help="layers of the synthetic checkpoints (default 18)")
    p.add_argument("--preset", default="120b-shape")
    p.add_argument("--ckpt-root", default="/dev/shm/neural-suite", help="holds skewed/ and uniform/")
    p.add_argument("--skew", type=float, default=1.5, help="router-bias skew of the static variant (skewed/)")
    p.add_argument("--jobs", type=int, default=8, help="shards the synth writes at once (default 8)")
    p.add_argument("--rewrite", action="store_true", help="write the checkpoints even if present")
    p.add_argument("--backend", default="gpu")
    p.add_argument("--budget", type=float, default=12.0)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--depths", default="0,8192")
    p.add_argument("--prompts", default="3000,13000")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before the timed ones (default 1)")
    p.add_argument("--routings", default="skewed,drift,uniform",
                   help="decode runs: skewed (static router-bias skew), drift (hot set follows the text), uniform")
    p.add_argument("--stages", default="env,synth,decode,prompt")
    p.add_argument("--stage-timeout", type=float, default=420.0, help="seconds allowed per stage")
    p.add_argument("--dry-run", action="store_true", help="tiny model on the CPU engine (checks the plumbing)")
    a = p.parse_args(argv)
    if a.dry_run:
        a.preset, a.backend, a.layers = "tiny", "cpu", min(a.layers, 2)
        a.context, a.tokens, a.depths, a.prompts = 512, 4, "0,64", "40,120"
        os.environ.setdefault("NEURAL_CACHE_DIR", str(Path(a.out) / "cache"))
    return Suite(a).run()


if __name__ == "__main__":
    sys.exit(main())
