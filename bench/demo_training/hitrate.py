"""VRAM hit rate of the demo model against a random-weight model of exactly its shape, as
``neural bench decode`` measures it on the GPU backend (the device script
``bench/device/demo_hitrate.sh`` runs it; everything here also runs on the CPU).

    python3 -m bench.demo_training.hitrate twin --model resources/demo-model --out DIR [--seed 0]
    python3 -m bench.demo_training.hitrate pool-gib --model DIR --slots 16 [--static -1]
    python3 -m bench.demo_training.hitrate summarize --bench-dir DIR [--out summary.json]

``twin``: a synthetic checkpoint (engine.synth, uniform router bias) whose config.json is the demo's
byte for byte in content and whose tokenizer files are the demo's, so both models see the same token
ids; only the weights differ. ``pool-gib``: the ``pool_gib`` setting that gives exactly N expert slots
(checked with the engine's own plan, engine/gpu/budget.py). ``summarize``: reads the bench JSONs
named ``LABEL--slotsN--staticS.json`` and prints the hit-rate table and routing statistics
(bench/demo_training/routing_stats.py) of each model on held-out prompts and on the very tokens the
bench decoded, with the slot replay (slot_replay.py, SIMULATED) of those tokens next to the
measured rate.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.config import ModelConfig
from engine.settings import EngineSettings
from engine.synth import SynthShape

GIB = 1 << 30
SCRATCH_SLOTS = EngineSettings().scratch_slots
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
BENCH_NAME = re.compile(r"^(?P<label>.+)--slots(?P<slots>\d+)--static(?P<static>-?\d+)\.json$")
# "GPU backend: budget ... (16 slots: 8 static, 8 adaptive; 6 scratch)" (engine/gpu/backend.py, NEURAL_LOG=INFO)
PLAN_LINE = re.compile(r"GPU backend: .*\((\d+) slots: (\d+) static, (\d+) adaptive; (\d+) scratch"
                       r"(?:, \d+ of them lookahead)?\)")


# ---- the random twin ------------------------------------------------------------------------------

def shape_of(config: dict[str, Any]) -> SynthShape:
    """The engine.synth shape whose config.json is ``config`` (eos/pad ids aside); ValueError if
    ``config`` has anything engine.synth would write differently."""
    rope = config["rope_scaling"]
    shape = SynthShape(
        hidden_size=config["hidden_size"], num_hidden_layers=config["num_hidden_layers"],
        num_local_experts=config["num_local_experts"], num_experts_per_tok=config["num_experts_per_tok"],
        num_attention_heads=config["num_attention_heads"], num_key_value_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"], intermediate_size=config["intermediate_size"], vocab_size=config["vocab_size"],
        sliding_window=config["sliding_window"], rope_factor=float(rope["factor"]),
        original_context=int(rope["original_max_position_embeddings"]))
    want = {**shape.config_dict(), "eos_token_id": config.get("eos_token_id"),
            "pad_token_id": config.get("pad_token_id")}
    diff = sorted(k for k in set(want) | set(config) if want.get(k) != config.get(k))
    if diff:
        raise ValueError(f"engine.synth cannot write this config exactly (differs in {', '.join(diff)})")
    return shape


def write_twin(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """Random weights (engine.synth, seed ``seed``, uniform router bias) in exactly the shape of
    ``model_dir``, with its config.json content and tokenizer files."""
    from engine.synth import write_synthetic_checkpoint

    config = json.loads((model_dir / "config.json").read_text())
    shape = shape_of(config)
    write_synthetic_checkpoint(out, shape, seed=seed)
    for name in TOKENIZER_FILES:
        shutil.copyfile(model_dir / name, out / name)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


# ---- pool sizing -----------------------------------------------------------------------------------

def bench_settings(**overrides: Any) -> EngineSettings:
    """The settings ``neural bench decode`` passes the engine by default (app/cli/cmd_bench.py),
    with ``overrides``."""
    base: dict[str, Any] = {"backend": "gpu", "dtype": "bfloat16", "cpu_threads": 8, "context": 16384,
                            "vram_budget_gib": 12.0}
    base.update(overrides)
    return EngineSettings.from_dict(base)


def planned_slots(cfg: ModelConfig, s: EngineSettings) -> tuple[int, int]:
    """(slots, static slots) the GPU backend plans for these settings (engine/plan.py)."""
    from engine.plan import plan_vram

    plan = plan_vram(cfg, s)
    return plan.n_slots, plan.n_static


def pool_gib_for(cfg: ModelConfig, slots: int, static_slots: int = -1,
                 scratch_slots: int = SCRATCH_SLOTS) -> str:
    """``pool_gib`` (as text for ``--set pool_gib=``) that plans exactly ``slots`` expert slots
    next to ``scratch_slots`` scratch slots and the default lookahead slots: half a slot above the
    boundary, so the engine's ``int(pool_gib * GiB) // slot_bytes`` lands on it whatever the float
    rounding."""
    from engine.gpu.layout import ExpertLayout

    if not cfg.num_experts_per_tok <= slots <= cfg.num_hidden_layers * cfg.num_local_experts:
        raise ValueError(f"{slots} slots: need between top-k ({cfg.num_experts_per_tok}) and all "
                         f"{cfg.num_hidden_layers * cfg.num_local_experts} experts")
    from engine.plan import planned_lookahead

    sb = ExpertLayout.for_config(cfg).slot_bytes
    ahead = planned_lookahead(bench_settings(scratch_slots=scratch_slots))  # the engine's default lookahead
    text = repr((slots + scratch_slots + ahead + 0.5) * sb / GIB)
    got, _static = planned_slots(cfg, bench_settings(pool_gib=float(text), static_slots=static_slots,
                                                     scratch_slots=scratch_slots))
    if got != slots:
        raise AssertionError(f"pool_gib={text} plans {got} slots, not {slots}")
    return text


# ---- routing statistics ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def _corpus_split(seed: int) -> tuple[list, list, str]:
    from .corpus import build_corpus, split

    samples, corpus_hash = build_corpus(None, seed=seed)
    train_s, held_s = split(samples, seed=seed)
    return train_s, held_s, corpus_hash


def held_out_prompts(tokenizer_file: Path, n: int = 24, length: int = 256, seed: int = 0) -> tuple[list[list[int]],
                                                                                                        str]:
    """The recipe's routing-statistics prompts (bench/demo_training/run.py): the first ``length``
    tokens of the first ``n`` held-out samples, encoded as training encoded them. Built from this
    Python's standard library, so they match the training run's only on the same Python version."""
    from tokenizers import Tokenizer

    from engine.tokenizer import SpecialTokens

    from .train import encode_sample

    train_s, held_s, corpus_hash = _corpus_split(seed)
    tok = Tokenizer.from_file(str(tokenizer_file))
    sp = SpecialTokens.from_tokenizer(tok)
    rng = random.Random(seed)
    for s in train_s:  # the training samples draw from the same generator first
        encode_sample(s, tok, sp, rng)
    prompts = [encode_sample(s, tok, sp, rng)[0][:length] for s in held_s[:n]]
    return prompts, f"corpus {corpus_hash} (Python {sys.version.split()[0]}), {len(prompts)} held-out prompts"


def bench_stream(model_dir: Path, result: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(context, decoded) token ids of one bench decode result (needs ``--ids``): the context the
    engine held and the tokens its timed forwards processed (the first run; repeats are identical
    when ``repeats_identical``)."""
    from bench.harness.context_tokens import context_tokens
    from engine.session import Engine

    engine = Engine.load(model_dir, EngineSettings(backend="reference", dtype="float32"))
    try:
        seq, _source = context_tokens(engine, max(int(result["depth"]), 1))
    finally:
        engine.close()
    ids = [int(t) for t in result["token_ids"]]
    return seq[: max(int(result["depth"]), 1)], ids[:-1]  # the last picked token was never processed


