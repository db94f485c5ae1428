"""RAM-residency benchmark: first-answer and follow-up decode speed and page faults per token
from a cold page cache, with and without warm-up, at a RAM budget that holds the store only
partly; VRAM reserved before/after the prompt/decode boundary release.

    python -m bench.residency.cli suite --out DIR --backend gpu      # the device call
    python -m bench.residency.cli prepare --out DIR --layers 4 --store none
    python -m bench.residency.cli run --model DIR --backend gpu --budget-frac 0.5 \\
        --out results.json --md results.md

``suite`` (bench/residency/suite.py; wrapped by bench/device/residency.sh) does
everything in one bounded call: disk probe, ``prepare``, a Triton-compiling canary, then the
scenarios. ``run`` starts one fresh process per scenario (nothing mapped, a clean CUDA allocator):

    cold-nowarm    page cache dropped, no warm-up
    cold-warm      page cache dropped, warm-up to the budget, waited for before the first prompt
    cold-warm-now  page cache dropped, warm-up started, first prompt at once (warm-up paused while computing)
    warm           the whole expert source read into RAM first (reference)

Any scenario may carry ``+trim`` (e.g. ``cold-warm-now+trim``): after the first prompt, every
expert outside the warm-up plan is evicted (what an OS under RAM pressure would have trimmed),
through the engine's own mappings too. ``--trim`` adds it to every scenario.

"Dropped" = fsync, then POSIX_FADV_DONTNEED before the engine maps anything (no root needed;
``echo 3 > /proc/sys/vm/drop_caches`` may be refused on the device): ``--drop experts`` (default)
drops the expert byte ranges of the checkpoint and any store, ``--drop all`` whole files. The
measured residency right after the drop is recorded so a drop that did not work is visible.

Faults per token are process-wide counts over the answer divided by its tokens, minus the
warm-up thread's own faults.

The scenario's RAM budget and warm-up switch go into the EngineSettings the engine is loaded
with, so the engine's own residency manager (the GPU backend's since it owns one: static VRAM
experts left out of the plan, the saved routing counts as its ranking; the CPU engine's) is
what is measured; warm-up starts during load. On the GPU backend the bench turns off the
prompt runner's own ``empty_cache`` so that the boundary release it measures is the only one.
The hot set is loaded from ``NEURAL_CACHE_DIR`` when an earlier process saved one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

GIB = 1 << 30
SCENARIOS = ("cold-nowarm", "cold-warm", "cold-warm-now", "warm")
TRIM = "+trim"
WORDS = ("the", "function", "returns", "a", "list", "of", "tokens", "while", "each", "layer", "routes", "experts",
         "to", "memory", "pages", "and", "cache", "keeps", "values", "for", "later", "calls", "so", "that",
         "prompt", "can", "refer", "back", "code", "written", "before")
EXIT_NO_GPU = 3  # `one` asked for the GPU backend and the engine fell back to the CPU


def _json_default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    return str(o)


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default))
    os.replace(tmp, path)


def parse_scenario(name: str) -> tuple[str, bool]:
    """'cold-warm+trim' -> ('cold-warm', True); raises ValueError for an unknown scenario."""
    base, trim = (name[: -len(TRIM)], True) if name.endswith(TRIM) else (name, False)
    if base not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)} (each may end in {TRIM})")
    return base, trim


# ---- prepare -------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> int:
    import engine.synth as synth
    from engine.checkpoint import Checkpoint
    from engine.store.writer import build_store

    shape = synth.shape_with(args.preset, num_hidden_layers=args.layers)
    out = Path(args.out)
    summary: dict[str, Any] = {"out": str(out), "preset": args.preset, "layers": args.layers, "skew": args.skew}
    t0 = time.perf_counter()
    synth.write_synthetic_checkpoint(out, shape, seed=args.seed, skew=args.skew, fast=True)
    summary["write_s"] = time.perf_counter() - t0
    files = sorted(out.glob("*.safetensors"))
    summary["checkpoint_bytes"] = sum(p.stat().st_size for p in files)
    print(f"checkpoint {out} ({summary['checkpoint_bytes'] / GIB:.2f} GiB) in {summary['write_s']:.1f} s",
          file=sys.stderr, flush=True)
    if args.store != "none":
        t0 = time.perf_counter()
        s = build_store(Checkpoint.open(out), out / f"experts-{args.store}.nstore", args.store)
        summary["store_s"] = time.perf_counter() - t0
        summary["store_bytes"] = s.file_bytes
        files.append(Path(s.path))
        print(f"store {s.path} ({s.file_bytes / GIB:.2f} GiB) in {summary['store_s']:.1f} s", file=sys.stderr,
              flush=True)
    if args.fsync:
        t0 = time.perf_counter()
        for p in files:  # dirty pages cannot be dropped later: write them out now, timed apart
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        summary["fsync_s"] = time.perf_counter() - t0
    print(json.dumps(summary))
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


def _model_files(model: Path) -> list[Path]:
    return sorted(model.glob("*.safetensors")) + sorted(model.glob("*.nstore"))


def _expert_spans(model: Path) -> dict[Path, list[tuple[int, int]]]:
    """Per file, the merged (offset, length) byte ranges holding experts: the checkpoint's expert
    tensors and every store file (all experts)."""
    from engine.checkpoint import Checkpoint
    from engine.residency import checkpoint_regions

    ck = Checkpoint.open(model)
    try:
        files, regions = checkpoint_regions(ck)
    finally:
        ck.close()
    out: dict[Path, list[tuple[int, int]]] = {}
    for fi, path in enumerate(files):
        merged: list[list[int]] = []
        for r in sorted((r for r in regions if r.file == fi), key=lambda r: r.offset):
            if merged and r.offset <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], r.end)
            else:
                merged.append([r.offset, r.end])
        out[path] = [(a, b - a) for a, b in merged]
    for p in sorted(model.glob("*.nstore")):
        out[p] = [(0, p.stat().st_size)]
    return out


def _drop(model: Path, mode: str) -> dict[str, Any]:
    """Make the expert bytes cold: fsync (dirty pages cannot be dropped), then POSIX_FADV_DONTNEED
    on the expert ranges (``experts``) or on every checkpoint/store file (``all``). Returns the
    expert bytes resident before and after, measured with mincore through fresh mappings."""
    t0 = time.perf_counter()
    spans = _expert_spans(model)
    before = _span_residency(spans)
    for p in _model_files(model):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            for off, n in [(0, 0)] if mode == "all" else spans.get(p, []):
                dontneed(fd, off, n)
        finally:
            os.close(fd)
    return {"mode": mode, "seconds": time.perf_counter() - t0, "expert_bytes": sum(n for s in spans.values()
                                                                                       for _o, n in s),
            "resident_before": before, "resident_after": _span_residency(spans)}


def dontneed(fd: int, offset: int = 0, length: int = 0) -> None:
    """POSIX_FADV_DONTNEED (Linux; the benchmark's cold start without root). length 0 = to the end."""
    if sys.platform.startswith("linux"):
        from engine.residency import os_memory

        os_memory.fadvise_dontneed(fd, offset, length)


def _span_residency(spans: dict[Path, list[tuple[int, int]]]) -> int:
    """Bytes of these file ranges in the page cache (mincore through a fresh mapping)."""
    from engine.residency import Mapping, Region, StoreResidency

    total = 0
    for p, ranges in spans.items():
        if not ranges or p.stat().st_size == 0:
            continue
        with Mapping.open(p) as m:
            total += StoreResidency(m, [Region(0, i, off, n) for i, (off, n) in enumerate(ranges)]).refresh()
    return total


def _trim(engine: Any, res: Any, maps: list[Any], regions: list[Any], kind: str) -> None:
    """Evict every expert outside the warm-up plan, as an OS under RAM pressure would have."""
    from engine.residency import evict, os_memory

    planned = set(res.plan.keys)
    outside = [r for r in regions if r.key not in planned]
    if sys.platform.startswith("linux"):
        for addr, n in _engine_spans(engine, outside, kind):
            with contextlib.suppress(OSError):
                os_memory.madvise(addr, n, os_memory.MADV_DONTNEED)
    evict(maps, outside)


def _static_vram_keys(backend: Any) -> list[tuple[int, int]]:
    """Experts in the GPU backend's static slots (the hot set): the CPU never reads them."""
    pool = getattr(backend, "pool", None)
    slots = getattr(pool, "slots", None) or []
    return [tuple(s.key) for s in slots if getattr(s, "static", False) and getattr(s, "key", None) is not None]


def _routing_ranking(backend: Any, fingerprint: str) -> Any:
    """The GPU backend's routing counts (from a saved hot set) as the warm-up ranking; None if empty."""
    from engine.residency import ExpertRanking

    counts = getattr(getattr(backend, "policy", None), "counts", None)
    if counts is None or not np.asarray(counts).any():
        return None
    return ExpertRanking(np.asarray(counts).copy(), fingerprint)


def pool_gib_for(cfg: Any, args: argparse.Namespace) -> float:
    """``--pool-slots N``: N adaptive+static slots plus the scratch slots. ``--pool-gib auto36``:
    the slots per layer a 36-layer model gets from ``--vram-budget-gib`` (the GPU backend's own
    VRAM plan, prompt workspace included), times this model's layers. Else the number given."""
    from dataclasses import replace

    from engine.gpu.layout import ExpertLayout

    sb = ExpertLayout.for_config(cfg).slot_bytes
    if args.pool_slots > 0:  # half a slot of margin: plan_vram floors pool_gib * GiB / slot_bytes
        return (args.pool_slots + args.scratch_slots + 0.5) * sb / GIB
    if args.pool_gib != "auto36":
        return float(args.pool_gib)
    from engine.plan import plan_vram
    from engine.settings import EngineSettings

    full = replace(cfg, num_hidden_layers=36,
                   layer_types=tuple(cfg.layer_types[i % len(cfg.layer_types)] for i in range(36)))
    p36 = plan_vram(full, EngineSettings(context=args.context, kv_ring=256, vram_budget_gib=args.vram_budget_gib,
                                         scratch_slots=args.scratch_slots))
    slots = max(cfg.num_experts_per_tok, round(p36.n_slots * cfg.num_hidden_layers / 36))
    return (slots + args.scratch_slots + 0.5) * sb / GIB


def _uses_store(model: Path, args: argparse.Namespace) -> Path | None:
    """The store the backend will read experts from, or None for the checkpoint (the GPU backend's
    misses and prompt staging read the checkpoint)."""
    from engine.store.reader import find_store

    store = find_store(model)
    if args.source == "store" or (args.source == "auto" and args.backend not in ("gpu", "gpu-interpret", "auto")):
        return store
    return None


def _source_bytes(model: Path, args: argparse.Namespace) -> int:
    """Expert bytes of the files the backend will read (the RAM budget is a fraction of them)."""
    from engine.checkpoint import Checkpoint
    from engine.residency import checkpoint_regions, store_regions
    from engine.store.reader import ExpertStore

    store = _uses_store(model, args)
    if store is not None:
        with ExpertStore.open(store) as st:
            return sum(r.length for r in store_regions(st))
    ck = Checkpoint.open(model)
    try:
        return sum(r.length for r in checkpoint_regions(ck)[1])
    finally:
        ck.close()


def _load_engine(model: Path, args: argparse.Namespace, ram_budget_gib: float, warmup: bool) -> Any:
    """The engine as the scenario needs it: its RAM budget and warm-up go to the engine's own
    residency manager (no lock: mlock would hide what the OS does)."""
    from engine.checkpoint import Checkpoint
    from engine.session import Engine
    from engine.settings import EngineSettings

    gpu = args.backend in ("gpu", "gpu-interpret")
    kw: dict[str, Any] = {"backend": "gpu" if gpu else args.backend, "vram_budget_gib": args.vram_budget_gib,
                          "context": args.context, "scratch_slots": args.scratch_slots,
                          "ram_budget_gib": ram_budget_gib, "warmup": warmup, "mlock_gib": 0.0,
                          # the suite's fallback scenarios (suite.py) ask for token-by-token prompts
                          "gpu_prefill": os.environ.get("NEURAL_GPU_PREFILL", "1") != "0"}
    if gpu:
        ck = Checkpoint.open(model)
        kw["pool_gib"] = pool_gib_for(ck.config, args)
        if args.backend == "gpu-interpret":  # the GPU code paths on the CPU (Triton interpreter): dry runs
            from engine.gpu.backend import GpuBackend

            settings = EngineSettings(**kw)
            return Engine(ck, settings, GpuBackend.create(ck, settings, interpret=True), "")
        ck.close()
    return Engine.load(model, EngineSettings(**kw))


def one(args: argparse.Namespace) -> int:
    if args.backend == "gpu-interpret":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton
    from engine.residency import (
        FaultMeter,
        Mapping,
        ResidencyManager,
        StoreResidency,
        release_unused_vram,
        vram_report,
    )
    from engine.residency.vram import peak_reserved, reset_peak
    from engine.settings import EngineSettings
    from engine.types import Conversation, Done, GenerationParams, Message, TextDelta

    sc, trim = parse_scenario(args.scenario)
    trim = trim or args.trim
    model = Path(args.model)
    partial = Path(args.partial) if args.partial else None
    result: dict[str, Any] = {"scenario": sc + (TRIM if trim else ""), "model": str(model),
                              "budget_frac": args.budget_frac, "backend_requested": args.backend, "pid": os.getpid(),
                              "prefill_env": os.environ.get("NEURAL_GPU_PREFILL", "")}

    def save() -> None:
        if partial is not None:
            write_json_atomic(partial, result)

    t_start = time.perf_counter()
    if sc.startswith("cold"):
        result["drop"] = _drop(model, args.drop)
        result["resident_after_drop"] = result["drop"]["resident_after"]
    source_bytes = _source_bytes(model, args)
    budget_gib = source_bytes / GIB * (args.budget_frac if sc != "warm" else 1.0)
    result["budget_gib"] = budget_gib
    save()
    t0 = time.perf_counter()
    engine = _load_engine(model, args, ram_budget_gib=max(1e-6, budget_gib), warmup=sc != "cold-nowarm")
    result["load_s"] = time.perf_counter() - t0
    result["backend"] = engine.backend.name
    result["backend_note"] = engine.info.backend_note
    result["layers"] = engine.config.num_hidden_layers
    result["vram_after_load"] = vram_report()
    if args.backend in ("gpu", "gpu-interpret") and not engine.backend.name.startswith("gpu"):
        result["error"] = f"GPU backend not used: {engine.info.backend_note or engine.backend.name}"
        save()
        print(json.dumps(result, default=_json_default))
        _close(engine, args.close_timeout_s)
        return EXIT_NO_GPU
    be = engine.backend
    runner = getattr(be, "prefill", None)
    if runner is not None and hasattr(runner, "release_cache"):
        runner.release_cache = False  # the bench's boundary release is the one measured (or none)
    plan = getattr(be, "plan", None)
    if plan is not None:
        result["vram_plan"] = plan.describe()
    result["hot_set_loaded"] = bool(getattr(be, "hot_set_installed", False))
    files, regions, kind = _expert_source(engine, args.source)
    maps = [Mapping.open(f) for f in files]
    probe = StoreResidency(maps, regions)
    store_bytes = probe.store_bytes
    result.update(source=kind, store_bytes=store_bytes, resident_after_load=probe.refresh())

    static = _static_vram_keys(be) if kind == "checkpoint" else []
    ranking = _routing_ranking(be, engine.info.fingerprint)
    result["static_vram_experts"] = len(static)
    result["ranked_experts"] = len(ranking.order()) if ranking is not None else 0
    # The engine's own manager (the GPU backend's, or the CPU engine's) was built at load from the
    # scenario's settings (budget, warm-up on/off) and has started warming. Only a backend without
    # one (the pure reference) gets the bench's, built the same way.
    res: Any = engine.ram_residency
    owned = res is None
    if owned:
        res = ResidencyManager(maps, regions, EngineSettings(ram_budget_gib=budget_gib, warmup=sc != "cold-nowarm",
                                                             mlock_gib=0.0),
                               ranking=ranking, exclude=static, sample_interval_s=0)
        engine.ram_residency = res
        if sc != "cold-nowarm":
            res.start()
    result["engine_owned_residency"] = not owned
    result["ram_budget"] = res.budget.describe()
    result["plan_bytes"] = res.plan.planned_bytes
    t0 = time.perf_counter()
    if sc in ("cold-warm", "warm") and res.warmer is not None:
        res.warmer.join()
        result["warm_s"] = time.perf_counter() - t0  # the wait after load; warm-up began during it
    if res.warmer is not None:
        result["warmup"] = res.warmer.progress()
    result["resident_before_first_prompt"] = probe.refresh()
    save()

    warm_faults = res.warmer.faults if res.warmer is not None else None
    meter = FaultMeter(exclude=warm_faults)
    conv_msgs = [Message(role="user", content=_prompt_text(engine, args.prompt_tokens, args.seed))]
    params = GenerationParams(max_tokens=args.answer_tokens, temperature=args.temperature, seed=args.seed)
    turns: list[dict[str, Any]] = []
    result["turns"] = turns
    for turn in range(1 + args.followups):
        conv = Conversation(messages=tuple(conv_msgs), reasoning_effort="low")
        ids = engine.render(conv)
        row: dict[str, Any] = {"turn": turn, "prompt_tokens": len(ids), "resident_before": probe.refresh()}
        with res.computing():
            reset_peak()
            last_prompt = getattr(runner, "last", None)
            prompt_meter = FaultMeter(exclude=warm_faults)
            prompt_meter.start_token()
            t1 = time.perf_counter()
            _logits, cached = engine.prefill(ids)
            row["prompt_s"] = time.perf_counter() - t1
            row["prompt_major_faults"] = prompt_meter.end_token().major
            row["cached_tokens"] = cached
            if runner is not None:
                row["prefill_path"] = "layer-major" if getattr(runner, "last", None) is not last_prompt else \
                    "token-by-token"
            before = vram_report()
            rel = release_unused_vram() if args.release else None
            row["vram_boundary"] = {"reserved_before": before.reserved_bytes, "allocated": before.allocated_bytes,
                                    "reserved_after": rel.after.reserved_bytes if rel else before.reserved_bytes,
                                    "release_ms": rel.seconds * 1e3 if rel else 0.0,
                                    "peak_reserved_prompt": peak_reserved()}
            if trim and turn == 0:
                t2 = time.perf_counter()
                _trim(engine, res, maps, regions, kind)
                row["trim_s"] = time.perf_counter() - t2
                row["resident_after_trim"] = probe.refresh()
            res.meter.reset()
            meter.start_token()
            text, usage = "", None
            for ev in engine.generate(conv, params):
                if isinstance(ev, TextDelta) and ev.channel == "final":
                    text += ev.text
                elif isinstance(ev, Done):
                    usage = ev.usage
                    if ev.error:
                        row["error"] = ev.error
            faults = meter.end_token()
        n = max(1, usage.completion_tokens if usage else 1)
        steps = res.meter.summary()
        row.update(completion_tokens=usage.completion_tokens if usage else 0,
                   decode_tps=usage.decode_tps if usage else 0.0,
                   major_per_token=faults.major / n, minor_per_token=faults.minor / n,
                   worst_step_faults=steps.max_total, steps_metered=steps.tokens,
                   resident_after=probe.refresh(), vram_after_decode=vram_report().reserved_bytes)
        turns.append(row)
        save()
        print(json.dumps(row, default=_json_default), file=sys.stderr, flush=True)
        conv_msgs += [Message(role="assistant", content=text or "ok"),
                      Message(role="user", content=_prompt_text(engine, args.followup_tokens, args.seed + turn + 1))]
    result["close_s"] = _close(engine, args.close_timeout_s)  # closes engine.ram_residency too
    result["total_s"] = time.perf_counter() - t_start
    save()
    print(json.dumps(result, default=_json_default))
    return 0


def _close(engine: Any, timeout_s: float) -> float | None:
    """engine.close() (the GPU backend saves its hot set there) on a daemon thread: a close that
    hangs must not hold the process; None if it did not finish in time."""
    import threading

    t0 = time.perf_counter()
    th = threading.Thread(target=engine.close, name="bench-close", daemon=True)
    th.start()
    th.join(timeout_s)
    return None if th.is_alive() else time.perf_counter() - t0


# ---- child processes -----------------------------------------------------------------------
_LIVE: set[subprocess.Popen[str]] = set()  # children running now, each leading its own group


def run_child(cmd: list[str], timeout_s: float, *, env: dict[str, str] | None = None,
              stderr: Any = None) -> tuple[int | None, str, float]:
    """Run ``cmd`` in its own process group; on timeout kill that group. Returns (exit code or
    None on timeout, stdout, seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, start_new_session=True)
    _LIVE.add(proc)
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout_s))
        return proc.returncode, out or "", time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        return None, out or "", time.perf_counter() - t0
    finally:
        _LIVE.discard(proc)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if sys.platform == "win32":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)


def kill_children() -> None:
    """SIGKILL the process group of every child started by :func:`run_child` that still runs."""
    for proc in list(_LIVE):
        _kill_group(proc)


def last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    return obj
    return None


def one_argv(args: argparse.Namespace, scenario: str, model: str, partial: str | None = None) -> list[str]:
    argv = [sys.executable, "-m", "bench.residency.cli", "one", "--scenario", scenario,
            "--model", model, "--backend", args.backend, "--budget-frac", str(args.budget_frac),
            "--prompt-tokens", str(args.prompt_tokens), "--followup-tokens", str(args.followup_tokens),
            "--answer-tokens", str(args.answer_tokens), "--followups", str(args.followups),
            "--pool-gib", str(args.pool_gib), "--pool-slots", str(args.pool_slots),
            "--scratch-slots", str(args.scratch_slots), "--vram-budget-gib", str(args.vram_budget_gib),
            "--context", str(args.context), "--temperature", str(args.temperature), "--seed", str(args.seed),
            "--source", args.source, "--drop", args.drop]
    argv += ["--trim"] if args.trim else []
    argv += [] if args.release else ["--no-release"]
    argv += ["--partial", partial] if partial else []
    return argv


# ---- run all -------------------------------------------------------------------------------
def _fmt_md(results: list[dict[str, Any]]) -> str:
    rows = ["| scenario | turn | prompt tok | prompt s | answer tok | decode tok/s | major/tok | minor/tok | "
            "store in RAM before → after | VRAM reserved at boundary → after release |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sb = max(1, r.get("store_bytes", 1))
        for t in r.get("turns", []):
            if "vram_boundary" not in t or "completion_tokens" not in t:
                continue
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
    for sc in args.scenarios.split(","):
        try:
            parse_scenario(sc)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        for rep in range(args.repeats):
            print(f"== {sc} (repeat {rep + 1}/{args.repeats})", file=sys.stderr, flush=True)
            rc, out, secs = run_child(one_argv(args, sc, args.model), args.timeout_s)
            r = last_json(out) or {"scenario": sc}
            r["repeat"], r["wall_s"] = rep, secs
            if rc != 0:
                r["error"] = r.get("error") or ("timed out" if rc is None else f"exit {rc}")
            results.append(r)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=_json_default))
    md = _fmt_md([r for r in results if "turns" in r])
    if args.md:
        Path(args.md).write_text(md)
    print(md)
    return 0 if all("error" not in r for r in results) else 1


def common_args(p: argparse.ArgumentParser, model: bool = True) -> None:
    if model:
        p.add_argument("--model", required=True)
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu", "reference", "gpu-interpret"],
                   help="gpu-interpret: the GPU backend under TRITON_INTERPRET=1 on the CPU (dry runs only)")
    p.add_argument("--budget-frac", type=float, default=0.5, help="RAM budget as a fraction of the expert bytes")
    p.add_argument("--prompt-tokens", type=int, default=3000)
    p.add_argument("--followup-tokens", type=int, default=64)
    p.add_argument("--answer-tokens", type=int, default=128)
    p.add_argument("--followups", type=int, default=2)
    p.add_argument("--pool-gib", default="0",
                   help="GPU expert pool: GiB, or auto36 = the slots per layer of a 36-layer model at "
                        "--vram-budget-gib, times this model's layers")
    p.add_argument("--pool-slots", type=int, default=0, help="GPU expert slots (overrides --pool-gib)")
    p.add_argument("--scratch-slots", type=int, default=6)
    p.add_argument("--vram-budget-gib", type=float, default=12.0)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--source", default="auto", choices=["auto", "store", "checkpoint"],
                   help="which files hold the experts the backend reads (auto: GPU reads the checkpoint)")
    p.add_argument("--drop", default="experts", choices=["experts", "all"],
                   help="cold scenarios: drop the expert byte ranges only (default) or whole files")
    p.add_argument("--trim", action="store_true", help="after the first prompt, evict experts outside the plan")
    p.add_argument("--no-release", dest="release", action="store_false",
                   help="skip the VRAM boundary release (to measure without it)")
