"""`neural gui` is registered and takes the app's options."""

from __future__ import annotations

from app.cli.main import build_parser


def test_gui_subcommand_arguments():
    args = build_parser().parse_args(["gui", "--model", "/m", "--screenshot-dir", "/s", "--home", "/h"])
    assert (args.model, args.screenshot_dir, args.home) == ("/m", "/s", "/h")
    assert callable(args._run)
