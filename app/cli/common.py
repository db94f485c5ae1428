"""Arguments and helpers shared by subcommands that load a model."""

from __future__ import annotations

import argparse
import sys

from engine.settings import EngineSettings, SettingsError


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", nargs="?", help="gpt-oss model folder (default: the configured model, else the demo)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu", "reference"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--threads", type=int, default=0, help="CPU threads for experts (0 = auto)")
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--budget-gib", type=float, default=12.0, help="VRAM budget for the whole process")


def settings_from_args(args: argparse.Namespace) -> EngineSettings:
    return EngineSettings(backend=args.backend, dtype=args.dtype, cpu_threads=args.threads, context=args.context,
                          vram_budget_gib=args.budget_gib)


def fail(msg: str) -> int:
    print(f"neural: error: {msg}", file=sys.stderr)
    return 2


def load_engine(args: argparse.Namespace):  # -> engine.session.Engine
    from app.core.expert_store import find_expert_store
    from app.core.models import resolve_model_dir
    from engine.checkpoint import CheckpointError
    from engine.session import Engine
    from engine.tokenizer import TokenizerError

    try:
        settings = settings_from_args(args)
        model_dir = resolve_model_dir(args.model_dir)
        # the store the desktop app built for this checkpoint (in its data folder), if any
        return Engine.load(model_dir, settings, store_path=find_expert_store(model_dir))
    except (CheckpointError, TokenizerError, SettingsError) as exc:
        raise SystemExit(fail(str(exc))) from exc
