"""``neural bench``: reproducible benchmarks (decode, prompt, replay, kernel).

Speed figures in this project come from these commands; see docs/perf-harness.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from .common import fail
from .lab import ensure_lab

NAME = "bench"
HELP = "Benchmarks: decode and prompt speed of the engine, replays against API servers, CPU kernel."

KERNEL_MODULE = "app.cli.cmd_bench_kernel"


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def _engine_args(p: argparse.ArgumentParser, repeats: int) -> None:
    p.add_argument("model_dir", nargs="?", help="checkpoint folder, or a folder with skewed/ and uniform/ "
                   "checkpoints (default: the configured model, else the demo)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu", "reference"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--budget-gib", type=float, default=12.0, help="VRAM budget of the whole process (default 12)")
    p.add_argument("--threads", type=int, default=8, help="CPU threads for experts (default 8)")
    p.add_argument("--torch-threads", type=int, default=0, help="PyTorch intra-op threads (0 = the engine's choice)")
    p.add_argument("--context", type=int, default=16384, help="engine context in tokens (default 16384)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other engine setting, e.g. --set refresh_every=0 (frozen residency); repeatable")
    p.add_argument("--routing", choices=["skewed", "uniform"], default=None,
                   help="the routing to benchmark: picks DIR/skewed or DIR/uniform, or checks the checkpoint's")
    p.add_argument("--repeats", type=int, default=repeats, help=f"timed runs per point (default {repeats})")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    p.add_argument("--ids", action="store_true", help="include the generated token ids in the JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative numbers, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench_command", metavar="BENCH", required=True)

    d = sub.add_parser("decode", help="decode tokens/s at given context depths", description=
                       "Decode through the engine's generation loop and its sampler after DEPTH tokens of "
                       "context, per temperature; only the decode is timed, the sampler's cost reported.")
    _engine_args(d, repeats=3)
    d.add_argument("--tokens", type=int, default=128, help="timed decode tokens per run (default 128)")
    d.add_argument("--depth", type=int_list, default=[0, 8192], help="context depths, e.g. 0,8192 (default)")
    d.add_argument("--temperature", type=float_list, default=[0.0, 1.0],
                   help="sampling temperatures, 0 = greedy (default 0,1)")
    d.add_argument("--top-p", type=float_list, default=[0.9],
                   help="top-p values for each temperature > 0, e.g. 1,0.9 (default 0.9)")
    d.set_defaults(_bench_run=run_decode)

    q = sub.add_parser("prompt", help="prompt processing: time to first token for prompts of given lengths",
                       description="Process a fresh prompt of N tokens and pick the first token; timed per run.")
    _engine_args(q, repeats=2)
    q.add_argument("--tokens", type=int_list, default=[3000, 13000], help="prompt lengths (default 3000,13000)")
    q.add_argument("--check-tokens", type=int, default=8,
                   help="untimed greedy tokens after each prompt, for the token hash (default 8)")
    q.add_argument("--followup", type=int, default=0,
                   help="also time a follow-up of N new tokens after each prompt is held (default 0: off)")
    q.set_defaults(_bench_run=run_prompt)

    r = sub.add_parser("replay", help="replay saved chat requests against OpenAI-compatible servers (A B B A)",
                       description="Replay chat-completions bodies against running servers in mirrored order.")
    r.add_argument("--endpoint", action="append", required=True, metavar="NAME=URL",
                   help="a server to compare, e.g. neural=http://127.0.0.1:8080 (repeatable; the first is the "
                        "baseline of the ratios)")
    r.add_argument("--requests", type=Path, default=None,
                   help="JSONL of chat-completions bodies (default: bench/data/coding-13k.jsonl)")
    r.add_argument("--out", type=Path, default=None, help="archive folder (default ./bench-replay-TIMESTAMP)")
    r.add_argument("--rounds", type=int, default=2, help="mirrored rounds: 2 gives A B B A (default 2)")
    r.add_argument("--model", default=None, help="send this model name instead of the saved one")
    r.add_argument("--api-key", default=None, help="Bearer key sent to every endpoint")
    r.add_argument("--limit", type=int, default=0, help="replay only the first N requests (0 = all)")
    r.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per request (default 3600)")
    r.add_argument("--warmup-sessions", type=int, default=0,
                   help="untimed sessions per endpoint before the measured ones (default 0)")
    r.add_argument("--session-nonce", action="store_true",
                   help="tag each session's first message so no server reuses a prompt cache across sessions")
    r.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature sent with every request (default 1: the app's and the API's "
                        "default, so the sampler is timed as users run it; 0 = greedy)")
    r.add_argument("--seed", type=int, default=0, help="seed sent with every request (default 0)")
    r.add_argument("--json", action="store_true", help="print the results JSON instead of a table")
    r.set_defaults(_bench_run=run_replay)

    _add_kernel(sub)


class _Graft:
    """Stands in for our ``bench`` parser when the kernel module adds its own sub-commands
    (``add_subparsers`` + ``add_parser("kernel")``): they land in our sub-command list."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub

    def add_subparsers(self, **_kw: Any) -> Any:
        return self.sub


