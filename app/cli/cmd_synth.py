"""``neural synth``: write a synthetic gpt-oss checkpoint in the exact HF layout, or a routing
variant of one that shares its expert bytes (``--like``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .common import fail
from .lab import ensure_lab

NAME = "synth"
HELP = "Write a synthetic (random-weight) gpt-oss checkpoint in the Hugging Face layout."
SHAPE_FLAGS = ("preset", "layers", "experts", "hidden", "intermediate", "vocab", "top_k", "window")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engine.synth import MODES, PRESETS

    p.add_argument("--preset", default=None, choices=sorted(PRESETS), help="shape (default tiny)")
    p.add_argument("--out", default=None, help="the folder to write (required unless --routing-stats)")
    p.add_argument("--seed", type=int, default=None, help="default 0")
    for k in ("layers", "experts", "hidden", "intermediate", "vocab", "top-k", "window"):
        p.add_argument(f"--{k}", type=int, default=None)
    p.add_argument("--routing", choices=MODES, default=None,
                   help="uniform: no expert favoured; static: a fixed per-layer hot set (router bias); drift: "
                        "uneven use with a hot set that follows the text (token topics); calibrated: a designed "
                        "text whose routing replays at the design doc's LRU/Belady hit rates (see --report). "
                        "Default: static when --skew > 0, else uniform")
    p.add_argument("--skew", type=float, default=None,
                   help="routing strength (0 = uniform; 1-2 = skewed; default 1.5 with --routing static|drift)")
    p.add_argument("--fast", action="store_true", help="tiled random expert bytes and scales (speed tests only)")
    p.add_argument("--shard-gib", type=float, default=None, help="shard size (default 2)")
    p.add_argument("--jobs", type=int, default=None, help="shards written at once (default: CPUs, at most 8)")
    p.add_argument("--like", metavar="DIR", default=None,
                   help="write a routing variant of the synthetic checkpoint DIR: the same weights (expert "
                        "shards hard-linked, else copied) with --routing/--skew; takes no shape flags")
    p.add_argument("--routing-stats", metavar="DIR", default=None,
                   help="measure instead of writing: the expert choices of the reference engine (CPU; small shapes) "
                        "on ids whose topic switches halfway and on segments of the shipped coding conversation")
    p.add_argument("--segments", type=int, default=8, help="--routing-stats: conversation segments (0: none)")
    p.add_argument("--segment-tokens", type=int, default=1024, help="--routing-stats: tokens per segment")
    p.add_argument("--report", action="store_true",
                   help="with --routing calibrated: write nothing; replay the designed trace (shape flags apply, "
                        "default 120b-shape) and print LRU / Belady / the engine's admission hit rates (SIMULATED)")
    p.add_argument("--tokens", type=int, default=50_000, help="--report: trace length in tokens")
    p.add_argument("--slots", default="430,548", help="--report: slot counts to replay (comma-separated)")
    p.add_argument("--policy-tokens", type=int, default=6000,
                   help="--report: tokens replayed through the engine's admission policy (slow: Python); 0 = skip")
    p.add_argument("--prompt-tokens", type=int, default=2048,
                   help="--report: the policy replay's prompt (it ranks the static hot set)")


def _progress() -> Callable[[int, int], None]:
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 0.5 or done == total:
            last[0] = now
            print(f"\r  {done / 2**30:7.2f} / {total / 2**30:.2f} GiB", end="", file=sys.stderr, flush=True)

    return progress


def _variant(args: argparse.Namespace) -> int:
    from engine.safetensors_io import CheckpointError
    from engine.synth import RoutingSpec, SynthShape, write_routing_variant

    given = [f"--{k.replace('_', '-')}" for k in (*SHAPE_FLAGS, "seed", "shard_gib") if getattr(args, k) is not None]
    if args.fast:
        given.append("--fast")
    if given:
        return fail(f"--like takes the shape, seed and layout of its source; drop {', '.join(given)}")
    if args.routing is None:
        return fail("--like needs --routing uniform|static|drift")
    t0 = time.perf_counter()
    progress = _progress()
    try:
        spec = RoutingSpec.resolve(args.routing, args.skew)
        rep = write_routing_variant(args.like, args.out, spec, jobs=args.jobs, progress=progress)
    except (ValueError, CheckpointError, OSError) as exc:
        return fail(str(exc))
    print(file=sys.stderr)
    from engine.synth import read_synthetic_meta

    shape = SynthShape(**read_synthetic_meta(rep.out)["shape"])
    shared = f"{len(rep.linked)} shard file(s) hard-linked"
    if rep.copied:
        shared += f", {len(rep.copied)} copied (no hard link possible)"
    print(f"wrote {rep.out}: variant of {args.like} with the same weights except routing; {shared} "
          f"({rep.shared_bytes / 2**30:.2f} GiB shared), {len(rep.rewritten)} rewritten "
          f"({rep.written_bytes / 2**30:.2f} GiB) in {time.perf_counter() - t0:.1f} s")
    print(f"routing: {spec.describe(shape)}")
    return 0


def _conversation_ids(model_dir: str) -> tuple[list[int], str]:
    from dataclasses import replace

    from app.api.chat_request import parse_chat_request
    ensure_lab()
    from bench.harness.context_tokens import FIXED_DATE, REQUESTS_FILE
    from engine.harmony.render import render_conversation
    from engine.tokenizer import load_tokenizer

    tok, sp = load_tokenizer(model_dir)
    with REQUESTS_FILE.open(encoding="utf-8") as f:
        body = json.loads(f.readline())
    conv = parse_chat_request(body, context_limit=1 << 30, vocab_size=tok.get_vocab_size()).conversation
    return render_conversation(replace(conv, current_date=FIXED_DATE), tok, sp), f"{REQUESTS_FILE.name} request 0"


def _routing_stats(args: argparse.Namespace) -> int:
    """Figures of docs/perf-harness.md "Synthetic routing"."""
    import numpy as np
    from tokenizers import Tokenizer

    from engine.safetensors_io import CheckpointError
    from engine.synth import SynthShape, read_synthetic_meta, source_routing, token_topics
    from engine.synth import routing_stats as rs

    d = args.routing_stats
    try:
        meta = read_synthetic_meta(Path(d))
        shape = SynthShape(**meta["shape"])
        tok = Tokenizer.from_file(str(Path(d) / "tokenizer.json"))
        n = min(shape.vocab_size, tok.get_vocab_size())
        topics = token_topics(list(tok.decode_batch([[i] for i in range(n)], skip_special_tokens=True)),
                              shape.vocab_size)
        spec = source_routing(meta)
        print(f"routing stats of {d}: {spec.describe(shape)}; {shape.num_hidden_layers} layers, "
              f"{shape.num_local_experts} experts, top-{shape.num_experts_per_tok} (reference engine, float32)")
        ids = rs.topic_switch_ids(topics, 512, ordinary=n - 21)
        tr = rs.trace_routing(d, ids)
        print("topic switch (512 ids: topic 3, then topic 6):")
        print(f"  top-25% share of uses in 64-token windows       {rs.concentration(tr, 64):.3f}")
        halves = rs.hot_overlap(tr, slice(0, 256), slice(256, None))
        print(f"  top-25% experts shared by the two halves        {halves:.3f}")
        if args.segments > 0:
            conv, source = _conversation_ids(d)
            seg = args.segment_tokens
            starts = np.linspace(0, max(0, len(conv) - seg), args.segments).astype(int)
            trs = [rs.trace_routing(d, conv[s : s + seg]) for s in starts]
            e = shape.num_local_experts
            hot = [[rs.top_experts(c, e) for c in t.choices] for t in trs]
            cross = [rs.coverage(trs[b].choices, hot[a]) for a in range(len(trs)) for b in range(len(trs)) if a != b]
            print(f"coding conversation ({source}, {len(conv)} tokens; {len(trs)} segments of {seg} tokens):")
            print(f"  top-25% share of uses within a segment          "
                  f"{np.mean([rs.coverage(t.choices, h) for t, h in zip(trs, hot, strict=True)]):.3f}")
            if cross:
                print(f"  uses covered by another segment's top 25%       {np.mean(cross):.3f} (min {min(cross):.3f})")
            print(f"  experts shared with the previous token          "
                  f"{np.mean([rs.shared_with_previous(t) for t in trs]):.3f}")
    except (OSError, ValueError, CheckpointError) as exc:
        return fail(str(exc))
    return 0


def _report(args: argparse.Namespace) -> int:
    """``--routing calibrated --report``: the designed trace's hit rates (docs/perf-residency.md)."""
    from engine.synth import shape_with
    from engine.synth.calibrated import CalibratedTables, calibrated_text, designed_trace

    ensure_lab()
    from bench.routing.policy_replay import replay_policy
    from bench.routing.replay_sim import HAVE_NUMBA, cache_rates, split_per_layer

    if args.routing != "calibrated":
        return fail("--report needs --routing calibrated")
    try:
        shape = shape_with(args.preset or "120b-shape", num_hidden_layers=args.layers, num_local_experts=args.experts,
                           hidden_size=args.hidden, intermediate_size=args.intermediate, vocab_size=args.vocab,
                           num_experts_per_tok=args.top_k, sliding_window=args.window)
        slots = [int(x) for x in args.slots.split(",") if x.strip()]
        if not slots or min(slots) < 1:
            raise ValueError("--slots: give positive slot counts, e.g. 430,548")
        if args.tokens < 2 or args.policy_tokens < 0:
            raise ValueError("--tokens must be >= 2 and --policy-tokens >= 0")
        tables = CalibratedTables(args.seed or 0, shape)
    except (TypeError, ValueError) as exc:
        return fail(str(exc))
    t0 = time.perf_counter()
    ids = calibrated_text(tables, args.tokens)
    trace = designed_trace(tables, ids)
    L, E, K = shape.num_hidden_layers, shape.num_local_experts, shape.num_experts_per_tok
    print(f"calibrated routing, seed {args.seed or 0}: {L} layers x {E} experts, top-{K}; {args.tokens} tokens "
          f"({len(set(ids.tolist()))} distinct ids); trace built in {time.perf_counter() - t0:.1f} s"
          f"{'' if HAVE_NUMBA else ' (numba missing: slow replay)'}")
    print("SIMULATED hit rates (uses served from VRAM slots):")
    for n in slots:
        g = cache_rates(trace, E, n)
        p = cache_rates(trace, E, n, per_layer=True)
        quota = sorted(set(split_per_layer(n, L)))
        print(f"  {n:5d} slots ({n / (L * E):.1%} of {L * E}): one pool for all layers: LRU {g.lru:.3f}  "
              f"Belady {g.belady:.3f} | per-layer quotas of {'/'.join(map(str, quota))}: LRU {p.lru:.3f}  "
              f"Belady {p.belady:.3f}")
    if args.policy_tokens:
        n_pol = min(args.tokens, args.prompt_tokens + args.policy_tokens)
        print(f"the engine's admission policy (defaults; static = half the pool, ranked from a "
              f"{args.prompt_tokens}-token prompt), {n_pol - args.prompt_tokens} decoded tokens:")
        for n in slots:
            try:
                r = replay_policy(trace[:n_pol], E, n, prompt_tokens=args.prompt_tokens)
            except ValueError as exc:
                return fail(str(exc))
            print(f"  {n:5d} slots ({r.static} static): policy {r.hit:.3f} (static {r.static_hit:.3f}), "
                  f"{r.admissions_per_token:.2f} admissions/token | LRU {r.lru:.3f} "
                  f"({r.lru_admissions_per_token:.1f} admissions/token) | Belady {r.belady:.3f}")
    print(f"design doc (recorded coding trace, ~430 slots): LRU 0.406, Belady 0.632 (SIMULATED); "
          f"{time.perf_counter() - t0:.1f} s in all")
    return 0


