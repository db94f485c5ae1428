"""RAM-residency benchmark: first-answer and follow-up decode speed and page faults per token
from a cold page cache, with and without warm-up, at a RAM budget that holds the store only
partly; VRAM reserved before/after the prompt/decode boundary release.

    python -m engine.residency.bench_residency prepare --out DIR --layers 12
    python -m engine.residency.bench_residency run --model DIR --backend gpu --budget-frac 0.5 \\
        --out results.json --md results.md

``run`` starts one fresh process per scenario (nothing mapped, a clean CUDA allocator):

    cold-nowarm    page cache dropped, no warm-up
    cold-warm      page cache dropped, warm-up to the budget, waited for before the first prompt
    cold-warm-now  page cache dropped, warm-up started, first prompt at once (warm-up paused while computing)
    warm           the whole expert source read into RAM first (reference)

"Dropped" = POSIX_FADV_DONTNEED on every checkpoint/store file before the engine maps them
(no root needed; ``echo 3 > /proc/sys/vm/drop_caches`` may be refused on the device). The
measured residency right after the drop is printed so a drop that did not work is visible.
``--trim`` additionally evicts, after the first prompt, every expert outside the warm-up plan
(what an OS under RAM pressure would have trimmed), through the engine's own mappings.

Faults per token are process-wide counts over the answer divided by its tokens, minus the
warm-up thread's own faults. If the engine already owns a ResidencyManager (attribute
``ram_residency`` on the engine or its backend), the bench uses it instead of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GIB = 1 << 30
SCENARIOS = ("cold-nowarm", "cold-warm", "cold-warm-now", "warm")
WORDS = ("the", "function", "returns", "a", "list", "of", "tokens", "while", "each", "layer", "routes", "experts",
         "to", "memory", "pages", "and", "cache", "keeps", "values", "for", "later", "calls", "so", "that",
         "prompt", "can", "refer", "back", "code", "written", "before")


def _json_default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(o)
    return str(o)


# ---- prepare -------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> int:
    from engine.checkpoint import Checkpoint
    from engine.store.writer import build_store
    from engine.synth import shape_with, write_synthetic_checkpoint

    shape = shape_with(args.preset, num_hidden_layers=args.layers)
    out = Path(args.out)
    t0 = time.perf_counter()
    write_synthetic_checkpoint(out, shape, seed=args.seed, fast=True)
    print(f"checkpoint {out} in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.store != "none":
        t0 = time.perf_counter()
        s = build_store(Checkpoint.open(out), out / f"experts-{args.store}.nstore", args.store)
        print(f"store {s.path} ({s.file_bytes / GIB:.2f} GiB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


# ---- one scenario --------------------------------------------------------------------------
def _prompt_text(engine: Any, tokens: int, seed: int) -> str:
    import random

    rng = random.Random(seed)
    words: list[str] = []
    step = max(8, tokens // 8)
    while True:
        have = engine.count_tokens(" ".join(words))
        if have >= tokens:
            return " ".join(words)
        words += [rng.choice(WORDS) for _ in range(min(step, max(1, (tokens - have) // 2)))]


def _expert_source(engine: Any, source: str) -> tuple[list[Path], list[Any], str]:
    """Files and regions the backend reads experts from."""
    from engine.residency import checkpoint_regions, store_regions
    from engine.store.reader import ExpertStore, find_store

    store_path = find_store(engine.ck.model_dir)
    use_store = source == "store" or (source == "auto" and store_path is not None
                                      and not engine.backend.name.startswith("gpu"))
    if use_store and store_path is not None:
        with ExpertStore.open(store_path) as st:
            return [store_path], store_regions(st), "store"
    files, regions = checkpoint_regions(engine.ck)
    return files, regions, "checkpoint"


def _engine_spans(engine: Any, regions: list[Any], kind: str) -> list[tuple[int, int]]:
    """(address, length) of expert regions inside the engine's own checkpoint mappings, so an
    eviction also unmaps the engine's page-table entries (fadvise alone skips mapped pages)."""
    if kind != "checkpoint":
        return []
    spans = []
    for layer in sorted({r.layer for r in regions}):
        for e in sorted({r.expert for r in regions if r.layer == layer}):
            for a in engine.ck.expert_arrays(layer, e).values():
                spans.append((int(a.ctypes.data), int(a.nbytes)))
    return spans


def _drop(paths: list[Path]) -> None:
    from engine.residency import os_memory

    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages (a freshly written checkpoint) cannot be dropped
            os_memory.fadvise_dontneed(fd)
        finally:
            os.close(fd)


def _trim(engine: Any, res: Any, maps: list[Any], regions: list[Any], kind: str) -> None:
    """Evict every expert outside the warm-up plan, as an OS under RAM pressure would have."""
    from engine.residency import evict, os_memory

    planned = set(res.plan.keys)
    outside = [r for r in regions if r.key not in planned]
    for addr, n in _engine_spans(engine, outside, kind):
        with contextlib.suppress(OSError):
            os_memory.madvise(addr, n, os_memory.MADV_DONTNEED)
    evict(maps, outside)


