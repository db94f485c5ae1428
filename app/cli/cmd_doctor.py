"""``neural doctor``: check the GPU, driver, CUDA, CPU, RAM, disk, model, store and settings."""

from __future__ import annotations

import argparse

NAME = "doctor"
HELP = "Check this machine and the configured model and settings; print what to fix."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="DIR",
                   help="model folder to check (default: the app's configured model, else the demo)")
    p.add_argument("--json", action="store_true", help="print one JSON object (checks and raw facts) instead")


def run(args: argparse.Namespace) -> int:
    from app.doctor import main

    return main(args.model, as_json=args.json)