@dataclass(frozen=True)
class RoutingRow:
    model: str
    source: str
    tokens: int
    top10_share: float
    median_reuse_distance: float
    next_token_overlap: float
    lru_hit_rate: float  # SIMULATED


def routing_row(model: str, model_dir: Path, prompts: list[list[int]], source: str) -> RoutingRow:
    from .routing_stats import route_trace, stats

    cfg = ModelConfig.from_dict(json.loads((model_dir / "config.json").read_text()))
    st = stats(route_trace(model_dir, prompts), cfg.num_local_experts, cfg.num_hidden_layers)
    return RoutingRow(model, source, st.tokens, st.top10_share, st.median_reuse_distance, st.next_token_overlap,
                      st.lru_hit_rate)


def replay_stream(model_dir: Path, context: list[int], decoded: list[int], slots: int, static: int) -> float:
    """SIMULATED hit rate of the slot replay (slot_replay.py: ``static`` slots calibrated on the
    context, whose routing enters the scores with the engine's prompt weight; refresh and admission
    settings of the engine's defaults) on the decoded tokens."""
    from engine.gpu.admission import AdmissionSettings

    from .routing_stats import route_trace
    from .slot_replay import replay

    cfg = ModelConfig.from_dict(json.loads((model_dir / "config.json").read_text()))
    trace = route_trace(model_dir, [context + decoded])[0]
    layers, experts = cfg.num_hidden_layers, cfg.num_local_experts
    r = replay([trace[: len(context)]], [trace[len(context):]], layers, experts,
               slot_fraction=slots / (layers * experts), static_slots=static,
               calibration_weight=min(1.0, AdmissionSettings().prefill_weight / max(1, len(context))))
    return r.hit_rate