def _file_residency(paths: list[Path]) -> int:
    """Bytes of these files in the page cache (mincore through a fresh mapping)."""
    from engine.residency import Mapping, Region, StoreResidency

    total = 0
    for p in paths:
        if p.stat().st_size == 0:
            continue
        with Mapping.open(p) as m:
            total += StoreResidency(m, [Region(0, 0, 0, m.size)]).refresh()
    return total


def one(args: argparse.Namespace) -> int:
    from engine.residency import (
        FaultMeter,
        Mapping,
        ResidencyManager,
        StoreResidency,
        release_unused_vram,
        vram_report,
    )
    from engine.session import Engine
    from engine.settings import EngineSettings
    from engine.types import Conversation, Done, GenerationParams, Message, TextDelta

    sc = args.scenario
    model = Path(args.model)
    all_files = sorted(model.glob("*.safetensors")) + sorted(model.glob("*.nstore"))
    result: dict[str, Any] = {"scenario": sc, "model": str(model), "budget_frac": args.budget_frac}
    if sc.startswith("cold"):
        _drop(all_files)
        result["resident_after_drop"] = _file_residency(all_files)
    t0 = time.perf_counter()
    settings = EngineSettings(backend=args.backend, pool_gib=args.pool_gib, vram_budget_gib=args.vram_budget_gib,
                              context=args.context, warmup=False)
    engine = Engine.load(model, settings)
    result["load_s"] = time.perf_counter() - t0
    result["backend"] = engine.backend.name
    result["vram_after_load"] = vram_report()
    files, regions, kind = _expert_source(engine, args.source)
    maps = [Mapping.open(f) for f in files]
    probe = StoreResidency(maps, regions)
    store_bytes = probe.store_bytes
    result.update(source=kind, store_bytes=store_bytes, resident_after_load=probe.refresh())

    budget_gib = max(1e-6, args.budget_frac * store_bytes / GIB) if sc != "warm" else store_bytes / GIB
    res_settings = EngineSettings(ram_budget_gib=budget_gib, warmup=sc != "cold-nowarm", mlock_gib=0.0)
    # The engine starts its own manager with default settings; the scenario needs its budget, so the
    # bench's manager replaces it (the session reads engine.ram_residency on every request).
    res: Any = getattr(engine.backend, "ram_residency", None)
    owned = res is None
    if owned:
        old = getattr(engine, "ram_residency", None)
        if old is not None:
            old.close()
        res = ResidencyManager(maps, regions, res_settings, sample_interval_s=0)
        engine.ram_residency = res
    result["engine_owned_residency"] = not owned
    result["ram_budget"] = res.budget.describe()
    result["plan_bytes"] = res.plan.planned_bytes
    t0 = time.perf_counter()
    if owned and sc != "cold-nowarm":
        res.start()
    if sc in ("cold-warm", "warm") and res.warmer is not None:
        res.warmer.join()
        result["warm_s"] = time.perf_counter() - t0
    result["resident_before_first_prompt"] = probe.refresh()

    meter = FaultMeter(exclude=res.warmer.faults if res.warmer is not None else None)
    conv_msgs = [Message(role="user", content=_prompt_text(engine, args.prompt_tokens, args.seed))]
    params = GenerationParams(max_tokens=args.answer_tokens, temperature=args.temperature, seed=args.seed)
    turns = []
    for turn in range(1 + args.followups):
        conv = Conversation(messages=tuple(conv_msgs), reasoning_effort="low")
        ids = engine.render(conv)
        row: dict[str, Any] = {"turn": turn, "prompt_tokens": len(ids), "resident_before": probe.refresh()}
        with res.computing():
            t1 = time.perf_counter()
            _logits, cached = engine.prefill(ids)
            row["prompt_s"] = time.perf_counter() - t1
            row["cached_tokens"] = cached
            before = vram_report()
            rel = release_unused_vram() if args.release else None
            row["vram_boundary"] = {"reserved_before": before.reserved_bytes, "allocated": before.allocated_bytes,
                                    "reserved_after": rel.after.reserved_bytes if rel else before.reserved_bytes,
                                    "release_ms": rel.seconds * 1e3 if rel else 0.0}
            if args.trim and turn == 0:
                _trim(engine, res, maps, regions, kind)
                row["resident_after_trim"] = probe.refresh()
            meter.start_token()
            text, usage = "", None
            for ev in engine.generate(conv, params):
                if isinstance(ev, TextDelta) and ev.channel == "final":
                    text += ev.text
                elif isinstance(ev, Done):
                    usage = ev.usage
            faults = meter.end_token()
        n = max(1, usage.completion_tokens if usage else 1)
        row.update(completion_tokens=usage.completion_tokens if usage else 0,
                   decode_tps=usage.decode_tps if usage else 0.0,
                   major_per_token=faults.major / n, minor_per_token=faults.minor / n,
                   resident_after=probe.refresh(), vram_after_decode=vram_report().reserved_bytes)
        turns.append(row)
        print(json.dumps(row, default=_json_default), file=sys.stderr, flush=True)
        conv_msgs += [Message(role="assistant", content=text or "ok"),
                      Message(role="user", content=_prompt_text(engine, args.followup_tokens, args.seed + turn + 1))]
    result["turns"] = turns
    if owned:
        res.close()
    engine.close()
    print(json.dumps(result, default=_json_default))
    return 0