def run(args: argparse.Namespace) -> int:
    from engine.synth import RoutingSpec, shape_with, write_synthetic_checkpoint

    if args.routing_stats is not None:
        return _routing_stats(args)
    if args.report:
        return _report(args)
    if args.out is None:
        return fail("--out DIR is required")
    if args.like is not None:
        return _variant(args)
    try:
        shape = shape_with(args.preset or "tiny", num_hidden_layers=args.layers, num_local_experts=args.experts,
                           hidden_size=args.hidden, intermediate_size=args.intermediate, vocab_size=args.vocab,
                           num_experts_per_tok=args.top_k, sliding_window=args.window)
        spec = RoutingSpec.resolve(args.routing, args.skew)
    except (TypeError, ValueError) as exc:
        return fail(str(exc))
    t0 = time.perf_counter()
    progress = _progress()
    shard_gib = 2.0 if args.shard_gib is None else args.shard_gib
    try:
        out = write_synthetic_checkpoint(args.out, shape, seed=args.seed or 0, routing=spec, fast=args.fast,
                                         max_shard_bytes=int(shard_gib * 2**30), jobs=args.jobs,
                                         progress=progress)
    except ValueError as exc:
        return fail(str(exc))
    print(file=sys.stderr)
    secs = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in out.glob("model*.safetensors"))
    print(f"wrote {out} ({shape.num_hidden_layers} layers, {shape.num_local_experts} experts, "
          f"hidden {shape.hidden_size}; {size / 1e9:.2f} GB) in {secs:.1f} s ({size / 1e9 / max(secs, 1e-9):.2f} GB/s)")
    print(f"routing: {spec.describe(shape)}")
    return 0
