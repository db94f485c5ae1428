"""Entry point of the ``neural`` console script."""

from __future__ import annotations

import argparse
import sys

from . import commands


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neural", description="Local gpt-oss: desktop app, API server and tools.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in commands.load():
        sp = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv: list[str] | None = None) -> int:
    import logging
    import os

    # the CLI prints fallbacks itself; engine log lines would repeat them
    logging.basicConfig(level=os.environ.get("NEURAL_LOG", "ERROR").upper())
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--self-test"]:  # the installer bundle's flag, also accepted here
        argv[0] = "selftest"
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        # No subcommand: start the desktop app when it is installed, else show help.
        try:
            from app.gui_main import main as gui_main  # type: ignore[import-not-found]
        except ImportError:
            parser.print_help()
            return 2
        return int(gui_main([]))
    from .lab import LabUnavailable

    try:
        return int(run(args) or 0)
    except LabUnavailable as exc:
        print(f"neural: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