# ---- run all -------------------------------------------------------------------------------
def _fmt_md(results: list[dict[str, Any]]) -> str:
    rows = ["| scenario | turn | prompt tok | prompt s | answer tok | decode tok/s | major/tok | minor/tok | "
            "store in RAM before → after | VRAM reserved at boundary → after release |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sb = max(1, r.get("store_bytes", 1))
        for t in r.get("turns", []):
            v = t["vram_boundary"]
            rows.append(f"| {r['scenario']} | {t['turn']} | {t['prompt_tokens']} | {t['prompt_s']:.2f} | "
                        f"{t['completion_tokens']} | {t['decode_tps']:.2f} | {t['major_per_token']:.1f} | "
                        f"{t['minor_per_token']:.1f} | "
                        f"{t['resident_before'] / sb:.0%} → {t['resident_after'] / sb:.0%} | "
                        f"{v['reserved_before'] / GIB:.3f} → {v['reserved_after'] / GIB:.3f} GiB "
                        f"({v['release_ms']:.1f} ms) |")
    return "\n".join(rows) + "\n"


def run(args: argparse.Namespace) -> int:
    results = []
    passthrough = ["--model", args.model, "--backend", args.backend, "--budget-frac", str(args.budget_frac),
                   "--prompt-tokens", str(args.prompt_tokens), "--followup-tokens", str(args.followup_tokens),
                   "--answer-tokens", str(args.answer_tokens), "--followups", str(args.followups),
                   "--pool-gib", str(args.pool_gib), "--vram-budget-gib", str(args.vram_budget_gib),
                   "--context", str(args.context), "--temperature", str(args.temperature), "--seed", str(args.seed),
                   "--source", args.source] + (["--trim"] if args.trim else []) + ([] if args.release else
                                                                                  ["--no-release"])
    for sc in args.scenarios.split(","):
        if sc not in SCENARIOS:
            print(f"unknown scenario {sc!r}; choose from {', '.join(SCENARIOS)}", file=sys.stderr)
            return 2
        for rep in range(args.repeats):
            print(f"== {sc} (repeat {rep + 1}/{args.repeats})", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, "-m", "engine.residency.bench_residency", "one", "--scenario", sc,
                                   *passthrough], stdout=subprocess.PIPE, text=True, check=False)
            if proc.returncode != 0:
                results.append({"scenario": sc, "error": f"exit {proc.returncode}"})
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r["repeat"] = rep
            results.append(r)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=_json_default))
    md = _fmt_md([r for r in results if "turns" in r])
    if args.md:
        Path(args.md).write_text(md)
    print(md)
    return 0 if all("error" not in r for r in results) else 1


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu", "reference"])
    p.add_argument("--budget-frac", type=float, default=0.5, help="RAM budget as a fraction of the expert bytes")
    p.add_argument("--prompt-tokens", type=int, default=3000)
    p.add_argument("--followup-tokens", type=int, default=64)
    p.add_argument("--answer-tokens", type=int, default=128)
    p.add_argument("--followups", type=int, default=2)
    p.add_argument("--pool-gib", type=float, default=0.0)
    p.add_argument("--vram-budget-gib", type=float, default=12.0)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--source", default="auto", choices=["auto", "store", "checkpoint"],
                   help="which files hold the experts the backend reads (auto: GPU reads the checkpoint)")
    p.add_argument("--trim", action="store_true", help="after the first prompt, evict experts outside the plan")
    p.add_argument("--no-release", dest="release", action="store_false",
                   help="skip the VRAM boundary release (to measure without it)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_residency", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write a synthetic 120b-shape checkpoint (+ store) with fewer layers")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="120b-shape")
    p.add_argument("--layers", type=int, default=12, help="layers to keep (12 of 36: ~1/3 of the 61 GB)")
    p.add_argument("--store", default="packed", choices=["packed", "raw", "none"])
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("one", help="one scenario in this process (used by run)")
    p.add_argument("--scenario", required=True, choices=SCENARIOS)
    _common(p)
    p = sub.add_parser("run", help="every scenario, each in a fresh process")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON results file")
    p.add_argument("--md", default=None, help="markdown table file")
    _common(p)
    args = ap.parse_args(argv)
    return {"prepare": prepare, "one": one, "run": run}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