# ---- the bench table --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchRow:
    model: str
    slots: int
    static: int  # static slots the engine planned (from its log line, else from the settings)
    plan_source: str  # "engine log" (the GPU backend's own plan line) or "settings" (computed here)
    backend: str
    depth: int
    tokens: int
    hit_first: float | None  # MEASURED: VRAM hit rate over the first timed run (fresh text)
    hit_median: float | None  # MEASURED: median over the repeats (the same tokens again)
    tok_s: float | None  # MEASURED: median decode tokens/s
    distinct_tokens: int | None  # distinct ids among the decoded tokens: a looping model hits more
    repeats_identical: bool
    replay_hit: float | None = None  # SIMULATED: slot replay of the same tokens, same slots
    file: str = ""


def bench_row(path: Path, report: dict[str, Any]) -> BenchRow:
    m = BENCH_NAME.match(path.name)
    if m is None:
        raise ValueError(f"{path.name}: expected LABEL--slotsN--staticS.json")
    res = report["results"][0]
    eng = report["settings"]["engine"]
    cfg = ModelConfig.from_dict(json.loads((Path(report["model"]["dir"]) / "config.json").read_text()))
    slots, static = planned_slots(cfg, EngineSettings.from_dict(eng))
    plan_source = "settings"
    log = path.with_suffix(".log")
    if log.is_file():
        found = PLAN_LINE.findall(log.read_text(errors="replace"))
        if found:
            slots, static = int(found[-1][0]), int(found[-1][1])
            plan_source = "engine log"
    if slots != int(m["slots"]):
        raise ValueError(f"{path.name}: the engine planned {slots} slots, the file name says {m['slots']}")
    hit = res.get("vram_hit_rate") or {}
    runs = hit.get("runs") or []
    ids = res.get("token_ids")
    return BenchRow(
        model=m["label"], slots=slots, static=static, plan_source=plan_source, backend=report["backend"],
        depth=int(res["depth"]), tokens=int(res["tokens"]), hit_first=runs[0] if runs else None,
        hit_median=hit.get("median"), tok_s=(res.get("tokens_per_s") or {}).get("median"),
        distinct_tokens=len(set(ids[:-1])) if ids else None, repeats_identical=bool(res.get("repeats_identical")),
        file=path.name)


