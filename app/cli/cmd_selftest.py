"""``neural selftest`` (the bundle also accepts ``--self-test``): load the demo model, generate
16 tokens, answer one API request over HTTP, exit 0 — or name the failing step and exit 1."""

from __future__ import annotations

import argparse

NAME = "selftest"
HELP = "Headless end-to-end check: demo model, 16 generated tokens, one HTTP API request."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="DIR", help="model folder (default: the bundled demo model)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu", "reference"])
    p.add_argument("--json", action="store_true", help="print the step report as JSON on stdout")


def run(args: argparse.Namespace) -> int:
    from app.selftest import main

    return main(args.model, backend=args.backend, as_json=args.json)
