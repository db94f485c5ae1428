"""``neural generate``: stream an answer to one prompt in the terminal."""

from __future__ import annotations

import argparse
import sys

from .common import add_engine_arguments, load_engine

NAME = "generate"
HELP = "Generate an answer to one prompt (streams to the terminal)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_arguments(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--system", default=None, help="developer instructions")
    p.add_argument("--reasoning", default="low", choices=["low", "medium", "high"])
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--show-analysis", action="store_true", help="also print the analysis channel")


def run(args: argparse.Namespace) -> int:
    from engine.types import Conversation, Done, GenerationParams, Message, TextDelta, ToolCallEvent

    eng = load_engine(args)
    if eng.info.note:
        print(f"[{eng.info.name}: {eng.info.note}]", file=sys.stderr)
    if eng.info.backend_note:
        print(f"[{eng.info.backend_note}]", file=sys.stderr)
    msgs = [Message("developer", args.system)] if args.system else []
    msgs.append(Message("user", args.prompt))
    conv = Conversation(tuple(msgs), reasoning_effort=args.reasoning)
    params = GenerationParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                              seed=args.seed)
    channel = None
    for ev in eng.generate(conv, params):
        if isinstance(ev, TextDelta):
            if ev.channel == "analysis" and not args.show_analysis:
                continue
            if ev.channel != channel:
                if channel is not None:
                    print()
                if args.show_analysis or ev.channel != "final":
                    print(f"[{ev.channel}] ", end="")
                channel = ev.channel
            print(ev.text, end="", flush=True)
        elif isinstance(ev, ToolCallEvent):
            print(f"\n[tool call] {ev.call.name}({ev.call.arguments})")
        elif isinstance(ev, Done):
            u = ev.usage
            print()
            print(f"[{ev.finish_reason}; prompt {u.prompt_tokens} tok ({u.cached_tokens} cached) "
                  f"{u.prompt_tps:.1f} tok/s; {u.completion_tokens} tok at {u.decode_tps:.1f} tok/s; "
                  f"backend {eng.backend.name}]", file=sys.stderr)
            if ev.error:
                print(f"neural: error: {ev.error}", file=sys.stderr)
                return 1
    return 0
