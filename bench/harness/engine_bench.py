"""Decode and prompt benchmarks through the real engine (``Engine.load`` with its settings).

Decode: the engine first holds ``depth`` tokens of context (the deterministic sequence of
``context_tokens``), then generates ``tokens`` more through ``Engine.complete`` (the loop
``Engine.generate`` runs, with the shipping sampler, seeded) once per sampling setting
(temperature 0 = greedy, and each temperature > 0 with each top-p); the decode is timed by
the engine's own usage figures, and the sampler's own time per token is reported, with its
cost over greedy (the stop tokens are biased away so that every run decodes all its tokens).
Every repeat restarts from the same context: the session's prefix reuse truncates the K/V back
to it, so the context is processed once per depth and its cold pass is reported as time to
first token.

Prompt: the engine is reset, then a prompt of ``n`` tokens is processed in one
``engine.prefill`` and the first token is picked; that is the time to first token. A few
greedy tokens after it (untimed) feed the token hash, which makes runs comparable across
backends and builds.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .context_tokens import context_tokens
from .stats import median_of_dicts, summarize

if TYPE_CHECKING:
    from engine.session import Engine

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def hash_ids(ids: list[int]) -> str:
    """sha256 of the token ids as comma-separated decimal text (easy to recompute anywhere)."""
    return hashlib.sha256(",".join(str(i) for i in ids).encode()).hexdigest()


def greedy(logits: torch.Tensor) -> int:
    return int(torch.argmax(logits).item())


def telemetry_snapshot(engine: Engine) -> tuple[float | None, dict[str, float]]:
    """VRAM hit rate and phase times; (None, {}) on engines without VRAM slots (CPU)."""
    t = engine.telemetry()
    hit = float(t.vram_hit_rate) if t.slots else None
    return hit, {k: float(v) for k, v in t.phases_ms.items()}


_COUNT_FIELDS = ("tokens", "hits", "routed")


def _backend_counters(engine: Engine) -> dict[str, float] | None:
    """The GPU decoder's accumulated counters (tokens, hits, routed, seconds per phase), if the
    backend has them. Telemetry reports them as averages since the engine started, which would
    mix warm-up, context and earlier runs into a run's figures; their difference over the run
    does not."""
    stats = getattr(getattr(engine.backend, "decoder", None), "stats", None)
    if stats is None or not hasattr(stats, "__dict__"):
        return None
    out = {k: float(v) for k, v in vars(stats).items()
           if isinstance(v, int | float) and not isinstance(v, bool) and k != "last_hit_rate"}
    return out if all(k in out for k in _COUNT_FIELDS) else None


class RunWindow:
    """VRAM hit rate and per-token phase times over one timed run."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.before = _backend_counters(engine)

    def result(self) -> tuple[float | None, dict[str, float], str]:
        after = _backend_counters(self.engine)
        if self.before is None or after is None:  # no counters (CPU engines): what telemetry says
            hit, phases = telemetry_snapshot(self.engine)
            return hit, phases, "engine telemetry read after the run"
        d = {k: after[k] - self.before.get(k, 0.0) for k in after}
        if d["tokens"] <= 0:  # e.g. a prompt path the decode counters do not cover
            return None, {}, "backend counters did not move during the run"
        hit = d["hits"] / d["routed"] if d["routed"] > 0 else None
        # float counters are seconds (ms per token); integer ones count things (per token, e.g. lane_experts)
        stats = self.engine.backend.decoder.stats  # type: ignore[attr-defined]
        phases = {k: (1.0 if isinstance(getattr(stats, k, 0.0), int) else 1e3) * v / d["tokens"]
                  for k, v in d.items() if k not in _COUNT_FIELDS}
        return hit, phases, "backend counters: ms per token over the timed run (counts per token)"


def max_position(engine: Engine) -> int:
    """Tokens the engine can hold: its context setting, within the model's positions."""
    model_max = int(getattr(engine.config, "max_position_embeddings", 0) or engine.settings.context)
    return min(int(engine.settings.context), model_max)


@dataclass
class DecodeRun:
    seconds: float
    ids: list[int]
    hit_rate: float | None
    phases_ms: dict[str, float] = field(default_factory=dict)
    phases_source: str = ""
    faults: dict[str, float] = field(default_factory=dict)
    forwards: int = 0  # decode steps inside ``seconds``
    sample_ms: float = 0.0  # the sampler's own time per token
    fallbacks: int = 0  # tokens that needed the sampler's full-vocabulary sort


