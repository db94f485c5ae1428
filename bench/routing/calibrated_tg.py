"""Teacher-forced decode of the calibrated text timed like a tg run (after a warm-up, through the
engine's decode step): the calibrated row of bench/device/peer_decode.sh.

    python -m bench.routing.calibrated_tg CKPT [--depth 2048] [--warmup 16] [--tokens 128]
        [--backend gpu] [--budget-gib 12] [--threads 8] [--context 16384] [--set key=value ...]

As bench.routing.calibrated_decode: the text's first ``depth`` tokens are one prompt, the next
ones are fed one at a time (teacher-forced, so the routing is the designed one). Three changes
make its tok/s comparable with `neural bench decode` and llama-bench tg, which time after a
warm-up run:
- ``warmup`` tokens go untimed first. The GPU backend installs the static hot set (gigabytes of
  expert copies) at the first decode step after 64 tokens, a once-per-process cost (0.7 s at 36
  layers, MEASURED) that calibrated_decode's timed window holds.
- each step is Engine._run's: ``forward_device`` (the logits stay on the GPU) and a greedy pick,
  not ``forward`` (a 201k-entry logits copy to the host per token).
- the steps run inside the RAM residency's ``computing()``, as Engine._run's do (its background
  page warmer pauses).
Prints one JSON line: tok_s_MEASURED (and with the warm-up tokens counted), and over the timed
tokens (GPU only) vram_hit_rate_MEASURED, routing_as_designed, cpu_experts_per_token, admissions_per_token and the
decoder's phases_ms (ms per token), slots, static_slots.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

import numpy as np

PHASES = ("wall", "launch", "gpu_wait", "cpu", "admission", "tail", "adm_route", "adm_after", "adm_refresh", "adm_poll",
          "lane", "lane_start", "lane_decide", "lane_wait")


def _phase_totals(stats: Any) -> dict[str, float]:
    """The decoder's accumulated phase seconds (StepStats), to difference over the timed tokens."""
    return {k: float(getattr(stats, k)) for k in PHASES}


def run(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    from engine.session import Engine
    from engine.synth.calibrated import calibrated_text, designed_trace

    from .calibrated_decode import load_calibrated

    tables, _shape, settings = load_calibrated(a)
    ids = calibrated_text(tables, a.depth + a.warmup + a.tokens).tolist()
    t0 = time.perf_counter()
    engine = Engine.load(a.ckpt, settings)
    be: Any = engine.backend  # GpuBackend or ReferenceBackend: decoder, plan, forward_device are the GPU's
    engine.prefill(ids[: a.depth])
    prompt_s = time.perf_counter() - t0
    forward = getattr(be, "forward_device", be.forward)
    dec = getattr(be, "decoder", None)
    res = engine.ram_residency
    timed = ids[a.depth + a.warmup :]
    with res.computing() if res is not None else contextlib.nullcontext():
        tw = time.perf_counter()
        for tok in ids[a.depth : a.depth + a.warmup]:
            int(torch.argmax(forward([tok])))
        warmup_s = time.perf_counter() - tw
        if dec is not None:
            dec.record_routing = []
            h0, r0 = dec.stats.hits, dec.stats.routed
            p0 = _phase_totals(dec.stats)
            adm = dec.residency.stats
            a0 = adm.admissions
            l0 = dec.stats.lane_experts
            n0, y0 = dec.native_layers, dec.native_yields
        t0 = time.perf_counter()
        for tok in timed:
            int(torch.argmax(forward([tok])))  # the greedy pick: a host sync per token, as the engine's sampler
        seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"ckpt": str(a.ckpt), "backend": type(be).__name__, "depth": a.depth, "warmup": a.warmup,
                           "tokens": a.tokens, "prompt_s": round(prompt_s, 3), "tok_s_MEASURED": a.tokens / seconds,
                           # the untimed first tokens too (the hot set's install, the fill's captures): what
                           # a user waits for from the first answer token on
                           "warmup_s": round(warmup_s, 4),
                           "tok_s_with_warmup_MEASURED": (a.warmup + a.tokens) / (warmup_s + seconds)}
    if dec is not None:
        out["vram_hit_rate_MEASURED"] = (dec.stats.hits - h0) / max(1, dec.stats.routed - r0)
        out["cpu_experts_per_token"] = ((dec.stats.routed - r0) - (dec.stats.hits - h0)) / a.tokens
        # each admission is a capture: the CPU kernel also writes the expert out (bench.kernel.capture_cost)
        out["admissions_per_token"] = (adm.admissions - a0) / a.tokens
        out["admissions_before_timed"] = a0  # since the load: the hot set, the fill, the warm-up
        # misses the copy lane computed on the GPU (engine/gpu/copy_lane.py; counted in cpu_experts_per_token too)
        out["lane_experts_per_token"] = (dec.stats.lane_experts - l0) / a.tokens
        out["lane_check"] = getattr(be, "lane_check", {})
        # layers whose host work ran as one native call (engine/gpu/native_layer.py; the rest: the Python path)
        out["native_layers_per_token"] = (dec.native_layers - n0) / a.tokens
        out["native_yields_per_token"] = (dec.native_yields - y0) / a.tokens  # handed back: a candidate missed
        out["lane_split"] = dec.lane.report() if dec.lane is not None else None  # rates, probes (lane_split.py)
        p1 = _phase_totals(dec.stats)
        out["phases_ms"] = {k: round(1e3 * (p1[k] - p0[k]) / a.tokens, 3) for k in p0}
        got = np.sort(np.stack(dec.record_routing), axis=-1)
        want = designed_trace(tables, np.asarray(timed))
        out["routing_as_designed"] = float((got == want).all(-1).mean())
        out["slots"], out["static_slots"] = be.plan.n_slots, be.plan.n_static
        out["load_phases_s"] = {k: round(v, 3) for k, v in getattr(be, "load_phases", {}).items()}
    engine.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing.calibrated_tg", description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt")
    p.add_argument("--depth", type=int, default=2048, help="prompt tokens (the text's first)")
    p.add_argument("--warmup", type=int, default=16, help="untimed teacher-forced tokens after the prompt")
    p.add_argument("--tokens", type=int, default=128, help="timed teacher-forced tokens after the warm-up")
    p.add_argument("--backend", default="gpu")
    p.add_argument("--budget-gib", type=float, default=12.0)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="engine setting (repeatable)")
    p.set_defaults(dtype="bfloat16")  # engine_settings reads it
    a = p.parse_args(argv)
    if a.depth < 64 or a.warmup < 1 or a.tokens < 1:
        p.error("--depth must be >= 64 (the static hot set is ranked after 64 tokens), --warmup and --tokens >= 1")
    try:
        out = run(a)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
