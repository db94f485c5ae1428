"""Decode the calibrated text through the real engine and set the MEASURED VRAM hit rate and
tok/s beside the SIMULATED replay of the same tokens (bench.routing.policy_replay) — the check
that the GPU bench sees the hit rates the design gives.

    python -m bench.routing.calibrated_decode CKPT [--depth 2048] [--tokens 256] [--budget-gib 12]
        [--threads 8] [--set key=value ...] [--json]

CKPT is a checkpoint written with ``--routing calibrated`` (or a ``--like`` variant). The first
``depth`` tokens of its text are the prompt (one ``engine.prefill``: the prompt path, which ranks
the static hot set); the next ``tokens`` are fed one ``backend.forward`` at a time (teacher-forced:
the same work as greedy decoding, but the tokens are the text's, so the routing is the designed
one). With the GPU backend the decoder records its routing, which is compared with the design.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def load_calibrated(a: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(CalibratedTables, SynthShape, EngineSettings) of ``a.ckpt`` and the command line (its
    ``--set`` parsed as ``neural bench`` parses it); ValueError unless the routing is calibrated."""
    from app.cli.cmd_bench import engine_settings
    from engine.synth import SynthShape, read_synthetic_meta, source_routing
    from engine.synth.calibrated import CalibratedTables

    meta = read_synthetic_meta(Path(a.ckpt))
    if source_routing(meta).mode != "calibrated":
        raise ValueError(f"{a.ckpt} has {source_routing(meta).mode} routing; write one with --routing calibrated")
    shape = SynthShape(**meta["shape"])
    return CalibratedTables(int(meta["seed"]), shape), shape, engine_settings(a)


def run(a: argparse.Namespace) -> dict[str, Any]:
    from engine.gpu.admission import AdmissionSettings
    from engine.session import Engine
    from engine.synth.calibrated import calibrated_text, designed_trace

    from .policy_replay import replay_policy

    tables, shape, settings = load_calibrated(a)
    ids = calibrated_text(tables, a.depth + a.tokens)
    engine: Any = None
    t0 = time.perf_counter()
    if a.interpret:  # the GPU backend's kernels on the CPU (TRITON_INTERPRET=1): tests only
        from engine.checkpoint import Checkpoint
        from engine.gpu.backend import GpuBackend

        be = GpuBackend.create(Checkpoint.open(a.ckpt), settings, interpret=True, prefer_native=False,
                               hot_set_file=None)
        be.forward(ids[: a.depth].tolist())
    else:
        engine = Engine.load(a.ckpt, settings)
        be = engine.backend
        engine.prefill(ids[: a.depth].tolist())
    prompt_s = time.perf_counter() - t0
    dec = getattr(be, "decoder", None)
    if dec is not None:
        dec.record_routing = []
        h0, r0 = dec.stats.hits, dec.stats.routed
    t0 = time.perf_counter()
    for tok in ids[a.depth :].tolist():
        be.forward([tok])
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"ckpt": str(a.ckpt), "backend": type(be).__name__, "depth": a.depth, "tokens": a.tokens,
                           "prompt_s": round(prompt_s, 3), "tok_s_MEASURED": a.tokens / seconds}
    want = designed_trace(tables, ids)
    if dec is not None:
        out["vram_hit_rate_MEASURED"] = (dec.stats.hits - h0) / max(1, dec.stats.routed - r0)
        got = np.sort(np.stack(dec.record_routing), axis=-1)
        out["routing_as_designed"] = float((got == want[a.depth :]).all(-1).mean())
        plan = be.plan
        adm = AdmissionSettings(settings.refresh_every, settings.refresh_m, settings.prefill_weight,
                                capture_buffers=max(1, min(16, settings.refresh_m)))
        sim = replay_policy(want, shape.num_local_experts, plan.n_slots, plan.n_static, a.depth, adm,
                            settings.fill_tokens)
        out["slots"], out["static_slots"] = plan.n_slots, plan.n_static
        out["SIMULATED"] = {"policy": sim.hit, "static": sim.static_hit, "lru": sim.lru, "belady": sim.belady,
                            "admissions_per_token": sim.admissions_per_token}
    (engine or be).close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing.calibrated_decode", description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt")
    p.add_argument("--depth", type=int, default=2048, help="prompt tokens (the text's first)")
    p.add_argument("--tokens", type=int, default=256, help="teacher-forced decode tokens after the prompt")
    p.add_argument("--backend", default="gpu")
    p.add_argument("--budget-gib", type=float, default=12.0)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="engine setting (repeatable)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--interpret", action="store_true", help="the GPU backend under the Triton interpreter (tests)")
    p.set_defaults(dtype="bfloat16")  # engine_settings reads it
    a = p.parse_args(argv)
    if a.depth < 64 or a.tokens < 1:
        p.error("--depth must be >= 64 (the static hot set is ranked after 64 tokens) and --tokens >= 1")
    try:
        out = run(a)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=None if a.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