def read_faults() -> Any:
    """Process page faults so far (major/minor; Windows reports one total as minor), or None."""
    try:
        from engine.residency.os_memory import read_faults as read

        return read()
    except Exception:  # an optional figure: no OS support means no column
        return None


def residency_figures(engine: Engine, before: Any, tokens: int) -> dict[str, float]:
    """Page faults per token over a timed run (process-wide; the RAM warm-up is paused while the
    bench computes) and the expert store's RAM residency and VRAM as the engine reports them."""
    out: dict[str, float] = {}
    after = read_faults()
    if before is not None and after is not None and tokens > 0:
        d = after - before
        out["faults_major_per_token"] = d.major / tokens
        out["faults_minor_per_token"] = d.minor / tokens
    t = engine.telemetry()
    if t.store_bytes:
        out["store_resident_fraction"] = t.store_resident_bytes / t.store_bytes
        out["ram_budget_gib"] = t.ram_budget_bytes / 2**30
    if t.vram_reserved_bytes:
        out["vram_reserved_gib"] = t.vram_reserved_bytes / 2**30
        out["vram_used_gib"] = t.vram_used_bytes / 2**30
    return out


def computing(engine: Engine) -> contextlib.AbstractContextManager[Any]:
    """What the engine does around its own generation: RAM warm-up pauses while it computes
    (the bench drives the backend directly, so it says so itself)."""
    res = getattr(engine, "ram_residency", None)
    return res.computing() if res is not None else contextlib.nullcontext()


def stops_biased_away(engine: Any) -> tuple[tuple[int, float], ...]:
    """logit_bias that keeps a raw completion from stopping: <|return|>, <|call|> and <|endoftext|> at -100, so a run
    decodes all its tokens (a sparse bias, the same in every sampler setting, greedy included)."""
    sp = engine.special
    return tuple((t, -100.0) for t in sorted({sp.return_, sp.call, sp.endoftext}))


def _decode_once(engine: Engine, prompt: list[int], tokens: int, temperature: float = 0.0,
                 top_p: float = 1.0) -> DecodeRun:
    """One run through the engine's generation loop and its sampler (seeded: repeats agree)."""
    from engine.types import Done, GenerationParams

    params = GenerationParams(max_tokens=tokens + 1, temperature=temperature, top_p=top_p, seed=0,
                              logit_bias=stops_biased_away(engine))
    window = RunWindow(engine)
    f0 = read_faults()
    done: Done | None = None
    for ev in engine.complete(list(prompt), params):
        if isinstance(ev, Done):
            done = ev
    assert done is not None
    if done.finish_reason == "error":
        raise RuntimeError(f"decode failed: {done.error}")
    forwards = max(done.usage.completion_tokens - 1, 1)  # the first token comes from the context pass
    hit, phases, source = window.result()
    s = engine.last_sampler
    return DecodeRun(done.usage.decode_seconds, list(done.token_ids), hit, phases, source,
                     residency_figures(engine, f0, forwards), forwards,
                     1e3 * s.seconds / max(s.calls, 1), s.fallbacks)


