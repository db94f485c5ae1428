"""Registry of subcommand modules. Each module defines ``NAME``, ``HELP``, ``add_arguments(p)``
and ``run(args) -> int``. Add a module by appending one line below."""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES: list[str] = [
    "app.cli.cmd_generate",
    "app.cli.cmd_logits",
    "app.cli.cmd_synth",
    "app.cli.cmd_train_demo",
    "app.cli.cmd_serve",
    "app.cli.cmd_bench",
    "app.cli.cmd_build_store",
    "app.cli.cmd_doctor",
    "app.cli.cmd_selftest",
    "app.cli.cmd_gui",
]


def load() -> list[ModuleType]:
    return [importlib.import_module(m) for m in MODULES]