def _add_kernel(sub: Any) -> None:
    """``bench kernel`` is the native-kernel benchmark's own module, imported here only when present.
    It either adds a ``kernel`` sub-command itself (grafted into ours) or plain arguments."""
    try:
        mod = importlib.import_module(KERNEL_MODULE)
        before = set(sub.choices)
        try:
            mod.add_arguments(_Graft(sub))
        except AttributeError:  # it adds plain arguments: give it a parser of its own
            if set(sub.choices) != before:
                raise
            mod.add_arguments(sub.add_parser("kernel", help=getattr(mod, "HELP", "kernel benchmark")))
        for name in set(sub.choices) - before:
            sub.choices[name].set_defaults(_bench_run=mod.run)
        if "kernel" not in sub.choices:
            raise ImportError(f"{KERNEL_MODULE} added no 'kernel' sub-command")
    except Exception as exc:  # absent or broken: the rest of the CLI must keep working
        if "kernel" in sub.choices:
            raise
        # prefix_chars "+": any "--flag" meant for the real kernel benchmark lands in "rest", so the
        # user gets the message below instead of an argparse error about that flag
        k = sub.add_parser("kernel", help="native CPU expert kernel benchmark (not available in this build)",
                           add_help=False, prefix_chars="+")
        k.add_argument("rest", nargs="*")
        message = f"the kernel benchmark is not available in this build ({KERNEL_MODULE}: {type(exc).__name__}: {exc})"
        k.set_defaults(_bench_run=lambda _a: fail(message))


def run(args: argparse.Namespace) -> int:
    return int(args._bench_run(args) or 0)


# ---- decode / prompt -----------------------------------------------------------------------------

def engine_settings(args: argparse.Namespace):  # -> EngineSettings
    from engine.settings import EngineSettings

    base: dict[str, Any] = {"backend": args.backend, "dtype": args.dtype, "cpu_threads": args.threads,
                            "context": args.context, "vram_budget_gib": args.budget_gib}
    # a field's type is its default's (the dataclass annotations are strings under __future__)
    types: dict[str, type] = {f.name: type(f.default) for f in fields(EngineSettings)}
    for item in args.set:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in types:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(types))}")
        try:
            kind = types[key]
            base[key] = kind(value) if kind is not bool else value.lower() in ("1", "true", "yes", "on")
        except ValueError:
            raise ValueError(f"--set {item!r}: {value!r} is not a valid {types[key].__name__}") from None
    return EngineSettings.from_dict(base)