def _settings(temperatures: list[float], top_ps: list[float]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for t in temperatures:
        for p in ([1.0] if t == 0 else top_ps):
            if (t, p) not in out:
                out.append((t, p))
    return out


def _summary(runs: list[DecodeRun], temperature: float, top_p: float) -> dict[str, Any]:
    return {"temperature": temperature, "top_p": top_p,
            "tokens_per_s": summarize([r.forwards / r.seconds for r in runs]),
            "ms_per_token": summarize([1000.0 * r.seconds / r.forwards for r in runs]),
            "sample_ms_per_token": summarize([r.sample_ms for r in runs]),
            "sampler_full_sorts": sum(r.fallbacks for r in runs), "sampled_tokens": sum(len(r.ids) for r in runs),
            "token_ids_sha256": hash_ids(runs[0].ids),
            "repeats_identical": len({hash_ids(r.ids) for r in runs}) == 1}


def run_decode(engine: Engine, *, tokens: int, depths: list[int], repeats: int, warmup: int,
               temperatures: list[float] | tuple[float, ...] = (0.0,), top_ps: list[float] | tuple[float, ...] = (1.0,),
               log: Log = _stderr) -> dict[str, Any]:
    """One result row per depth; its top-level figures are the first sampling setting's, and
    ``sampling`` lists every setting (sampler ms/token, and its cost over greedy when greedy ran)."""
    if tokens < 1 or repeats < 1 or warmup < 0:
        raise ValueError("tokens and repeats must be >= 1, warmup >= 0")
    if not temperatures or any(t < 0 for t in temperatures) or not top_ps or any(not 0 < p <= 1 for p in top_ps):
        raise ValueError("temperatures must be >= 0 and top-p values in (0, 1]")
    settings = _settings(list(temperatures), list(top_ps))
    limit = max_position(engine)
    seq, source = context_tokens(engine, max(max(depths), 1))
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for want in depths:
        depth = min(want, limit - tokens - 2)
        if depth < 0:
            raise ValueError(f"{tokens} decode tokens do not fit the context of {limit}")
        if depth != want:
            notes.append(f"depth {want} capped at {depth}: the context is {limit} tokens "
                         f"(settings.context and the model's positions) and {tokens} tokens are decoded after it")
        prompt = seq[: max(depth, 1)]  # decoding needs one token to start from
        engine.reset()
        with computing(engine):
            t0 = time.perf_counter()
            logits, _ = engine.prefill(prompt)
            greedy(logits)
            ttft = time.perf_counter() - t0
        log(f"depth {depth}: context processed in {ttft:.2f} s; {warmup} warm-up + {repeats} timed runs "
            f"of {tokens} tokens per sampling setting")
        rows: list[tuple[list[DecodeRun], dict[str, Any]]] = []
        for temperature, top_p in settings:
            for _ in range(warmup):
                _decode_once(engine, prompt, tokens, temperature, top_p)
            runs = [_decode_once(engine, prompt, tokens, temperature, top_p) for _ in range(repeats)]
            for i, r in enumerate(runs):
                log(f"  T={temperature:g} top_p={top_p:g} run {i + 1}: {r.forwards / r.seconds:.2f} tok/s, "
                    f"sampler {r.sample_ms:.3f} ms/token")
            rows.append((runs, _summary(runs, temperature, top_p)))
        base = next((s for _, s in rows if s["temperature"] == 0), None)
        for _, s in rows:
            if base is not None:
                s["sample_over_greedy_ms"] = s["sample_ms_per_token"]["median"] - base["sample_ms_per_token"]["median"]
                s["ms_per_token_over_greedy"] = s["ms_per_token"]["median"] - base["ms_per_token"]["median"]
        runs, first = rows[0]
        hits = [r.hit_rate for r in runs if r.hit_rate is not None]
        results.append({
            "depth": depth,
            "depth_requested": want,
            "tokens": tokens,
            "temperature": first["temperature"],
            "top_p": first["top_p"],
            "tokens_per_s": first["tokens_per_s"],
            "ms_per_token": first["ms_per_token"],
            "ttft_s": ttft,
            "context_tokens_per_s": len(prompt) / ttft if ttft > 0 else None,
            "vram_hit_rate": summarize(hits) if hits else None,
            "phases_ms": median_of_dicts([r.phases_ms for r in runs]),
            "phases_source": runs[0].phases_source,
            "residency": median_of_dicts([r.faults for r in runs]),
            "token_ids_sha256": first["token_ids_sha256"],
            "repeats_identical": first["repeats_identical"],
            "token_ids": runs[0].ids,
            "sampling": [s for _, s in rows],
        })
    calib = getattr(getattr(engine.backend, "prefill", None), "calibration", None)
    return {"context_source": source, "results": results, "notes": notes,
            "split_calibration": dict(calib or {}),
            "token_ids_sha256": hash_ids([i for r in results for i in r["token_ids"]])}


def prompt_split(engine: Engine) -> dict[str, float]:
    """The GPU prompt path's own split of its last prompt, flattened: seconds of GPU GEMM,
    staging copies, attention... (``gpu_*``, device time), host phases (routing sync, CPU jobs,
    pack, stage wait...) and counts (staged experts/bytes, CPU experts...). Empty on backends
    without one (the CPU engine)."""
    last = getattr(getattr(engine.backend, "prefill", None), "last", None)
    stats = getattr(last, "stats", None)
    if stats is None or not hasattr(stats, "as_dict"):
        return {}
    d = stats.as_dict()
    out = {f"gpu_{k}": float(v) for k, v in d.get("gpu", {}).items()}
    out.update({f"lane_{k}": float(v) for k, v in d.get("split", {}).items()})  # split.py: observed vs predicted
    out.update({k: float(v) for k, v in d.items()
                if k != "gpu" and isinstance(v, int | float) and not isinstance(v, bool)})
    return out


@dataclass
class PromptRun:
    ttft: float
    ids: list[int]
    hit_rate: float | None
    phases_ms: dict[str, float]
    phases_source: str
    split: dict[str, float]  # the GPU prompt path's own split (prompt_split), empty elsewhere


SPLIT_SOURCE = "the GPU prompt path's split of the timed prompt (seconds, gpu_* = device time; counts)"


def _prompt_once(engine: Engine, prompt: list[int], check_tokens: int) -> PromptRun:
    with computing(engine):
        return _prompt_timed(engine, prompt, check_tokens)


def _prompt_timed(engine: Engine, prompt: list[int], check_tokens: int) -> PromptRun:
    engine.reset()
    window = RunWindow(engine)
    t0 = time.perf_counter()
    logits, _ = engine.prefill(prompt)
    tok = greedy(logits)
    ttft = time.perf_counter() - t0
    hit, phases, source = window.result()  # the prompt pass's, before the check tokens
    split = prompt_split(engine)
    ids = [tok]
    for _ in range(check_tokens):
        tok = greedy(engine.backend.forward([tok]))
        ids.append(tok)
    return PromptRun(ttft, ids, hit, phases, source, split)


def _followup_once(engine: Engine, prompt: list[int], extra: list[int]) -> tuple[float, dict[str, float]]:
    """A follow-up: ``prompt`` is held (processed untimed), then ``extra`` new tokens arrive; the
    time to its first token, as a conversation's next turn waits for it."""
    with computing(engine):
        engine.reset()
        engine.prefill(prompt)
        t0 = time.perf_counter()
        logits, cached = engine.prefill(prompt + extra)
        greedy(logits)
        ttft = time.perf_counter() - t0
    if cached != len(prompt):
        raise RuntimeError(f"the follow-up reused {cached} of {len(prompt)} held tokens")
    return ttft, prompt_split(engine)


def run_prompt(engine: Engine, *, lengths: list[int], repeats: int, warmup: int, check_tokens: int = 8,
               followup: int = 0, log: Log = _stderr) -> dict[str, Any]:
    if repeats < 1 or warmup < 0 or check_tokens < 0:
        raise ValueError("repeats must be >= 1, warmup and check tokens >= 0")
    limit = max_position(engine)
    seq, source = context_tokens(engine, max(lengths) + followup)
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for want in lengths:
        n = min(want, limit - check_tokens - 2)
        if n < 1:
            raise ValueError(f"no prompt fits the context of {limit}")
        if n != want:
            notes.append(f"prompt {want} capped at {n}: the context is {limit} tokens")
        prompt = seq[:n]
        log(f"prompt {n}: {warmup} warm-up + {repeats} timed runs")
        for _ in range(warmup):
            _prompt_once(engine, prompt, 0)
        runs = [_prompt_once(engine, prompt, check_tokens) for _ in range(repeats)]
        for i, r in enumerate(runs):
            log(f"  run {i + 1}: {r.ttft:.3f} s, {n / r.ttft:.1f} tok/s")
        hashes = [hash_ids(r.ids) for r in runs]
        hits = [r.hit_rate for r in runs if r.hit_rate is not None]
        follow: dict[str, Any] = {}
        if followup and n + followup < limit - 2:
            times = [_followup_once(engine, prompt, seq[n : n + followup]) for _ in range(repeats)]
            for i, (t, _) in enumerate(times):
                log(f"  follow-up of {followup} tokens after {n}, run {i + 1}: {t:.3f} s")
            follow = {"followup": {"tokens": followup, "after": n, "ttft_s": summarize([t for t, _ in times]),
                                   "runs_s": [t for t, _ in times], "prompt_split": times[0][1]}}
        # the GPU prompt path reports its own split (seconds and counts) instead of ms per token
        split = runs[0].split
        results.append({
            "prompt_tokens": n,
            "prompt_tokens_requested": want,
            "ttft_s": summarize([r.ttft for r in runs]),
            "runs_s": [r.ttft for r in runs],  # in order: with --warmup 0 the first is this process's first
            "tokens_per_s": summarize([n / r.ttft for r in runs]),
            "vram_hit_rate": summarize(hits) if hits else None,
            **({"prompt_split": median_of_dicts([r.split for r in runs])} if split
               else {"phases_ms": median_of_dicts([r.phases_ms for r in runs])}),
            "phases_source": SPLIT_SOURCE if split else runs[0].phases_source,
            "check_tokens": check_tokens,
            "token_ids_sha256": hashes[0],
            "repeats_identical": len(set(hashes)) == 1,
            "token_ids": runs[0].ids,
            **follow,
        })
    calib = getattr(getattr(engine.backend, "prefill", None), "calibration", None)
    return {"context_source": source, "results": results, "notes": notes,
            "split_calibration": dict(calib or {}),
            "token_ids_sha256": hash_ids([i for r in results for i in r["token_ids"]])}