def _f(x: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def bench_table(rows: list[BenchRow], total_experts: int) -> str:
    lines = ["| model | slots (share) | static + adaptive | depth + tokens | VRAM hit rate, 1st run (MEASURED) "
             "| median of repeats | slot replay (SIMULATED) | tok/s | distinct decoded tokens | backend |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r.slots, r.static, r.model)):
        lines.append(
            f"| {r.model} | {r.slots} ({r.slots / total_experts:.0%}) | {r.static} + {r.slots - r.static} "
            f"| {r.depth} + {r.tokens} | {_f(r.hit_first)} | {_f(r.hit_median)} | {_f(r.replay_hit)} "
            f"| {_f(r.tok_s, '{:.1f}')} | {r.distinct_tokens if r.distinct_tokens is not None else '-'} "
            f"| {r.backend} |")
    return "\n".join(lines)


def routing_table(rows: list[RoutingRow]) -> str:
    lines = ["| model | tokens routed | top-10% share | median reuse distance | shared with previous token "
             "| LRU(25%) hit rate (SIMULATED) | prompts |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.tokens} | {r.top10_share:.3f} | {r.median_reuse_distance:g} "
                     f"| {r.next_token_overlap:.3f} | {r.lru_hit_rate:.3f} | {r.source} |")
    return "\n".join(lines)


def summarize(bench_dir: Path, routing: bool = True, held_out: bool = True) -> dict[str, Any]:
    """Bench rows of every ``LABEL--slotsN--staticS.json`` in ``bench_dir``, and (``routing``)
    routing statistics per model on its decoded tokens and (``held_out``) on held-out prompts."""
    rows: list[BenchRow] = []
    reports: dict[str, tuple[Path, dict[str, Any]]] = {}
    errors: list[str] = []
    for path in sorted(bench_dir.glob("*--slots*--static*.json")):
        try:
            report = json.loads(path.read_text())
            row = bench_row(path, report)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
            continue
        reports.setdefault(row.model, (Path(report["model"]["dir"]), report))
        rows.append(row)
    routing_rows: list[RoutingRow] = []
    if routing:
        streams: dict[str, tuple[list[int], list[int]]] = {}
        for label, (model_dir, report) in reports.items():
            res = report["results"][0]
            if not res.get("token_ids"):
                errors.append(f"{label}: no token ids in the bench JSON (run it with --ids)")
                continue
            streams[label] = bench_stream(model_dir, res)
            ctx, dec = streams[label]
            routing_rows.append(routing_row(label, model_dir, [ctx + dec], f"bench context {len(ctx)} + decoded "
                                            f"{len(dec)} tokens"))
        for i, r in enumerate(rows):
            if r.model in streams:
                hit = replay_stream(reports[r.model][0], *streams[r.model], r.slots, r.static)
                rows[i] = BenchRow(**{**asdict(r), "replay_hit": hit})
        if held_out:
            for label, (model_dir, _report) in reports.items():
                prompts, source = held_out_prompts(model_dir / "tokenizer.json")
                routing_rows.append(routing_row(label, model_dir, prompts, source))
    total = 0
    if reports:
        rep = next(iter(reports.values()))[1]
        total = int(rep["model"]["layers"]) * int(rep["model"]["experts"])
    return {"bench": [asdict(r) for r in rows], "routing": [asdict(r) for r in routing_rows], "errors": errors,
            "total_experts": total,
            "table": bench_table(rows, max(total, 1)) + ("\n\n" + routing_table(routing_rows) if routing_rows else "")}


# ---- command line -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.demo_training.hitrate", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("twin", help="random-weight checkpoint of exactly a model's shape, with its tokenizer")
    t.add_argument("--model", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--seed", type=int, default=0)
    g = sub.add_parser("pool-gib", help="the pool_gib setting that plans exactly N expert slots")
    g.add_argument("--model", type=Path, required=True)
    g.add_argument("--slots", type=int, required=True)
    g.add_argument("--static", type=int, default=-1, help="static_slots (-1: half the pool, the default)")
    s = sub.add_parser("summarize", help="hit-rate table and routing statistics from bench JSONs")
    s.add_argument("--bench-dir", type=Path, required=True)
    s.add_argument("--out", type=Path, default=None, help="also write the summary JSON here")
    s.add_argument("--no-routing", action="store_true", help="bench table only")
    s.add_argument("--no-held-out", action="store_true", help="skip the held-out prompts (stdlib corpus build)")
    s.add_argument("--expect-backend", default=None,
                   help="flag an error for runs on any other backend (the engine falls back to the CPU quietly)")
    a = p.parse_args(argv)
    if a.cmd == "twin":
        out = write_twin(a.model, a.out, a.seed)
        print(f"wrote {out}: random weights (seed {a.seed}) in the shape of {a.model}")
    elif a.cmd == "pool-gib":
        cfg = ModelConfig.from_dict(json.loads((a.model / "config.json").read_text()))
        print(pool_gib_for(cfg, a.slots, a.static))
    else:
        summary = summarize(a.bench_dir, routing=not a.no_routing, held_out=not a.no_held_out)
        if a.expect_backend:
            summary["errors"] += [f"{r['file']}: ran on {r['backend']}, expected {a.expect_backend}"
                                  for r in summary["bench"] if r["backend"] != a.expect_backend]
        if a.out is not None:
            a.out.write_text(json.dumps(summary, indent=2))
        print(summary["table"])
        for e in summary["errors"]:
            print(f"error: {e}", file=sys.stderr)
        return 1 if summary["errors"] or not summary["bench"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