def _run_engine_bench(args: argparse.Namespace, bench: str) -> int:
    import torch

    ensure_lab()
    from app.core.models import resolve_model_dir
    from bench.harness.engine_bench import run_decode as decode_bench
    from bench.harness.engine_bench import run_prompt as prompt_bench
    from bench.harness.environment import checkpoint_routing, pick_model_dir
    from bench.harness.report import decode_table, header, prompt_table, routing_warning
    from engine.checkpoint import CheckpointError
    from engine.session import Engine
    from engine.settings import SettingsError
    from engine.tokenizer import TokenizerError

    model_dir = pick_model_dir(resolve_model_dir(args.model_dir), args.routing)
    routing = checkpoint_routing(model_dir)
    warning = routing_warning(routing, args.routing, model_dir)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    try:
        settings = engine_settings(args)
        t_load = time.perf_counter()
        engine = Engine.load(model_dir, settings)
        load_s = time.perf_counter() - t_load
    except (CheckpointError, TokenizerError, SettingsError, ValueError, OSError) as exc:
        return fail(str(exc))
    if args.torch_threads:  # after the load, which sizes torch with the native team (native_experts.share_cores)
        torch.set_num_threads(args.torch_threads)
    try:
        if engine.info.backend_note:
            print(f"[{engine.info.backend_note}]", file=sys.stderr)
        common = {"repeats": args.repeats, "warmup": args.warmup}
        if bench == "decode":
            bench_settings = {**common, "tokens": args.tokens, "depths": args.depth,
                              "temperatures": args.temperature, "top_ps": args.top_p}
            result = decode_bench(engine, tokens=args.tokens, depths=args.depth, temperatures=args.temperature,
                                  top_ps=args.top_p, **common)
        else:
            bench_settings = {**common, "prompt_tokens": args.tokens, "check_tokens": args.check_tokens,
                              "followup": args.followup}
            result = prompt_bench(engine, lengths=args.tokens, check_tokens=args.check_tokens,
                                  followup=args.followup, **common)
        report = header(bench, engine, routing, args.routing, bench_settings)
        report.update(result)
        report["load_s"] = load_s  # Engine.load: weights, kernels (Triton's disk cache), warm-up
        if warning:
            report["notes"].insert(0, warning)
    except ValueError as exc:
        return fail(str(exc))
    finally:
        engine.close()
    if not args.ids:
        for r in report["results"]:
            r.pop("token_ids", None)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(decode_table(report) if bench == "decode" else prompt_table(report))
    return 0


def run_decode(args: argparse.Namespace) -> int:
    return _run_engine_bench(args, "decode")


def run_prompt(args: argparse.Namespace) -> int:
    return _run_engine_bench(args, "prompt")


# ---- replay ----------------------------------------------------------------------------------------

def run_replay(args: argparse.Namespace) -> int:
    import asyncio
    import hashlib

    ensure_lab()
    from bench.harness.context_tokens import REQUESTS_FILE
    from bench.harness.environment import device_info, engine_version
    from bench.harness.ordering import mirrored_order
    from bench.harness.replay import Endpoint, load_requests, run_replay, write_manifest
    from bench.harness.replay_report import replay_table, summarize_replay

    try:
        endpoints = [Endpoint.parse(s) for s in args.endpoint]
        order = mirrored_order([e.name for e in endpoints], args.rounds)
        path = args.requests or REQUESTS_FILE
        bodies = load_requests(path)
    except (ValueError, OSError) as exc:
        return fail(str(exc))
    if args.limit > 0:
        bodies = bodies[: args.limit]
    out = args.out or Path(f"bench-replay-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(f"replaying {len(bodies)} requests from {path} in order {' '.join(order)}; archive in {out}")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    records = asyncio.run(run_replay(endpoints, bodies, out, rounds=args.rounds, model=args.model,
                                     api_key=args.api_key, timeout_s=args.timeout,
                                     session_nonce=args.session_nonce, warmup_sessions=args.warmup_sessions,
                                     temperature=args.temperature, seed=args.seed, log=log))
    summary = summarize_replay(records, [e.name for e in endpoints])
    result = {
        "schema": 1, "bench": "replay", "started_at": started,
        "requests_file": str(path), "requests_file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "requests": len(bodies), "endpoints": {e.name: e.url for e in endpoints}, "order": order,
        "settings": {"rounds": args.rounds, "model": args.model, "timeout_s": args.timeout,
                     "session_nonce": args.session_nonce, "warmup_sessions": args.warmup_sessions,
                     "temperature": args.temperature, "seed": args.seed, "stream": True},
        "client": {"engine_version": engine_version(), "device": device_info()},
        "summary": summary,
        "records": [r.to_dict() for r in records],
    }
    (out / "results.json").write_text(json.dumps(result, indent=2))
    write_manifest(out)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(replay_table(summary))
        print(f"archive: {out} (results.json, SHA256SUMS)")
    return 0 if all(r.ok for r in records if not r.warmup) else 1
