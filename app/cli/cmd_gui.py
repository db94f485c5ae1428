"""``neural gui``: the desktop app (also what plain ``neural`` starts)."""

from __future__ import annotations

import argparse

NAME = "gui"
HELP = "Start the desktop app (chat, residency panel, preferences, local API switch)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    from app.gui_main import add_arguments as gui_arguments

    gui_arguments(p)


def run(args: argparse.Namespace) -> int:
    from app.gui_main import run_app

    return run_app(args.model, args.screenshot_dir, args.home, end_process=True)
