"""Assemble the one JSON object a benchmark prints, and its human-readable table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .environment import Routing, device_info, engine_version

if TYPE_CHECKING:
    from engine.session import Engine

SCHEMA = 1


def routing_block(routing: Routing, requested: str | None) -> dict[str, Any]:
    matches = None if requested is None or routing.kind == "natural" else routing.kind == requested
    return {"requested": requested, "checkpoint": routing.kind, "skew": routing.skew,
            "matches": matches, "description": routing.describe()}


def routing_warning(routing: Routing, requested: str | None, model_dir: Path) -> str | None:
    if requested is None:
        return None
    if routing.kind == "natural":
        return (f"--routing {requested} ignored: {model_dir} has real weights, whose routing is the model's own "
                f"(skew is a property of synthetic checkpoints)")
    if routing.kind != requested:
        hint = "--skew 1.5" if requested == "skewed" else "--skew 0"
        return (f"--routing {requested} asked, but {model_dir} routes {routing.describe()}; "
                f"write a matching checkpoint with `neural synth ... {hint}`, or give a folder holding "
                f"skewed/ and uniform/ checkpoints")
    return None


def _lane_block(engine: Engine) -> dict[str, Any]:
    lane = getattr(getattr(engine.backend, "decoder", None), "lane", None)
    return {"on": lane is not None, "check": getattr(engine.backend, "lane_check", {}),
            "split": lane.report() if lane is not None else None}


def header(bench: str, engine: Engine, routing: Routing, requested: str | None,
           bench_settings: dict[str, Any]) -> dict[str, Any]:
    cfg = engine.config
    return {
        "schema": SCHEMA,
        "bench": bench,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {"dir": str(engine.info.model_dir), "name": engine.info.name,
                  "fingerprint": engine.info.fingerprint, "note": engine.info.note,
                  "layers": cfg.num_hidden_layers, "experts": cfg.num_local_experts,
                  "experts_per_token": cfg.num_experts_per_tok, "hidden": cfg.hidden_size,
                  "synthetic": routing.synthetic},
        "routing": routing_block(routing, requested),
        "backend": engine.backend.name,
        "backend_note": engine.info.backend_note,
        # the decode copy lane (engine/gpu/copy_lane.py): its load-time check, whether it is on, and what its split
        # did over the whole bench (rates, probes, layers per choice)
        "decode_lane": _lane_block(engine),
        "load_phases_s": {k: round(v, 3) for k, v in getattr(engine.backend, "load_phases", {}).items()},
        "settings": {"engine": engine.settings.to_dict(), "bench": bench_settings,
                     "torch_threads": torch.get_num_threads()},
        "engine_version": engine_version(),
        "device": device_info(),
    }


def _spread(s: dict[str, Any] | None, fmt: str = "{:.2f}") -> str:
    if not s or s.get("median") is None:
        return "-"
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"


def _describe_run(rep: dict[str, Any]) -> list[str]:
    m = rep["model"]
    dev = rep["device"]
    gpu = dev["gpu"]["name"] if dev.get("gpu") else "no GPU"
    ver = rep["engine_version"]
    return [
        f"model     {m['name']} ({m['layers']} layers, {m['experts']} experts, hidden {m['hidden']}) "
        f"{m['note'] or ''}".rstrip(),
        f"routing   {rep['routing']['description']}",
        f"backend   {rep['backend']}" + (f"  ({rep['backend_note']})" if rep["backend_note"] else ""),
        f"device    {dev['cpu']}, {dev['logical_cores']} logical cores; {gpu}",
        f"version   neural {ver['package']} {ver['git'] or ''}".rstrip(),
    ]


def lane_line(rep: dict[str, Any]) -> str | None:
    """The decode copy lane's line of the table: whether it ran, its load check, what its split did; None where the
    backend has no lane check (the CPU engine, a GPU without direct copies)."""
    dl = rep.get("decode_lane") or {}
    check, split = dl.get("check") or {}, dl.get("split")
    if not check and not dl.get("on"):
        return None
    line = f"copy lane {'on' if dl.get('on') else 'off'}"
    if check:
        line += (f": load check gain {check.get('gain')} (CPU {check.get('cpu_ms_alone')} ms an expert alone, "
                 f"{check.get('cpu_ms_beside')} beside copies of {check.get('copy_ms')} ms)")
    if split:
        line += (f"; split rates CPU {split['cpu_ms']} / lane {split['lane_ms']} ms an expert, {split['experts']} "
                 f"experts sent, layers sending 0/1/2+ {split['layers_sending_0_1_2']}, probes {split['probes']}, "
                 f"layers unregistered {split['layers_not_registered']}, all captured {split['layers_all_captured']}")
        if split.get("layers_split"):  # decode_lane_split: one expert a layer shared by units
            line += f", layers splitting an expert {split['layers_split']} ({split.get('split_share')} experts' worth)"
    return line


def decode_table(rep: dict[str, Any]) -> str:
    lane = lane_line(rep)
    lines = ["neural bench decode", *_describe_run(rep), *([lane] if lane else []), "",
             f"{'depth':>7} {'tokens':>6} {'tok/s median [min-max]':>26} {'ms/token':>10} {'TTFT s':>8} "
             f"{'VRAM hit':>9}  token-id sha256"]
    for r in rep["results"]:
        hit = _spread(r["vram_hit_rate"], "{:.3f}") if r["vram_hit_rate"] else "-"
        lines.append(f"{r['depth']:>7} {r['tokens']:>6} {_spread(r['tokens_per_s']):>26} "
                     f"{r['ms_per_token']['median']:>10.2f} {r['ttft_s']:>8.2f} {hit:>9}  "
                     f"{r['token_ids_sha256'][:16]}{'' if r['repeats_identical'] else ' (repeats differ)'}")
        if r["phases_ms"]:
            lines.append("        phases ms: " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases_ms"].items()))
        if r.get("residency"):
            lines.append("        residency: " + ", ".join(f"{k} {v:.3g}" for k, v in r["residency"].items()))
        for s in r.get("sampling", []):
            over = s.get("sample_over_greedy_ms")
            lines.append(f"        T={s['temperature']:g} top_p={s['top_p']:g}: {_spread(s['tokens_per_s'])} tok/s, "
                         f"sampler {s['sample_ms_per_token']['median']:.3f} ms/token"
                         + (f" ({over:+.3f} over greedy)" if over is not None else "")
                         + f", full sorts {s['sampler_full_sorts']}/{s['sampled_tokens']}, "
                         f"ids {s['token_ids_sha256'][:16]}{'' if s['repeats_identical'] else ' (repeats differ)'}")
    lines += [f"note: {n}" for n in rep["notes"]]
    return "\n".join(lines)


def prompt_table(rep: dict[str, Any]) -> str:
    lines = ["neural bench prompt", *_describe_run(rep), "",
             f"{'prompt':>7} {'TTFT s median [min-max]':>28} {'tok/s median':>13} {'VRAM hit':>9}  token-id sha256"]
    for r in rep["results"]:
        hit = _spread(r["vram_hit_rate"], "{:.3f}") if r["vram_hit_rate"] else "-"
        lines.append(f"{r['prompt_tokens']:>7} {_spread(r['ttft_s'], '{:.3f}'):>28} "
                     f"{r['tokens_per_s']['median']:>13.1f} {hit:>9}  {r['token_ids_sha256'][:16]}"
                     f"{'' if r['repeats_identical'] else ' (repeats differ)'}")
        if r.get("phases_ms"):
            lines.append("        phases ms: " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases_ms"].items()))
        if r.get("prompt_split"):
            lines.append("        split: " + split_line(r["prompt_split"]))
    lines += [f"note: {n}" for n in rep["notes"]]
    return "\n".join(lines)


def split_line(s: dict[str, float]) -> str:
    """The GPU prompt path's split in the issue's terms: GPU GEMM, staging copies, CPU jobs, routing sync."""
    g = lambda k: s.get(k, 0.0)
    return (f"wall {g('wall'):.3f} s = GPU gemm {g('gpu_gemm'):.3f} s, attention {g('gpu_attention'):.3f} s, "
            f"dense {g('gpu_dense'):.3f} s; staging copies {g('gpu_copies'):.3f} s ({g('staged_experts'):.0f} experts, "
            f"{g('staged_bytes') / 1e9:.2f} GB), pack {g('pack'):.3f} s, stage wait {g('stage_wait'):.3f} s; "
            f"CPU jobs {g('cpu_jobs'):.3f} s ({g('cpu_experts'):.0f} experts, waited {g('cpu_wait'):.3f} s); "
            f"routing sync {g('routing_sync'):.3f} s; launch {g('launch'):.3f} s")
